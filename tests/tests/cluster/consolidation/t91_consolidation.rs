//! A broker consolidating: records produced one request at a time land in many small WAL objects;
//! once old enough, each partition's batches are rewritten into a few objects of their own
//! (`ReplaceBatches`), the WAL objects are deleted by the cleaner, and a consumer reads every
//! record at its offset, with its bytes, from the consolidated objects (no byte cache: every read
//! goes to the store).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use diskless_cluster_tests::nemesis::kafka_client::KafkaClient;
use diskless_cluster_tests::*;
use diskless_proto::v1::ListTopicsRequest;

const TOPIC: &str = "consolidated";
const PARTITIONS: i32 = 2;
const RECORDS: i64 = 12;

/// A batch of one record, timestamped now (old timestamps would be past the topic's retention,
/// and consolidation leaves batches about to expire where they are).
fn batch_now(value: &str) -> bytes::Bytes {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let recs = vec![(Some(bytes::Bytes::from(format!("k{value}"))), Some(bytes::Bytes::from(value.to_string())))];
    kafka_records::encode(&recs, now, Compression::None, NOT_IDEMPOTENT).expect("encode")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_batches_move_into_per_partition_objects_and_read_back_exactly() {
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions {
        kafka: true,
        commit_interval_ms: 20,
        kafka_toml: "\n[fetch]\ncache_bytes = 0\n\n[consolidation]\nenabled = true\ninterval_ms = 200\n\
                     min_age_ms = 500\nmin_batches = 1\ntarget_bytes = 1048576\nexpiry_margin_ms = 0\n"
            .into(),
        ..BrokerOptions::default()
    };
    let storage = TestStorage::Local(c.path("objects"));
    let a = BrokerProc::start(&c, "a", &storage, &options).await;
    create_topic_via(&mut a.client().await, TOPIC, PARTITIONS).await;
    let mut k = KafkaClient::connect(a.kafka_addr.as_deref().unwrap()).await.unwrap();
    for i in 0..RECORDS {
        for p in 0..PARTITIONS {
            let batch = batch_now(&format!("p{p}-{i}"));
            let (code, base) = k.produce(TOPIC, p, batch).await.expect("produce");
            assert_eq!((code, base), (0, i));
        }
    }
    let objects = storage.open();
    let wal_before: BTreeSet<String> = objects.list("wal/").await.unwrap().into_iter().map(|o| o.key).collect();
    eprintln!("FIGURE objects before consolidation: {}", wal_before.len());

    // Every batch ends in consolidated objects; the WAL objects go.
    let mut cluster = c.client(1).await;
    let topics = cluster.list_topics(ListTopicsRequest { names: vec![TOPIC.into()], timeout_ms: 10_000 }).await;
    let topic_id = topics.unwrap().into_inner().topics[0].topic_id.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut per_partition = vec![];
    loop {
        per_partition.clear();
        let mut all_merged = true;
        for p in 0..PARTITIONS {
            let batches = all_batches(&mut cluster, &topic_id, p, vec![]).await.unwrap();
            assert_eq!(batches.len() as i64, RECORDS);
            all_merged &= batches.iter().all(|b| b.object_key.starts_with("wal/merged-"));
            per_partition.push(batches.iter().map(|b| b.object_key.clone()).collect::<BTreeSet<_>>());
        }
        let left: Vec<String> = objects
            .list("wal/")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .filter(|k| !k.starts_with("wal/merged-"))
            .collect();
        if all_merged && left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not consolidated within 60 s: {per_partition:?}, WAL objects left {left:?}\n{}",
            a.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Each partition's objects are its own.
    assert!(per_partition[0].is_disjoint(&per_partition[1]));
    let after: usize = objects.list("wal/").await.unwrap().len();
    eprintln!(
        "FIGURE objects after consolidation: {after} (per partition {:?})",
        per_partition.iter().map(BTreeSet::len).collect::<Vec<_>>()
    );
    assert!(per_partition.iter().all(|o| o.len() <= RECORDS as usize / 2), "{per_partition:?}");

    // A consumer reads every record at its offset from the consolidated objects.
    for p in 0..PARTITIONS {
        let f = k.fetch(TOPIC, p, 0).await.unwrap();
        assert_eq!(f.error_code, 0, "{f:?}");
        let want: Vec<(i64, String)> = (0..RECORDS).map(|i| (i, format!("p{p}-{i}"))).collect();
        assert_eq!(f.values(), want, "partition {p}");
    }
}
