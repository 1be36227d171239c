//! A stopped node catches up when it restarts: from the log, and from a snapshot when the others
//! purged the log it missed.

use std::collections::BTreeSet;
use std::time::Duration;

use diskless_cluster_tests::*;

async fn commit_many(c: &Cluster, via: u64, prefix: &str, n: usize) {
    let topic = topic_id(1);
    let mut client = c.client(via).await;
    for i in 0..n {
        commit_all(&mut client, &format!("{prefix}/{i}"), &topic, &[(0, 2), (1, 3), (2, 1), (3, 4)]).await;
    }
}

fn assert_same_state(digests: &[std::collections::BTreeMap<u64, String>], nodes: usize) {
    for (g, per_node) in digests.iter().enumerate() {
        assert_eq!(per_node.len(), nodes, "metadata partition {g}: every node answered");
        let distinct: BTreeSet<&String> = per_node.values().collect();
        assert_eq!(distinct.len(), 1, "metadata partition {g}: replicas differ: {per_node:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_catches_up_from_the_log_and_from_a_snapshot() {
    let options = Options { snapshot_after_entries: 1_000_000, entries_kept_after_snapshot: 0, ..Options::default() };
    let mut c = Cluster::start(3, options).await;
    create_topic(&mut c.client(1).await, &topic_id(1), "t", 4).await;
    commit_many(&c, 1, "a", 20).await;

    // From the log: node 3 misses 50 commits.
    c.kill(3);
    commit_many(&c, 1, "b", 50).await;
    c.spawn(3);
    c.wait_for_leaders(Duration::from_secs(60)).await;
    assert_same_state(&c.converged_digests(Duration::from_secs(60)).await, 3);
    let s3 = c.status(3, false).await;
    assert!(s3.groups.iter().all(|g| g.snapshot_index == 0), "no snapshot was needed");

    // From a snapshot: node 2 misses commits that the others then purge from their logs.
    c.kill(2);
    commit_many(&c, 1, "c", 50).await;
    for id in [1, 3] {
        let r = c.admin(id).await.trigger_snapshot(diskless_proto::admin::TriggerSnapshotRequest {}).await.unwrap();
        assert!(r.into_inner().snapshot_index.iter().all(|i| *i > 0));
    }
    // The purge follows the snapshot asynchronously; one that openraft postponed (a leader's stream
    // to the dead node covers the entries) is asked for again every 5 s.
    let mut purged = vec![];
    for _ in 0..75 {
        purged = vec![];
        for id in [1, 3] {
            purged.extend(c.status(id, false).await.groups.iter().map(|g| g.purged_index));
        }
        if purged.iter().all(|p| *p > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(purged.iter().all(|p| *p > 0), "logs purged on nodes 1 and 3: {purged:?}");
    c.spawn(2);
    c.wait_for_leaders(Duration::from_secs(60)).await;
    assert_same_state(&c.converged_digests(Duration::from_secs(60)).await, 3);
    let s2 = c.status(2, false).await;
    assert!(s2.groups.iter().any(|g| g.snapshot_index > 0), "node 2 installed snapshots");

    // Node 2 serves what it learned: all 120 commits are visible through it.
    let mut client = c.client(2).await;
    let batches = all_batches(&mut client, &topic_id(1), 3, vec![]).await.unwrap();
    assert_eq!(batches.len(), 120);
    assert_eq!(batches.last().unwrap().last_offset, 120 * 4 - 1);

    // And a full restart of every node (each repeats its bootstrap) keeps everything.
    for id in [1, 2, 3] {
        c.kill(id);
    }
    for id in [1, 2, 3] {
        c.spawn(id);
    }
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let mut client = c.client(3).await;
    assert_eq!(high_watermark(&mut client, &topic_id(1), 3).await.unwrap(), 480);
    assert_same_state(&c.converged_digests(Duration::from_secs(60)).await, 3);
}
