//! Security of a 3-node cluster with mutual TLS, a separate peer listener and roles (the harness's
//! `Options::tls`: admin `operator`, broker `broker-1`, reader `reader-1`, all from one test CA).
//!
//! - A broker identity commits and reads; clients without a certificate, with one of another CA,
//!   or with an expired one are refused; a broker process reaches the nodes over TLS and produces
//!   and consumes.
//! - A broker identity calling RemoveNode or TransferLeader gets PERMISSION_DENIED naming it and
//!   the role, and membership is unchanged; a reader may not ask for digests; the admin may.
//! - A forged AppendEntries with a far higher term, correctly addressed, from a certificate of the
//!   cluster's CA that names no member is refused on the peer listener and the metadata partition's term stays;
//!   the same message from a member's certificate would have raised it (shown last). Raft
//!   messages are refused on the client listener. A snapshot stream past `max_snapshot_bytes` is
//!   refused.
//! - Certificate rotation: a node's certificate files replaced, new connections get the new one,
//!   and the cluster keeps committing, without a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_coordinator::raft::{TypeConfig, Vote};
use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::{RemoveNodeRequest, StatusRequest, TransferLeaderRequest};
use diskless_proto::internal::raft_service_client::RaftServiceClient;
use diskless_proto::internal::{Addressee, IdentifyRequest, RaftRequest, SnapshotChunk};
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_tls::{ClientTls, PeerIdentity, TlsFiles};
use tonic::transport::{Channel, Endpoint};

fn channel(addr: &str, tls: Option<Arc<ClientTls>>) -> Channel {
    let e = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect_timeout(Duration::from_secs(5));
    diskless_tls::client::channel(e, tls)
}

fn as_(files: &TlsFiles) -> Option<Arc<ClientTls>> {
    Some(ClientTls::new(files).expect("client TLS"))
}

fn options() -> Options {
    Options {
        tls: true,
        metadata_partitions: 2,
        extra_config: "max_snapshot_bytes = 1048576".into(),
        ..Default::default()
    }
}

/// The identities of the certificate node `addr` presents now (a new connection).
async fn server_identity(addr: &str, tls: &ClientTls) -> PeerIdentity {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let s = tokio_rustls::TlsConnector::from(tls.config()).connect(name, tcp).await.unwrap();
    let der = s.get_ref().1.peer_certificates().unwrap()[0].clone();
    PeerIdentity::from_der(&der).unwrap()
}

fn addressee(status: &diskless_proto::admin::StatusResponse, partition: usize) -> Addressee {
    let cluster_id = (0..status.cluster_id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&status.cluster_id[i..i + 2], 16).unwrap())
        .collect();
    Addressee { node_id: status.node_id, incarnation: status.groups[partition].incarnation, cluster_id }
}

/// An AppendEntries (a heartbeat) of a leader "99" at `term`: a follower that accepts it adopts
/// the term.
fn forged_append(term: u64, to: Addressee) -> RaftRequest {
    let req = openraft::raft::AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(term, 99),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    RaftRequest { group: 0, payload: diskless_coordinator::storage::codec::encode(&req).unwrap(), to: Some(to) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mtls_roles_and_peer_checks() {
    let c = Cluster::start(3, options()).await;
    let ca = c.certs_dir().join("ca.pem");

    // A broker identity commits and reads.
    let mut broker = CoordinatorServiceClient::new(channel(c.addr(1), as_(&c.tls_files("broker-1"))));
    let topic = topic_id(1);
    create_topic(&mut broker, &topic, "secure", 2).await;
    commit_all(&mut broker, "obj-1", &topic, &[(0, 5), (1, 3)]).await;
    assert_eq!(high_watermark(&mut broker, &topic, 0).await.unwrap(), 5);

    // Refused: no certificate, another CA's certificate, an expired one, no TLS at all.
    let other = tempfile::tempdir().unwrap();
    let other_ca = diskless_tls::certs::Ca::new("another CA").unwrap();
    other_ca.write(other.path()).unwrap();
    let foreign = other_ca.issue("broker-1", &[]).unwrap().write(other.path(), "broker-1").unwrap();
    let foreign = TlsFiles { ca: ca.clone(), ..foreign };
    let own_ca = diskless_tls::certs::Ca::load(&ca, &c.certs_dir().join("ca.key")).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let expired = own_ca
        .issue_valid("broker-1", &[], now - time::Duration::days(30), now - time::Duration::days(1))
        .unwrap()
        .write(other.path(), "expired")
        .unwrap();
    let expired = TlsFiles { ca: ca.clone(), ..expired };
    for (what, tls) in [
        ("no certificate", Some(ClientTls::anonymous(&ca).unwrap())),
        ("another CA", as_(&foreign)),
        ("expired", as_(&expired)),
        ("no TLS", None),
    ] {
        let mut client = CoordinatorServiceClient::new(channel(c.addr(1), tls));
        let r = client.list_topics(diskless_proto::v1::ListTopicsRequest::default()).await;
        assert!(r.is_err(), "{what}: refused, got {r:?}");
        println!("{what}: refused: {}", r.unwrap_err());
    }

    // Roles: the broker may not change membership or leadership; nothing changes.
    let before = c.status(1, false).await;
    let mut as_broker = AdminServiceClient::new(channel(c.addr(1), as_(&c.tls_files("broker-1"))));
    let e = as_broker.remove_node(RemoveNodeRequest { node_id: 3, metadata_partition: None }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    assert!(e.message().contains("broker-1") && e.message().contains("admin"), "{}", e.message());
    let target = if before.groups[0].leader == 2 { 3 } else { 2 };
    let e = as_broker
        .transfer_leader(TransferLeaderRequest { metadata_partition: 0, to_node_id: target })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    let after = c.status(1, false).await;
    for (b, a) in before.groups.iter().zip(&after.groups) {
        assert_eq!((&b.voters, &b.learners), (&a.voters, &a.learners), "membership unchanged");
    }
    // A reader reads status, but not digests; coordctl as the broker is refused, as the admin not.
    let mut reader = AdminServiceClient::new(channel(c.addr(1), as_(&c.tls_files("reader-1"))));
    reader.status(StatusRequest::default()).await.expect("a reader reads status");
    let e = reader.status(StatusRequest { with_digest: true, ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    let out = c.coordctl_as(c.addr(2), "broker-1").arg("check").output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        !out.status.success() && said.contains("broker-1") && said.contains("does not hold the role admin"),
        "{said}"
    );
    let out = c.coordctl_as(c.addr(2), "operator").arg("check").output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // The admin transfers leadership.
    let mut admin = AdminServiceClient::new(channel(c.addr(1), as_(&c.tls_files("operator"))));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = admin.transfer_leader(TransferLeaderRequest { metadata_partition: 0, to_node_id: target }).await;
        if r.is_ok() && c.status(target, false).await.groups[0].leader == target {
            break;
        }
        assert!(Instant::now() < deadline, "the admin's transfer did not happen: {r:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The peer listener: a non-member certificate (same CA) is refused; a member's answers.
    let follower = if target == 1 { 2 } else { 1 };
    let status = c.status(follower, false).await;
    let term = status.groups[0].term;
    let to = addressee(&status, 0);
    let peer = c.peer_addr(follower).unwrap().to_string();
    let mut intruder = RaftServiceClient::new(channel(&peer, as_(&c.tls_files("intruder"))));
    let e = intruder.append_entries(forged_append(term + 1000, to.clone())).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    assert!(e.message().contains("intruder"), "{}", e.message());
    let e = intruder.identify(IdentifyRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    // The admin's certificate is no member either, and Raft is not served on the client listener.
    let mut admin_raft = RaftServiceClient::new(channel(c.addr(follower), as_(&c.tls_files("operator"))));
    let e = admin_raft.append_entries(forged_append(term + 1000, to.clone())).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now_term = c.status(follower, false).await.groups[0].term;
    assert!(now_term < term + 1000, "the metadata partition's term stayed ({term} -> {now_term})");

    // A snapshot stream past max_snapshot_bytes (1 MiB) from a member's certificate is refused.
    let member = c.tls_files(&format!("node-{target}"));
    let mut from_member = RaftServiceClient::new(channel(&peer, as_(&member)));
    from_member.identify(IdentifyRequest {}).await.expect("a member's certificate is admitted");
    let meta = diskless_coordinator::raft::SnapshotMeta { last_log_id: None, last_membership: Default::default() };
    // A vote below the current term: were the stream taken whole, the install would be refused
    // anyway; the size bound refuses it first.
    let header = diskless_coordinator::storage::codec::encode(&(Vote::new_committed(0, 99), meta)).unwrap();
    let chunks: Vec<SnapshotChunk> = (0..3)
        .map(|i| SnapshotChunk {
            group: 0,
            header: if i == 0 { header.clone() } else { vec![] },
            data: vec![0u8; 512 << 10],
            to: (i == 0).then(|| to.clone()),
        })
        .collect();
    let e = from_member.install_snapshot(tokio_stream::iter(chunks)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    assert!(e.message().contains("max_snapshot_bytes"), "{}", e.message());

    // The control: the intruder's message from a member's certificate is taken (the term jumps).
    let r = from_member.append_entries(forged_append(term + 1000, to)).await.expect("admitted");
    assert!(r.into_inner().error.is_empty());
    // The term is read from Raft's metrics, which the node publishes after it handled the message:
    // wait for it (bounded) rather than read once.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now_term = c.status(follower, false).await.groups[0].term;
        if now_term >= term + 1000 {
            break;
        }
        assert!(Instant::now() < deadline, "a member's message moves the term ({term} -> {now_term})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_rotate_without_restart() {
    let c = Cluster::start(3, options()).await;
    let operator = ClientTls::new(&c.tls_files("operator")).unwrap();
    assert_eq!(server_identity(c.addr(1), &operator).await.common_name.as_deref(), Some("node-1"));

    // New certificates for node 1 (client and peer listeners share the files here), written as an
    // operator's tooling would: each file replaced whole.
    let ca = diskless_tls::certs::Ca::load(&c.certs_dir().join("ca.pem"), &c.certs_dir().join("ca.key")).unwrap();
    ca.issue("node-1-rotated", &["127.0.0.1", "localhost"]).unwrap().write(&c.certs_dir(), "node-1").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let id = server_identity(c.addr(1), &operator).await;
        if id.common_name.as_deref() == Some("node-1-rotated") {
            break;
        }
        assert!(Instant::now() < deadline, "node 1 still presents {id:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let peer = server_identity(c.peer_addr(1).unwrap(), &operator).await;
    assert_eq!(peer.common_name.as_deref(), Some("node-1-rotated"), "the peer listener too");

    // The cluster keeps working: node 1's new connections to peers present the new certificate
    // (its names still include the member host), commits go through, every node is still up.
    let mut broker = CoordinatorServiceClient::new(channel(c.addr(1), as_(&c.tls_files("broker-1"))));
    let topic = topic_id(2);
    create_topic(&mut broker, &topic, "rotated", 2).await;
    commit_all(&mut broker, "obj-r", &topic, &[(0, 4), (1, 2)]).await;
    assert_eq!(high_watermark(&mut broker, &topic, 0).await.unwrap(), 4);
    for id in c.ids() {
        c.status(id, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_reaches_secure_nodes_over_tls() {
    let c = Cluster::start(3, options()).await;
    let dir = c.root().join("wal");
    let f = c.tls_files("broker-1");
    let o = BrokerOptions {
        extra_toml: format!(
            "[coordinator_tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
            f.cert.display(),
            f.key.display(),
            f.ca.display()
        ),
        ..Default::default()
    };
    let broker = BrokerProc::start(&c, "b1", &TestStorage::Local(dir), &o).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "tls-events", 2).await;
    let values: Vec<String> = (0..5).map(|i| format!("v{i}")).collect();
    let r = produce_retrying(&mut client, "tls-events", 1, batch_of(&values)).await;
    assert_eq!(r.base_offset, 0);
    let got = consume_all(&mut client, "tls-events", 1).await.unwrap();
    assert_eq!(got.len(), 5);
}

/// A 4th node joins a 3-node mTLS cluster: `coordctl add-node` as the broker identity is refused
/// (PERMISSION_DENIED, membership unchanged); as the operator it adds the node's peer address to
/// every metadata partition over mutual TLS, the new node becomes a voter everywhere, and it serves
/// what was committed before it joined to a broker identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_joins_an_mtls_cluster_with_coordctl_add_node() {
    let mut c = Cluster::start(3, options()).await;
    let mut broker = CoordinatorServiceClient::new(channel(c.addr(1), as_(&c.tls_files("broker-1"))));
    let topic = topic_id(7);
    create_topic(&mut broker, &topic, "before-join", 2).await;
    commit_all(&mut broker, "obj-before", &topic, &[(0, 4), (1, 2)]).await;

    let member = c.spawn_new_node(4);
    let add = |who: &str| {
        let mut cmd = c.coordctl_as(c.addr(1), who);
        cmd.args(["add-node", "--id", "4", "--address", &member]);
        cmd
    };
    let out = add("broker-1").output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && said.contains("does not hold the role admin"), "{said}");
    assert!(c.status(1, false).await.groups.iter().all(|g| !g.voters.contains(&4) && !g.learners.contains(&4)));

    let out = tokio::task::spawn_blocking({
        let mut cmd = add("operator");
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "add-node as the operator: {said}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = c.status(4, false).await;
        if !s.groups.is_empty() && s.groups.iter().all(|g| g.voters.contains(&4) && g.voters.len() == 4) {
            break;
        }
        assert!(Instant::now() < deadline, "node 4 is not a voter everywhere: {:?}", s.groups);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Node 4 serves, over mutual TLS, what was committed before it joined.
    let mut via_4 = CoordinatorServiceClient::new(channel(c.addr(4), as_(&c.tls_files("broker-1"))));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match high_watermark(&mut via_4, &topic, 0).await {
            Ok(4) => break,
            other => assert!(Instant::now() < deadline, "node 4 does not serve the topic: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    commit_all(&mut via_4, "obj-after", &topic, &[(1, 3)]).await;
    assert_eq!(high_watermark(&mut broker, &topic, 1).await.unwrap(), 5);
}
