//! Snapshot installs under faults: a sender that goes away mid-install must not stop the
//! receiver's replica, and a replica caught mid-install answers no FindBatches from its
//! half-replaced state. Nodes run with a test pause inside every install (before adopting the
//! received file, and again after deleting the old state) so the tests can act inside it.

use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::admin::TriggerSnapshotRequest;
use diskless_proto::v1::{find_batches_request, FindBatchesRequest};

const PAUSE_MS: u64 = 1_500;

fn options() -> Options {
    Options {
        metadata_partitions: 1,
        leader_balance_ms: 0,
        snapshot_after_entries: 1_000_000,
        entries_kept_after_snapshot: 0,
        snapshot_install_pause_ms: PAUSE_MS,
        ..Options::default()
    }
}

async fn commit_many(c: &Cluster, via: u64, prefix: &str, n: usize) {
    let mut client = c.client(via).await;
    for i in 0..n {
        commit_all(&mut client, &format!("{prefix}/{i}"), &topic_id(1), &[(0, 1), (1, 1)]).await;
    }
}

/// Stops `follower`, commits `n` more through `via`, and has the other nodes snapshot and purge
/// their logs, so the follower can only catch up from a snapshot.
async fn fall_behind_a_purged_log(c: &mut Cluster, follower: u64, via: u64, n: usize) {
    // The follower first applies everything committed so far: a commit is acknowledged once a
    // majority has it, so without this wait it could stop one entry short, and its (correct,
    // consistent) state before the install would not be the one the second test expects.
    c.converged_digests(Duration::from_secs(30)).await;
    c.kill(follower);
    commit_many(c, via, "behind", n).await;
    let others: Vec<u64> = c.running();
    for &id in &others {
        c.admin(id).await.trigger_snapshot(TriggerSnapshotRequest {}).await.expect("snapshot");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut purged = true;
        for &id in &others {
            purged &= c.status(id, false).await.groups.iter().all(|g| g.purged_index > 0);
        }
        if purged {
            return;
        }
        assert!(Instant::now() < deadline, "the logs were not purged");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `id`'s snapshot directory holds a file being received (or received, not adopted).
async fn wait_for_incoming_snapshot(c: &Cluster, id: u64) {
    let dir = c.data_dir(id).join("snapshots").join("0000");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let receiving = std::fs::read_dir(&dir)
            .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("receiving-")))
            .unwrap_or(false);
        if receiving {
            return;
        }
        assert!(Instant::now() < deadline, "node {id} received no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pick_follower(leader: u64) -> (u64, u64) {
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    (others[0], others[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_sender_going_away_mid_install_does_not_stop_the_receivers_replica() {
    let mut c = Cluster::start(3, options()).await;
    create_topic(&mut c.client(1).await, &topic_id(1), "t", 2).await;
    commit_many(&c, 1, "a", 5).await;
    let leader = c.leaders(1).await[0];
    let (follower, third) = pick_follower(leader);
    fall_behind_a_purged_log(&mut c, follower, leader, 30).await;

    c.spawn(follower);
    wait_for_incoming_snapshot(&c, follower).await;
    // Inside the first pause: the file is received whole, openraft is about to adopt it. The
    // sender goes away, which cancels the transfer request on the receiver.
    tokio::time::sleep(Duration::from_millis(PAUSE_MS / 3)).await;
    let sender = c.leaders(third).await[0];
    assert_ne!(sender, follower);
    c.kill(sender);

    // The receiver's replica lives on: with the third node it forms a quorum and serves.
    let survivor = if sender == leader { third } else { leader };
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let s = c.status(follower, false).await;
    assert!(s.groups.iter().all(|g| g.state != "shutdown"), "the replica stopped: {:?}", s.groups);
    commit_many(&c, survivor, "after", 3).await;
    c.spawn(sender);
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let digests = c.converged_digests(Duration::from_secs(60)).await;
    let distinct: std::collections::BTreeSet<&String> = digests[0].values().collect();
    assert_eq!((digests[0].len(), distinct.len()), (3, 1), "replicas differ: {digests:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_caught_mid_install_answers_no_find_batches_from_its_half_replaced_state() {
    let mut c = Cluster::start(3, options()).await;
    create_topic(&mut c.client(1).await, &topic_id(1), "t", 2).await;
    commit_many(&c, 1, "a", 5).await;
    let leader = c.leaders(1).await[0];
    let (follower, _) = pick_follower(leader);
    fall_behind_a_purged_log(&mut c, follower, leader, 30).await;

    c.spawn(follower);
    let mut client = c.client(follower).await;
    let (mut refused, mut answered) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client
            .find_batches(FindBatchesRequest {
                fetch_max_bytes: i32::MAX,
                max_batches_per_partition: 10_000,
                topics: vec![find_batches_request::FindBatchesTopic {
                    topic_id: topic_id(1),
                    partitions: vec![find_batches_request::FindBatchesPartition {
                        partition_index: 0,
                        offset: 0,
                        max_partition_fetch_bytes: i32::MAX,
                    }],
                }],
                timeout_ms: 1_000,
                min_applied: vec![],
                isolation_level: 0,
            })
            .await
            .expect("find batches")
            .into_inner();
        let p = &r.topics[0].partitions[0];
        match p.error_code {
            0 => {
                // Before the install (5 batches) or after it (35): never something in between
                // or nothing.
                answered += 1;
                let n = p.batches.len();
                assert!(n == 5 || n == 35, "a half-installed replica answered {n} batches");
                if n == 35 {
                    break;
                }
            }
            9 => refused += 1, // REPLICA_NOT_AVAILABLE: retriable, ask elsewhere
            code => panic!("FindBatches answered error {code}: {:?}", p.error_message),
        }
        assert!(Instant::now() < deadline, "the follower never caught up ({refused} refused, {answered} answered)");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused > 0, "no read happened inside the install (the test did not test anything)");
}
