//! DescribeProducers (Kafka's `KafkaApis.handleDescribeProducersRequest`): the producers each
//! partition keeps state for, as the coordinator cluster keeps it (`CoordinatorService.
//! DescribeProducers`, on each partition's metadata-partition leader).
//!
//! READ on each topic (TOPIC_AUTHORIZATION_FAILED), then the topic and partition must exist
//! (UNKNOWN_TOPIC_OR_PARTITION). Any broker answers for any partition (every broker serves every
//! partition here), so NOT_LEADER_OR_FOLLOWER is never answered. What differs from Kafka:
//! `last_timestamp` is the append time of the producer's last batch (Kafka: its largest
//! timestamp), and `coordinator_epoch` is -1 (markers here are fenced by transaction numbers and
//! epochs, not by a coordinator epoch kept per producer). It must not read producer state itself.

use diskless_proto::v1 as coord;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::group_access::TIMEOUT_MS;
use super::response::{encode, message, Reply};
use super::session::Session;
use crate::authz::Operation;

/// One partition's answer: its error (and message), or its producers.
type Described = Result<Vec<describe_producers_response::ProducerState>, (ErrorCode, Option<String>)>;

pub(super) async fn describe_producers(l: &Session, header: &RequestHeader, req: DescribeProducersRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    // Per topic: per partition, its answer so far (None: asked of the cluster).
    let mut answers: Vec<Vec<(i32, Option<Described>)>> = vec![];
    let mut asked: Vec<coord::describe_producers_request::Partition> = vec![];
    for t in &req.topics {
        let meta = l.topic(&access, Operation::Read, t.name.as_str()).await;
        let mut parts = vec![];
        for &p in &t.partition_indexes {
            let known = meta.as_ref().map_err(Clone::clone).and_then(|m| l.partition(m, p).map(|()| m));
            let answer = match known {
                Err(e) => Some(Err((e.code, Some(e.message)))),
                Ok(m) => {
                    asked.push(coord::describe_producers_request::Partition {
                        topic_id: m.id.to_vec(),
                        partition_index: p,
                    });
                    None
                }
            };
            parts.push((p, answer));
        }
        answers.push(parts);
    }
    let mut described: std::vec::IntoIter<Described> = if asked.is_empty() {
        vec![].into_iter()
    } else {
        let n = asked.len();
        let request = coord::DescribeProducersRequest { partitions: asked, timeout_ms: TIMEOUT_MS };
        let r = l
            .shim
            .cluster
            .call(|mut c| {
                let request = request.clone();
                async move { c.describe_producers(request).await }
            })
            .await;
        match r {
            Ok(resp) if resp.partitions.len() == n => {
                resp.partitions.into_iter().map(described).collect::<Vec<_>>().into_iter()
            }
            Ok(_) => vec![Err((ErrorCode::UnknownServerError, None)); n].into_iter(),
            Err(status) => {
                tracing::info!(%status, "DescribeProducers: coordinator cluster unavailable");
                vec![Err((ErrorCode::RequestTimedOut, Some(status.message().to_string()))); n].into_iter()
            }
        }
    };
    let topics = req
        .topics
        .iter()
        .zip(answers)
        .map(|(t, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, answer)| {
                    let answer =
                        answer.or_else(|| described.next()).unwrap_or(Err((ErrorCode::UnknownServerError, None)));
                    let base = describe_producers_response::PartitionResponse::default().with_partition_index(p);
                    match answer {
                        Ok(producers) => base.with_active_producers(producers),
                        Err((code, text)) => {
                            base.with_error_code(code.code()).with_error_message(text.and_then(message))
                        }
                    }
                })
                .collect();
            describe_producers_response::TopicResponse::default().with_name(t.name.clone()).with_partitions(partitions)
        })
        .collect();
    encode(ApiKey::DescribeProducers, header, v, &DescribeProducersResponse::default().with_topics(topics))
}

/// The cluster's answer for one partition; routing and availability problems stay retriable.
fn described(p: coord::describe_producers_response::Partition) -> Described {
    match ErrorCode::from_wire(p.error_code) {
        ErrorCode::None => Ok(p
            .producers
            .iter()
            .map(|a| {
                describe_producers_response::ProducerState::default()
                    .with_producer_id(ProducerId(a.producer_id))
                    .with_producer_epoch(a.producer_epoch)
                    .with_last_sequence(a.last_sequence)
                    .with_last_timestamp(a.last_timestamp)
                    .with_coordinator_epoch(-1)
                    .with_current_txn_start_offset(a.current_txn_start_offset)
            })
            .collect()),
        code => Err((code, p.error_message)),
    }
}
