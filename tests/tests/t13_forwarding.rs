//! Routing through a node that does not lead: a command sent to a follower is forwarded once, as
//! the typed command, over the peers' `RaftService.Execute`, and applied exactly once on the
//! leader; a strict read is forwarded the same way; a client still gets the per-item answers in
//! request order. `Execute` is a peer method: on a secure cluster a certificate naming no member
//! is refused on the peer listener, and nobody reaches it on the client listener.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::internal::raft_service_client::RaftServiceClient;
use diskless_proto::internal::ExecuteRequest;
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
    let c = Cluster::start(3, Options { groups: 2, leader_balance_ms: 0, metrics: true, ..Options::default() }).await;
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let topic = topic_id(3);
    create_topic(&mut c.client(1).await, &topic, "routed", 4).await;
    let topic16: [u8; 16] = topic.clone().try_into().unwrap();
    // A partition of group 0, and a node that does not lead group 0.
    let p = (0..4).find(|&p| metadata_partition_for(&topic16, p, 2) == 0).expect("a partition of group 0");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (leader, follower) = loop {
        let leader = c.leaders(1).await[0];
        if leader != 0 {
            break (leader, c.ids().into_iter().find(|&id| id != leader).unwrap());
        }
        assert!(Instant::now() < deadline, "no leader of group 0");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (executed_before, _) = counters(&c, leader, 0).await;
    let (_, forwarded_before) = counters(&c, follower, 0).await;

    // Two batches of the partition of group 0 and a malformed one in between, through the follower.
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
    let c = Cluster::start(3, Options { tls: true, groups: 1, ..Options::default() }).await;
    let as_ = |name: &str| Some(ClientTls::new(&c.tls_files(name)).expect("client TLS"));
    let garbage = || ExecuteRequest { group: 0, payload: vec![0xff; 8], timeout_ms: 1_000 };
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
