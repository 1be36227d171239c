//! Transactions on the partition side, through the coordinator's API: transactional
//! batches committed across metadata partitions hold each partition's last stable offset;
//! EndTransaction writes a marker on every partition of the transaction, in each owning metadata
//! partition's log, sent to any node; `read_committed` FindBatches and ListOffsets stop at the
//! last stable offset, name the aborted transactions and describe the markers, alike on every
//! replica; the marker's epoch fences a late batch of the ended transaction; a repeated
//! EndTransaction writes nothing more.

use std::time::Duration;

use diskless_cluster_tests::*;
use diskless_proto::v1::*;

const PARTITIONS: i32 = 4;
const PRODUCER: i64 = 7;

fn txn_batch(topic: &[u8], partition: i32, at: i32, epoch: i32, seq: i32) -> commit_file_request::CommitBatch {
    commit_file_request::CommitBatch {
        producer_id: PRODUCER,
        producer_epoch: epoch,
        base_sequence: seq,
        last_sequence: seq + 1,
        is_transactional: true,
        txn_number: 0,
        ..batch(topic, partition, 2, at, 100)
    }
}

/// Commits `batches` as one file; the error code of each.
async fn commit(client: &mut Client, key: &str, batches: Vec<commit_file_request::CommitBatch>) -> Vec<i32> {
    let req = CommitFileRequest {
        object_key: key.into(),
        object_format: 1,
        file_size: 100 * batches.len() as i64,
        owner_ids: vec![],
        batches,
        timeout_ms: 10_000,
        uploader_broker_id: 1,
    };
    client.commit_file(req).await.expect("commit").into_inner().batches.iter().map(|b| b.error_code).collect()
}

/// EndTransaction on every partition: each marker's (error code, offset), and the indexes applied.
async fn end(client: &mut Client, topic: &[u8], epoch: i32, commit: bool) -> (Vec<(i32, i64)>, Vec<AppliedIndex>) {
    let markers = (0..PARTITIONS)
        .map(|p| end_transaction_request::Marker {
            topic_id: topic.to_vec(),
            partition_index: p,
            producer_id: PRODUCER,
            producer_epoch: epoch,
            commit,
            coordinator_epoch: 5,
            txn_number: 0,
        })
        .collect();
    let r =
        client.end_transaction(EndTransactionRequest { markers, timeout_ms: 10_000 }).await.expect("end").into_inner();
    (r.markers.iter().map(|m| (m.error_code, m.offset)).collect(), r.applied)
}

/// FindBatches read_committed of one partition from offset 0 on `client`'s node.
async fn committed(
    client: &mut Client,
    topic: &[u8],
    partition: i32,
    min: &[AppliedIndex],
) -> find_batches_response::FindBatchesPartitionResponse {
    let r = client
        .find_batches(FindBatchesRequest {
            fetch_max_bytes: i32::MAX,
            max_batches_per_partition: 0,
            topics: vec![find_batches_request::FindBatchesTopic {
                topic_id: topic.to_vec(),
                partitions: vec![find_batches_request::FindBatchesPartition {
                    partition_index: partition,
                    offset: 0,
                    max_partition_fetch_bytes: i32::MAX,
                }],
            }],
            timeout_ms: 10_000,
            min_applied: min.to_vec(),
            isolation_level: 1,
        })
        .await
        .expect("find batches")
        .into_inner();
    r.topics[0].partitions[0].clone()
}

async fn latest(client: &mut Client, topic: &[u8], partition: i32, isolation_level: i32) -> i64 {
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
            isolation_level,
        })
        .await
        .expect("list offsets")
        .into_inner();
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
    p.offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spanning_metadata_partitions_is_ended_by_markers_every_replica_reads_alike() {
    let c = Cluster::start(3, Options { metadata_partitions: 2, ..Options::default() }).await;
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let topic = topic_id(15);
    let mut client = c.client(1).await;
    create_topic(&mut client, &topic, "txn", PARTITIONS).await;

    // Offsets 0..1 plain, then the transaction's first batch at 2 on every partition.
    let plain: Vec<_> = (0..PARTITIONS).map(|p| batch(&topic, p, 2, p * 100, 100)).collect();
    assert_eq!(commit(&mut client, "wal/plain", plain).await, vec![0; PARTITIONS as usize]);
    let open: Vec<_> = (0..PARTITIONS).map(|p| txn_batch(&topic, p, p * 100, 0, 0)).collect();
    assert_eq!(commit(&mut client, "wal/txn-1", open).await, vec![0; PARTITIONS as usize]);
    for p in 0..PARTITIONS {
        assert_eq!(latest(&mut client, &topic, p, 0).await, 4, "read_uncommitted: the high watermark");
        assert_eq!(latest(&mut client, &topic, p, 1).await, 2, "read_committed: the open transaction's start");
        let r = committed(&mut client, &topic, p, &[]).await;
        assert_eq!((r.error_code, r.last_stable_offset, r.high_watermark), (0, 2, 4));
        assert_eq!(r.batches.iter().map(|b| b.base_offset).collect::<Vec<_>>(), vec![0]);
    }

    // Aborted, with the epoch bumped: a marker at 4 on every partition.
    let (markers, applied) = end(&mut client, &topic, 1, false).await;
    assert_eq!(markers, vec![(0, 4); PARTITIONS as usize]);
    // A late batch of the aborted transaction is fenced by the marker's epoch.
    let late: Vec<_> = (0..PARTITIONS).map(|p| txn_batch(&topic, p, p * 100, 0, 2)).collect();
    assert_eq!(commit(&mut client, "wal/late", late).await, vec![47; PARTITIONS as usize]);
    // Every replica answers the same: the aborted range, the marker, the last stable offset.
    for node in 1..=3 {
        let mut on = c.client(node).await;
        for p in 0..PARTITIONS {
            let r = committed(&mut on, &topic, p, &applied).await;
            assert_eq!((r.error_code, r.last_stable_offset, r.high_watermark), (0, 5, 5), "node {node} partition {p}");
            let aborted: Vec<(i64, i64)> =
                r.aborted_transactions.iter().map(|a| (a.producer_id, a.first_offset)).collect();
            assert_eq!(aborted, vec![(PRODUCER, 2)], "node {node} partition {p}");
            let marker = r.batches.last().expect("the marker");
            assert_eq!((marker.base_offset, marker.byte_size, marker.object_key.as_str()), (4, 0, ""));
            let m = marker.marker.expect("described as a marker");
            assert_eq!((m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch), (PRODUCER, 1, false, 5));
        }
    }

    // The next transaction, in the new epoch from sequence 0, committed.
    let next: Vec<_> = (0..PARTITIONS).map(|p| txn_batch(&topic, p, p * 100, 1, 0)).collect();
    assert_eq!(commit(&mut client, "wal/txn-2", next).await, vec![0; PARTITIONS as usize]);
    let (markers, applied) = end(&mut client, &topic, 2, true).await;
    assert_eq!(markers, vec![(0, 7); PARTITIONS as usize]);
    for p in 0..PARTITIONS {
        let r = committed(&mut client, &topic, p, &applied).await;
        assert_eq!((r.last_stable_offset, r.high_watermark), (8, 8));
        assert!(r.batches.last().and_then(|b| b.marker).is_some_and(|m| m.commit));
        assert_eq!(latest(&mut client, &topic, p, 1).await, 8);
    }
    // Said again (a coordinator retrying): nothing more is written.
    let (markers, _) = end(&mut client, &topic, 2, true).await;
    assert_eq!(markers, vec![(0, -1); PARTITIONS as usize]);
    assert_eq!(latest(&mut client, &topic, 0, 0).await, 8);
}
