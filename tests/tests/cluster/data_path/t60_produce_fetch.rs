//! End to end through a broker shim, on a local directory and on a real S3 server (moto): several
//! concurrent producers, many partitions; everything fetched back byte-exact, offsets contiguous
//! per partition, each producer's messages in produce order.

use std::collections::BTreeMap;
use std::sync::Arc;

use diskless_cluster_tests::*;

const PARTITIONS: i32 = 12;
const PRODUCERS: usize = 4;
const BATCHES: usize = 30;

async fn run(storage: TestStorage, c: &Cluster) {
    let broker = BrokerProc::start(c, "b1", &storage, &BrokerOptions::default()).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "events", PARTITIONS).await;

    // Each producer (idempotent, as Kafka's are by default) sends BATCHES batches of 1-5 messages
    // "p<producer>-<seq>", round robin over the partitions, one at a time, retrying retriable
    // errors with the same sequence numbers (a retry of a committed batch is recognised as a
    // duplicate and answered with its original offset).
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = vec![];
    for p in 0..PRODUCERS {
        let mut client = broker.client().await;
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut seq = 0;
            let mut sequences = [0i32; PARTITIONS as usize];
            for b in 0..BATCHES {
                let n = 1 + (b * 7 + p) % 5;
                let values: Vec<String> = (0..n)
                    .map(|_| {
                        seq += 1;
                        format!("p{p}-{seq:05}")
                    })
                    .collect();
                let partition = ((b + p) % PARTITIONS as usize) as i32;
                let idem = Idempotence {
                    producer_id: 100 + p as i64,
                    producer_epoch: 0,
                    base_sequence: sequences[partition as usize],
                };
                sequences[partition as usize] += n as i32;
                let records = idempotent_batch_of(&values, idem);
                let r = produce_retrying(&mut client, "events", partition, records).await;
                acked.lock().unwrap().push((partition, r.base_offset, values));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    let acked = acked.lock().unwrap().clone();
    let mut expected: BTreeMap<i32, BTreeMap<i64, String>> = BTreeMap::new();
    for (partition, base, values) in &acked {
        for (i, v) in values.iter().enumerate() {
            expected.entry(*partition).or_default().insert(base + i as i64, v.clone());
        }
    }
    let mut total = 0;
    for partition in 0..PARTITIONS {
        let got = consume_all(&mut client, "events", partition).await.unwrap();
        let want = expected.remove(&partition).unwrap_or_default();
        assert_eq!(got.len(), want.len(), "partition {partition}: every message, once");
        let mut last_seq: BTreeMap<String, u32> = BTreeMap::new();
        for (i, m) in got.iter().enumerate() {
            assert_eq!(m.offset, i as i64, "partition {partition}: contiguous offsets from 0");
            let v = String::from_utf8(m.value.clone().unwrap().to_vec()).unwrap();
            assert_eq!(want.get(&m.offset), Some(&v), "partition {partition} offset {}", m.offset);
            assert_eq!(m.key.as_deref(), Some(format!("k{v}").as_bytes()), "keys byte-exact");
            let (producer, seq) = v.split_once('-').unwrap();
            let seq: u32 = seq.parse().unwrap();
            if let Some(prev) = last_seq.insert(producer.to_string(), seq) {
                assert!(seq > prev, "partition {partition}: {producer}'s messages in produce order");
            }
        }
        total += got.len();
    }
    assert!(total > PRODUCERS * BATCHES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_read_back_exactly_on_a_local_directory() {
    let c = Cluster::start(3, Options::default()).await;
    let dir = c.path("objects");
    run(TestStorage::Local(dir.clone()), &c).await;
    let objects = std::fs::read_dir(dir.join("wal")).unwrap().count();
    assert!(objects > 0 && objects < PRODUCERS * BATCHES, "batches were shared in segments: {objects} objects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_read_back_exactly_on_s3() {
    let Some(s3) = S3Server::start("diskless") else { return };
    let c = Cluster::start(3, Options::default()).await;
    run(TestStorage::S3 { endpoint: s3.endpoint.clone(), bucket: "diskless".into() }, &c).await;
}
