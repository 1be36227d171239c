//! A partition's offsets: ListOffsets (a strict read of the metadata partition's leader, through
//! `cluster`) and DeleteRecords (the log start moved on, sent once). Names are resolved through the
//! catalog, each topic authorized first (ListOffsets DESCRIBE, DeleteRecords DELETE); each
//! partition is answered on its own, a ListOffsets's partitions asked in one round trip per
//! metadata partition.
//!
//! ListOffsets follows Kafka's `UnifiedLog.fetchOffsetByTimestamp`: EARLIEST (−2) and
//! EARLIEST_LOCAL (−4) the log start, LATEST (−1) the high watermark (`read_committed`, v2+: the
//! last stable offset), LATEST_TIERED (−5) −1 (nothing is tiered); a time t the earliest *record*
//! whose timestamp is ≥ t, MAX_TIMESTAMP (−3) the first record with the largest timestamp — the
//! coordinator finds the batch, `fetch::by_time` the record in it; with `read_committed` nothing
//! at or past the last stable offset is found (Kafka's `ReplicaManager.fetchOffsetForTimestamp`).

use kafka_protocol::messages::*;

use super::listener::Listener;
use super::response::{encode, Reply};
use super::session::Session;
use crate::authz::Operation;
use crate::cluster::OffsetAsk;
use crate::error::KafkaError;
use crate::fetch::by_time::TimeTarget;
use diskless_proto::ErrorCode;

/// How often a time lookup asks again when its batch went away between the two reads.
const TIME_LOOKUP_ATTEMPTS: usize = 3;

/// A ListOffsets answer by time made exact: the coordinator's answer names the batch, the record
/// comes from inside it (asked again, whole, when the batch went away between the two reads).
async fn to_the_record(
    l: &Listener,
    (topic_id, partition, timestamp): OffsetAsk,
    found: Result<(i64, i64), KafkaError>,
    read_committed: bool,
) -> Result<(i64, i64), KafkaError> {
    let target = match timestamp {
        t if t >= 0 => TimeTarget::AtOrAfter(t),
        -3 => TimeTarget::Max,
        _ => return found,
    };
    let mut found = found?;
    for attempt in 0..TIME_LOOKUP_ATTEMPTS {
        if attempt > 0 {
            let again = l.shim.cluster.list_offsets_isolated(&[(topic_id, partition, timestamp)], read_committed).await;
            found = again.into_iter().next().unwrap_or_else(|| {
                Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer for the partition"))
            })?;
        }
        let (batch_ts, batch_offset) = found;
        if batch_offset < 0 {
            return Ok(found);
        }
        if let Some(record) = l.shim.fetcher.record_by_time(topic_id, partition, batch_offset, batch_ts, target).await?
        {
            return Ok(record);
        }
    }
    // The log kept moving under the lookup (retention at work): the batch's answer.
    Ok(found)
}

pub(super) async fn list_offsets(l: &Session, header: &RequestHeader, req: ListOffsetsRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    // Every partition checked first; then one round trip per metadata partition for all of them.
    struct Item {
        partition_index: i32,
        epoch: i32,
        ask: Result<OffsetAsk, KafkaError>,
    }
    let mut checked: Vec<(TopicName, Vec<Item>)> = vec![];
    for t in req.topics {
        let topic = l.topic(&access, Operation::Describe, t.name.as_str()).await;
        let mut items = vec![];
        for p in t.partitions {
            let mut epoch = l.shim.registry.leader_epoch();
            let ask = topic.clone().and_then(|tm| {
                l.partition(&tm, p.partition_index)?;
                epoch = l.leader_epoch(if v >= 4 { p.current_leader_epoch } else { -1 })?;
                Ok((tm.id, p.partition_index, p.timestamp))
            });
            items.push(Item { partition_index: p.partition_index, epoch, ask });
        }
        checked.push((t.name, items));
    }
    let asks: Vec<OffsetAsk> =
        checked.iter().flat_map(|(_, items)| items.iter().filter_map(|i| i.ask.clone().ok())).collect();
    let read_committed = v >= 2 && req.isolation_level == 1;
    let found = l.shim.cluster.list_offsets_isolated(&asks, read_committed).await;
    let exact = futures_util::future::join_all(
        asks.iter().zip(found).map(|(&ask, f)| to_the_record(l, ask, f, read_committed)),
    )
    .await;
    let mut exact = exact.into_iter();
    let mut topics = vec![];
    for (name, items) in checked {
        let mut parts = vec![];
        for item in items {
            let r = match item.ask {
                Ok(_) => {
                    exact.next().unwrap_or_else(|| Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")))
                }
                Err(e) => Err(e),
            };
            let mut resp = list_offsets_response::ListOffsetsPartitionResponse::default()
                .with_partition_index(item.partition_index);
            resp = match r {
                Ok((ts, off)) => resp.with_timestamp(ts).with_offset(off),
                Err(e) => resp.with_error_code(e.code.code()).with_timestamp(-1).with_offset(-1),
            };
            if v >= 4 {
                resp = resp.with_leader_epoch(item.epoch);
            }
            parts.push(resp);
        }
        topics.push(list_offsets_response::ListOffsetsTopicResponse::default().with_name(name).with_partitions(parts));
    }
    encode(ApiKey::ListOffsets, header, v, &ListOffsetsResponse::default().with_topics(topics))
}

pub(super) async fn delete_records(l: &Session, header: &RequestHeader, req: DeleteRecordsRequest) -> Reply {
    let v = header.request_api_version;
    let mut topics = vec![];
    let access = l.access().await;
    for t in req.topics {
        let topic = l.topic(&access, Operation::Delete, t.name.as_str()).await;
        let mut parts = vec![];
        for p in t.partitions {
            let r = async {
                let tm = topic.clone()?;
                l.partition(&tm, p.partition_index)?;
                l.shim.cluster.delete_records_before(tm.id, p.partition_index, p.offset, req.timeout_ms).await
            }
            .await;
            let resp = delete_records_response::DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index);
            parts.push(match r {
                Ok(lw) => resp.with_low_watermark(lw),
                Err(e) => resp.with_error_code(e.code.code()).with_low_watermark(-1),
            });
        }
        topics.push(
            delete_records_response::DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(parts),
        );
    }
    encode(ApiKey::DeleteRecords, header, v, &DeleteRecordsResponse::default().with_topics(topics))
}
