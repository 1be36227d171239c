//! InitProducerId for idempotent producers: a fresh producer id (from the blocks of
//! `crate::producer_ids`) and epoch 0 every time. Transactional ids are refused
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) until there is a transaction coordinator.

use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::listener::Listener;
use super::response::{encode, Reply};

pub(super) async fn init_producer_id(l: &Listener, header: &RequestHeader, req: InitProducerIdRequest) -> Reply {
    let v = header.request_api_version;
    let refused = |code: ErrorCode| {
        InitProducerIdResponse::default()
            .with_error_code(code.code())
            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let body = if req.transactional_id.is_some() {
        refused(ErrorCode::TransactionalIdAuthorizationFailed)
    } else {
        // Idempotence only: a fresh id, epoch 0, every time (a restarted producer is a new one).
        match l.shim.producer_ids.next().await {
            Ok(id) => InitProducerIdResponse::default()
                .with_producer_id(kafka_protocol::messages::ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::info!(error = %e, "InitProducerId: no producer id");
                // Clients retry COORDINATOR_NOT_AVAILABLE.
                refused(ErrorCode::CoordinatorNotAvailable)
            }
        }
    };
    encode(ApiKey::InitProducerId, header, v, &body)
}
