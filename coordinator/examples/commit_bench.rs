//! CommitFile latency and throughput against a running cluster (e.g. `deploy/local/run.sh`).
//!
//! `cargo run --release -p diskless-coordinator --example commit_bench -- \
//!     [--addr 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003] [--clients 1] [--batches 64] \
//!     [--partitions 1000] [--seconds 10] [--rate 0]`
//!
//! Each client sends one CommitFile at a time (`--rate` N > 0: N commits/s in all, spread over the
//! clients, measured from the intended send time so queueing counts), `--batches` batches over
//! random partitions of a `--partitions` topic, to the nodes in turn. Prints HDR percentiles and
//! committed batch coordinates per second.

use std::time::{Duration, Instant};

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::*;
use hdrhistogram::Histogram;

struct Args {
    addrs: Vec<String>,
    clients: usize,
    batches: usize,
    partitions: i32,
    seconds: u64,
    rate: f64,
}

fn args() -> Args {
    let mut a = Args {
        addrs: vec!["127.0.0.1:7001".into(), "127.0.0.1:7002".into(), "127.0.0.1:7003".into()],
        clients: 1,
        batches: 64,
        partitions: 1000,
        seconds: 10,
        rate: 0.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{f} needs a value"));
        match f.as_str() {
            "--addr" => a.addrs = v().split(',').map(String::from).collect(),
            "--clients" => a.clients = v().parse().expect("--clients N"),
            "--batches" => a.batches = v().parse().expect("--batches N"),
            "--partitions" => a.partitions = v().parse().expect("--partitions N"),
            "--seconds" => a.seconds = v().parse().expect("--seconds N"),
            "--rate" => a.rate = v().parse().expect("--rate N"),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn request(key: String, topic: &[u8], batches: usize, partitions: i32, rng: &mut fastrand::Rng) -> CommitFileRequest {
    let batches: Vec<_> = (0..batches)
        .map(|i| commit_file_request::CommitBatch {
            magic: 2,
            request_id: i as i32,
            topic_id: topic.to_vec(),
            partition_index: rng.i32(..partitions),
            byte_offset: i as i32 * 16_384,
            size: 16_384,
            base_offset: 0,
            last_offset: 9,
            batch_max_timestamp: 0,
            timestamp_type: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            last_sequence: -1,
            is_transactional: false,
            txn_number: 0,
        })
        .collect();
    CommitFileRequest {
        object_key: key,
        object_format: 1,
        file_size: 16_384 * batches.len() as i64,
        owner_ids: vec![],
        batches,
        timeout_ms: 30_000,
        uploader_broker_id: 1,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let a = args();
    let topic = uuid::Uuid::new_v4().as_bytes().to_vec();
    let mut c0 = CoordinatorServiceClient::connect(format!("http://{}", a.addrs[0])).await?;
    let r = c0
        .create_partitions(CreatePartitionsRequest {
            topics: vec![create_partitions_request::CreatablePartitions {
                topic_id: topic.clone(),
                name: format!("bench-{}", uuid::Uuid::new_v4().simple()),
                num_partitions: a.partitions,
                configs: None,
            }],
            timeout_ms: 30_000,
        })
        .await?
        .into_inner();
    anyhow::ensure!(r.topics[0].error_code == 0, "create topic: {:?}", r.topics[0].error_message);

    let run = uuid::Uuid::new_v4().simple().to_string();
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let per_client_interval = (a.rate > 0.0).then(|| Duration::from_secs_f64(a.clients as f64 / a.rate));
    let mut tasks = vec![];
    for client in 0..a.clients {
        let addr = a.addrs[client % a.addrs.len()].clone();
        let topic = topic.clone();
        let (batches, partitions, run) = (a.batches, a.partitions, run.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = CoordinatorServiceClient::connect(format!("http://{addr}")).await?;
            let mut h = Histogram::<u64>::new(3)?;
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15 ^ (client as u64 + 1));
            let mut next_send = Instant::now();
            let mut n = 0u64;
            while Instant::now() < deadline {
                if per_client_interval.is_some() {
                    tokio::time::sleep_until(next_send.into()).await;
                }
                let start = per_client_interval.map_or_else(Instant::now, |_| next_send);
                n += 1;
                let req = request(format!("bench/{run}/{client}/{n}"), &topic, batches, partitions, &mut rng);
                let r = c.commit_file(req).await?.into_inner();
                h.record(start.elapsed().as_micros() as u64)?;
                let bad = r.batches.iter().filter(|b| b.error_code != 0).count() as u64;
                if let Some(b) = r.batches.iter().find(|b| b.error_code != 0) {
                    if errors == 0 {
                        eprintln!("client {client}: first refusal: code {} {:?}", b.error_code, b.error_message);
                    }
                }
                ok += r.batches.len() as u64 - bad;
                errors += bad;
                if let Some(iv) = per_client_interval {
                    next_send += iv;
                }
            }
            anyhow::Ok((h, ok, errors, n))
        }));
    }
    let mut all = Histogram::<u64>::new(3)?;
    let (mut ok, mut errors, mut commits) = (0, 0, 0);
    for t in tasks {
        let (h, o, e, n) = t.await??;
        all.add(h)?;
        ok += o;
        errors += e;
        commits += n;
    }
    let secs = a.seconds as f64;
    println!(
        "CommitFile, {} batches/commit, {} partitions, {} clients{}: n={} p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms",
        a.batches,
        a.partitions,
        a.clients,
        if a.rate > 0.0 { format!(", offered {:.0} commits/s", a.rate) } else { ", saturation".into() },
        all.len(),
        all.value_at_quantile(0.5) as f64 / 1e3,
        all.value_at_quantile(0.9) as f64 / 1e3,
        all.value_at_quantile(0.99) as f64 / 1e3,
        all.value_at_quantile(0.999) as f64 / 1e3,
        all.max() as f64 / 1e3,
    );
    println!(
        "throughput: {:.0} commits/s, {:.0} batch coordinates/s; {} batches refused",
        commits as f64 / secs,
        ok as f64 / secs,
        errors
    );
    Ok(())
}
