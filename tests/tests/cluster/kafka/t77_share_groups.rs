//! KIP-932 share groups with librdkafka's ShareConsumer through two brokers
//! (`tests/python/share_groups.py`): consumers share one partition's records, accepted records are
//! not delivered again, a consumer killed with `kill -9` gives its records back when their locks
//! expire, a record released at every delivery is archived at the delivery count limit. Then the
//! admin APIs on the wire: ShareGroupDescribe, DescribeShareGroupOffsets (the start offset past
//! every record), AlterShareGroupOffsets (refused while the group has members elsewhere: here it is
//! empty, so taken), and the broker coordinating the group is killed: through the other broker the
//! group goes on from the stored share-partition state, from the altered start offset. And on the
//! wire: a ShareFetch's acknowledgements and its acquisition are one store.

use diskless_cluster_tests::nemesis::kafka_client::KafkaClient;
use diskless_cluster_tests::*;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "kip932";
const GROUP: &str = "kip932-group";
/// What the script produces before the admin checks: 300 + 20 + 20 + 1 records, all acknowledged or
/// archived.
const CONSUMED: i64 = 341;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t77_share_groups_share_acknowledge_redeliver_and_survive_their_coordinator() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let groups = "\n[groups]\nshare_session_timeout_ms = 6000\nshare_heartbeat_interval_ms = 500\n\
                  share_record_lock_duration_ms = 4000\nshare_delivery_count_limit = 3\n\
                  share_auto_offset_reset = \"earliest\"\n";
    let options = BrokerOptions {
        kafka: true,
        commit_interval_ms: 20,
        kafka_toml: groups.to_string(),
        ..BrokerOptions::default()
    };
    let storage = TestStorage::Local(c.path("objects"));
    let mut a = BrokerProc::start(&c, "a", &storage, &options).await;
    let mut b = BrokerProc::start(&c, "b", &storage, &options).await;
    let (ka, kb) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    let out = run_python_checks(
        "share_groups.py",
        vec![format!("{ka},{kb}"), TOPIC.into(), GROUP.into()],
        "ALL SHARE GROUP CHECKS PASSED",
    )
    .await;
    println!("{out}");

    let mut k = KafkaClient::connect(&ka).await.unwrap();
    let coordinator = k.find_group_coordinator(GROUP).await.unwrap();
    let (mut on_coordinator, survivor) = if coordinator == a.broker_id {
        (KafkaClient::connect(&ka).await.unwrap(), kb.clone())
    } else {
        (KafkaClient::connect(&kb).await.unwrap(), ka.clone())
    };
    let group = || GroupId(StrBytes::from_static_str(GROUP));
    let d = on_coordinator.call(&ShareGroupDescribeRequest::default().with_group_ids(vec![group()]), 1).await.unwrap();
    let g = &d.groups[0];
    assert_eq!((g.error_code, g.group_state.as_str(), g.assignor_name.as_str()), (0, "Empty", "simple"), "{g:?}");
    assert!(g.group_epoch > 0);

    let describe = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(group())
            .with_topics(None),
    ]);
    let start_offset = |r: &DescribeShareGroupOffsetsResponse| {
        let g = &r.groups[0];
        assert_eq!(g.error_code, 0, "{g:?}");
        g.topics[0].partitions[0].start_offset
    };
    let r = on_coordinator.call(&describe, 0).await.unwrap();
    assert_eq!(start_offset(&r), CONSUMED, "every record acknowledged or archived: {r:?}");

    let alter = AlterShareGroupOffsetsRequest::default().with_group_id(group()).with_topics(vec![
        alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default(
            )
            .with_partition_index(0)
            .with_start_offset(300)]),
    ]);
    let r = on_coordinator.call(&alter, 0).await.unwrap();
    assert_eq!((r.error_code, r.responses[0].partitions[0].error_code), (0, 0), "{r:?}");
    let r = on_coordinator.call(&describe, 0).await.unwrap();
    assert_eq!(start_offset(&r), 300);

    // The coordinating broker killed: the other goes on from the stored state (from offset 300:
    // the 41 records after it are delivered again, then the new ones).
    if coordinator == a.broker_id {
        a.kill();
    } else {
        b.kill();
    }
    let out = run_python_checks(
        "share_groups.py",
        vec![survivor, TOPIC.into(), GROUP.into(), "--resume".into()],
        "ALL SHARE GROUP CHECKS PASSED",
    )
    .await;
    println!("{out}");
}

/// The group protocols' figures (not run by the test command: `cargo test -p diskless-cluster-tests --test
/// cluster t77_group_figures -- --ignored --nocapture`, with nothing else running): rebalance time
/// with 3 and 30 members, classic against KIP-848, and share-fetch throughput with 1 and 8 share
/// consumers on one partition (`tests/python/group_figures.py`), on a local 3-node cluster and one
/// broker with default group settings but `share_auto_offset_reset = "earliest"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore]
async fn t77_group_figures() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions {
        kafka: true,
        kafka_toml: "\n[groups]\nshare_auto_offset_reset = \"earliest\"\n".to_string(),
        ..BrokerOptions::default()
    };
    let storage = TestStorage::Local(c.path("objects"));
    let a = BrokerProc::start(&c, "a", &storage, &options).await;
    let out =
        run_python_checks("group_figures.py", vec![a.kafka_addr.clone().unwrap()], "ALL GROUP FIGURES MEASURED").await;
    println!("{out}");
}

/// A broker for raw share-fetch tests: commits every 20 ms, share groups from the earliest offset.
async fn raw_share_broker(c: &Cluster) -> BrokerProc {
    let options = BrokerOptions {
        kafka: true,
        commit_interval_ms: 20,
        kafka_toml: "\n[groups]\nshare_auto_offset_reset = \"earliest\"\n".to_string(),
        ..BrokerOptions::default()
    };
    BrokerProc::start(c, "a", &TestStorage::Local(c.path("objects")), &options).await
}

/// A topic's id, from Metadata.
async fn topic_id_of(k: &mut KafkaClient, topic: &'static str) -> uuid::Uuid {
    let md = k
        .call(
            &MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str(topic))))])),
            12,
        )
        .await
        .unwrap();
    md.topics[0].topic_id
}

/// A ShareFetch carrying the acknowledgements of what the member acquired before is one store:
/// the partition's stored state moves one version for the acknowledgements and the new
/// acquisition together (it moved two, a write each, before). The acknowledged records move the
/// start offset and are not delivered again; the next ones are.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t77_an_acknowledged_share_fetch_is_one_store() {
    const ACKED: &str = "acked-polls";
    let c = Cluster::start(3, Options::default()).await;
    let a = raw_share_broker(&c).await;
    let mut broker = a.client().await;
    create_topic_via(&mut broker, ACKED, 1).await;
    for i in 0..3 {
        let values: Vec<String> = (0..10).map(|j| format!("r{i}-{j}")).collect();
        produce_retrying(&mut broker, ACKED, 0, batch_of(&values)).await;
    }
    let mut k = KafkaClient::connect(a.kafka_addr.as_deref().unwrap()).await.unwrap();
    let topic_id = topic_id_of(&mut k, ACKED).await;
    let fetch = |epoch: i32, acked: Option<(i64, i64)>| {
        let mut p = share_fetch_request::FetchPartition::default().with_partition_index(0);
        if let Some((first, last)) = acked {
            p.acknowledgement_batches.push(
                share_fetch_request::AcknowledgementBatch::default()
                    .with_first_offset(first)
                    .with_last_offset(last)
                    .with_acknowledge_types(vec![1]),
            );
        }
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_static_str(GROUP))))
            .with_member_id(Some(StrBytes::from_static_str("member-1")))
            .with_share_session_epoch(epoch)
            .with_max_wait_ms(2_000)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(10)
            .with_batch_size(10)
            .with_topics(vec![share_fetch_request::FetchTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![p])])
    };
    let acquired = |r: &ShareFetchResponse| -> (i16, i16, Vec<(i64, i64)>) {
        let p = &r.responses[0].partitions[0];
        (
            p.error_code,
            p.acknowledge_error_code,
            p.acquired_records.iter().map(|a| (a.first_offset, a.last_offset)).collect(),
        )
    };
    let mut cluster = c.client(1).await;
    let stored = |cluster: &mut diskless_cluster_tests::cluster::Client| {
        let req = diskless_proto::v1::ReadShareStatesRequest {
            group_id: GROUP.into(),
            timeout_ms: 10_000,
            topic_id: Some(topic_id.as_bytes().to_vec()),
            partition_index: Some(0),
        };
        let mut cluster = cluster.clone();
        async move {
            let r = cluster.read_share_states(req).await.unwrap().into_inner();
            assert_eq!(r.error_code, 0, "{r:?}");
            let s = &r.states[0];
            (s.version, s.start_offset)
        }
    };

    let first = k.call(&fetch(0, None), 1).await.unwrap();
    assert_eq!((first.error_code, acquired(&first)), (0, (0, 0, vec![(0, 9)])), "{first:?}");
    let (v1, start1) = stored(&mut cluster).await;
    assert_eq!(start1, 0);
    let second = k.call(&fetch(1, Some((0, 9))), 1).await.unwrap();
    assert_eq!((second.error_code, acquired(&second)), (0, (0, 0, vec![(10, 19)])), "{second:?}");
    let (v2, start2) = stored(&mut cluster).await;
    assert_eq!(start2, 10, "the acknowledged records moved the start offset");
    assert_eq!(v2, v1 + 1, "the acknowledgements and the acquisition were one store");
    // An acknowledgement the partition refuses (records never acquired) fails alone: the
    // acquisition still goes through.
    let third = k.call(&fetch(2, Some((25, 29))), 1).await.unwrap();
    assert_eq!(acquired(&third), (0, 121 /* INVALID_RECORD_STATE */, vec![(20, 29)]), "{third:?}");
}

/// The partitions of one ShareFetch are acquired together, each with an equal share of
/// `max_records` (whole batches, so a share may be passed by part of a batch); a partition that
/// filled its share takes what the others left. One partition with many records does not starve
/// another in the same fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t77_a_share_fetch_shares_its_records_over_its_partitions_and_fills_from_the_busy_one() {
    const SPREAD: &str = "spread-polls";
    let c = Cluster::start(3, Options::default()).await;
    let a = raw_share_broker(&c).await;
    let mut broker = a.client().await;
    create_topic_via(&mut broker, SPREAD, 2).await;
    // Partition 0: six batches of 10 records; partition 1: one.
    for (partition, batches) in [(0, 6), (1, 1)] {
        for i in 0..batches {
            let values: Vec<String> = (0..10).map(|j| format!("p{partition}-{i}-{j}")).collect();
            produce_retrying(&mut broker, SPREAD, partition, batch_of(&values)).await;
        }
    }
    let mut k = KafkaClient::connect(a.kafka_addr.as_deref().unwrap()).await.unwrap();
    let topic_id = topic_id_of(&mut k, SPREAD).await;
    let fetch = |member: &'static str| {
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_static_str("spread-group"))))
            .with_member_id(Some(StrBytes::from_static_str(member)))
            .with_share_session_epoch(0)
            .with_max_wait_ms(2_000)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(30)
            .with_batch_size(10)
            .with_topics(vec![share_fetch_request::FetchTopic::default().with_topic_id(topic_id).with_partitions(
                (0..2).map(|p| share_fetch_request::FetchPartition::default().with_partition_index(p)).collect(),
            )])
    };
    // Per partition: (first, last, count) of what was acquired.
    let acquired = |r: &ShareFetchResponse| -> Vec<(i32, i64, i64, i64)> {
        assert_eq!(r.error_code, 0, "{r:?}");
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| !p.acquired_records.is_empty())
            .map(|p| {
                assert_eq!(p.error_code, 0, "{p:?}");
                let a = &p.acquired_records;
                let count = a.iter().map(|r| r.last_offset - r.first_offset + 1).sum();
                (
                    p.partition_index,
                    a.iter().map(|r| r.first_offset).min().unwrap(),
                    a.iter().map(|r| r.last_offset).max().unwrap(),
                    count,
                )
            })
            .collect()
    };
    // 15 records each: partition 0 gives two batches, partition 1 its one.
    let first = k.call(&fetch("member-1"), 1).await.unwrap();
    assert_eq!(acquired(&first), vec![(0, 0, 19, 20), (1, 0, 9, 10)], "{first:?}");
    // Partition 1 has nothing left: partition 0 fills the fetch in a second round.
    let second = k.call(&fetch("member-2"), 1).await.unwrap();
    assert_eq!(acquired(&second), vec![(0, 20, 49, 30)], "{second:?}");
}
