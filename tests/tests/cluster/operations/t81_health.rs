//! gRPC health checking and server reflection on a node's listener: NOT_SERVING while the cluster
//! cannot form (a member missing), SERVING once every metadata partition has a leader, and
//! NOT_SERVING again on a node whose two peers are stopped — while the admin service stays
//! SERVING, so an operator can still ask why. Reflection lists the services (`grpcurl list`). A
//! broker is SERVING while its registration in the broker registry holds, NOT_SERVING once the
//! coordinators are gone past its lease, and SERVING again when they return.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

const COORDINATOR: &str = "diskless.coordinator.v1.CoordinatorService";
const ADMIN: &str = "diskless.admin.v1.AdminService";

async fn status(c: &Cluster, id: u64, service: &str) -> ServingStatus {
    let mut h = HealthClient::new(c.channel(id).await);
    let r = h.check(HealthCheckRequest { service: service.into() }).await.expect("health check").into_inner();
    ServingStatus::try_from(r.status).expect("a known status")
}

/// Waits until node `id`'s overall health is `want` (bounded; the bound is not what is tested).
async fn wait_for(c: &Cluster, id: u64, want: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = status(c, id, "").await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "node {id} is still {now:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn health_follows_the_quorum_and_reflection_lists_the_services() {
    let mut c = Cluster::prepare(3, Options::default());
    // Two of three members: bootstrapping waits for the third, so no metadata partition can have a
    // leader.
    c.spawn(1);
    c.spawn(2);
    for id in [1, 2] {
        assert_eq!(status(&c, id, "").await, ServingStatus::NotServing, "node {id} before the cluster forms");
        assert_eq!(status(&c, id, COORDINATOR).await, ServingStatus::NotServing);
        assert_eq!(status(&c, id, ADMIN).await, ServingStatus::Serving, "the admin service answers meanwhile");
    }

    c.spawn(3);
    for id in c.ids() {
        wait_for(&c, id, ServingStatus::Serving).await;
        assert_eq!(status(&c, id, COORDINATOR).await, ServingStatus::Serving);
    }
    c.wait_for_leaders(Duration::from_secs(30)).await;

    // Reflection: what `grpcurl -plaintext host:port list` prints.
    let mut r = ServerReflectionClient::new(c.channel(1).await);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers =
        r.server_reflection_info(futures_util::stream::iter(vec![req])).await.expect("reflection").into_inner();
    let first = answers.message().await.expect("a reflection answer").expect("one answer");
    let Some(MessageResponse::ListServicesResponse(list)) = first.message_response else {
        panic!("not a service list: {first:?}");
    };
    let names: BTreeSet<String> = list.service.into_iter().map(|s| s.name).collect();
    for want in [COORDINATOR, ADMIN, "diskless.internal.v1.RaftService", "grpc.health.v1.Health"] {
        assert!(names.contains(want), "reflection lists {want}: {names:?}");
    }
    assert!(!names.iter().any(|n| n.contains("BrokerService")), "only what the node serves: {names:?}");

    // Node 1 alone: it cannot reach a quorum of any metadata partition any more.
    c.kill(2);
    c.kill(3);
    wait_for(&c, 1, ServingStatus::NotServing).await;
    assert_eq!(status(&c, 1, COORDINATOR).await, ServingStatus::NotServing);
    assert_eq!(status(&c, 1, ADMIN).await, ServingStatus::Serving, "still reachable for operators");

    // And back once a peer returns.
    c.spawn(2);
    wait_for(&c, 1, ServingStatus::Serving).await;
}

const BROKER: &str = "diskless.broker.v1.BrokerService";

async fn broker_status(addr: &str, service: &str) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("broker address")
        .connect()
        .await
        .expect("connect to the broker API");
    let r = HealthClient::new(channel)
        .check(HealthCheckRequest { service: service.into() })
        .await
        .expect("health check")
        .into_inner();
    ServingStatus::try_from(r.status).expect("a known status")
}

/// Waits until the broker's overall health is `want` (bounded; the bound is not what is tested).
async fn wait_for_broker(b: &BrokerProc, want: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = broker_status(&b.addr, "").await;
        if now == want {
            assert_eq!(broker_status(&b.addr, BROKER).await, want, "the broker service agrees");
            return;
        }
        assert!(Instant::now() < deadline, "broker is still {now:?}, not {want:?}: {}", b.log_tail());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_is_serving_while_its_registration_holds() {
    let mut c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::Local(c.path("objects"));
    let b = BrokerProc::start(&c, "b", &storage, &BrokerOptions { kafka: true, lease_ms: 3_000, ..Default::default() })
        .await;
    wait_for_broker(&b, ServingStatus::Serving).await;

    // The coordinators go: once the broker's lease would have lapsed, it is not serving.
    for id in c.ids() {
        c.kill(id);
    }
    let gone = Instant::now();
    wait_for_broker(&b, ServingStatus::NotServing).await;
    assert!(gone.elapsed() >= Duration::from_millis(1_000), "not before its last renewal aged");

    // They come back (same data): the broker renews its registration and serves again.
    for id in c.ids() {
        c.spawn(id);
    }
    wait_for_broker(&b, ServingStatus::Serving).await;
}
