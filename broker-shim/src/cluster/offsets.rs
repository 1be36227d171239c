//! A partition's offsets in the cluster: ListOffsets, a strict read served by the metadata
//! partition's leader (asked directly; any node routes it when the leader is unknown or moved),
//! and DeleteRecords, which moves the log start on (sent once: never repeated on failure). Each
//! answer becomes the partition's result or its Kafka error.

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::*;
use diskless_proto::{metadata_partition_for, ErrorCode};

use super::ClusterClient;
use crate::error::KafkaError;

impl ClusterClient {
    /// ListOffsets of one partition: `(timestamp, offset)`.
    pub async fn list_offset(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        timestamp: i64,
    ) -> Result<(i64, i64), KafkaError> {
        let req = ListOffsetsRequest {
            topics: vec![list_offsets_request::ListOffsetsTopic {
                topic_id: topic_id.to_vec(),
                partitions: vec![list_offsets_request::ListOffsetsPartition { partition_index: partition, timestamp }],
            }],
            timeout_ms: 10_000,
        };
        let mut attempts = 0;
        // Strict reads are served by the metadata partition's leader: ask it directly (no
        // forwarding hop). Any node still routes the read when the leader is unknown or moved.
        let mp = metadata_partition_for(&topic_id, partition.max(0), self.num_metadata_partitions);
        let mut asked: Option<String> = None;
        for _ in 0..2 {
            let Some(leader) = self.leader_of(mp).filter(|l| asked.as_ref() != Some(l)) else { break };
            let Some(ch) = self.channel_to(&leader) else { break };
            let r = CoordinatorServiceClient::new(ch).list_offsets(req.clone()).await;
            match r.map(|r| r.into_inner().topics.into_iter().flat_map(|t| t.partitions).next()) {
                Ok(Some(p))
                    if p.error_code != ErrorCode::NotLeaderOrFollower.wire()
                        && p.error_code != ErrorCode::RequestTimedOut.wire() =>
                {
                    return KafkaError::from_wire(p.error_code, p.error_message)
                        .map_or(Ok((p.timestamp, p.offset)), Err);
                }
                // Gone, no longer the leader, or unable to confirm its leadership (cut off from
                // its quorum, while the others elected another): learn the leaders again and ask
                // the new one; any node meanwhile.
                _ => {
                    asked = Some(leader);
                    self.refresh_leaders().await;
                }
            }
        }
        loop {
            let resp = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.list_offsets(req).await }
                })
                .await
                .map_err(|s| KafkaError::unavailable("list offsets", &s))?;
            let p = resp.topics.into_iter().flat_map(|t| t.partitions).next().ok_or_else(no_answer)?;
            attempts += 1;
            // A node that knows no leader for the partition cannot route the read: ask another.
            if p.error_code == ErrorCode::NotLeaderOrFollower.wire() && attempts < self.nodes() {
                self.move_on();
                continue;
            }
            return KafkaError::from_wire(p.error_code, p.error_message).map_or(Ok((p.timestamp, p.offset)), Err);
        }
    }

    /// DeleteRecords of one partition: the new low watermark. Sent once (not repeated on failure).
    pub async fn delete_records_before(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        offset: i64,
        timeout_ms: i32,
    ) -> Result<i64, KafkaError> {
        let req = DeleteRecordsRequest {
            topics: vec![delete_records_request::DeleteRecordsTopic {
                topic_id: topic_id.to_vec(),
                partitions: vec![delete_records_request::DeleteRecordsPartition { partition_index: partition, offset }],
            }],
            timeout_ms: timeout_ms.max(1000),
        };
        let resp = self
            .call_once(|mut c| async move { c.delete_records(req).await })
            .await
            .map_err(|s| KafkaError::unavailable("delete records", &s))?;
        let p = resp.topics.into_iter().flat_map(|t| t.partitions).next().ok_or_else(no_answer)?;
        KafkaError::from_wire(p.error_code, p.error_message).map_or(Ok(p.low_watermark), Err)
    }
}

fn no_answer() -> KafkaError {
    KafkaError::new(ErrorCode::UnknownServerError, "the coordinator answered no partition")
}
