//! A node whose data directory was wiped (a replaced disk) restarts with the same configuration.
//! It must not vote or acknowledge with the log it lost — with another node down, its vote would
//! elect a lagging node and acknowledged batches would vanish — and it takes part again only once
//! an operator adds it back, after which every replica holds the same state.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::admin::AddNodeRequest;
use diskless_proto::v1::{list_offsets_request, ListOffsetsRequest};

const PARTITIONS: i32 = 8;

/// Strict high watermarks of every partition through node `via`, with a short timeout: `None`
/// for a partition that could not be read (no leader).
async fn high_watermarks(c: &Cluster, via: u64, topic: &[u8]) -> Vec<Option<i64>> {
    let mut client = c.client(via).await;
    let req = ListOffsetsRequest {
        topics: vec![list_offsets_request::ListOffsetsTopic {
            topic_id: topic.to_vec(),
            partitions: (0..PARTITIONS)
                .map(|p| list_offsets_request::ListOffsetsPartition { partition_index: p, timestamp: -1 })
                .collect(),
        }],
        timeout_ms: 2_000,
        isolation_level: 0,
    };
    match client.list_offsets(req).await {
        Ok(r) => r.into_inner().topics[0].partitions.iter().map(|p| (p.error_code == 0).then_some(p.offset)).collect(),
        Err(_) => vec![None; PARTITIONS as usize],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_cannot_elect_a_stale_leader_and_takes_part_only_once_added_again() {
    let mut c = Cluster::start(3, Options { metadata_partitions: 4, leader_balance_ms: 0, ..Options::default() }).await;
    let topic = topic_id(1);
    let mut client = c.client(1).await;
    create_topic(&mut client, &topic, "t", PARTITIONS).await;

    // 4 records per partition with every node up, then node 3 falls behind while 6 more per
    // partition are acknowledged by nodes 1 and 2.
    commit_all(&mut client, "a", &topic, &(0..PARTITIONS).map(|p| (p, 4)).collect::<Vec<_>>()).await;
    c.kill(3);
    commit_all(&mut client, "b", &topic, &(0..PARTITIONS).map(|p| (p, 6)).collect::<Vec<_>>()).await;
    drop(client);

    // Node 2's disk is replaced and node 1 goes down. Node 2 (empty) and node 3 (behind) come back:
    // by count a majority, but only node 3 remembers anything, and not the last 6 records.
    c.kill(1);
    c.kill(2);
    c.wipe(2);
    c.spawn(2);
    c.spawn(3);
    let until = Instant::now() + Duration::from_secs(8); // several election timeouts
    while Instant::now() < until {
        for (p, hwm) in high_watermarks(&c, 3, &topic).await.into_iter().enumerate() {
            assert!(
                hwm.is_none_or(|h| h == 10),
                "partition {p}: a strict read answered high watermark {hwm:?} while 10 records were acknowledged"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s2 = c.status(2, false).await;
    assert!(s2.groups.iter().all(|g| !g.member), "the wiped node's replicas are not members: {:?}", s2.groups);
    // The wiped node accepted nothing: no entry, no vote.
    assert!(s2.groups.iter().all(|g| g.last_log_index == 0 && g.term == 0), "node 2 took part: {:?}", s2.groups);

    // Node 1 returns: leaders with every acknowledged record are elected.
    c.spawn(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let hwms = high_watermarks(&c, 1, &topic).await;
        assert!(hwms.iter().all(|h| h.is_none_or(|h| h == 10)), "high watermarks {hwms:?}");
        if hwms.iter().all(|h| *h == Some(10)) {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster did not serve again: {hwms:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut client = c.client(1).await;
    for p in 0..PARTITIONS {
        let batches = all_batches(&mut client, &topic, p, vec![]).await.unwrap();
        let offsets: Vec<(i64, i64)> = batches.iter().map(|b| (b.base_offset, b.last_offset)).collect();
        assert_eq!(offsets, vec![(0, 3), (4, 9)], "partition {p}");
    }
    // Still refused: the metadata partitions know node 2's old replicas.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(c.status(2, false).await.groups.iter().all(|g| !g.member));

    // The operator adds node 2 again: its new replicas replace the old ones and catch up.
    let r = c
        .admin(1)
        .await
        .add_node(AddNodeRequest { node_id: 2, address: c.addr(2).to_string(), metadata_partition: None })
        .await
        .expect("add node 2 again")
        .into_inner();
    assert!(r.progress.iter().all(|l| l.contains("removed node 2's old replica")), "{:?}", r.progress);
    let s2 = c.status(2, false).await;
    assert!(s2.groups.iter().all(|g| g.member), "node 2 is a member again: {:?}", s2.groups);
    let digests = c.converged_digests(Duration::from_secs(60)).await;
    for (g, per_node) in digests.iter().enumerate() {
        assert_eq!(per_node.len(), 3, "metadata partition {g}: every node answered");
        let distinct: BTreeSet<&String> = per_node.values().collect();
        assert_eq!(distinct.len(), 1, "metadata partition {g}: replicas differ: {per_node:?}");
    }
    // And it counts again: with node 3 down, nodes 1 and 2 commit.
    c.kill(3);
    let mut client = c.client(1).await;
    commit_all(&mut client, "c", &topic, &[(0, 1)]).await;
}
