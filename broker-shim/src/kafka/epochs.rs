//! OffsetForLeaderEpoch (KIP-320): where a leader epoch ended, which a consumer asks after the
//! leader epoch it fetched at changed, to learn whether its log was truncated under it. A diskless
//! log is never truncated — every offset the coordinator cluster assigned stays where it was — so
//! every epoch up to the current one (the registry's generation, `Registry::leader_epoch`) ends at
//! the high watermark: a consumer's position is never past it and is kept. An epoch newer than this
//! broker's, or none, is answered with −1 and −1, as Kafka's `LeaderEpochFileCache.endOffsetFor`
//! answers an epoch it does not know; the current epoch is checked as Fetch checks it
//! (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH), after Kafka's `Partition.lastOffsetForLeaderEpoch`.
//! Needs DESCRIBE on the topic (Kafka's `KafkaApis.handleOffsetForLeaderEpochRequest` for a
//! consumer). Reads only.

use kafka_protocol::messages::*;

use super::response::{encode, Reply};
use super::session::Session;
use crate::authz::Operation;
use crate::error::KafkaError;

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: (i32, i64) = (-1, -1);

pub(super) async fn offset_for_leader_epoch(
    l: &Session,
    header: &RequestHeader,
    req: OffsetForLeaderEpochRequest,
) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let mut topics = vec![];
    for t in req.topics {
        let topic = l.topic(&access, Operation::Describe, t.topic.as_str()).await;
        let mut partitions = vec![];
        for p in t.partitions {
            let r: Result<(i32, i64), KafkaError> = async {
                let tm = topic.clone()?;
                l.partition(&tm, p.partition)?;
                let ours = l.leader_epoch(p.current_leader_epoch)?;
                if p.leader_epoch < 0 || p.leader_epoch > ours {
                    return Ok(UNDEFINED);
                }
                let (_, high_watermark) = l.shim.cluster.list_offset(tm.id, p.partition, -1).await?;
                Ok((p.leader_epoch, high_watermark))
            }
            .await;
            let e = offset_for_leader_epoch_response::EpochEndOffset::default().with_partition(p.partition);
            partitions.push(match r {
                Ok((epoch, end)) => e.with_leader_epoch(epoch).with_end_offset(end),
                Err(err) => {
                    e.with_error_code(err.code.code()).with_leader_epoch(UNDEFINED.0).with_end_offset(UNDEFINED.1)
                }
            });
        }
        topics.push(
            offset_for_leader_epoch_response::OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions),
        );
    }
    encode(ApiKey::OffsetForLeaderEpoch, header, v, &OffsetForLeaderEpochResponse::default().with_topics(topics))
}
