//! The data-path phase (`diskless-bench data-path`): a local 3-node cluster and one broker (the
//! bench re-executing itself as each, release build, local object store, the broker's default
//! 250 ms commit interval), measured through the Kafka protocol with light clients:
//!
//! - **latency**: one producer at `--rate` (20) records/s, acks=all, requests pipelined as
//!   librdkafka sends them (each record its own request, up to 5 in flight); produce
//!   acknowledgement and end-to-end latency (a consumer long-polling the same partition through the
//!   same broker; the record carries its send time), P50/P99/max;
//! - **throughput** (`throughput`): 4 producers writing 50 MiB/s together to 4 partitions, one
//!   consumer of them all; produce acknowledgement and end to end P50/P99, the rate reached;
//! - **wake** (`wake`): a second broker; how soon a parked fetch is answered after the commit that
//!   fills it, through the committing broker and through the other (the watch);
//! - **transactions** (`transactions`): 1 and 4 transactional producers, one transaction at a time
//!   (AddPartitionsToTxn, a Produce of transactional batches, EndTxn), against idempotent producers
//!   sending the same requests; EndTxn and transaction latency, records/s and MiB/s of each;
//! - **replay**: a fill, then 10 consumers reading it from the start beside the latency step;
//! - **idle consumers**: 0, 100 and 1,000 (`--idle`) connections each long-polling the end of an
//!   idle topic (`max_wait_ms` 500, as consumers do); FindBatches served per second by all the
//!   nodes, and the nodes' and the broker's CPU, over a window after a warm-up. The 0 row is the
//!   idle cluster each other row is compared to.
//!
//! Prints a table and writes `data-path.json` to `--out`. Figures, never thresholds. It must not
//! share the machine with another phase.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::kafka_wire::{self, call};
use crate::ours::LocalCluster;

mod moto;
mod replay;
mod throughput;
mod transactions;
mod wake;

const PRODUCE_V: i16 = 9;
const FETCH_V: i16 = 12;
const LIST_OFFSETS_V: i16 = 7;
const CREATE_TOPICS_V: i16 = 5;
/// librdkafka's `max.in.flight.requests.per.connection` with idempotence.
const IN_FLIGHT: usize = 5;
/// The broker's `fetch.catch_up_age_ms` here: data written by the replay step's fill counts as
/// old a second after it is written (30 s by default), so its replay runs under the catch-up budget.
const CATCH_UP_AGE_MS: u64 = 1_000;

#[derive(Debug, clap::Args)]
pub struct DataPathArgs {
    /// A few seconds per step: keeps the phase working (the test suite runs it).
    #[arg(long)]
    smoke: bool,
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Records per second of the latency step's producer.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Seconds of the latency step.
    #[arg(long)]
    seconds: Option<f64>,
    /// Idle long-polling consumers per step.
    #[arg(long, value_delimiter = ',')]
    idle: Option<Vec<usize>>,
    /// Seconds each idle step is measured (after a warm-up of 3 s).
    #[arg(long)]
    window: Option<f64>,
    /// MiB written, then replayed by `replayers` consumers while the latency step's producer and
    /// tail consumer run again (0: no replay step).
    #[arg(long)]
    replay_mib: Option<u64>,
    #[arg(long, default_value_t = 10)]
    replayers: usize,
    /// MiB/s the throughput step's producers write together (0: no throughput step).
    #[arg(long)]
    throughput_mib: Option<f64>,
    #[arg(long, default_value_t = 4)]
    throughput_producers: usize,
    /// Seconds of the throughput step.
    #[arg(long)]
    throughput_seconds: Option<f64>,
    /// Seconds of the wake step (0: none).
    #[arg(long)]
    wake_seconds: Option<f64>,
    /// Transactions each transactional producer of the transactions step commits, and requests
    /// each idempotent producer sends (0: no transactions step).
    #[arg(long)]
    transactions: Option<u64>,
    /// Producers of the transactions step, each count a run of its own.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    transaction_producers: Vec<usize>,
    /// The transactions step alone (the other steps skipped).
    #[arg(long)]
    only_transactions: bool,
    /// The broker's object store is a moto S3 server instead of a local directory.
    #[arg(long)]
    s3: bool,
}

/// The broker under test, stopped when dropped.
struct LocalBroker {
    child: Child,
    kafka: String,
    metrics: String,
    /// Its `[storage]` section (another broker of the same store starts with it).
    storage: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalBroker {
    /// A broker of `cluster`, its objects in `storage` (a `[storage]` section; `None`: a local
    /// directory in its own folder).
    async fn start(cluster: &LocalCluster, storage: Option<String>) -> anyhow::Result<LocalBroker> {
        Self::start_as(cluster, 1, storage).await
    }

    /// [`LocalBroker::start`] with the broker id `broker_id`.
    async fn start_as(cluster: &LocalCluster, broker_id: i32, storage: Option<String>) -> anyhow::Result<LocalBroker> {
        let dir = tempfile::Builder::new().prefix("diskless-bench-broker-").tempdir()?;
        let kafka = format!("127.0.0.1:{}", free_port()?);
        let metrics = format!("127.0.0.1:{}", free_port()?);
        let coordinators: Vec<String> = cluster.addrs.iter().map(|a| format!("{a:?}")).collect();
        let config = dir.path().join("broker.toml");
        let storage = storage.unwrap_or_else(|| {
            format!("[storage]\nkind = \"local\"\npath = {:?}\n", dir.path().join("objects").display().to_string())
        });
        std::fs::write(
            &config,
            format!(
                "broker_id = {broker_id}\nlisten = \"127.0.0.1:{}\"\ncoordinators = [{}]\nmetrics_addr = {metrics:?}\n\n{storage}\n[kafka]\nlisten = {kafka:?}\n\n[fetch]\ncatch_up_age_ms = {CATCH_UP_AGE_MS}\n",
                free_port()?,
                coordinators.join(", "),
            ),
        )?;
        let log = std::fs::File::create(dir.path().join("broker.log"))?;
        let child = Command::new(std::env::current_exe()?)
            .args(["broker", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start the broker")?;
        let b = LocalBroker { child, kafka, metrics, storage, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(&b.kafka).await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "the broker's Kafka listener did not open in 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(b)
    }
}

impl Drop for LocalBroker {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

async fn create_topic(addr: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let req = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
            .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("diskless.enable"))
                .with_value(Some(StrBytes::from_static_str("true")))]),
    ]);
    let mut conn = kafka_wire::connect(addr).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = call(&mut conn, &req, CREATE_TOPICS_V).await?;
        let code = r.topics.first().map_or(-1, |t| t.error_code);
        if code == 0 || code == 36 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "CreateTopics {topic}: error {code}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn fetch_request(topic: &str, partition: i32, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
            fetch_request::FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20),
        ])])
}

async fn end_offset(
    conn: &mut (kafka_wire::Sender, kafka_wire::Receiver),
    topic: &str,
    partition: i32,
) -> anyhow::Result<i64> {
    let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![
            list_offsets_request::ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1),
        ]),
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = call(conn, &req, LIST_OFFSETS_V).await?;
        let p = r.topics.first().and_then(|t| t.partitions.first()).context("ListOffsets answered no partition")?;
        if p.error_code == 0 {
            return Ok(p.offset);
        }
        anyhow::ensure!(Instant::now() < deadline, "ListOffsets {topic}/{partition}: error {}", p.error_code);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Produce-acknowledgement and end-to-end latencies, in µs.
struct Latency {
    ack: Histogram<u64>,
    e2e: Histogram<u64>,
    sent: u64,
    errors: u64,
}

async fn latency(addr: &str, rate: f64, secs: Duration) -> anyhow::Result<Latency> {
    latency_until(addr, rate, secs, tokio::sync::watch::channel(false).1).await
}

/// [`latency`], ending early when `done` turns true.
async fn latency_until(
    addr: &str,
    rate: f64,
    secs: Duration,
    done: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Latency> {
    const TOPIC: &str = "bench-latency";
    create_topic(addr, TOPIC, 1).await?;
    let epoch = Instant::now();
    let mut consumer = kafka_wire::connect(addr).await?;
    let start = end_offset(&mut consumer, TOPIC, 0).await?;
    let e2e = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    // The consumer: long polls from the end, each record's value its send time (µs from `epoch`).
    let reader = {
        let e2e = e2e.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let mut offset = start;
            loop {
                let req = fetch_request(TOPIC, 0, offset, 500);
                let r = tokio::select! {
                    r = call(&mut consumer, &req, FETCH_V) => r?,
                    _ = stop.wait_for(|&s| s) => return anyhow::Ok(()),
                };
                let now = epoch.elapsed().as_micros() as u64;
                let Some(p) = r.responses.first().and_then(|t| t.partitions.first()) else { continue };
                let Some(records) = p.records.clone().filter(|r| !r.is_empty()) else { continue };
                for m in diskless_broker_shim::records::decode(records)? {
                    offset = m.offset + 1;
                    let sent = m
                        .value
                        .as_ref()
                        .and_then(|v| v.get(..8))
                        .map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
                    if let Some(sent) = sent {
                        let _ = e2e.lock().unwrap_or_else(|e| e.into_inner()).record(now.saturating_sub(sent).max(1));
                    }
                }
            }
        })
    };
    // The producer: one record per request at `rate`, up to IN_FLIGHT unanswered.
    let (mut tx, mut rx) = kafka_wire::connect(addr).await?;
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let sent_at: Arc<Mutex<HashMap<i32, Instant>>> = Arc::default();
    let ack = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let acks = {
        let (sent_at, ack, in_flight, errors) = (sent_at.clone(), ack.clone(), in_flight.clone(), errors.clone());
        tokio::spawn(async move {
            loop {
                let (id, r): (i32, ProduceResponse) = rx.recv(PRODUCE_V).await?;
                let t = sent_at.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                in_flight.add_permits(1);
                let code = r.responses.first().and_then(|t| t.partition_responses.first()).map_or(-1, |p| p.error_code);
                if code != 0 {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                } else if let Some(t) = t {
                    let _ =
                        ack.lock().unwrap_or_else(|e| e.into_inner()).record((t.elapsed().as_micros() as u64).max(1));
                }
            }
            #[allow(unreachable_code)]
            anyhow::Ok(())
        })
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let until = Instant::now() + secs;
    let mut sent = 0u64;
    let padding = vec![b'x'; 100];
    while Instant::now() < until && !*done.borrow() {
        tick.tick().await;
        // The record exists from its tick: waiting for a free in-flight slot is part of its
        // latency, as a client's delivery report counts its time queued.
        let created = Instant::now();
        let mut value = (epoch.elapsed().as_micros() as u64).to_be_bytes().to_vec();
        in_flight.acquire().await?.forget();
        value.extend_from_slice(&padding);
        let batch = diskless_broker_shim::records::encode(
            &[(None, Some(Bytes::from(value)))],
            chrono_ms(),
            kafka_protocol::records::Compression::None,
            diskless_broker_shim::records::NOT_IDEMPOTENT,
        )?;
        let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
            produce_request::TopicProduceData::default().with_name(name(TOPIC)).with_partition_data(vec![
                produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch)),
            ]),
        ]);
        // Stamped before the send: the answer may come before `send` returns.
        let id = tx.next_correlation();
        sent_at.lock().unwrap_or_else(|e| e.into_inner()).insert(id, created);
        anyhow::ensure!(tx.send(&req, PRODUCE_V).await? == id, "correlation ids out of step");
        sent += 1;
    }
    // Every answer, then the consumer's last records.
    let drained = Instant::now() + Duration::from_secs(30);
    while in_flight.available_permits() < IN_FLIGHT && Instant::now() < drained {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    acks.abort();
    let _ = stop_tx.send(true);
    reader.await.context("consumer task")??;
    let ack = ack.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let e2e = e2e.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(Latency { ack, e2e, sent, errors: errors.load(std::sync::atomic::Ordering::Relaxed) })
}

/// Milliseconds since the Unix epoch (a record's CreateTime).
fn chrono_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The nodes' `/metrics` text.
async fn scrape(addr: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out.split_once("\r\n\r\n").map_or(out.clone(), |(_, b)| b.to_string()))
}

async fn find_batches_served(cluster: &LocalCluster) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for m in &cluster.metrics {
        total += scrape(m)
            .await?
            .lines()
            .filter(|l| l.starts_with("diskless_grpc_requests_total{") && l.contains("/FindBatches\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(total)
}

/// One idle step's figures.
struct Idle {
    consumers: usize,
    find_batches_per_s: f64,
    nodes_cpu: f64,
    broker_cpu: f64,
    fetches_per_s: f64,
}

async fn idle(addr: &str, cluster: &LocalCluster, broker_pid: u32, n: usize, window: Duration) -> anyhow::Result<Idle> {
    const TOPIC: &str = "bench-idle";
    const PARTITIONS: i32 = 4;
    create_topic(addr, TOPIC, PARTITIONS).await?;
    let mut ends = vec![];
    let mut conn = kafka_wire::connect(addr).await?;
    for p in 0..PARTITIONS {
        ends.push(end_offset(&mut conn, TOPIC, p).await?);
    }
    let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = vec![];
    for i in 0..n {
        let (addr, answered) = (addr.to_string(), answered.clone());
        let p = i as i32 % PARTITIONS;
        let offset = ends[p as usize];
        tasks.push(tokio::spawn(async move {
            let mut conn = kafka_wire::connect(&addr).await?;
            loop {
                call(&mut conn, &fetch_request(TOPIC, p, offset, 500), FETCH_V).await?;
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            #[allow(unreachable_code)]
            anyhow::Ok(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (f0, a0) = (find_batches_served(cluster).await?, answered.load(std::sync::atomic::Ordering::Relaxed));
    let mut pids = cluster.pids();
    pids.push(broker_pid);
    let cpu = crate::idle_cpu::measure(&pids, window).await?;
    let (f1, a1) = (find_batches_served(cluster).await?, answered.load(std::sync::atomic::Ordering::Relaxed));
    for t in &tasks {
        t.abort();
    }
    let secs = window.as_secs_f64();
    Ok(Idle {
        consumers: n,
        find_batches_per_s: (f1 - f0) / secs,
        nodes_cpu: cpu[..cpu.len() - 1].iter().sum(),
        broker_cpu: cpu[cpu.len() - 1],
        fetches_per_s: (a1 - a0) as f64 / secs,
    })
}

/// A broker metric's value (the sum of its series).
async fn broker_metric(b: &LocalBroker, name: &str) -> anyhow::Result<f64> {
    let text = scrape(&b.metrics).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// P50, P99 and max of `h` (µs) in ms, as JSON.
fn latency_json(h: &Histogram<u64>) -> serde_json::Value {
    serde_json::json!({"p50": ms(h, 0.5), "p99": ms(h, 0.99), "max": h.max() as f64 / 1000.0})
}

const MIB: f64 = (1 << 20) as f64;

/// The transactions step's tables: latencies, then throughput against the idempotent producers.
fn transactions_table(runs: &[transactions::Run]) -> String {
    let mut t = format!(
        "\ntransactions: {} KiB batches ({} records of {} B) for each of 4 partitions a request, acks=all; \
         transactional: AddPartitionsToTxn, one Produce, EndTxn(commit), one transaction at a time a producer\n\
         | producers | figure | P50 ms | P99 ms | max ms |\n| ---: | --- | ---: | ---: | ---: |\n",
        transactions::RECORDS * transactions::RECORD_BYTES / 1024,
        transactions::RECORDS,
        transactions::RECORD_BYTES
    );
    for r in runs {
        let mut rows = vec![
            ("AddPartitionsToTxn".to_string(), &r.txn.add_partitions),
            ("transactional Produce".to_string(), &r.txn.produce),
            ("EndTxn".to_string(), &r.txn.end_txn),
            ("whole transaction".to_string(), &r.txn.whole),
        ];
        for i in &r.idem {
            rows.push((format!("idempotent Produce, {} in flight", i.in_flight), &i.ack));
        }
        for (label, h) in rows {
            t.push_str(&format!(
                "| {} | {label} | {:.1} | {:.1} | {:.1} |\n",
                r.producers,
                ms(h, 0.5),
                ms(h, 0.99),
                h.max() as f64 / 1000.0
            ));
        }
    }
    t.push_str(
        "\n| producers | producer | requests | seconds | records/s | MiB/s | transactional / this | errors (retries) |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in runs {
        let x = &r.txn;
        let txn_rate = x.bytes as f64 / x.seconds;
        t.push_str(&format!(
            "| {} | transactional | {} | {:.1} | {:.0} | {:.2} | 1.00 | 0 ({}) |\n",
            r.producers,
            x.transactions,
            x.seconds,
            x.records as f64 / x.seconds,
            txn_rate / MIB,
            x.retries
        ));
        for i in &r.idem {
            let rate = i.bytes as f64 / i.seconds;
            t.push_str(&format!(
                "| {} | idempotent, {} in flight | {} | {:.1} | {:.0} | {:.2} | {:.2} | {} |\n",
                r.producers,
                i.in_flight,
                i.requests,
                i.seconds,
                i.records as f64 / i.seconds,
                rate / MIB,
                txn_rate / rate.max(1e-9),
                i.errors
            ));
        }
    }
    t
}

fn transactions_json(runs: &[transactions::Run]) -> serde_json::Value {
    serde_json::json!({
        "records_per_batch": transactions::RECORDS,
        "record_bytes": transactions::RECORD_BYTES,
        "partitions": 4,
        "runs": runs.iter().map(|r| {
            let x = &r.txn;
            let txn_rate = x.bytes as f64 / x.seconds;
            serde_json::json!({
                "producers": r.producers,
                "transactional": {
                    "transactions": x.transactions,
                    "records": x.records,
                    "seconds": x.seconds,
                    "records_per_s": x.records as f64 / x.seconds,
                    "mib_per_s": txn_rate / MIB,
                    "retries": x.retries,
                    "add_partitions_ms": latency_json(&x.add_partitions),
                    "produce_ms": latency_json(&x.produce),
                    "end_txn_ms": latency_json(&x.end_txn),
                    "transaction_ms": latency_json(&x.whole),
                },
                "idempotent": r.idem.iter().map(|i| {
                    let rate = i.bytes as f64 / i.seconds;
                    serde_json::json!({
                        "in_flight": i.in_flight,
                        "requests": i.requests,
                        "records": i.records,
                        "seconds": i.seconds,
                        "records_per_s": i.records as f64 / i.seconds,
                        "mib_per_s": rate / MIB,
                        "errors": i.errors,
                        "produce_ack_ms": latency_json(&i.ack),
                        "transactional_over_idempotent": txn_rate / rate.max(1e-9),
                    })
                }).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
    })
}

pub async fn run(a: DataPathArgs) -> anyhow::Result<()> {
    let secs = Duration::from_secs_f64(a.seconds.unwrap_or(if a.smoke { 3.0 } else { 60.0 }));
    let window = Duration::from_secs_f64(a.window.unwrap_or(if a.smoke { 2.0 } else { 10.0 }));
    let only = a.only_transactions;
    let steps =
        if only { vec![] } else { a.idle.clone().unwrap_or(if a.smoke { vec![0, 10] } else { vec![0, 100, 1000] }) };
    std::fs::create_dir_all(&a.out)?;
    eprintln!("data path: starting a local 3-node cluster and a broker");
    let cluster = LocalCluster::start(8, None, false).await?;
    let moto = if a.s3 { Some(moto::Moto::start("bench-data-path")?) } else { None };
    let broker = LocalBroker::start(&cluster, moto.as_ref().map(|m| m.storage_toml("bench-data-path"))).await?;
    let store = if moto.is_some() { "moto S3 store" } else { "local object store" };
    let lat = if only {
        None
    } else {
        eprintln!("data path: latency, {} records/s for {} s", a.rate, secs.as_secs_f64());
        Some(latency(&broker.kafka, a.rate, secs).await?)
    };
    let wake_secs = if only { 0.0 } else { a.wake_seconds.unwrap_or(if a.smoke { 3.0 } else { 30.0 }) };
    let woke = if wake_secs > 0.0 {
        eprintln!(
            "data path: wake, {} records/s through broker 1 for {wake_secs} s, consumers on brokers 1 and 2",
            a.rate
        );
        Some(wake::wake(&cluster, &broker, a.rate, Duration::from_secs_f64(wake_secs)).await?)
    } else {
        None
    };
    let throughput_mib = if only { 0.0 } else { a.throughput_mib.unwrap_or(if a.smoke { 5.0 } else { 50.0 }) };
    let thr = if throughput_mib > 0.0 {
        let t = Duration::from_secs_f64(a.throughput_seconds.unwrap_or(if a.smoke { 3.0 } else { 30.0 }));
        eprintln!(
            "data path: throughput, {} producers writing {throughput_mib} MiB/s for {} s",
            a.throughput_producers,
            t.as_secs_f64()
        );
        Some(throughput::throughput(&broker.kafka, a.throughput_producers, throughput_mib, t).await?)
    } else {
        None
    };
    let txn_count = a.transactions.unwrap_or(if a.smoke { 4 } else { 25 });
    let txns = if txn_count > 0 {
        eprintln!(
            "data path: transactions, {:?} transactional producers x {txn_count} transactions, then idempotent \
             producers x {txn_count} requests",
            a.transaction_producers
        );
        Some(transactions::transactions(&broker.kafka, &a.transaction_producers, txn_count).await?)
    } else {
        None
    };
    let replay_mib = if only { 0 } else { a.replay_mib.unwrap_or(if a.smoke { 4 } else { 1024 }) };
    let replay = if replay_mib > 0 {
        eprintln!("data path: replay of {replay_mib} MiB by {} consumers beside the tail", a.replayers);
        Some(replay::replay(&broker, replay_mib, a.replayers, a.rate).await?)
    } else {
        None
    };
    let mut idles = vec![];
    for &n in &steps {
        eprintln!("data path: {n} idle long-polling consumers, {} s window", window.as_secs_f64());
        idles.push(idle(&broker.kafka, &cluster, broker.child.id(), n, window).await?);
    }
    let mut table = format!("Data path: one broker, a local 3-node cluster, {store}, 250 ms commit interval\n");
    if let Some(lat) = &lat {
        table.push_str(&format!(
            "\nlatency at {} records/s (acks=all, {} in flight), {} sent, {} errors\n\
             | figure | P50 ms | P99 ms | max ms |\n| --- | ---: | ---: | ---: |\n",
            a.rate, IN_FLIGHT, lat.sent, lat.errors
        ));
        for (label, h) in [("produce acknowledgement", &lat.ack), ("end to end", &lat.e2e)] {
            table.push_str(&format!(
                "| {label} | {:.1} | {:.1} | {:.1} |\n",
                ms(h, 0.5),
                ms(h, 0.99),
                h.max() as f64 / 1000.0
            ));
        }
    }
    if let Some(w) = &woke {
        table.push_str(&format!(
            "\nwake: a parked fetch answered after the commit that fills it ({} records through broker 1; \
             delay = the consumer's receive time - the producer's acknowledgement time)\n\
             | consumer through | P50 ms | P99 ms | max ms | received before the ack |\n| --- | ---: | ---: | ---: | ---: |\n",
            w.records
        ));
        for (label, h, early) in
            [("broker 1 (its own commit)", &w.same, w.before_ack.0), ("broker 2 (the watch)", &w.other, w.before_ack.1)]
        {
            table.push_str(&format!(
                "| {label} | {:.1} | {:.1} | {:.1} | {early} of {} |\n",
                ms(h, 0.5),
                ms(h, 0.99),
                h.max() as f64 / 1000.0,
                h.len()
            ));
        }
    }
    if let Some(t) = &thr {
        table.push_str(&format!(
            "\nthroughput: {} producers asked for {:.0} MiB/s together (4 partitions, 256 KiB batches, \
             {} in flight each, acks=all) for {:.1} s: {:.1} MiB/s acknowledged, {:.1} MiB/s consumed, {} errors\n\
             | figure | P50 ms | P99 ms | max ms |\n| --- | ---: | ---: | ---: |\n",
            t.producers,
            t.target_mib_per_s,
            IN_FLIGHT,
            t.seconds,
            t.acked_mib / t.seconds,
            t.consumed_mib / t.seconds,
            t.errors
        ));
        for (label, h) in [("produce acknowledgement", &t.ack), ("end to end", &t.e2e)] {
            table.push_str(&format!(
                "| {label} | {:.1} | {:.1} | {:.1} |\n",
                ms(h, 0.5),
                ms(h, 0.99),
                h.max() as f64 / 1000.0
            ));
        }
    }
    if let Some(runs) = &txns {
        table.push_str(&transactions_table(runs));
    }
    if !idles.is_empty() {
        table.push_str(
            "\nidle long-polling consumers (max_wait_ms 500)\n\
             | consumers | FindBatches/s (nodes) | nodes' CPU % | vs idle | broker CPU % | fetches answered/s |\n\
             | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
    }
    let base = idles.first().map_or(0.0, |i| i.nodes_cpu);
    for i in &idles {
        table.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:+.1} | {:.1} | {:.0} |\n",
            i.consumers,
            i.find_batches_per_s,
            i.nodes_cpu,
            i.nodes_cpu - base,
            i.broker_cpu,
            i.fetches_per_s
        ));
    }
    if let Some(r) = &replay {
        table.push_str(&format!(
            "\nreplay: {:.0} MiB written in {:.1} s, then read from the start by {} consumers at once \
             (catch_up_age_ms {CATCH_UP_AGE_MS}) while the latency step's producer and tail consumer run\n\
             | figure | value |\n| --- | ---: |\n\
             | replayed, all consumers | {:.0} MiB in {:.1} s ({:.1} MiB/s) |\n\
             | object GETs (catch-up) | {:.0} ({:.0}) |\n\
             | reads joined to another fetch's GET | {:.0} |\n\
             | GETs per MiB replayed | {:.2} |\n\
             | tail produce ack P50 / P99 ms | {:.1} / {:.1} |\n\
             | tail end to end P50 / P99 ms | {:.1} / {:.1} |\n",
            r.mib / r.replayers as f64,
            r.fill_secs,
            r.replayers,
            r.mib,
            r.replay_secs,
            r.mib / r.replay_secs,
            r.gets,
            r.catch_up_gets,
            r.joined,
            r.gets / r.mib.max(1e-9),
            ms(&r.tail.ack, 0.5),
            ms(&r.tail.ack, 0.99),
            ms(&r.tail.e2e, 0.5),
            ms(&r.tail.e2e, 0.99),
        ));
    }
    println!("{table}");
    std::fs::write(a.out.join("data-path.txt"), &table)?;
    let json = serde_json::json!({
        "store": if a.s3 { "s3 (moto)" } else { "local" },
        "rate": a.rate,
        "seconds": secs.as_secs_f64(),
        "produce_ack_ms": lat.as_ref().map(|l| latency_json(&l.ack)),
        "end_to_end_ms": lat.as_ref().map(|l| latency_json(&l.e2e)),
        "sent": lat.as_ref().map(|l| l.sent),
        "errors": lat.as_ref().map(|l| l.errors),
        "wake": woke.as_ref().map(|w| serde_json::json!({
            "records": w.records,
            "same_broker_ms": {"p50": ms(&w.same, 0.5), "p99": ms(&w.same, 0.99), "max": w.same.max() as f64 / 1000.0, "received": w.same.len(), "before_ack": w.before_ack.0},
            "other_broker_ms": {"p50": ms(&w.other, 0.5), "p99": ms(&w.other, 0.99), "max": w.other.max() as f64 / 1000.0, "received": w.other.len(), "before_ack": w.before_ack.1},
        })),
        "throughput": thr.as_ref().map(|t| serde_json::json!({
            "producers": t.producers,
            "target_mib_per_s": t.target_mib_per_s,
            "seconds": t.seconds,
            "acked_mib_per_s": t.acked_mib / t.seconds,
            "consumed_mib_per_s": t.consumed_mib / t.seconds,
            "errors": t.errors,
            "produce_ack_ms": {"p50": ms(&t.ack, 0.5), "p99": ms(&t.ack, 0.99), "max": t.ack.max() as f64 / 1000.0},
            "end_to_end_ms": {"p50": ms(&t.e2e, 0.5), "p99": ms(&t.e2e, 0.99), "max": t.e2e.max() as f64 / 1000.0},
        })),
        "transactions": txns.as_ref().map(|runs| transactions_json(runs)),
        "replay": replay.as_ref().map(|r| serde_json::json!({
            "replayers": r.replayers,
            "mib_replayed": r.mib,
            "fill_seconds": r.fill_secs,
            "replay_seconds": r.replay_secs,
            "gets": r.gets,
            "catch_up_gets": r.catch_up_gets,
            "joined": r.joined,
            "tail_produce_ack_ms": {"p50": ms(&r.tail.ack, 0.5), "p99": ms(&r.tail.ack, 0.99)},
            "tail_end_to_end_ms": {"p50": ms(&r.tail.e2e, 0.5), "p99": ms(&r.tail.e2e, 0.99)},
        })),
        "idle": idles.iter().map(|i| serde_json::json!({
            "consumers": i.consumers,
            "find_batches_per_s": i.find_batches_per_s,
            "nodes_cpu_percent": i.nodes_cpu,
            "broker_cpu_percent": i.broker_cpu,
            "fetches_per_s": i.fetches_per_s,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(a.out.join("data-path.json"), serde_json::to_string_pretty(&json)?)?;
    Ok(())
}
