//! A partition's offsets: ListOffsets (by timestamp, earliest, latest: a strict read of the
//! metadata partition's leader, through `cluster`) and DeleteRecords (the log start moved on, sent
//! once). Names are resolved through the catalog; each partition is answered on its own.

use kafka_protocol::messages::*;

use super::listener::Listener;
use super::response::{encode, Reply};

pub(super) async fn list_offsets(l: &Listener, header: &RequestHeader, req: ListOffsetsRequest) -> Reply {
    let v = header.request_api_version;
    let mut topics = vec![];
    for t in req.topics {
        let topic = l.topic(t.name.as_str()).await;
        let mut parts = vec![];
        for p in t.partitions {
            let r = async {
                let tm = topic.clone()?;
                l.partition(&tm, p.partition_index)?;
                l.shim.cluster.list_offset(tm.id, p.partition_index, p.timestamp).await
            }
            .await;
            let mut resp =
                list_offsets_response::ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            resp = match r {
                Ok((ts, off)) => resp.with_timestamp(ts).with_offset(off),
                Err(e) => resp.with_error_code(e.code.code()).with_timestamp(-1).with_offset(-1),
            };
            if v >= 4 {
                resp = resp.with_leader_epoch(0);
            }
            parts.push(resp);
        }
        topics
            .push(list_offsets_response::ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(parts));
    }
    encode(ApiKey::ListOffsets, header, v, &ListOffsetsResponse::default().with_topics(topics))
}

pub(super) async fn delete_records(l: &Listener, header: &RequestHeader, req: DeleteRecordsRequest) -> Reply {
    let v = header.request_api_version;
    let mut topics = vec![];
    for t in req.topics {
        let topic = l.topic(t.name.as_str()).await;
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
