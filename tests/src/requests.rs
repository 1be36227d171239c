//! Builders of coordinator requests (topics, commits) and the calls tests repeat with them.

use std::time::{Duration, Instant};

use diskless_proto::v1::*;
use uuid::Uuid;

use crate::*;

pub fn topic_id(n: u8) -> Vec<u8> {
    Uuid::from_bytes([n; 16]).as_bytes().to_vec()
}

pub fn create_request(topic: &[u8], name: &str, partitions: i32) -> CreatePartitionsRequest {
    CreatePartitionsRequest {
        topics: vec![create_partitions_request::CreatablePartitions {
            topic_id: topic.to_vec(),
            name: name.into(),
            num_partitions: partitions,
            configs: None,
        }],
        timeout_ms: 10_000,
    }
}

/// Creates a topic through `client`, retrying retriable errors (a leader being elected).
pub async fn create_topic(client: &mut Client, topic: &[u8], name: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client.create_partitions(create_request(topic, name, partitions)).await;
        match r.map(|r| r.into_inner().topics[0].error_code) {
            Ok(0) => return,
            other if Instant::now() > deadline => panic!("create topic {name}: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A batch of `records` records for partition `partition` of `topic`, `size` bytes at `at`.
pub fn batch(topic: &[u8], partition: i32, records: i64, at: i32, size: i32) -> commit_file_request::CommitBatch {
    commit_file_request::CommitBatch {
        magic: 2,
        request_id: 0,
        topic_id: topic.to_vec(),
        partition_index: partition,
        byte_offset: at,
        size,
        base_offset: 0,
        last_offset: records - 1,
        batch_max_timestamp: 0,
        timestamp_type: 0,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
        is_transactional: false,
        txn_number: 0,
    }
}

/// A CommitFile request for `object_key` holding one batch per `(partition, records)`, 100 bytes
/// each, back to back.
pub fn commit_request(object_key: &str, topic: &[u8], parts: &[(i32, i64)]) -> CommitFileRequest {
    let batches: Vec<_> =
        parts.iter().enumerate().map(|(i, &(p, n))| batch(topic, p, n, i as i32 * 100, 100)).collect();
    CommitFileRequest {
        object_key: object_key.into(),
        object_format: 1,
        file_size: 100 * parts.len() as i64,
        owner_ids: vec![],
        batches,
        timeout_ms: 10_000,
        uploader_broker_id: 1,
    }
}

/// Every batch of one partition from offset 0, read from `client`'s node (after it applied `min`).
pub async fn all_batches(
    client: &mut Client,
    topic: &[u8],
    partition: i32,
    min: Vec<AppliedIndex>,
) -> Result<Vec<find_batches_response::BatchInfo>, String> {
    batches_from(client, topic, partition, 0, min).await
}

/// Every batch of a partition from `offset` to its high watermark, through FindBatches.
pub async fn batches_from(
    client: &mut Client,
    topic: &[u8],
    partition: i32,
    mut offset: i64,
    min: Vec<AppliedIndex>,
) -> Result<Vec<find_batches_response::BatchInfo>, String> {
    let mut out = vec![];
    loop {
        let r = client
            .find_batches(FindBatchesRequest {
                fetch_max_bytes: i32::MAX,
                max_batches_per_partition: 10_000,
                topics: vec![find_batches_request::FindBatchesTopic {
                    topic_id: topic.to_vec(),
                    partitions: vec![find_batches_request::FindBatchesPartition {
                        partition_index: partition,
                        offset,
                        max_partition_fetch_bytes: i32::MAX,
                    }],
                }],
                timeout_ms: 10_000,
                min_applied: min.clone(),
                isolation_level: 0,
            })
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        let p = &r.topics[0].partitions[0];
        if p.error_code != 0 {
            return Err(format!("FindBatches error {}: {:?}", p.error_code, p.error_message));
        }
        if p.batches.is_empty() {
            return Ok(out);
        }
        offset = p.batches.last().map_or(offset, |b| b.last_offset + 1);
        out.extend(p.batches.iter().cloned());
        if offset >= p.high_watermark {
            return Ok(out);
        }
    }
}

/// The high watermark of a partition through a strict ListOffsets.
pub async fn high_watermark(client: &mut Client, topic: &[u8], partition: i32) -> Result<i64, String> {
    let r = client
        .list_offsets(ListOffsetsRequest {
            topics: vec![list_offsets_request::ListOffsetsTopic {
                topic_id: topic.to_vec(),
                partitions: vec![list_offsets_request::ListOffsetsPartition {
                    partition_index: partition,
                    timestamp: -1,
                }],
            }],
            timeout_ms: 10_000,
            isolation_level: 0,
        })
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    let p = &r.topics[0].partitions[0];
    if p.error_code != 0 {
        return Err(format!("ListOffsets error {}: {:?}", p.error_code, p.error_message));
    }
    Ok(p.offset)
}

/// Commits one batch per `(partition, records)` through `client`, retrying the batches that failed
/// with a retriable error (under a new object key: the first file may be committed in part).
pub async fn commit_all(client: &mut Client, key: &str, topic: &[u8], parts: &[(i32, i64)]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut left: Vec<(i32, i64)> = parts.to_vec();
    let mut attempt = 0;
    while !left.is_empty() {
        attempt += 1;
        let req = commit_request(&format!("{key}#{attempt}"), topic, &left);
        let retry: Vec<(i32, i64)> = match client.commit_file(req).await {
            Ok(r) => r
                .into_inner()
                .batches
                .iter()
                .zip(&left)
                .filter(|(b, _)| {
                    assert!(
                        matches!(b.error_code, 0 | 6 | 7),
                        "commit {key}: error {} {:?}",
                        b.error_code,
                        b.error_message
                    );
                    b.error_code != 0
                })
                .map(|(_, p)| *p)
                .collect(),
            Err(_) => left.clone(),
        };
        left = retry;
        assert!(Instant::now() < deadline, "commit {key} still failing after a minute");
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
