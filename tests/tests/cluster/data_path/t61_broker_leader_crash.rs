//! Kill -9 the coordinator node leading the most metadata partitions while producers stream through
//! a broker shim: no acknowledged batch is lost or duplicated.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;

const PARTITIONS: i32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_crash_loses_and_duplicates_no_acknowledged_batch_on_a_local_directory() {
    let mut c = Cluster::start(3, Options { leader_balance_ms: 0, ..Options::default() }).await;
    let storage = TestStorage::Local(c.path("objects"));
    run(&mut c, storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_crash_loses_and_duplicates_no_acknowledged_batch_on_s3() {
    let Some(s3) = S3Server::start("crash") else { return };
    let mut c = Cluster::start(3, Options { leader_balance_ms: 0, ..Options::default() }).await;
    run(&mut c, TestStorage::S3 { endpoint: s3.endpoint.clone(), bucket: "crash".into() }).await;
}

async fn run(c: &mut Cluster, storage: TestStorage) {
    let broker = BrokerProc::start(c, "b1", &storage, &BrokerOptions::default()).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "stream", PARTITIONS).await;

    let stop = Instant::now() + Duration::from_secs(8);
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = vec![];
    for p in 0..3usize {
        let mut client = broker.client().await;
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut sequences = [0i32; PARTITIONS as usize];
            let mut n = 0;
            while Instant::now() < stop {
                n += 1;
                let partition = ((n + p) % PARTITIONS as usize) as i32;
                let values: Vec<String> = (0..3).map(|i| format!("p{p}-{n:05}-{i}")).collect();
                let idem = Idempotence {
                    producer_id: 200 + p as i64,
                    producer_epoch: 0,
                    base_sequence: sequences[partition as usize],
                };
                sequences[partition as usize] += 3;
                let r = produce_retrying(&mut client, "stream", partition, idempotent_batch_of(&values, idem)).await;
                acked.lock().unwrap().push((partition, r.base_offset, values));
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leaders = c.leaders(1).await;
    let victim = (1..=3u64).max_by_key(|id| leaders.iter().filter(|l| *l == id).count()).unwrap();
    c.kill(victim);
    let before = acked.lock().unwrap().len();
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > before, "producing continued after the crash ({before} before, {} in all)", acked.len());

    let mut expected: BTreeMap<(i32, i64), String> = BTreeMap::new();
    for (partition, base, values) in &acked {
        for (i, v) in values.iter().enumerate() {
            expected.insert((*partition, base + i as i64), v.clone());
        }
    }
    let mut seen = BTreeSet::new();
    for partition in 0..PARTITIONS {
        let got = consume_all(&mut client, "stream", partition).await.unwrap();
        for (i, m) in got.iter().enumerate() {
            assert_eq!(m.offset, i as i64);
            let v = String::from_utf8(m.value.clone().unwrap().to_vec()).unwrap();
            assert!(seen.insert(v.clone()), "{v} stored twice");
            if let Some(want) = expected.get(&(partition, m.offset)) {
                assert_eq!(want, &v, "partition {partition} offset {}", m.offset);
            }
        }
    }
    for ((partition, offset), v) in &expected {
        assert!(seen.contains(v), "acknowledged {v} at {partition}/{offset} is missing");
    }
}
