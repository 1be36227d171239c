//! Leadership moves never leave a metadata partition without a serving leader.
//!
//! openraft's leader stops taking writes and strict reads the moment it starts a leadership
//! transfer, and stays so until another node is elected. The fault suite saw a partition take no
//! write for minutes after one node's disk loss: the wiped node came back (same configuration,
//! empty data directory) before an operator removed it, refusing every Raft message for the
//! replicas it lost, as it must; and the leader balancer kept handing the partition to it, because
//! the leader remembered it as caught up.
//!
//! - A wiped voter not removed yet: the balancer never hands it anything (the partition keeps its
//!   leader and term, and serves strict reads and commits through the other two nodes); an
//!   operator's transfer to it is refused with the reason; removing it and adding it back
//!   restores three voters, and then the balancer gives its partition back.
//! - A transfer whose target looks fit but cannot be elected (it sends nothing: its vote requests
//!   are lost): the leader watches it and, when no node took over within an election timeout,
//!   hands leadership to the other voter (or that voter's own election came first), so the
//!   partition serves again within a few election timeouts, and the operator is told the transfer
//!   did not happen.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::admin::{AddNodeRequest, RemoveNodeRequest, TransferLeaderRequest};
use diskless_proto::v1::{list_offsets_request, ListOffsetsRequest};

const METADATA_PARTITIONS: u32 = 4;
const PARTITIONS: i32 = 16;
/// The metadata partition whose preferred leader is node 2 (voters 1, 2, 3: `g mod 3` is index 1).
const G: u32 = 1;

fn options() -> Options {
    Options { metadata_partitions: METADATA_PARTITIONS, leader_balance_ms: 2_000, ..Options::default() }
}

/// One topic partition of each metadata partition.
fn one_partition_per_group(topic: &[u8]) -> BTreeMap<u32, i32> {
    let id: [u8; 16] = topic.try_into().expect("16-byte topic id");
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        out.entry(diskless_proto::metadata_partition_for(&id, p, METADATA_PARTITIONS)).or_insert(p);
    }
    assert_eq!(out.len(), METADATA_PARTITIONS as usize, "every metadata partition holds a partition: {out:?}");
    out
}

/// Waits until node `via` sees node `leader` lead metadata partition `g`.
async fn wait_for_leader(c: &Cluster, via: u64, g: u32, leader: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let l = c.leaders(via).await;
        if l[g as usize] == leader {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "metadata partition {g}: leader {} after {within:?}, not {leader}",
            l[g as usize]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A strict read (ListOffsets, latest) of `partition` through `client`: whether it was answered.
async fn strict_read(client: &mut Client, topic: &[u8], partition: i32) -> bool {
    let req = ListOffsetsRequest {
        topics: vec![list_offsets_request::ListOffsetsTopic {
            topic_id: topic.to_vec(),
            partitions: vec![list_offsets_request::ListOffsetsPartition { partition_index: partition, timestamp: -1 }],
        }],
        timeout_ms: 1_000,
        isolation_level: 0,
    };
    match tokio::time::timeout(Duration::from_secs(2), client.list_offsets(req)).await {
        Ok(Ok(r)) => r.get_ref().topics.iter().flat_map(|t| &t.partitions).all(|p| p.error_code == 0),
        _ => false,
    }
}

/// For `how_long`, strict reads of one partition of each metadata partition through nodes 1 and
/// 3 in turn; the longest time each metadata partition went without an answer.
async fn longest_unanswered(
    c: &Cluster,
    topic: &[u8],
    parts: &BTreeMap<u32, i32>,
    how_long: Duration,
) -> BTreeMap<u32, Duration> {
    let mut clients = [c.client(1).await, c.client(3).await];
    let start = Instant::now();
    let mut last_ok: BTreeMap<u32, Instant> = parts.keys().map(|g| (*g, start)).collect();
    let mut longest: BTreeMap<u32, Duration> = BTreeMap::new();
    let mut i = 0;
    while start.elapsed() < how_long {
        i += 1;
        for (g, p) in parts {
            let ok = strict_read(&mut clients[i % 2], topic, *p).await;
            let now = Instant::now();
            let worst = longest.entry(*g).or_default();
            *worst = (*worst).max(now - last_ok[g]);
            if ok {
                last_ok.insert(*g, now);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    longest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_voter_not_yet_removed_is_never_handed_leadership_and_is_restored_by_remove_and_add() {
    let mut c = Cluster::start(3, options()).await;
    let topic = topic_id(1);
    create_topic(&mut c.client(1).await, &topic, "t", PARTITIONS).await;
    let parts = one_partition_per_group(&topic);
    let all: Vec<(i32, i64)> = parts.values().map(|p| (*p, 1)).collect();
    commit_all(&mut c.client(1).await, "a", &topic, &all).await;

    // The balancer gives metadata partition G to node 2. Then node 1 takes it over (an operator's
    // transfer: node 1's replication knows node 2 as caught up), and node 2's disk is lost at once:
    // killed, emptied, restarted with its configuration, never removed.
    wait_for_leader(&c, 1, G, 2, Duration::from_secs(30)).await;
    c.admin(2)
        .await
        .transfer_leader(TransferLeaderRequest { metadata_partition: G, to_node_id: 1 })
        .await
        .expect("transfer metadata partition G to node 1");
    wait_for_leader(&c, 1, G, 1, Duration::from_secs(10)).await;
    c.kill(2);
    c.wipe(2);
    c.spawn(2);
    let term = c.status(1, false).await.groups[G as usize].term;

    // Five balancing rounds of strict reads only (they append nothing, so node 1's memory of node
    // 2 stays "caught up"): every metadata partition answers through nodes 1 and 3 all along, and
    // G keeps its leader and term — nothing handed it to the wiped replica, which would have
    // stopped node 1 serving until node 3 was elected.
    let longest = longest_unanswered(&c, &topic, &parts, Duration::from_secs(10)).await;
    eprintln!("longest time without a strict read, per metadata partition: {longest:?}");
    for (g, worst) in &longest {
        assert!(
            *worst < Duration::from_secs(5),
            "metadata partition {g} answered no strict read for {worst:?} while nodes 1 and 3 were up: {longest:?}"
        );
    }
    let s1 = c.status(1, false).await;
    assert_eq!(
        (s1.groups[G as usize].leader, s1.groups[G as usize].term),
        (1, term),
        "metadata partition {G} kept its leader and term: no leadership went to the wiped node"
    );
    let s2 = c.status(2, false).await;
    assert!(s2.groups.iter().all(|g| !g.member), "the wiped node's replicas are not members: {:?}", s2.groups);
    commit_all(&mut c.client(3).await, "b", &topic, &all).await;

    // An operator asking for it is told why not, and nothing moves.
    let e = c
        .admin(3)
        .await
        .transfer_leader(TransferLeaderRequest { metadata_partition: G, to_node_id: 2 })
        .await
        .expect_err("a transfer to the wiped node is refused");
    assert!(e.message().contains("node 2 cannot take leadership") && e.message().contains("answered"), "{e}");
    assert_eq!(c.status(1, false).await.groups[G as usize].term, term, "{e}");
    // Asking for the leader it has is answered, and changes nothing either.
    c.admin(3)
        .await
        .transfer_leader(TransferLeaderRequest { metadata_partition: G, to_node_id: 1 })
        .await
        .expect("node 1 leads already");
    assert_eq!(c.status(1, false).await.groups[G as usize].term, term);

    // The operator's way back: remove node 2, then add it again, both through node 3.
    let r = c
        .admin(3)
        .await
        .remove_node(RemoveNodeRequest { node_id: 2, metadata_partition: None })
        .await
        .expect("remove node 2")
        .into_inner();
    eprintln!("removal: {:?}", r.progress);
    let voters = |s: diskless_proto::admin::StatusResponse| s.groups.into_iter().map(|g| g.voters).collect::<Vec<_>>();
    assert!(voters(c.status(3, false).await).iter().all(|v| *v == vec![1, 3]));
    let r = c
        .admin(3)
        .await
        .add_node(AddNodeRequest { node_id: 2, address: c.addr(2).to_string(), metadata_partition: None })
        .await
        .expect("add node 2 again")
        .into_inner();
    eprintln!("addition: {:?}", r.progress);
    let v = voters(c.status(3, false).await);
    assert!(v.iter().all(|v| *v == vec![1, 2, 3]), "three voters again: {v:?}");
    let digests = c.converged_digests(Duration::from_secs(60)).await;
    for (g, per_node) in digests.iter().enumerate() {
        assert_eq!(per_node.len(), 3, "metadata partition {g}: every node answered");
        assert!(per_node.values().all(|d| Some(d) == per_node.values().next()), "metadata partition {g}: {per_node:?}");
    }
    // Node 2, caught up and answering, gets its partition back from the balancer; and it counts:
    // with node 3 down, nodes 1 and 2 commit to every metadata partition.
    wait_for_leader(&c, 1, G, 2, Duration::from_secs(30)).await;
    c.kill(3);
    commit_all(&mut c.client(1).await, "c", &topic, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_whose_target_cannot_be_elected_is_handed_to_another_voter() {
    // No balancer: only the operator moves leadership here.
    let c = Cluster::start(3, Options { leader_balance_ms: 0, ..options() }).await;
    let topic = topic_id(2);
    create_topic(&mut c.client(1).await, &topic, "t", PARTITIONS).await;
    let parts = one_partition_per_group(&topic);
    let leader = c.leaders(1).await[G as usize];
    let target = if leader == 2 { 3 } else { 2 };
    let other = 6 - leader - target;
    commit_all(&mut c.client(other).await, "a", &topic, &[(parts[&G], 1)]).await;

    // The target cannot win an election: it sends nothing to the other nodes (its vote requests
    // are lost), though it answers what they send it, so it looks fit to lead. The transfer starts
    // and no node takes over.
    c.block(target, &[leader, other]).await;
    let asked = Instant::now();
    let r = c
        .admin(leader)
        .await
        .transfer_leader(TransferLeaderRequest { metadata_partition: G, to_node_id: target })
        .await;
    let answered = asked.elapsed();
    eprintln!("transfer to node {target}, which cannot be elected, answered after {answered:?}: {r:?}");
    let e = r.expect_err("the transfer did not happen");
    // Never reported as done: handed to the other voter once the wait ran out, or that voter was
    // elected first (its election timeout ran out before the leader's wait did), or the hand-over
    // was still under way (the target's own lost campaign can split one round of votes).
    assert!(
        e.message().contains(&format!("node {target} did not take leadership over"))
            && (e.message().contains(&format!("handed to node {other} instead"))
                || e.message().contains(&format!("node {other} was elected instead"))
                || e.message().contains(&format!("handing it to node {other} instead did not complete in time"))),
        "{e}"
    );
    assert!(answered < Duration::from_secs(5), "the transfer's outcome took {answered:?}");
    // Either way the partition serves through the two other nodes, with the target still unable
    // to send, within a few election timeouts (1.6 s each at most) of the answer: the target's
    // lost campaign holds the highest vote of its term, which can cost the hand-over a round.
    let mut client = c.client(other).await;
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let mut req = commit_request(&format!("after-{}", asked.elapsed().as_millis()), &topic, &[(parts[&G], 1)]);
        req.timeout_ms = 1_000;
        let ok = matches!(
            tokio::time::timeout(Duration::from_secs(2), client.commit_file(req)).await,
            Ok(Ok(r)) if r.get_ref().batches.iter().all(|b| b.error_code == 0)
        );
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "metadata partition {G} took no commit for 8 s after the transfer answered");
    }
    eprintln!("metadata partition {G} serves again {:?} after the transfer was asked", asked.elapsed());
    c.block(target, &[]).await;
}
