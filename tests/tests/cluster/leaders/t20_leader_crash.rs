//! Kill -9 the node leading the most metadata partitions during a stream of concurrent commits:
//! every acknowledged batch is present afterwards with the offset it was given, offsets of every
//! partition are contiguous, nothing is duplicated; the killed node comes back and catches up to a
//! byte-identical state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;

const PARTITIONS: i32 = 8;

/// An acknowledged batch: (partition, assigned base offset, records, object key, byte offset).
type Ack = (i32, i64, i64, String, i64);

async fn producer(
    c: Arc<Mutex<Vec<u64>>>,
    addrs: Vec<(u64, String)>,
    me: usize,
    stop: Instant,
    acks: Arc<Mutex<Vec<Ack>>>,
) -> (u64, u64) {
    let topic = topic_id(1);
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut seq = 0u64;
    let mut target = me % addrs.len();
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d ^ (me as u64 + 1));
    let mut next = move || rng.u64(..);
    while Instant::now() < stop {
        let (id, addr) = &addrs[target];
        if !c.lock().unwrap().contains(id) {
            target = (target + 1) % addrs.len();
            continue;
        }
        let Ok(channel) = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await
        else {
            target = (target + 1) % addrs.len();
            continue;
        };
        let mut client = diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient::new(channel);
        while Instant::now() < stop {
            seq += 1;
            let key = format!("p{me}/{seq}");
            let parts: Vec<(i32, i64)> =
                (0..1 + next() % 4).map(|_| ((next() % PARTITIONS as u64) as i32, 1 + (next() % 5) as i64)).collect();
            let req = commit_request(&key, &topic, &parts);
            match client.commit_file(req.clone()).await {
                Ok(r) => {
                    for (b, res) in req.batches.iter().zip(r.into_inner().batches) {
                        if res.error_code == 0 {
                            ok += 1;
                            let records = b.last_offset + 1;
                            acks.lock().unwrap().push((
                                b.partition_index,
                                res.assigned_base_offset,
                                records,
                                key.clone(),
                                i64::from(b.byte_offset),
                            ));
                        } else {
                            failed += 1;
                        }
                    }
                }
                Err(_) => {
                    failed += req.batches.len() as u64;
                    target = (target + 1) % addrs.len();
                    break;
                }
            }
        }
    }
    (ok, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_commits_survive_a_leader_crash_with_contiguous_offsets_and_no_duplicates() {
    let mut c = Cluster::start(3, Options::default()).await;
    let topic = topic_id(1);
    create_topic(&mut c.client(1).await, &topic, "events", PARTITIONS).await;

    let alive = Arc::new(Mutex::new(c.ids()));
    let addrs: Vec<(u64, String)> = c.ids().iter().map(|id| (*id, c.addr(*id).to_string())).collect();
    let acks = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + Duration::from_secs(8);
    let producers: Vec<_> =
        (0..4).map(|me| tokio::spawn(producer(alive.clone(), addrs.clone(), me, stop, acks.clone()))).collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let leaders = c.leaders(1).await;
    let victim = (1..=3u64).max_by_key(|id| leaders.iter().filter(|l| *l == id).count()).unwrap();
    let before = acks.lock().unwrap().len();
    alive.lock().unwrap().retain(|id| *id != victim);
    c.kill(victim);
    eprintln!("killed node {victim}, leader of {:?} metadata partitions, after {before} acknowledged batches", leaders);

    let mut totals = (0, 0);
    for p in producers {
        let (ok, failed) = p.await.unwrap();
        totals = (totals.0 + ok, totals.1 + failed);
    }
    let acks = acks.lock().unwrap().clone();
    eprintln!("acknowledged {} batches, {} not acknowledged", totals.0, totals.1);
    assert!(acks.len() > before, "commits continued after the crash");

    let survivor = c.running()[0];
    let mut client = c.client(survivor).await;
    let mut seen: BTreeSet<(String, i64)> = BTreeSet::new();
    let mut stored: BTreeMap<(i32, i64), (i64, String, i64)> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let hwm = high_watermark(&mut client, &topic, p).await.unwrap();
        let batches = all_batches(&mut client, &topic, p, vec![]).await.unwrap();
        let mut expect = 0;
        for b in &batches {
            assert_eq!(b.base_offset, expect, "partition {p}: offsets are contiguous");
            expect = b.last_offset + 1;
            assert!(
                seen.insert((b.object_key.clone(), b.byte_offset)),
                "batch {} @{} stored twice",
                b.object_key,
                b.byte_offset
            );
            stored.insert((p, b.base_offset), (b.last_offset, b.object_key.clone(), b.byte_offset));
        }
        assert_eq!(expect, hwm, "partition {p}: batches end at the high watermark");
    }
    for (p, base, records, key, at) in &acks {
        let got = stored.get(&(*p, *base));
        assert_eq!(got, Some(&(base + records - 1, key.clone(), *at)), "acknowledged batch {key}@{at} at {p}/{base}");
    }

    // The crashed node comes back, catches up, and every replica holds the same state.
    c.spawn(victim);
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let digests = c.converged_digests(Duration::from_secs(60)).await;
    for (g, per_node) in digests.iter().enumerate() {
        let distinct: BTreeSet<&String> = per_node.values().collect();
        assert_eq!(distinct.len(), 1, "metadata partition {g}: replicas differ: {per_node:?}");
        assert_eq!(per_node.len(), 3, "metadata partition {g}: every node answered");
    }
}
