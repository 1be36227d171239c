//! `CoordinatorService.ReplaceBatches`: object consolidation's atomic replace (KIP-1165), run on
//! the leader of the metadata partition owning the request's partition.
//!
//! Owns the wire conversion; which batches move, and what the old and new objects become, is the
//! state machine's (`state_machine::replace_batches`).

use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::RouteError;
use crate::server::convert::{self, result_fields, route_failure};
use crate::state_machine::{Failure, Op, Outcome, ReplaceBatches, Replaced, ReplacedBatch};

fn replace_of(req: &ReplaceBatchesRequest) -> Result<ReplaceBatches, Failure> {
    Ok(ReplaceBatches {
        object_key: req.object_key.clone(),
        object_format: convert::int8(req.object_format, "object format")?,
        file_size: req.file_size,
        uploader_broker_id: req.uploader_broker_id,
        tp: convert::tp(&req.topic_id, req.partition_index)?,
        sources: req.sources.clone(),
        batches: req
            .batches
            .iter()
            .map(|b| ReplacedBatch {
                last_offset: b.last_offset,
                batch_id: b.batch_id,
                source: b.source,
                byte_offset: b.byte_offset,
                byte_size: b.byte_size,
            })
            .collect(),
    })
}

impl CoordinatorApi {
    pub(super) async fn serve_replace_batches(
        &self,
        request: Request<ReplaceBatchesRequest>,
    ) -> Result<Response<ReplaceBatchesResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let mut applied = None;
        let r = match replace_of(&req) {
            Err(f) => Err(f),
            Ok(replace) => {
                let g = self.owner(&replace.tp);
                match self.write(g, Op::ReplaceBatches(replace), timeout, hop).await {
                    Ok((Outcome::ReplaceBatches(r), index)) => {
                        applied = Some(AppliedIndex { metadata_partition: g, index });
                        r
                    }
                    Ok((other, _)) => Err(route_failure(&RouteError::unexpected(g, &other))),
                    Err(e) => Err(route_failure(&e)),
                }
            }
        };
        let (error_code, error_message) = result_fields(&r);
        let replaced = r.map(|v| v.iter().map(|x| *x == Replaced::Replaced).collect()).unwrap_or_default();
        Ok(Response::new(ReplaceBatchesResponse { error_code, error_message, replaced, applied }))
    }
}
