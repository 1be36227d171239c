//! Produce throughput and end-to-end latency through a running broker shim (e.g. the one
//! `deploy/local/run.sh` starts).
//!
//! `cargo run --release -p diskless-broker-shim --example produce_bench -- [--broker 127.0.0.1:9192]
//!     [--inflight 64] [--batch-bytes 16384] [--partitions 64] [--seconds 10]`
//!
//! `--inflight` produce requests are kept outstanding (each waits for its commit, as a Kafka
//! producer with acks=all does); every batch carries `--batch-bytes` of record values. Reports the
//! latency from send to acknowledgement (HDR percentiles) and the acknowledged payload in MiB/s.

use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_broker_shim::records::{self, NOT_IDEMPOTENT};
use diskless_proto::broker::broker_service_client::BrokerServiceClient;
use diskless_proto::broker::{CreateTopicRequest, ProduceRequest};
use hdrhistogram::Histogram;
use kafka_protocol::records::Compression;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let broker: String = arg(&args, "--broker", "127.0.0.1:9192".to_string());
    let inflight: usize = arg(&args, "--inflight", 64);
    let batch_bytes: usize = arg(&args, "--batch-bytes", 16_384);
    let partitions: i32 = arg(&args, "--partitions", 64);
    let seconds: u64 = arg(&args, "--seconds", 10);

    let mut c = BrokerServiceClient::connect(format!("http://{broker}")).await?;
    let topic = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let r = c
        .create_topic(CreateTopicRequest { name: topic.clone(), partitions, retention_ms: None, retention_bytes: None })
        .await?
        .into_inner();
    anyhow::ensure!(r.error_code == 0, "create topic: {:?}", r.error_message);

    // 16 records per batch, values filling the batch size.
    let value = Bytes::from(vec![b'x'; batch_bytes / 16]);
    let recs: Vec<_> = (0..16).map(|i| (Some(Bytes::from(format!("key-{i}"))), Some(value.clone()))).collect();
    let batch = records::encode(&recs, 1_700_000_000_000, Compression::None, NOT_IDEMPOTENT)?.to_vec();
    let payload = 16 * value.len();

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = vec![];
    for t in 0..inflight {
        let mut c = c.clone();
        let (topic, batch) = (topic.clone(), batch.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new(3)?;
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut n = 0;
            while Instant::now() < deadline {
                let partition = ((t + n) % partitions as usize) as i32;
                n += 1;
                let start = Instant::now();
                let r = c
                    .produce(ProduceRequest { topic: topic.clone(), partition, records: batch.clone() })
                    .await?
                    .into_inner();
                h.record(start.elapsed().as_micros() as u64)?;
                if r.error_code == 0 {
                    ok += 1;
                } else {
                    failed += 1;
                }
            }
            anyhow::Ok((h, ok, failed))
        }));
    }
    let mut all = Histogram::<u64>::new(3)?;
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        let (h, o, f) = t.await??;
        all.add(h)?;
        ok += o;
        failed += f;
    }
    let secs = seconds as f64;
    println!(
        "produce {} B batches, {inflight} in flight, {partitions} partitions: p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        batch.len(),
        all.value_at_quantile(0.5) as f64 / 1e3,
        all.value_at_quantile(0.9) as f64 / 1e3,
        all.value_at_quantile(0.99) as f64 / 1e3,
        all.max() as f64 / 1e3,
    );
    println!(
        "throughput: {:.1} MiB/s of record values ({:.0} batches/s acknowledged, {failed} failed)",
        ok as f64 * payload as f64 / secs / (1 << 20) as f64,
        ok as f64 / secs
    );
    Ok(())
}
