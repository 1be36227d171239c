//! Partitions' offsets in the cluster: ListOffsets, a strict read served by each metadata
//! partition's leader (one request per metadata partition, all at once; asked directly, and a
//! leader that cannot confirm its leadership is asked no more once another is known; any node
//! routes it when the leader is unknown or moved),
//! and DeleteRecords, which moves the log start on (sent once: never repeated on failure). Each
//! answer becomes the partition's result or its Kafka error.

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::*;
use diskless_proto::{merge_part, metadata_partition_for, split_by_partition, ErrorCode, PartFailure};

use super::ClusterClient;
use crate::error::KafkaError;

/// One partition of a ListOffsets: topic id, partition, timestamp (or spec: -1 latest, ...).
pub type OffsetAsk = ([u8; 16], i32, i64);

impl ClusterClient {
    /// ListOffsets of one partition: `(timestamp, offset)`.
    pub async fn list_offset(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        timestamp: i64,
    ) -> Result<(i64, i64), KafkaError> {
        self.list_offsets(&[(topic_id, partition, timestamp)]).await.pop().unwrap_or_else(|| Err(no_answer()))
    }

    /// ListOffsets of many partitions: one request per metadata partition involved, all at once,
    /// each sent to its leader; answers in request order.
    pub async fn list_offsets(&self, asks: &[OffsetAsk]) -> Vec<Result<(i64, i64), KafkaError>> {
        self.list_offsets_isolated(asks, false).await
    }

    /// [`ClusterClient::list_offsets`] with Kafka's isolation level: `read_committed` answers the
    /// last stable offset for LATEST and finds nothing at or past it.
    pub async fn list_offsets_isolated(
        &self,
        asks: &[OffsetAsk],
        read_committed: bool,
    ) -> Vec<Result<(i64, i64), KafkaError>> {
        let n = self.num_metadata_partitions;
        let parts = split_by_partition(asks, |(t, p, _)| Some(metadata_partition_for(t, (*p).max(0), n)));
        let answers = futures_util::future::join_all(
            parts
                .iter()
                .map(|(&mp, idxs)| self.list_offsets_of(mp, idxs.iter().map(|&i| asks[i]).collect(), read_committed)),
        )
        .await;
        let mut slots: Vec<Option<Result<(i64, i64), KafkaError>>> = (0..asks.len()).map(|_| None).collect();
        for ((_, idxs), answer) in parts.iter().zip(answers) {
            merge_part(&mut slots, idxs, answer, |f| {
                Err(match f {
                    PartFailure::Failed(e) => e.clone(),
                    PartFailure::Miscounted { .. } => no_answer(),
                })
            });
        }
        slots.into_iter().map(|s| s.unwrap_or_else(|| Err(no_answer()))).collect()
    }

    /// The ListOffsets of partitions of metadata partition `mp`, a strict read served by its
    /// leader: asked directly (no forwarding hop); any node routes the read when the leader is
    /// unknown or moved.
    async fn list_offsets_of(
        &self,
        mp: u32,
        asks: Vec<OffsetAsk>,
        read_committed: bool,
    ) -> Result<Vec<Result<(i64, i64), KafkaError>>, KafkaError> {
        let req = ListOffsetsRequest {
            // One topic entry per ask: the answer's entries are in request order.
            topics: asks
                .iter()
                .map(|(t, p, ts)| list_offsets_request::ListOffsetsTopic {
                    topic_id: t.to_vec(),
                    partitions: vec![list_offsets_request::ListOffsetsPartition {
                        partition_index: *p,
                        timestamp: *ts,
                    }],
                })
                .collect(),
            timeout_ms: 10_000,
            isolation_level: i32::from(read_committed),
        };
        let answers = |r: ListOffsetsResponse| -> Vec<list_offsets_response::ListOffsetsPartitionResponse> {
            r.topics.into_iter().flat_map(|t| t.partitions).collect()
        };
        let not_leader = |ps: &[list_offsets_response::ListOffsetsPartitionResponse]| {
            ps.iter().any(|p| {
                p.error_code == ErrorCode::NotLeaderOrFollower.wire()
                    || p.error_code == ErrorCode::RequestTimedOut.wire()
            })
        };
        let mut asked: Option<String> = None;
        for _ in 0..2 {
            let Some(leader) = self.leader_of(mp).filter(|l| asked.as_ref() != Some(l)) else { break };
            let Some(ch) = self.channel_to(&leader) else { break };
            if let Ok(r) = CoordinatorServiceClient::new(ch).list_offsets(req.clone()).await {
                let ps = answers(r.into_inner());
                if ps.len() == asks.len() && !not_leader(&ps) {
                    return Ok(results(ps));
                }
            }
            // Gone, no longer the leader, or unable to confirm its leadership (cut off from its
            // quorum, while the others elected another): learn the leaders again and ask the new
            // one; any node meanwhile.
            asked = Some(leader);
            self.refresh_leaders().await;
        }
        let mut attempts = 0;
        loop {
            let resp = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.list_offsets(req).await }
                })
                .await
                .map_err(|s| KafkaError::unavailable("list offsets", &s))?;
            let ps = answers(resp);
            attempts += 1;
            // A node that knows no leader for the partition cannot route the read: ask another.
            if ps.iter().any(|p| p.error_code == ErrorCode::NotLeaderOrFollower.wire()) && attempts < self.nodes() {
                self.move_on();
                continue;
            }
            return Ok(results(ps));
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
        let low = KafkaError::from_wire(p.error_code, p.error_message).map_or(Ok(p.low_watermark), Err)?;
        // This broker's own reads see the new log start at once, before any watch tells of it.
        self.coordinates.truncate_below(topic_id, partition, low);
        self.marks.observe(topic_id, partition, None, Some(low), 0);
        Ok(low)
    }
}

fn results(ps: Vec<list_offsets_response::ListOffsetsPartitionResponse>) -> Vec<Result<(i64, i64), KafkaError>> {
    ps.into_iter()
        .map(|p| KafkaError::from_wire(p.error_code, p.error_message).map_or(Ok((p.timestamp, p.offset)), Err))
        .collect()
}

fn no_answer() -> KafkaError {
    KafkaError::new(ErrorCode::UnknownServerError, "the coordinator answered no partition")
}
