//! FindBatches is served by any replica, but only by one that can vouch for its state: a node cut
//! off from every leader, or removed from the metadata partitions, stops answering from its frozen
//! state (REPLICA_NOT_AVAILABLE, retriable: ask another node) instead of pointing readers for ever
//! at batches — and objects — the cluster has since deleted.

use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::admin::RemoveNodeRequest;
use diskless_proto::v1::{find_batches_request, FindBatchesRequest};

const PARTITIONS: i32 = 4;

/// Per partition, FindBatches from offset 0 through node `via`: the error code and batch count.
async fn find_all(c: &Cluster, via: u64) -> Vec<(i32, usize)> {
    let r = c
        .client(via)
        .await
        .find_batches(FindBatchesRequest {
            fetch_max_bytes: i32::MAX,
            max_batches_per_partition: 10_000,
            topics: vec![find_batches_request::FindBatchesTopic {
                topic_id: topic_id(1),
                partitions: (0..PARTITIONS)
                    .map(|p| find_batches_request::FindBatchesPartition {
                        partition_index: p,
                        offset: 0,
                        max_partition_fetch_bytes: i32::MAX,
                    })
                    .collect(),
            }],
            timeout_ms: 1_000,
            min_applied: vec![],
            isolation_level: 0,
        })
        .await
        .expect("find batches")
        .into_inner();
    r.topics[0].partitions.iter().map(|p| (p.error_code, p.batches.len())).collect()
}

async fn commit_round(c: &Cluster, via: u64, key: &str) {
    let parts: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, 1)).collect();
    commit_all(&mut c.client(via).await, key, &topic_id(1), &parts).await;
}

/// Waits until `check` holds for node `via`'s FindBatches answers.
async fn wait_for(c: &Cluster, via: u64, what: &str, check: impl Fn(&[(i32, usize)]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = find_all(c, via).await;
        if check(&got) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: node {via} answers {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_every_leader_stops_serving_and_serves_again_once_healed() {
    let c = Cluster::start(3, Options { leader_balance_ms: 0, ..Options::default() }).await;
    create_topic(&mut c.client(1).await, &topic_id(1), "t", PARTITIONS).await;
    commit_round(&c, 1, "a").await;
    wait_for(&c, 3, "node 3 serves", |got| got.iter().all(|&p| p == (0, 1))).await;

    // Node 3 is cut off from both others; the cluster goes on without it.
    c.block(3, &[1, 2]).await;
    c.block(1, &[3]).await;
    c.block(2, &[3]).await;
    commit_round(&c, 1, "b").await;
    wait_for(&c, 3, "the cut-off replica refuses", |got| got.iter().all(|&(code, _)| code == 9)).await;
    // The others serve the new batches.
    wait_for(&c, 1, "node 1 serves", |got| got.iter().all(|&p| p == (0, 2))).await;

    // Healed: node 3 catches up and serves again.
    for id in [1, 2, 3] {
        c.block(id, &[]).await;
    }
    wait_for(&c, 3, "the healed replica serves", |got| got.iter().all(|&p| p == (0, 2))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_removed_from_the_groups_stops_serving() {
    let c = Cluster::start(3, Options { leader_balance_ms: 0, ..Options::default() }).await;
    create_topic(&mut c.client(1).await, &topic_id(1), "t", PARTITIONS).await;
    commit_round(&c, 1, "a").await;
    wait_for(&c, 3, "node 3 serves", |got| got.iter().all(|&p| p == (0, 1))).await;

    c.admin(1).await.remove_node(RemoveNodeRequest { node_id: 3, metadata_partition: None }).await.expect("remove");
    commit_round(&c, 1, "b").await;
    wait_for(&c, 3, "the removed node refuses", |got| got.iter().all(|&(code, _)| code == 9)).await;
}
