//! EndTransaction (DisklessEndTransaction): a transaction's markers, split by the metadata
//! partition owning each partition, each part one `EndTransaction` log entry on its leader, the
//! answers merged back in request order with the index each part applied at.
//!
//! Owns the call's wire conversions. What a marker does (the control batch, the aborted range,
//! the epoch it fences with) is the state machine's (`state_machine::partition_txns`).

use std::sync::Mutex;

use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::fan_out::no_result;
use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::RouteError;
use crate::server::convert::{self, result_fields};
use crate::state_machine::{Failure, Op, Outcome, TxnMarker};

fn marker(m: &end_transaction_request::Marker) -> Result<TxnMarker, Failure> {
    Ok(TxnMarker {
        tp: convert::tp(&m.topic_id, m.partition_index)?,
        producer_id: m.producer_id,
        producer_epoch: convert::narrow(m.producer_epoch, "producer epoch")?,
        commit: m.commit,
        coordinator_epoch: m.coordinator_epoch,
        txn_number: m.txn_number,
    })
}

impl CoordinatorApi {
    pub(super) async fn serve_end_transaction(
        &self,
        request: Request<EndTransactionRequest>,
    ) -> Result<Response<EndTransactionResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let flat: Vec<Result<TxnMarker, Failure>> = req.markers.iter().map(marker).collect();
        let applied = Mutex::new(vec![]);
        let results = self
            .per_partition(
                &flat,
                |m| &m.tp,
                |g, markers| {
                    let applied = &applied;
                    async move {
                        match self.write(g, Op::EndTransaction(markers), timeout, hop).await? {
                            (Outcome::EndTransaction(rs), index) => {
                                if let Ok(mut a) = applied.lock() {
                                    a.push(AppliedIndex { metadata_partition: g, index });
                                }
                                Ok(rs)
                            }
                            (other, _) => Err(RouteError::unexpected(g, &other)),
                        }
                    }
                },
            )
            .await;
        let markers = results
            .into_iter()
            .chain(std::iter::repeat_with(no_result))
            .take(req.markers.len())
            .map(|r| {
                let (error_code, error_message) = result_fields(&r);
                end_transaction_response::MarkerResult {
                    error_code,
                    error_message,
                    offset: r.ok().flatten().unwrap_or(-1),
                }
            })
            .collect();
        let mut applied = applied.into_inner().unwrap_or_else(|e| e.into_inner());
        applied.sort_by_key(|a| a.metadata_partition);
        Ok(Response::new(EndTransactionResponse { markers, applied }))
    }
}
