//! InitProducerId for idempotent producers: a fresh producer id (from the blocks of
//! `crate::producer_ids`) and epoch 0 every time. A transactional id goes to the transaction
//! coordinator (`transactions`); two-phase commit (KIP-939) is refused. An idempotent
//! producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic, else
//! CLUSTER_AUTHORIZATION_FAILED (Kafka's `KafkaApis.handleInitProducerIdRequest`).

use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::response::{encode, Reply};
use super::session::Session;
use crate::authz::{Operation, Resource};

pub(super) async fn init_producer_id(l: &Session, header: &RequestHeader, req: InitProducerIdRequest) -> Reply {
    let v = header.request_api_version;
    let refused = |code: ErrorCode| {
        InitProducerIdResponse::default()
            .with_error_code(code.code())
            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let access = l.access().await;
    let body = if req.transactional_id.as_ref().is_some_and(|t| t.is_empty()) {
        // Kafka's TransactionCoordinator: an empty transactional id is a malformed request.
        refused(ErrorCode::InvalidRequest)
    } else if req.enable_2_pc {
        refused(ErrorCode::UnsupportedVersion)
    } else if req.transactional_id.is_some() {
        return super::transactions::init_producer_id(l, header, req).await;
    } else if !access.on_cluster(Operation::IdempotentWrite)
        && !access.allowed_somewhere(Operation::Write, Resource::Topic)
    {
        // Kafka's rule: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
        refused(ErrorCode::ClusterAuthorizationFailed)
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
