//! The broker registry with real brokers: a second live broker with a taken id is refused and
//! exits naming the holder; Metadata lists every live broker (each by its address on the listener
//! the client came through: brokers register every named listener), spreads partition leadership over
//! them and drops a killed broker once its lease lapsed; FindCoordinator answers the same owner
//! from every broker, and the others answer NOT_COORDINATOR; a client in another rack is pointed
//! at a broker of its rack (`preferred_read_replica`); and a confluent-kafka group consuming across
//! two brokers goes on through the survivor when the broker coordinating it is killed -9 (see
//! `tests/python/coordinator_failover.py`). Leader epochs are the same through every broker, grow
//! when a broker dies, and are checked by ListOffsets, Fetch and OffsetForLeaderEpoch as Kafka
//! checks them.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::v1::ListBrokersRequest;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;

async fn metadata(addr: &str, topic: &str) -> MetadataResponse {
    let req = MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.into()))))]));
    kafka_call(addr, ApiKey::Metadata, 12, &req).await
}

fn broker_ids(m: &MetadataResponse) -> BTreeSet<i32> {
    m.brokers.iter().map(|b| b.node_id.0).collect()
}

fn leaders(m: &MetadataResponse) -> Vec<i32> {
    m.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.leader_id.0)).collect()
}

async fn coordinator_of(addr: &str, group: &str) -> i32 {
    let req = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![StrBytes::from_string(group.into())]);
    let r: FindCoordinatorResponse = kafka_call(addr, ApiKey::FindCoordinator, 4, &req).await;
    assert_eq!(r.coordinators[0].error_code, 0, "{r:?}");
    r.coordinators[0].node_id.0
}

/// Waits until Metadata from `addr` lists exactly `want`.
async fn wait_for_brokers(addr: &str, topic: &str, want: &BTreeSet<i32>) -> MetadataResponse {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = metadata(addr, topic).await;
        if &broker_ids(&m) == want {
            return m;
        }
        assert!(Instant::now() < deadline, "Metadata from {addr} lists {:?}, not {want:?}", broker_ids(&m));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The leader epochs a Metadata answer gives its partitions.
fn epochs(m: &MetadataResponse) -> BTreeSet<i32> {
    m.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.leader_epoch)).collect()
}

/// A Fetch of `spread`'s partition 0 from offset 0 that says it saw `epoch`.
fn fetch_at(epoch: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("spread")))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(epoch)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])])
}

/// Through `addr` at leader epoch `epoch`: ListOffsets and Fetch accept it and refuse an older
/// one (FENCED_LEADER_EPOCH, 74) and a newer one (UNKNOWN_LEADER_EPOCH, 75); OffsetForLeaderEpoch
/// ends every epoch up to it at the high watermark and knows no later one (−1, −1).
async fn check_epochs(addr: &str, epoch: i32) {
    let list = |current: i32| {
        ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("spread")))
                .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(current)
                    .with_timestamp(-1)]),
        ])
    };
    let code = |r: &ListOffsetsResponse| (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].leader_epoch);
    let r: ListOffsetsResponse = kafka_call(addr, ApiKey::ListOffsets, 7, &list(epoch)).await;
    assert_eq!(code(&r), (0, epoch), "ListOffsets at the current epoch");
    let high_watermark = r.topics[0].partitions[0].offset;
    let r: ListOffsetsResponse = kafka_call(addr, ApiKey::ListOffsets, 7, &list(epoch - 1)).await;
    assert_eq!(code(&r).0, 74, "ListOffsets at an older epoch");
    let r: ListOffsetsResponse = kafka_call(addr, ApiKey::ListOffsets, 7, &list(epoch + 1)).await;
    assert_eq!(code(&r).0, 75, "ListOffsets at a newer epoch");
    for (current, want) in [(epoch - 1, 74), (epoch, 0), (epoch + 1, 75)] {
        let r: FetchResponse = kafka_call(addr, ApiKey::Fetch, 12, &fetch_at(current)).await;
        assert_eq!(r.responses[0].partitions[0].error_code, want, "Fetch at epoch {current} (current {epoch})");
    }
    let ask = |leader_epoch: i32| {
        OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("spread")))
                .with_partitions(vec![offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(epoch)
                    .with_leader_epoch(leader_epoch)]),
        ])
    };
    for (asked, want) in [(epoch, (0, epoch, high_watermark)), (1, (0, 1, high_watermark)), (epoch + 1, (0, -1, -1))] {
        let r: OffsetForLeaderEpochResponse = kafka_call(addr, ApiKey::OffsetForLeaderEpoch, 4, &ask(asked)).await;
        let e = &r.topics[0].partitions[0];
        assert_eq!((e.error_code, e.leader_epoch, e.end_offset), want, "OffsetForLeaderEpoch of epoch {asked}");
    }
}

async fn kafka_ready(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "Kafka listener {addr} never accepted a connection");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_broker_with_a_taken_id_is_refused_and_exits_naming_the_holder() {
    let c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::Local(c.path("objects"));
    // a's lease outlasts the elections of a young cluster (its leaders move to their preferred
    // nodes; a lapsed lease would let b take the id) and the whole test, so that a's record
    // disappearing at the end can only be its unregistering. b gives up after its own lease.
    let options = BrokerOptions { kafka: true, broker_id: 41, lease_ms: 60_000, ..BrokerOptions::default() };
    let mut a = BrokerProc::start(&c, "a", &storage, &options).await;
    let ka = a.kafka_addr.clone().unwrap();
    kafka_ready(&ka).await;
    let mut client = c.client(1).await;
    // a registers.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client.list_brokers(ListBrokersRequest { timeout_ms: 5_000 }).await.unwrap().into_inner();
        if r.brokers.iter().any(|b| b.broker_id == 41) {
            break;
        }
        assert!(Instant::now() < deadline, "broker a never registered: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // b, with the same id at another address, is refused; after one lease it gives up and exits.
    let mut b = BrokerProc::start(&c, "b", &storage, &BrokerOptions { lease_ms: 4_000, ..options.clone() }).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = b.exited() {
            break s;
        }
        assert!(Instant::now() < deadline, "broker b still runs: {}", b.log_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!status.success(), "broker b exited with {status}");
    let log = b.log_text();
    let line = log.lines().find(|l| l.contains("broker id 41 is taken")).unwrap_or_else(|| panic!("{}", b.log_tail()));
    assert!(line.contains(&ka), "the message names the holder's address {ka}: {line}");
    // a still holds it.
    let r = client.list_brokers(ListBrokersRequest { timeout_ms: 5_000 }).await.unwrap().into_inner();
    let held: Vec<(i32, String)> = r.brokers.iter().map(|b| (b.broker_id, format!("{}:{}", b.host, b.port))).collect();
    assert_eq!(held, vec![(41, ka.clone())]);
    // coordctl shows it.
    let out = coordctl(c.addr(1)).args(["--json", "brokers"]).output().expect("run coordctl");
    assert!(out.status.success(), "coordctl brokers: {}", String::from_utf8_lossy(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(listed["brokers"][0]["broker_id"], 41, "{listed}");
    assert_eq!(format!("{}:{}", listed["brokers"][0]["host"].as_str().unwrap(), listed["brokers"][0]["port"]), ka);
    // A clean shutdown gives the id back at once (its lease would run for a minute).
    a.stop();
    let r = client.list_brokers(ListBrokersRequest { timeout_ms: 5_000 }).await.unwrap().into_inner();
    assert!(r.brokers.is_empty(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_lists_the_live_brokers_spreads_leaders_and_drops_a_killed_broker_after_its_lease() {
    let c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::Local(c.path("objects"));
    // Each broker also has a second listener, EXTERNAL.
    let external = |addr: &str| format!("[[kafka.listeners]]\nname = \"EXTERNAL\"\nlisten = \"{addr}\"\n");
    let (xa, xb) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let a = BrokerProc::start(
        &c,
        "a",
        &storage,
        &BrokerOptions { kafka: true, rack: Some("rack-a".into()), kafka_toml: external(&xa), ..Default::default() },
    )
    .await;
    let mut b = BrokerProc::start(
        &c,
        "b",
        &storage,
        &BrokerOptions { kafka: true, rack: Some("rack-b".into()), kafka_toml: external(&xb), ..Default::default() },
    )
    .await;
    let (ka, kb) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    kafka_ready(&ka).await;
    kafka_ready(&kb).await;
    kafka_ready(&xa).await;
    let mut broker = a.client().await;
    create_topic_via(&mut broker, "spread", 16).await;
    let both: BTreeSet<i32> = [a.broker_id, b.broker_id].into();
    let from_a = wait_for_brokers(&ka, "spread", &both).await;
    let from_b = wait_for_brokers(&kb, "spread", &both).await;
    // Addresses and racks as registered.
    for (id, addr, rack) in [(a.broker_id, &ka, "rack-a"), (b.broker_id, &kb, "rack-b")] {
        let m = from_a.brokers.iter().find(|x| x.node_id.0 == id).expect("listed");
        assert_eq!(format!("{}:{}", m.host, m.port), *addr);
        assert_eq!(m.rack.as_ref().map(|r| r.to_string()).as_deref(), Some(rack));
    }
    // Through a's EXTERNAL listener, every broker is named by its EXTERNAL address.
    let via_external = wait_for_brokers(&xa, "spread", &both).await;
    for (id, addr) in [(a.broker_id, &xa), (b.broker_id, &xb)] {
        let m = via_external.brokers.iter().find(|x| x.node_id.0 == id).expect("listed");
        assert_eq!(format!("{}:{}", m.host, m.port), *addr, "broker {id} through EXTERNAL");
    }
    // Leadership: the same on both brokers, spread over both.
    assert_eq!(leaders(&from_a), leaders(&from_b));
    // Leader epochs (KIP-320): the registry's generation, the same through both brokers once they
    // read the same registry, at least 2 (two brokers joined).
    let epoch = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (ea, eb) = (epochs(&metadata(&ka, "spread").await), epochs(&metadata(&kb, "spread").await));
            if ea == eb && ea.len() == 1 {
                break *ea.iter().next().unwrap();
            }
            assert!(Instant::now() < deadline, "leader epochs through a {ea:?}, through b {eb:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(epoch >= 2, "leader epoch {epoch}");
    check_epochs(&ka, epoch).await;
    assert_eq!(leaders(&from_a).into_iter().collect::<BTreeSet<_>>(), both, "{:?}", leaders(&from_a));
    // Group coordinators: the same answer from both; both coordinate some groups; the other
    // broker answers NOT_COORDINATOR.
    let mut owners = BTreeSet::new();
    for g in 0..12 {
        let group = format!("group-{g}");
        let owner = coordinator_of(&ka, &group).await;
        assert_eq!(owner, coordinator_of(&kb, &group).await, "{group}");
        owners.insert(owner);
        let other = if owner == a.broker_id { &kb } else { &ka };
        let hb = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.clone())))
            .with_generation_id(1)
            .with_member_id(StrBytes::from_static_str("m"));
        let r: HeartbeatResponse = kafka_call(other, ApiKey::Heartbeat, 4, &hb).await;
        assert_eq!(r.error_code, 16, "{group}: NOT_COORDINATOR from the other broker");
    }
    assert_eq!(owners, both);
    // A client in rack-b fetching from a (rack-a) is pointed at b; from b it is served.
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_rack_id(StrBytes::from_static_str("rack-b"))
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("spread")))
            .with_partitions(
                (0..4)
                    .map(|p| {
                        fetch_request::FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(0)
                            .with_partition_max_bytes(1 << 20)
                    })
                    .collect(),
            )]);
    let r: FetchResponse = kafka_call(&ka, ApiKey::Fetch, 11, &fetch).await;
    for p in &r.responses[0].partitions {
        assert_eq!(p.preferred_read_replica.0, b.broker_id, "{p:?}");
    }
    let r: FetchResponse = kafka_call(&kb, ApiKey::Fetch, 11, &fetch).await;
    for p in &r.responses[0].partitions {
        assert_eq!((p.error_code, p.preferred_read_replica.0), (0, -1), "{p:?}");
    }
    // b dies: once its lease lapsed, a lists only itself and leads everything, at a newer epoch;
    // the old epoch is fenced.
    b.kill();
    let alone = wait_for_brokers(&ka, "spread", &[a.broker_id].into()).await;
    assert!(leaders(&alone).iter().all(|l| *l == a.broker_id), "{:?}", leaders(&alone));
    let deadline = Instant::now() + Duration::from_secs(30);
    let newer = loop {
        let e = epochs(&metadata(&ka, "spread").await);
        if e.len() == 1 && *e.iter().next().unwrap() > epoch {
            break *e.iter().next().unwrap();
        }
        assert!(Instant::now() < deadline, "the leader epoch did not grow past {epoch} when b died: {e:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let r: FetchResponse = kafka_call(&ka, ApiKey::Fetch, 12, &fetch_at(epoch)).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 74, "FENCED_LEADER_EPOCH for the old epoch");
    check_epochs(&ka, newer).await;
    assert_eq!(coordinator_of(&ka, "group-0").await, a.broker_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_consuming_across_two_brokers_survives_the_kill_of_its_coordinator() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::Local(c.path("objects"));
    let options = BrokerOptions { kafka: true, commit_interval_ms: 20, ..BrokerOptions::default() };
    let mut a = BrokerProc::start(&c, "a", &storage, &options).await;
    let mut b = BrokerProc::start(&c, "b", &storage, &BrokerOptions { lease_ms: 4_000, ..options.clone() }).await;
    let (ka, kb) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    kafka_ready(&ka).await;
    kafka_ready(&kb).await;
    let mut broker = a.client().await;
    create_topic_via(&mut broker, "failover", 6).await;
    let both: BTreeSet<i32> = [a.broker_id, b.broker_id].into();
    wait_for_brokers(&ka, "failover", &both).await;
    wait_for_brokers(&kb, "failover", &both).await;
    let group = "failover-group";
    let coordinator = coordinator_of(&ka, group).await;
    assert_eq!(coordinator, coordinator_of(&kb, group).await);

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/coordinator_failover.py");
    // librdkafka logs every failed connection to the dead broker: a file, not a pipe that fills.
    let stderr_path = c.path("failover-stderr.log");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(format!("{ka},{kb}"))
        .arg("failover")
        .arg(group)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("run python3");
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, mut lines_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut out = vec![];
    let deadline = Instant::now() + Duration::from_secs(400);
    let mut killed = false;
    loop {
        let line = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), lines_rx.recv()).await;
        let Ok(Some(line)) = line else { break };
        if line == "PHASE1" && !killed {
            // The broker coordinating the group dies while the group consumes.
            if coordinator == a.broker_id {
                a.kill();
            } else {
                b.kill();
            }
            killed = true;
            writeln!(stdin, "GO").unwrap();
            stdin.flush().unwrap();
        }
        out.push(line);
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let stdout = out.join("\n");
    assert!(killed, "the consumers never reached the kill\n{stdout}");
    assert_checks_passed("coordinator_failover.py", status.success(), &stdout, &stderr, "FAILOVER CHECKS PASSED");
    // The survivor coordinates the group now.
    let survivor = if coordinator == a.broker_id { &kb } else { &ka };
    let other = if coordinator == a.broker_id { b.broker_id } else { a.broker_id };
    assert_eq!(coordinator_of(survivor, group).await, other);
}

/// The members of each group (id → member ids) as the cluster stores them.
async fn stored_members(c: &Cluster) -> std::collections::BTreeMap<String, Vec<String>> {
    let r = c
        .client(1)
        .await
        .list_groups(diskless_proto::v1::ListGroupsRequest { timeout_ms: 10_000 })
        .await
        .expect("list groups")
        .into_inner();
    r.groups
        .into_iter()
        .map(|e| {
            (e.group_id, e.group.map(|g| g.members.into_iter().map(|m| m.member_id).collect()).unwrap_or_default())
        })
        .collect()
}

/// A broker loads the groups it coordinates when it becomes their coordinator (here: when it
/// starts again after a crash), as Kafka loads a coordinator partition's groups at its election:
/// the stored members of a classic, a KIP-848 and a share group whose clients died with the
/// broker are removed once their sessions lapse, though nobody uses the groups again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_broker_takes_its_groups_over_and_their_dead_members_expire_unused() {
    let c = Cluster::start(3, Options::default()).await;
    let groups = "\n[groups]\ninitial_rebalance_delay_ms = 0\nmin_session_timeout_ms = 1000\n\
                  consumer_session_timeout_ms = 3000\nshare_session_timeout_ms = 3000\n";
    let options = BrokerOptions { kafka: true, kafka_toml: groups.to_string(), ..BrokerOptions::default() };
    let mut a = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let addr = a.kafka_addr.clone().unwrap();
    let mut broker = a.client().await;
    create_topic_via(&mut broker, "taken-over", 2).await;
    let s = |v: &str| StrBytes::from_string(v.to_string());

    // A classic member, joined and synced (its group stored with it).
    let join = |member: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("classic-unused")))
            .with_member_id(s(member))
            .with_session_timeout_ms(3_000)
            .with_rebalance_timeout_ms(3_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default().with_name(s("range"))])
    };
    let first: JoinGroupResponse = kafka_call(&addr, ApiKey::JoinGroup, 5, &join("")).await;
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED: {first:?}");
    let joined: JoinGroupResponse = kafka_call(&addr, ApiKey::JoinGroup, 5, &join(&first.member_id)).await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s("classic-unused")))
        .with_generation_id(joined.generation_id)
        .with_member_id(joined.member_id.clone())
        .with_assignments(vec![sync_group_request::SyncGroupRequestAssignment::default()
            .with_member_id(joined.member_id.clone())
            .with_assignment(bytes::Bytes::from_static(b"\0\0\0\0\0\0\0\0"))]);
    let synced: SyncGroupResponse = kafka_call(&addr, ApiKey::SyncGroup, 3, &sync).await;
    assert_eq!(synced.error_code, 0, "{synced:?}");

    // A KIP-848 member and a share member, each after one heartbeat.
    let heartbeat = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("consumer-unused")))
        .with_member_id(s("kip848-member"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(3_000)
        .with_subscribed_topic_names(Some(vec![TopicName(s("taken-over"))]))
        .with_topic_partitions(Some(vec![]));
    let r: ConsumerGroupHeartbeatResponse = kafka_call(&addr, ApiKey::ConsumerGroupHeartbeat, 1, &heartbeat).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let heartbeat = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("share-unused")))
        .with_member_id(s("share-member"))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![TopicName(s("taken-over"))]));
    let r: ShareGroupHeartbeatResponse = kafka_call(&addr, ApiKey::ShareGroupHeartbeat, 1, &heartbeat).await;
    assert_eq!(r.error_code, 0, "{r:?}");

    let stored = stored_members(&c).await;
    for group in ["classic-unused", "consumer-unused", "share-unused"] {
        assert_eq!(stored.get(group).map(Vec::len), Some(1), "{group} stored with its member: {stored:?}");
    }

    // The broker crashes with its clients; it comes back, and nobody names the groups again.
    a.kill();
    a.restart().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stored = stored_members(&c).await;
        let left: Vec<_> = ["classic-unused", "consumer-unused", "share-unused"]
            .into_iter()
            .filter(|g| stored.get(*g).is_some_and(|m| !m.is_empty()))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "dead members still stored in {left:?}: {stored:?}\n{}", a.log_tail());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
