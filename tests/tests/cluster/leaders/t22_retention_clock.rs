//! Retention deletes by time and cannot be undone, so it must not trust one node's clock: a
//! leader whose clock jumps two hours ahead must not expire records with a one-hour retention,
//! while retention itself keeps working (a topic with a one-second retention is emptied).

use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::admin::FaultRequest;
use diskless_proto::v1::{
    create_partitions_request, list_offsets_request, CreatePartitionsRequest, ListOffsetsRequest, TopicConfigs,
};

async fn create_with_retention(c: &Cluster, topic: &[u8], name: &str, retention_ms: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c
            .client(1)
            .await
            .create_partitions(CreatePartitionsRequest {
                topics: vec![create_partitions_request::CreatablePartitions {
                    topic_id: topic.to_vec(),
                    name: name.into(),
                    num_partitions: 1,
                    configs: Some(TopicConfigs { retention_ms: Some(retention_ms), ..Default::default() }),
                }],
                timeout_ms: 10_000,
            })
            .await
            .map(|r| r.into_inner().topics[0].error_code);
        if matches!(r, Ok(0)) {
            return;
        }
        assert!(Instant::now() < deadline, "create {name}: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Commits `n` LogAppendTime batches (their time is the commit's, on the leader's clock).
async fn commit_batches(c: &Cluster, topic: &[u8], key: &str, n: usize) {
    let mut client = c.client(1).await;
    for i in 0..n {
        let mut req = commit_request(&format!("{key}{i}"), topic, &[(0, 1)]);
        req.batches[0].timestamp_type = 1;
        let r = client.commit_file(req).await.expect("commit").into_inner();
        assert_eq!(r.batches[0].error_code, 0, "{:?}", r.batches[0].error_message);
    }
}

/// The log start offset of partition 0 (strict ListOffsets, earliest).
async fn log_start(c: &Cluster, topic: &[u8]) -> i64 {
    let r = c
        .client(1)
        .await
        .list_offsets(ListOffsetsRequest {
            topics: vec![list_offsets_request::ListOffsetsTopic {
                topic_id: topic.to_vec(),
                partitions: vec![list_offsets_request::ListOffsetsPartition { partition_index: 0, timestamp: -2 }],
            }],
            timeout_ms: 10_000,
            isolation_level: 0,
        })
        .await
        .expect("list offsets")
        .into_inner();
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
    p.offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_clock_far_ahead_does_not_expire_records_early() {
    let options =
        Options { metadata_partitions: 1, leader_balance_ms: 0, retention_check_ms: 500, ..Options::default() };
    let c = Cluster::start(3, options).await;
    let (kept, expiring) = (topic_id(1), topic_id(2));
    create_with_retention(&c, &kept, "kept", 3_600_000).await;
    create_with_retention(&c, &expiring, "expiring", 1_000).await;
    commit_batches(&c, &kept, "k", 5).await;
    commit_batches(&c, &expiring, "e", 5).await;

    // The leader's clock jumps two hours ahead.
    let leader = c.leaders(1).await[0];
    c.admin(leader)
        .await
        .inject_fault(FaultRequest { clock_offset_ms: Some(2 * 3_600_000), keep_blocks: true, ..Default::default() })
        .await
        .expect("clock jump");

    // Several retention passes later: the one-second topic is emptied, the one-hour topic is not.
    let deadline = Instant::now() + Duration::from_secs(30);
    while log_start(&c, &expiring).await < 5 {
        assert!(Instant::now() < deadline, "retention never emptied the one-second topic");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(log_start(&c, &kept).await, 0, "records with a one-hour retention expired after 5 seconds");
}
