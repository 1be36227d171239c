//! FindBatches on a follower, with the Raft indexes a commit returned as the minimum, returns the
//! caller's own just-committed batches.

use diskless_cluster_tests::*;
use diskless_proto::admin::TransferLeaderRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_read_with_a_minimum_index_sees_the_callers_own_commit() {
    let options = Options { metadata_partitions: 1, leader_balance_ms: 0, ..Options::default() };
    let c = Cluster::start(3, options).await;
    let topic = topic_id(1);
    // Metadata partition 0 led by node 1; nodes 2 and 3 are followers.
    let leader = c.leaders(1).await[0];
    if leader != 1 {
        c.admin(leader)
            .await
            .transfer_leader(TransferLeaderRequest { metadata_partition: 0, to_node_id: 1 })
            .await
            .unwrap();
    }
    // The transfer answers once it is asked for; node 1 leads a moment later.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while c.leaders(1).await[0] != 1 {
        assert!(std::time::Instant::now() < deadline, "node 1 does not take over metadata partition 0");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let mut leader = c.client(1).await;
    create_topic(&mut leader, &topic, "t", 1).await;

    let mut follower = c.client(3).await;
    for i in 0..30 {
        let r = leader.commit_file(commit_request(&format!("k{i}"), &topic, &[(0, 1)])).await.unwrap().into_inner();
        assert_eq!(r.batches[0].error_code, 0);
        let base = r.batches[0].assigned_base_offset;
        let batches = all_batches(&mut follower, &topic, 0, r.applied.clone()).await.unwrap();
        let last = batches.last().expect("the follower has the batch");
        assert_eq!((last.base_offset, last.object_key.as_str()), (base, format!("k{i}").as_str()));
    }

    // The answer says which index the replica had applied.
    let r = follower
        .find_batches(diskless_proto::v1::FindBatchesRequest {
            fetch_max_bytes: 1000,
            max_batches_per_partition: 1,
            topics: vec![diskless_proto::v1::find_batches_request::FindBatchesTopic {
                topic_id: topic.clone(),
                partitions: vec![diskless_proto::v1::find_batches_request::FindBatchesPartition {
                    partition_index: 0,
                    offset: 0,
                    max_partition_fetch_bytes: 1000,
                }],
            }],
            timeout_ms: 5000,
            min_applied: vec![],
            isolation_level: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.applied.len(), 1);
    assert!(r.applied[0].index > 30);
}

/// A minimum index for a metadata partition the request does not read must not hold it up (a broker
/// passes the indexes of every commit it made; one lagging metadata partition must not stall all
/// reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_index_of_a_group_the_request_does_not_read_does_not_delay_it() {
    let c = Cluster::start(3, Options::default()).await;
    let topic = topic_id(2);
    let mut client = c.client(1).await;
    create_topic(&mut client, &topic, "t", 8).await;
    let read = diskless_proto::metadata_partition_for(&[2; 16], 0, 4);
    let other = (read + 1) % 4;
    // Node 1 may follow the metadata partition it reads: pass the commit's own index for it, as a
    // broker does, so that the batch is there; the index for `other` is the one it must not wait
    // for.
    let committed = client.commit_file(commit_request("a", &topic, &[(0, 1)])).await.unwrap().into_inner();
    assert_eq!(committed.batches[0].error_code, 0, "{:?}", committed.batches[0].error_message);
    let mut min_applied: Vec<_> = committed.applied.into_iter().filter(|g| g.metadata_partition == read).collect();
    assert_eq!(min_applied.len(), 1);
    // An index that metadata partition `other` will not reach for a long time.
    min_applied.push(diskless_proto::v1::AppliedIndex { metadata_partition: other, index: 1 << 40 });
    let started = std::time::Instant::now();
    let r = client
        .find_batches(diskless_proto::v1::FindBatchesRequest {
            fetch_max_bytes: 1000,
            max_batches_per_partition: 1,
            topics: vec![diskless_proto::v1::find_batches_request::FindBatchesTopic {
                topic_id: topic.clone(),
                partitions: vec![diskless_proto::v1::find_batches_request::FindBatchesPartition {
                    partition_index: 0,
                    offset: 0,
                    max_partition_fetch_bytes: 1000,
                }],
            }],
            timeout_ms: 20_000,
            min_applied,
            isolation_level: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{:?}", r.topics[0].partitions[0].error_message);
    assert_eq!(r.topics[0].partitions[0].batches.len(), 1);
    let waited = started.elapsed();
    assert!(waited < std::time::Duration::from_secs(10), "waited {waited:?} for a metadata partition it does not read");
}
