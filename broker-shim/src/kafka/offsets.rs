//! A partition's offsets: ListOffsets (a strict read of the metadata partition's leader, through
//! `cluster`) and DeleteRecords (the log start moved on, sent once). Names are resolved through the
//! catalog, each topic authorized first (ListOffsets DESCRIBE, DeleteRecords DELETE); each
//! partition is answered on its own.
//!
//! ListOffsets follows Kafka's `UnifiedLog.fetchOffsetByTimestamp`: EARLIEST (−2) and
//! EARLIEST_LOCAL (−4) the log start, LATEST (−1) the high watermark (also the last stable offset:
//! no transactions yet), LATEST_TIERED (−5) −1 (nothing is tiered); a time t the earliest *record*
//! whose timestamp is ≥ t, MAX_TIMESTAMP (−3) the first record with the largest timestamp — the
//! coordinator finds the batch, `fetch::by_time` the record in it.

use kafka_protocol::messages::*;

use super::listener::Listener;
use super::response::{encode, Reply};
use super::session::Session;
use crate::authz::Operation;
use crate::error::KafkaError;
use crate::fetch::by_time::TimeTarget;

/// How often a time lookup asks again when its batch went away between the two reads.
const TIME_LOOKUP_ATTEMPTS: usize = 3;

/// One partition's ListOffsets answer: `(timestamp, offset)`.
async fn list_offset(
    l: &Listener,
    topic_id: [u8; 16],
    partition: i32,
    timestamp: i64,
) -> Result<(i64, i64), KafkaError> {
    let target = match timestamp {
        t if t >= 0 => TimeTarget::AtOrAfter(t),
        -3 => TimeTarget::Max,
        _ => return l.shim.cluster.list_offset(topic_id, partition, timestamp).await,
    };
    let mut found = (-1, -1);
    for _ in 0..TIME_LOOKUP_ATTEMPTS {
        found = l.shim.cluster.list_offset(topic_id, partition, timestamp).await?;
        let (batch_ts, batch_offset) = found;
        if batch_offset < 0 {
            return Ok(found);
        }
        match l.shim.fetcher.record_by_time(topic_id, partition, batch_offset, batch_ts, target).await? {
            Some(record) => return Ok(record),
            None => continue,
        }
    }
    // The log kept moving under the lookup (retention at work): the batch's answer.
    Ok(found)
}

pub(super) async fn list_offsets(l: &Session, header: &RequestHeader, req: ListOffsetsRequest) -> Reply {
    let v = header.request_api_version;
    let mut topics = vec![];
    let access = l.access().await;
    for t in req.topics {
        let topic = l.topic(&access, Operation::Describe, t.name.as_str()).await;
        let mut parts = vec![];
        for p in t.partitions {
            let mut epoch = l.shim.registry.leader_epoch();
            let r = async {
                let tm = topic.clone()?;
                l.partition(&tm, p.partition_index)?;
                epoch = l.leader_epoch(if v >= 4 { p.current_leader_epoch } else { -1 })?;
                list_offset(l, tm.id, p.partition_index, p.timestamp).await
            }
            .await;
            let mut resp =
                list_offsets_response::ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            resp = match r {
                Ok((ts, off)) => resp.with_timestamp(ts).with_offset(off),
                Err(e) => resp.with_error_code(e.code.code()).with_timestamp(-1).with_offset(-1),
            };
            if v >= 4 {
                resp = resp.with_leader_epoch(epoch);
            }
            parts.push(resp);
        }
        topics
            .push(list_offsets_response::ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(parts));
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
