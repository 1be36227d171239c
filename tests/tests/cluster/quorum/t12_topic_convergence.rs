//! Topic creations and deletions that reached the catalog (metadata partition 0) but not every
//! metadata partition — a timeout, a leader change, a crash — complete on their own: each
//! partition's leader copies the catalog's decisions. A deleted topic never comes back.

use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::v1::{
    delete_topics_request, list_offsets_request, CreatePartitionsRequest, DeleteTopicsRequest, ListOffsetsRequest,
};

const PARTITIONS: i32 = 8;

/// Per partition, the error code of a strict ListOffsets through node `via`.
async fn codes(c: &Cluster, via: u64, topic: &[u8]) -> Vec<i32> {
    let r = c
        .client(via)
        .await
        .list_offsets(ListOffsetsRequest {
            topics: vec![list_offsets_request::ListOffsetsTopic {
                topic_id: topic.to_vec(),
                partitions: (0..PARTITIONS)
                    .map(|p| list_offsets_request::ListOffsetsPartition { partition_index: p, timestamp: -1 })
                    .collect(),
            }],
            timeout_ms: 5_000,
            isolation_level: 0,
        })
        .await
        .expect("list offsets")
        .into_inner();
    r.topics[0].partitions.iter().map(|p| p.error_code).collect()
}

async fn wait_for_codes(c: &Cluster, topic: &[u8], what: &str, want: i32) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let got = codes(c, 1, topic).await;
        if got.iter().all(|&code| code == want) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: partitions answer {got:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// From now on, the topic changes node `on` runs reach only metadata partition `g` (as if the
/// others' parts were lost); `None` restores the normal path.
async fn cut_topic_changes(c: &Cluster, on: u64, g: Option<u32>) {
    c.admin(on)
        .await
        .inject_fault(diskless_proto::admin::FaultRequest {
            keep_blocks: true,
            set_topic_changes_only: true,
            topic_changes_only: g.into_iter().collect(),
            ..Default::default()
        })
        .await
        .expect("inject fault");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creations_and_deletions_that_failed_part_way_complete_and_deleted_topics_stay_deleted() {
    let c = Cluster::start(3, Options { leader_balance_ms: 0, ..Options::default() }).await;
    let topic = topic_id(7);
    let leaders = c.leaders(1).await;

    // The creation reached the catalog only.
    cut_topic_changes(&c, leaders[0], Some(0)).await;
    let r = c
        .client(leaders[0])
        .await
        .create_partitions(create_request(&topic, "half", PARTITIONS))
        .await
        .expect("create in the catalog")
        .into_inner();
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
    wait_for_codes(&c, &topic, "every partition exists", 0).await;
    cut_topic_changes(&c, leaders[0], None).await;
    let parts: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, 1)).collect();
    commit_all(&mut c.client(1).await, "a", &topic, &parts).await;

    // The deletion reached the catalog only.
    cut_topic_changes(&c, leaders[0], Some(0)).await;
    let r = c
        .client(leaders[0])
        .await
        .delete_topics(DeleteTopicsRequest {
            topics: vec![delete_topics_request::DeletableTopicState { topic_id: topic.clone() }],
            timeout_ms: 5_000,
        })
        .await
        .expect("delete in the catalog")
        .into_inner();
    assert_eq!(r.responses[0].error_code, 0, "{:?}", r.responses[0].error_message);
    cut_topic_changes(&c, leaders[0], None).await;
    wait_for_codes(&c, &topic, "every partition is gone", 3).await;

    // A late creation of the deleted topic (a retry that was stuck somewhere) is refused.
    for g in 1..4u32 {
        let leader = c.leaders(1).await[g as usize];
        cut_topic_changes(&c, leader, Some(g)).await;
        let r = c
            .client(leader)
            .await
            .create_partitions(CreatePartitionsRequest {
                timeout_ms: 5_000,
                ..create_request(&topic, "half", PARTITIONS)
            })
            .await
            .expect("late create")
            .into_inner();
        cut_topic_changes(&c, leader, None).await;
        assert_eq!(r.topics[0].error_code, 100, "metadata partition {g}: {:?}", r.topics[0].error_message);
    }
    tokio::time::sleep(Duration::from_secs(6)).await; // a reconciliation round
    assert!(codes(&c, 1, &topic).await.iter().all(|&code| code == 3), "the deleted topic came back");
}
