//! Add a fourth node, then remove a node; the cluster keeps serving commits throughout.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use diskless_cluster_tests::*;
use diskless_proto::admin::{AddNodeRequest, RemoveNodeRequest};

/// Waits (up to 10 s) until every metadata partition in node `via`'s view satisfies `ok`.
async fn wait_until(c: &Cluster, via: u64, ok: impl Fn(&diskless_proto::admin::GroupStatus) -> bool, what: &str) {
    for _ in 0..100 {
        if c.status(via, false).await.groups.iter().all(&ok) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let voters: Vec<_> = c.status(via, false).await.groups.into_iter().map(|g| g.voters).collect();
    panic!("{what}: voters per metadata partition {voters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_added_and_another_removed_while_commits_continue() {
    let mut c = Cluster::start(3, Options::default()).await;
    let topic = topic_id(1);
    create_topic(&mut c.client(1).await, &topic, "t", 4).await;

    // A steady stream of commits through node 2 (never removed).
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut client = c.client(2).await;
    let writer = {
        let (stop, ok, failed, topic) = (stop.clone(), ok.clone(), failed.clone(), topic.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let r = client
                    .commit_file(commit_request(&format!("m{i}"), &topic, &[(0, 1), (1, 1), (2, 1), (3, 1)]))
                    .await;
                match r {
                    Ok(r) if r.get_ref().batches.iter().all(|b| b.error_code == 0) => {
                        ok.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };

    let addr4 = c.spawn_new_node(4);
    let r = c.admin(1).await.add_node(AddNodeRequest { node_id: 4, address: addr4, metadata_partition: None }).await;
    let progress = r.expect("add node 4").into_inner().progress;
    assert_eq!(progress.len(), 4, "{progress:?}");
    // Node 4 learns the committed membership with the next replication round.
    wait_until(&c, 4, |g| g.voters.contains(&4) && g.voters.len() == 4, "node 4 votes everywhere").await;
    let during_add = ok.load(Ordering::Relaxed);

    // Remove node 1 (the one we asked); requests to the others go on.
    let r = c.admin(3).await.remove_node(RemoveNodeRequest { node_id: 1, metadata_partition: None }).await;
    r.expect("remove node 1");
    // Each partition's leader committed the removal; node 3 follows some of them and learns it
    // with their next replication round.
    wait_until(&c, 3, |g| !g.voters.contains(&1) && g.voters.len() == 3, "node 1 removed everywhere").await;
    c.kill(1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let after = ok.load(Ordering::Relaxed);
    eprintln!("commits: {during_add} during the add, {after} in all, {} failed", failed.load(Ordering::Relaxed));
    assert!(during_add > 0, "commits went on while node 4 joined");
    assert!(after > before, "commits go on after node 1 left");

    // Node 4 holds everything the cluster acknowledged.
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let mut n4 = c.client(4).await;
    let hwm = high_watermark(&mut n4, &topic, 0).await.unwrap();
    assert!(hwm >= after as i64);
    let batches = all_batches(&mut n4, &topic, 0, vec![]).await.unwrap();
    assert_eq!(batches.len() as i64, hwm);
}
