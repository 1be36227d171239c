//! Consumer groups with real clients (kcat -G, confluent-kafka subscribe(), kafka-python with
//! manual commits, AdminClient) against a diskless broker on a coordinator quorum; see
//! `tests/python/consumer_groups.py` for the checks. Also: a zombie's OffsetCommit with an old
//! generation is refused by the cluster, and committed offsets survive the loss of the node leading
//! the group's metadata partition; `coordctl groups list|describe` show them.

use std::process::Command;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::v1::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_confluent_kafka_and_kafka_python_consume_through_groups_with_exact_committed_offsets() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 20, ..BrokerOptions::default() };
    let mut a = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let ka = a.kafka_addr.clone().unwrap();
    run_python_checks("consumer_groups.py", vec![ka], "ALL GROUP CHECKS PASSED").await;
    // The broker that coordinated the groups dies; another broker serves the group `kgroup` from
    // what the cluster holds: kcat resumes exactly after the committed offsets.
    a.kill();
    let b_options = options;
    let b = BrokerProc::start(&c, "b", &TestStorage::Local(c.path("objects")), &b_options).await;
    let kb = b.kafka_addr.clone().unwrap();
    // The broker answers gRPC before its Kafka listener is bound: wait for the listener.
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&kb).await.is_err() {
        assert!(Instant::now() < deadline, "broker b's Kafka listener never accepted a connection");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kcat = |args: Vec<String>, input: Option<String>| {
        let mut cmd = Command::new("kcat");
        cmd.args(&args).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("run kcat");
        if let Some(input) = input {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        child.wait_with_output().expect("kcat output")
    };
    let produced = (90..100).map(|i| format!("k{i}:v{i}")).collect::<Vec<_>>().join("\n");
    let args: Vec<String> = ["-b", &kb, "-P", "-t", "kg", "-K:"].iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || kcat(args, Some(produced))).await.unwrap();
    assert!(out.status.success(), "kcat -P through broker b failed");
    let args: Vec<String> =
        ["-b", &kb, "-G", "kgroup", "-X", "auto.offset.reset=earliest", "-c", "10", "-f", "%s\n", "kg"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let out = tokio::task::spawn_blocking(move || kcat(args, None)).await.unwrap();
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    got.sort();
    let mut want: Vec<String> = (90..100).map(|i| format!("v{i}")).collect();
    want.sort();
    assert_eq!(got, want, "through another broker, the group resumes at its committed offsets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_commit_of_an_old_generation_is_refused_and_offsets_outlive_the_metadata_partition_leader() {
    let mut c = Cluster::start(3, Options::default()).await;
    c.wait_for_leaders(Duration::from_secs(30)).await;
    let mut client = c.client(1).await;
    let topic = [7u8; 16];
    create_topic(&mut client, &topic, "zt", 2).await;
    let member = |id: &str| consumer_group::Member {
        member_id: id.into(),
        client_id: "t".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        ..Default::default()
    };
    let store = |generation: i32, members: Vec<consumer_group::Member>, read: u64| StoreGroupRequest {
        group_id: "zg".into(),
        group: Some(ConsumerGroup {
            generation_id: generation,
            protocol_type: "consumer".into(),
            protocol: Some("range".into()),
            leader: members.first().map(|m| m.member_id.clone()),
            members,
            updated_ms: 0,
            coordinator: "test-coordinator".into(),
            version: 0,
        }),
        timeout_ms: 10_000,
        expected_version: read,
    };
    let r = client.store_group(store(1, vec![member("old")], 0)).await.unwrap().into_inner();
    assert_eq!(r.error_code, 0, "{r:?}");
    let first = r.group.expect("the stored group").version;
    let r = client.store_group(store(2, vec![member("new")], first)).await.unwrap().into_inner();
    assert_eq!(r.error_code, 0, "{r:?}");
    let commit = |generation: i32, member_id: &str, offset: i64| CommitOffsetsRequest {
        group_id: "zg".into(),
        generation_id: generation,
        member_id: member_id.into(),
        offsets: vec![GroupOffset { topic_id: topic.to_vec(), partition: 1, offset, ..Default::default() }],
        timeout_ms: 10_000,
    };
    // The zombie of generation 1.
    let r = client.commit_offsets(commit(1, "old", 99)).await.unwrap().into_inner();
    assert_eq!(r.offsets[0].error_code, 25, "unknown member: {r:?}");
    let r = client.commit_offsets(commit(1, "new", 99)).await.unwrap().into_inner();
    assert_eq!(r.offsets[0].error_code, 22, "illegal generation: {r:?}");
    // The current member.
    let r = client.commit_offsets(commit(2, "new", 7)).await.unwrap().into_inner();
    assert_eq!(r.offsets[0].error_code, 0, "{r:?}");
    // A deposed coordinator, which read generation 1's store, cannot store over generation 2's.
    let r = client.store_group(store(1, vec![member("old")], first)).await.unwrap().into_inner();
    assert_eq!(r.error_code, 22, "{r:?}");
    // Nor can another coordinator that read the same.
    let mut other = store(2, vec![member("intruder")], first);
    other.group.as_mut().unwrap().coordinator = "another-broker".into();
    let r = client.store_group(other).await.unwrap().into_inner();
    assert_eq!(r.error_code, 22, "{r:?}");
    // coordctl shows the group and its committed offset.
    let run = |args: &[&str]| {
        let out = coordctl(c.addr(1)).arg("--json").args(args).output().expect("run coordctl");
        assert!(out.status.success(), "coordctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("one JSON document")
    };
    let listed = run(&["groups", "list"]);
    assert_eq!(listed["groups"][0]["group_id"], "zg", "{listed}");
    assert_eq!(listed["groups"][0]["generation"], 2, "{listed}");
    let described = run(&["groups", "describe", "zg"]);
    assert_eq!(described["offsets"][0]["topic"], "zt", "{described}");
    assert_eq!(described["offsets"][0]["offset"], 7, "{described}");
    assert_eq!(described["members"][0]["member_id"], "new", "{described}");
    // The offset is replicated: read through another node once the leader that took it is killed.
    let g = diskless_proto::metadata_partition_for_group("zg", c.options.metadata_partitions) as usize;
    let leader = c.leaders(1).await[g];
    let other = c.ids().into_iter().find(|&i| i != leader).unwrap();
    c.kill(leader);
    let mut client = c.client(other).await;
    let fetch = FetchOffsetsRequest { group_id: "zg".into(), partitions: vec![], timeout_ms: 10_000 };
    let deadline = Instant::now() + Duration::from_secs(60);
    let r = loop {
        match client.fetch_offsets(fetch.clone()).await.map(|r| r.into_inner()) {
            Ok(r) if r.error_code == 0 => break r,
            other => assert!(Instant::now() < deadline, "no answer after the leader died: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(r.offsets.len(), 1);
    assert_eq!((r.offsets[0].partition, r.offsets[0].offset), (1, 7));
    assert_eq!(r.group.map(|g| g.generation_id), Some(2));
}
