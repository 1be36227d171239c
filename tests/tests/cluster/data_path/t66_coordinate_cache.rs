//! The batch-coordinate cache (item 2): a tail consumer on broker B of what broker A
//! produces reads every record without B asking FindBatches — B learns the coordinates of A's
//! batches from its watch — and the bytes it serves are the records produced, in order, to
//! `read_uncommitted` and `read_committed` fetches alike while no transaction is open. The cache
//! never serves what DeleteRecords or a topic deletion removed: after A's DeleteRecords, a fetch
//! below the new log start is out of range through A at once and through B as soon as its watch
//! tells it; after the topic's deletion, neither broker serves it. A replace (object
//! consolidation) moves the cached coordinates with their batches: after the WAL objects it left
//! are deleted, both brokers still serve every record (from the new object; without the watch's
//! announcement followed, the fetch fails with KAFKA_STORAGE_ERROR).

use std::time::{Duration, Instant};

use diskless_cluster_tests::nemesis::kafka_client::KafkaClient;
use diskless_cluster_tests::*;
use diskless_proto::broker::{DeleteRecordsRequest, DeleteTopicRequest};

const TOPIC: &str = "cached";
const OFFSET_OUT_OF_RANGE: i16 = 1;

async fn produce_one(producer: &mut KafkaClient, value: &str) -> i64 {
    let batch = bytes::Bytes::from(batch_of(&[value.to_string()]));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, base) = producer.produce(TOPIC, 0, batch.clone()).await.expect("produce");
        if code == 0 {
            return base;
        }
        assert!(retriable(i32::from(code)) && Instant::now() < deadline, "produce: error {code}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fetches at `offset` through `client` until the answer's error is `code` (at most 10 s).
async fn until_error(client: &mut KafkaClient, offset: i64, code: i16, what: &str) -> Duration {
    let start = Instant::now();
    loop {
        let f = client.fetch(TOPIC, 0, offset).await.expect("fetch");
        if f.error_code == code {
            return start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: still {f:?} after 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_consumer_reads_another_brokers_batches_without_find_batches_and_never_past_a_delete() {
    let c = Cluster::start(3, Options { metrics: true, ..Options::default() }).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 50, ..BrokerOptions::default() };
    let a = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let b = BrokerProc::start(&c, "b", &TestStorage::Local(c.path("objects")), &options).await;
    let (a_addr, b_addr) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    create_topic_via(&mut a.client().await, TOPIC, 1).await;
    let mut producer = KafkaClient::connect(&a_addr).await.unwrap();
    let mut consumer = KafkaClient::connect(&b_addr).await.unwrap();

    // A first record, read by b once through FindBatches: b then knows the partition.
    assert_eq!(produce_one(&mut producer, "r-0").await, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let f = consumer.fetch(TOPIC, 0, 0).await.unwrap();
        if f.error_code == 0 && !f.records.is_empty() {
            assert_eq!(f.values(), vec![(0, "r-0".to_string())]);
            break;
        }
        assert!(Instant::now() < deadline, "b never served the first record: {f:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A tail consumer on b, a record at a time through a: parked at the end, woken by the watch,
    // served from the coordinates it announced. Without the cache each record costs a FindBatches.
    // Every other read is read_committed (librdkafka's default): with no transaction open, the
    // same.
    const RECORDS: i64 = 20;
    let before = find_batches_served(&c).await;
    let mut next = 1;
    for i in 1..=RECORDS {
        let tail = {
            let consumer = KafkaClient::connect(&b_addr).await.unwrap();
            let mut consumer = if i % 2 == 0 { consumer.read_committed() } else { consumer };
            tokio::spawn(async move { consumer.fetch_waiting(TOPIC, 0, next, 10_000).await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(produce_one(&mut producer, &format!("r-{i}")).await, i);
        let f = tail.await.unwrap();
        assert_eq!(f.error_code, 0, "{f:?}");
        assert_eq!(f.values(), vec![(i, format!("r-{i}"))], "the tail read of record {i}");
        assert_eq!(f.high_watermark, i + 1);
        next = i + 1;
    }
    // And a read from the start: every record, in order, from the cached coordinates.
    let f = consumer.fetch(TOPIC, 0, 0).await.unwrap();
    let want: Vec<(i64, String)> = (0..=RECORDS).map(|i| (i, format!("r-{i}"))).collect();
    assert_eq!(f.values(), want);
    let asked = find_batches_served(&c).await - before;
    eprintln!("FIGURE FindBatches for {RECORDS} tail reads and a re-read on the other broker: {asked}");
    assert!(asked <= 3.0, "the tail consumer asked FindBatches {asked} times for {RECORDS} records");

    // DeleteRecords through a: a fetch below the new log start is out of range through a at once
    // and through b once its watch has told it (it never serves the removed records from the cache).
    let mut a_client = a.client().await;
    let r = a_client
        .delete_records(DeleteRecordsRequest { topic: TOPIC.into(), partition: 0, offset: 10 })
        .await
        .expect("delete records")
        .into_inner();
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut on_a = KafkaClient::connect(&a_addr).await.unwrap();
    let f = on_a.fetch(TOPIC, 0, 5).await.unwrap();
    assert_eq!(f.error_code, OFFSET_OUT_OF_RANGE, "through the broker that deleted: {f:?}");
    let took = until_error(&mut consumer, 5, OFFSET_OUT_OF_RANGE, "below the log start through b").await;
    eprintln!("FIGURE b refused the deleted range {} ms after the DeleteRecords answer", took.as_millis());
    let f = consumer.fetch(TOPIC, 0, 10).await.unwrap();
    assert_eq!((f.error_code, f.log_start_offset), (0, 10), "{f:?}");
    assert_eq!(f.values().first(), Some(&(10, "r-10".to_string())));

    // The topic deleted: neither broker serves it.
    let r = a_client.delete_topic(DeleteTopicRequest { name: TOPIC.into() }).await.expect("delete topic").into_inner();
    assert_eq!(r.error_code, 0, "{r:?}");
    for (name, client) in [("a", &mut on_a), ("b", &mut consumer)] {
        let start = Instant::now();
        loop {
            let f = client.fetch(TOPIC, 0, 10).await.expect("fetch");
            if f.error_code != 0 {
                assert!(f.records.is_empty());
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "{name} still serves a deleted topic: {f:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Object consolidation's replace seen by the brokers' caches: both brokers read a partition
/// (each then holds its batches' coordinates); the batches are copied into one new object and
/// replaced (as a consolidating broker would); the cleaner deletes the WAL objects they left after
/// its grace; both brokers then serve every record again, from the new object, with the same
/// offsets and bytes — their cached coordinates followed the replace through the watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_coordinates_follow_a_replace_and_no_read_hits_a_deleted_object() {
    use diskless_proto::v1::*;
    const MOVED: &str = "moved";
    let c = Cluster::start(3, Options::default()).await;
    // No cache of object bytes: every fetch reads the object its coordinates name.
    let options = BrokerOptions {
        kafka: true,
        commit_interval_ms: 50,
        kafka_toml: "\n[fetch]\ncache_bytes = 0\n".into(),
        ..BrokerOptions::default()
    };
    let storage = TestStorage::Local(c.path("objects"));
    let a = BrokerProc::start(&c, "a", &storage, &options).await;
    let b = BrokerProc::start(&c, "b", &storage, &options).await;
    create_topic_via(&mut a.client().await, MOVED, 1).await;
    let mut producer = KafkaClient::connect(a.kafka_addr.as_deref().unwrap()).await.unwrap();
    const RECORDS: i64 = 8;
    for i in 0..RECORDS {
        let batch = bytes::Bytes::from(batch_of(&[format!("m-{i}")]));
        let (code, base) = producer.produce(MOVED, 0, batch).await.expect("produce");
        assert_eq!((code, base), (0, i));
    }
    let want: Vec<(i64, String)> = (0..RECORDS).map(|i| (i, format!("m-{i}"))).collect();
    let mut readers = vec![];
    for broker in [&a, &b] {
        let mut k = KafkaClient::connect(broker.kafka_addr.as_deref().unwrap()).await.unwrap();
        let f = k.fetch(MOVED, 0, 0).await.unwrap();
        assert_eq!(f.values(), want, "before the replace");
        readers.push(k);
    }

    // The consolidator's part: copy the batches' bytes into one object, then replace.
    let mut cluster = c.client(1).await;
    let topics = cluster.list_topics(ListTopicsRequest { names: vec![MOVED.into()], timeout_ms: 10_000 }).await;
    let topic_id = topics.unwrap().into_inner().topics[0].topic_id.clone();
    let batches = all_batches(&mut cluster, &topic_id, 0, vec![]).await.unwrap();
    let wal: std::collections::BTreeSet<String> = batches.iter().map(|b| b.object_key.clone()).collect();
    let objects = storage.open();
    let mut merged = vec![];
    let mut moves = vec![];
    let sources: Vec<String> = wal.iter().cloned().collect();
    for bi in &batches {
        let range = bi.byte_offset as u64..(bi.byte_offset + bi.byte_size) as u64;
        let bytes = objects.get_ranges(&bi.object_key, &[range]).await.expect("read a WAL object");
        moves.push(replace_batches_request::Batch {
            last_offset: bi.last_offset,
            batch_id: bi.batch_id,
            byte_offset: merged.len() as i32,
            byte_size: bi.byte_size as i32,
            source: sources.iter().position(|s| *s == bi.object_key).unwrap() as u32,
        });
        merged.extend_from_slice(&bytes[0]);
    }
    let key = "wal/consolidated-0001";
    let size = merged.len() as i64;
    objects.put_new(key, bytes::Bytes::from(merged)).await.unwrap();
    let r = cluster
        .replace_batches(ReplaceBatchesRequest {
            object_key: key.into(),
            object_format: 1,
            file_size: size,
            uploader_broker_id: 99,
            topic_id,
            partition_index: 0,
            batches: moves,
            timeout_ms: 10_000,
            sources,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.error_code, r.replaced.len()), (0, RECORDS as usize), "{r:?}");
    assert!(r.replaced.iter().all(|x| *x), "{r:?}");

    // The cleaner deletes the WAL objects after the grace.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = objects.list("wal/").await.unwrap().into_iter().map(|o| o.key).collect();
        if wal.iter().all(|k| !left.contains(k)) {
            assert!(left.contains(&key.to_string()), "the new object stays: {left:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the WAL objects are not deleted: {left:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Both brokers serve every record from the new object.
    for (name, k) in ["a", "b"].iter().zip(readers.iter_mut()) {
        let f = k.fetch(MOVED, 0, 0).await.unwrap();
        assert_eq!(f.error_code, 0, "through {name}: {f:?}");
        assert_eq!(f.values(), want, "through {name}, after the replace");
    }
}
