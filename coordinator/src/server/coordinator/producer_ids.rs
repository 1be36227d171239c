//! AllocateProducerIds: a block of producer ids for a broker's InitProducerId, from the one
//! counter on metadata partition 0's leader ([`PRODUCER_ID_AUTHORITY`]).
//!
//! Owns the call's wire conversion. The counter is the state machine's
//! (`state_machine::producer_ids`).

use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::RouteError;
use crate::server::convert::{failure_fields, route_failure};
use crate::state_machine::{ErrorCode, Failure, Op, Outcome, PRODUCER_ID_AUTHORITY};

impl CoordinatorApi {
    pub(super) async fn serve_allocate_producer_ids(
        &self,
        request: Request<AllocateProducerIdsRequest>,
    ) -> Result<Response<AllocateProducerIdsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = PRODUCER_ID_AUTHORITY;
        let refused = |f: Failure| {
            let (error_code, error_message) = failure_fields(&f);
            AllocateProducerIdsResponse { error_code, error_message, producer_id_start: -1, producer_id_len: 0 }
        };
        let Ok(count) = u32::try_from(req.count) else {
            let f = Failure::new(ErrorCode::InvalidRequest, format!("count {} is negative", req.count));
            return Ok(Response::new(refused(f)));
        };
        let op = Op::AllocateProducerIds { broker_id: req.broker_id, count };
        Ok(Response::new(match self.write(g, op, timeout, hop).await {
            Ok((Outcome::ProducerIds(Ok(b)), _)) => AllocateProducerIdsResponse {
                error_code: 0,
                error_message: None,
                producer_id_start: b.first,
                producer_id_len: b.len as i32,
            },
            Ok((Outcome::ProducerIds(Err(f)), _)) => refused(f),
            Ok((other, _)) => refused(route_failure(&RouteError::unexpected(g, &other))),
            Err(e) => refused(route_failure(&e)),
        }))
    }
}
