//! Routing through a node that does not lead: a command sent to a follower is forwarded once, as
//! the typed command, over the peers' `RaftService.Execute`, and applied exactly once on the
//! leader; a strict read is forwarded the same way; a client still gets the per-item answers in
//! request order. `Execute` is a peer method: on a secure cluster a certificate naming no member
//! is refused on the peer listener, and nobody reaches it on the client listener. A forwarded
//! request names the leader replica it is meant for, and a node that is not that replica, or is
//! of another cluster, runs nothing of it (nor of a request that names no replica). A request that
//! meets a leadership transfer on its way is asked again of the new leader the old one names,
//! instead of failing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_coordinator::node::route::{Routed, Served, Write};
use diskless_coordinator::node::RouteError;
use diskless_coordinator::state_machine::{CommitBatch, CommitFile, Outcome, TopicPartition};
use diskless_coordinator::storage::codec;
use diskless_proto::admin::TransferLeaderRequest;
use diskless_proto::internal::raft_service_client::RaftServiceClient;
use diskless_proto::internal::{Addressee, ExecuteRequest, IdentifyRequest};
use diskless_proto::metadata_partition_for;
use diskless_tls::ClientTls;
use tonic::transport::{Channel, Endpoint};

const EXECUTE: &str = "/diskless.internal.v1.RaftService/Execute";

/// Requests node `id` served: Execute calls, and parts it forwarded with result `ok`.
async fn counters(c: &Cluster, id: u64, g: u32) -> (f64, f64) {
    let (_, text) = scrape(c.metrics_addr(id).expect("metrics")).await.expect("scrape");
    let executed: f64 = text
        .lines()
        .filter(|l| l.starts_with("diskless_grpc_requests_total{") && l.contains(EXECUTE) && l.contains("\"OK\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let forwarded = text
        .lines()
        .filter(|l| l.starts_with("diskless_forwarded_requests_total{"))
        .filter(|l| l.contains(&format!("metadata_partition=\"{g}\"")) && l.contains("result=\"ok\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    (executed, forwarded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_sent_to_a_follower_is_forwarded_as_a_typed_command_and_applied_once() {
    let c = Cluster::start(
        3,
        Options { metadata_partitions: 2, leader_balance_ms: 0, metrics: true, ..Options::default() },
    )
    .await;
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let topic = topic_id(3);
    create_topic(&mut c.client(1).await, &topic, "routed", 4).await;
    let topic16: [u8; 16] = topic.clone().try_into().unwrap();
    // A partition of metadata partition 0, and a node that does not lead metadata partition 0.
    let p = (0..4).find(|&p| metadata_partition_for(&topic16, p, 2) == 0).expect("a partition of metadata partition 0");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (leader, follower) = loop {
        let leader = c.leaders(1).await[0];
        if leader != 0 {
            break (leader, c.ids().into_iter().find(|&id| id != leader).unwrap());
        }
        assert!(Instant::now() < deadline, "no leader of metadata partition 0");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (executed_before, _) = counters(&c, leader, 0).await;
    let (_, forwarded_before) = counters(&c, follower, 0).await;

    // Two batches of the partition of metadata partition 0 and a malformed one in between, through
    // the follower.
    let mut req = commit_request("routed-1", &topic, &[(p, 5), (p, 3)]);
    let mut bad = req.batches[0].clone();
    bad.topic_id = vec![1, 2, 3];
    req.batches.insert(1, bad);
    let r = c.client(follower).await.commit_file(req).await.expect("commit").into_inner();
    let codes: Vec<i32> = r.batches.iter().map(|b| b.error_code).collect();
    assert_eq!(codes, vec![0, 42, 0], "per batch, in request order: {:?}", r.batches);
    assert_eq!((r.batches[0].assigned_base_offset, r.batches[2].assigned_base_offset), (0, 5));
    assert!(r.applied.iter().any(|a| a.metadata_partition == 0 && a.index > 0), "{:?}", r.applied);

    // Applied once: the leader holds exactly 8 records, whichever node is asked (a strict read
    // through the follower is forwarded too).
    assert_eq!(high_watermark(&mut c.client(leader).await, &topic, p).await.unwrap(), 8);
    assert_eq!(high_watermark(&mut c.client(follower).await, &topic, p).await.unwrap(), 8);

    // Through Execute: the leader served it, and the follower counted its forwarded parts.
    let (executed_after, _) = counters(&c, leader, 0).await;
    let (_, forwarded_after) = counters(&c, follower, 0).await;
    assert!(
        executed_after >= executed_before + 2.0,
        "Execute calls on the leader: {executed_before} -> {executed_after}"
    );
    assert!(
        forwarded_after >= forwarded_before + 2.0,
        "forwarded by the follower: {forwarded_before} -> {forwarded_after}"
    );
}

fn channel(addr: &str, tls: Option<Arc<ClientTls>>) -> Channel {
    let e = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect_timeout(Duration::from_secs(5));
    diskless_tls::client::channel(e, tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_is_refused_to_non_members_and_on_the_client_listener() {
    let c = Cluster::start(3, Options { tls: true, metadata_partitions: 1, ..Options::default() }).await;
    let as_ = |name: &str| Some(ClientTls::new(&c.tls_files(name)).expect("client TLS"));
    let garbage = || ExecuteRequest { group: 0, payload: vec![0xff; 8], timeout_ms: 1_000, to: None };
    let peer = c.peer_addr(1).unwrap().to_string();

    // A certificate of the cluster's CA that names no member, on the peer listener.
    let e = RaftServiceClient::new(channel(&peer, as_("intruder"))).execute(garbage()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    // The admin, on the client listener: peer methods are not served there.
    let e = RaftServiceClient::new(channel(c.addr(1), as_("operator"))).execute(garbage()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    // The control: a member's certificate reaches the handler (which refuses the garbage).
    let e = RaftServiceClient::new(channel(&peer, as_("node-2"))).execute(garbage()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
}

/// A one-batch commit of 7 records to partition `p` of `topic`, as a forwarding node sends it.
fn routed_commit(object_key: &str, topic: &[u8], p: i32) -> Vec<u8> {
    let tp = TopicPartition { topic_id: uuid::Uuid::from_slice(topic).unwrap(), partition: p };
    let batch = CommitBatch {
        magic: 2,
        request_id: 0,
        tp,
        byte_offset: 0,
        size: 100,
        base_offset: 0,
        last_offset: 6,
        batch_max_timestamp: 1,
        timestamp_type: 0,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
    };
    let file = CommitFile {
        deadline_ms: None,
        object_key: object_key.into(),
        object_format: 1,
        file_size: 100,
        uploader_broker_id: 1,
        owner_ids: vec![0],
        batches: vec![batch],
    };
    codec::encode(&Routed::Write(Write::Commit(file.into()))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_meant_for_another_replica_or_cluster_runs_nothing() {
    let c = Cluster::start(3, Options { metadata_partitions: 1, leader_balance_ms: 0, ..Options::default() }).await;
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let topic = topic_id(9);
    create_topic(&mut c.client(1).await, &topic, "addressed", 1).await;
    let leader = c.leaders(1).await[0];
    let addr = c.peer_addr(leader).unwrap_or(c.addr(leader)).to_string();
    let mut raft = RaftServiceClient::new(channel(&addr, None));
    let me = raft.identify(IdentifyRequest {}).await.expect("identify").into_inner();
    let right = Addressee { node_id: leader, incarnation: me.incarnations[0], cluster_id: me.cluster_id.clone() };

    let execute = |to: Option<Addressee>, key: &'static str| {
        let mut raft = raft.clone();
        let topic = topic.clone();
        async move {
            let request = ExecuteRequest { group: 0, payload: routed_commit(key, &topic, 0), timeout_ms: 10_000, to };
            let reply = raft.execute(request).await.expect("execute").into_inner();
            codec::decode::<Result<Served, RouteError>>(b"reply", &reply.payload).expect("reply")
        }
    };
    let wrong = [
        Addressee { incarnation: right.incarnation ^ 1, ..right.clone() },
        Addressee { node_id: leader % 3 + 1, ..right.clone() },
        Addressee { cluster_id: vec![7; 16], ..right.clone() },
    ];
    // Another replica, another node, another cluster, and a sender that names no addressee.
    for (i, to) in wrong.into_iter().map(Some).chain([None]).enumerate() {
        let r = execute(to.clone(), ["a", "b", "c", "d"][i]).await;
        assert!(matches!(r, Err(RouteError::NotLeader { partition: 0, .. })), "{to:?}: {r:?}");
    }
    let hwm = high_watermark(&mut c.client(leader).await, &topic, 0).await.unwrap();
    assert_eq!(hwm, 0, "nothing of a request meant for another replica or cluster, or for nobody, is applied");

    // The control: the right addressee.
    let r = execute(Some(right), "e").await;
    let Ok(Served::Written(Outcome::CommitFile(batches), _)) = &r else { panic!("{r:?}") };
    assert!(batches.iter().all(|b| b.is_ok()), "{r:?}");
    assert_eq!(high_watermark(&mut c.client(leader).await, &topic, 0).await.unwrap(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_through_a_follower_rides_through_a_leadership_transfer() {
    let c = Cluster::start(3, Options { metadata_partitions: 1, leader_balance_ms: 0, ..Options::default() }).await;
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let topic = topic_id(11);
    create_topic(&mut c.client(1).await, &topic, "moving", 1).await;
    let old = c.leaders(1).await[0];
    let others: Vec<u64> = c.ids().into_iter().filter(|&id| id != old).collect();
    let (new, via) = (others[0], others[1]);

    // Leadership moves to `new`, which tells `via` nothing: `via` still takes `old` for the
    // leader, and `old` answers "not the leader", naming `new`.
    c.block(new, &[via]).await;
    c.admin(old)
        .await
        .transfer_leader(TransferLeaderRequest { metadata_partition: 0, to_node_id: new })
        .await
        .expect("transfer");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.leaders(new).await[0] != new {
        assert!(Instant::now() < deadline, "node {new} did not take the lead");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The commit through `via` is asked again of the leader `old` named, at once: it lands while
    // `via` still knows no other leader.
    let mut client = c.client(via).await;
    let r =
        tokio::time::timeout(Duration::from_secs(2), client.commit_file(commit_request("moving", &topic, &[(0, 5)])))
            .await
            .expect("answered while `via` has not heard from the new leader")
            .expect("commit")
            .into_inner();
    assert_eq!(r.batches[0].error_code, 0, "{:?}", r.batches);
    c.block(new, &[]).await;
    assert_eq!(high_watermark(&mut c.client(new).await, &topic, 0).await.unwrap(), 5);
}
