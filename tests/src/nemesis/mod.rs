//! A Jepsen-style fault suite: a nemesis injects faults into a real cluster (coordinator nodes,
//! brokers, object store) while a workload produces, consumes and reads strictly; everything is
//! recorded in a history, which a checker judges after every fault is healed.
//!
//! ```text
//!  rng(seed) ─┬─▶ faults (nemesis) ──kill/stop/cut/failpoints──▶ system (nodes, brokers, proxies, store)
//!             └─▶ workload (producers, consumers, strict readers, admin) ──ops──▶ system
//!                      │ invoke / ok / fail / info          faults: start / heal │
//!                      └────────────────────────▶ history (JSON lines) ◀────────┘
//!  heal all ─▶ settle (availability, final reads, digests, objects) ─▶ checker ─▶ report
//! ```
//!
//! Used by the short seeded run in `cargo test` (`tests/tests/cluster/faults/t90_nemesis.rs`) and by the
//! `nemesis` binary for long runs (`tests/nemesis.sh`). This module owns the run's sequence; each
//! concept lives in its own file: `rng`, `history`, `system` (processes), `proxy`, `faults`,
//! `workload`, `kafka_client`, `settle`, `checker`, `report`.

pub mod checker;
#[cfg(test)]
mod checker_test;
pub mod faults;
pub mod history;
pub mod kafka_client;
pub mod proxy;
pub mod report;
pub mod rng;
pub mod settle;
pub mod system;
pub mod workload;

use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::broker::CreateTopicRequest;

use checker::Anomaly;
use faults::{Kind, Nemesis};
use history::{History, Op, Outcome, Res, Via};
use rng::Rng;
use system::{Shape, System};
use workload::{Ctx, Mix, Topic};

/// How long after the workload stops (every fault healed) each tail consumer must have read
/// every acknowledged record: more than the availability bound, as recovery comes first.
pub const TAIL_BOUND: Duration = Duration::from_secs(60);

/// `retention.bytes` of the last long-lived topic: a partition keeps about this much (the
/// workload writes some hundreds of KiB per partition in a short run).
pub const RETENTION_BYTES: i64 = 32 << 10;

/// The process number topic creation at setup is recorded under.
pub const SETUP: u32 = u32::MAX - 1;

/// What a run does.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    /// The fault phase lasts at least this long...
    pub duration: Duration,
    /// ... and until this many faults were injected (at most twice `duration`).
    pub min_faults: usize,
    pub shape: Shape,
    pub faults: Vec<Kind>,
    pub mix: Mix,
    /// Long-lived topics and their partitions.
    pub topics: usize,
    pub partitions: i32,
    /// The last long-lived topic's `retention.bytes` (with more than one topic): the coordinators'
    /// retention moves its log start while everything else runs.
    pub retention_bytes: Option<i64>,
    /// Keep every file (history, logs, data) even when the run passes.
    pub keep: bool,
    /// The command that replays this run (for the summary).
    pub replay: String,
}

impl Config {
    /// A run of `duration` with every fault kind on a 3-node cluster with 2 brokers.
    pub fn new(seed: u64, duration: Duration) -> Config {
        Config {
            seed,
            duration,
            min_faults: 0,
            shape: Shape { nodes: 3, brokers: 2, metadata_partitions: 4, s3: false },
            faults: Kind::ALL.to_vec(),
            mix: Mix::default(),
            topics: 2,
            partitions: 4,
            retention_bytes: Some(RETENTION_BYTES),
            keep: false,
            replay: format!(
                "DISKLESS_NEMESIS_SEED={seed} cargo test -p diskless-cluster-tests --test cluster t90_nemesis::"
            ),
        }
    }
}

/// What a run found.
pub struct RunResult {
    pub summary: report::Summary,
    pub anomalies: Vec<Anomaly>,
    pub faults: usize,
    /// Where the history and every process's log and data are, if kept.
    pub kept: Option<std::path::PathBuf>,
}

/// Runs the suite once: start, faults with the workload, heal, settle, check, report.
pub async fn run(config: Config) -> anyhow::Result<RunResult> {
    eprintln!("nemesis: seed {} ({:?})", config.seed, config.shape);
    let root_rng = Rng::new(config.seed);
    let options = crate::Options {
        metadata_partitions: config.shape.metadata_partitions,
        // Small, so snapshots are built, sent and installed often.
        snapshot_after_entries: 500,
        entries_kept_after_snapshot: 50,
        leader_balance_ms: 2_000,
        retention_check_ms: 2_000,
        ..crate::Options::default()
    };
    let system = Arc::new(System::start(config.shape.clone(), options).await?);
    let history_path = system.root.join("history.jsonl");
    let history = Arc::new(History::create(&history_path)?);
    history.note(format!("seed {} shape {:?} faults {:?}", config.seed, config.shape, config.faults));

    let topics = create_topics(&system, &history, config.topics, config.partitions, config.retention_bytes).await?;
    let txn_topic = if config.mix.txn_producers + config.mix.committed_readers > 0 {
        Some(create_topic(&system, &history, TXN_TOPIC, config.partitions, None).await?)
    } else {
        None
    };
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let (tail_stop_tx, tail_stop) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(Ctx {
        history: history.clone(),
        system: system.clone(),
        topics,
        txn_topic,
        stop,
        tail_stop,
        tail_positions: Default::default(),
    });
    let (workers, tails) = spawn_workers(&ctx, &config.mix, &root_rng);

    history.note("fault phase");
    let started = Instant::now();
    let mut nemesis = Nemesis::new(system.clone(), history.clone(), root_rng.fork(0), config.faults.clone());
    nemesis.run(started + config.duration, config.min_faults, started + config.duration * 2).await;
    let fault_phase = started.elapsed();

    history.note("stopping the workload");
    let _ = stop_tx.send(true);
    for w in workers {
        // A worker ends after its current request (bounded by the request timeout).
        if tokio::time::timeout(Duration::from_secs(60), w).await.is_err() {
            history.note("a worker did not stop within 60 s");
        }
    }
    if !tails.is_empty() {
        // Every fault is healed and nothing is produced any more: the tail consumers must now
        // reach the end of every partition (the checker names any record one of them missed).
        history.note("tail phase");
        match workload::tail::caught_up(&ctx, TAIL_BOUND).await {
            Some(took) => {
                history.note(format!("tail consumers caught up {} ms after the workload stopped", took.as_millis()))
            }
            None => history.note(format!("tail consumers not caught up within {TAIL_BOUND:?} of the workload's stop")),
        }
        if config.mix.share_consumers > 0 {
            // Share consumers go on until records locked by sessions a fault ended come back
            // (the brokers' lock is 5 s) and are delivered.
            history.note("share consumers draining");
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        let _ = tail_stop_tx.send(true);
        for w in tails {
            if tokio::time::timeout(Duration::from_secs(60), w).await.is_err() {
                history.note("a tail consumer did not stop within 60 s");
            }
        }
    }
    let settled = settle::settle(&ctx).await;
    history.flush();

    let events = history.events();
    let mut anomalies = checker::check(&events);
    anomalies.extend(nemesis.anomalies.iter().cloned());
    anomalies.extend(settled.anomalies);
    anomalies.sort();
    let summary = report::summarize(&report::Facts {
        seed: config.seed,
        shape: format!(
            "{} nodes, {} brokers, {} metadata partitions, {} store",
            config.shape.nodes,
            config.shape.brokers,
            config.shape.metadata_partitions,
            if config.shape.s3 { "S3 (moto)" } else { "local directory" }
        ),
        fault_phase,
        faults: &nemesis.counts,
        events: &events,
        anomalies: &anomalies,
        recovered_in: settled.recovered_in,
        history: history_path.display().to_string(),
        replay: config.replay.clone(),
    });
    let _ = std::fs::write(system.root.join("summary.txt"), &summary.text);
    let kept = if config.keep || !anomalies.is_empty() {
        system.cluster.lock().await.keep_files();
        Some(system.root.clone())
    } else {
        None
    };
    let faults = nemesis.total();
    drop(nemesis);
    drop(ctx);
    // Stops every process (the cluster's folder goes unless kept).
    drop(Arc::try_unwrap(system).ok());
    Ok(RunResult { summary, anomalies, faults, kept })
}

/// Creates the long-lived topics through broker 0 (retrying while the cluster settles); the last
/// of several with `retention_bytes`.
async fn create_topics(
    system: &System,
    history: &History,
    n: usize,
    partitions: i32,
    retention_bytes: Option<i64>,
) -> anyhow::Result<Vec<Topic>> {
    let mut out = vec![];
    for i in 0..n {
        let retention_bytes = retention_bytes.filter(|_| n > 1 && i == n - 1);
        out.push(create_topic(system, history, &format!("nemesis-{i}"), partitions, retention_bytes).await?);
    }
    Ok(out)
}

/// The transactional workload's topic.
pub const TXN_TOPIC: &str = "nemesis-txn";

/// Creates one topic through broker 0, retrying while the cluster settles.
async fn create_topic(
    system: &System,
    history: &History,
    name: &str,
    partitions: i32,
    retention_bytes: Option<i64>,
) -> anyhow::Result<Topic> {
    let name = name.to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let op = Op::CreateTopic { via: Via::Grpc, target: 0, topic: name.clone(), partitions };
        let id = history.invoke(SETUP, op);
        // No retention by time: the workload's records carry a fixed timestamp of 2023, so
        // the default 7 days would delete everything it writes.
        let req = CreateTopicRequest { name: name.clone(), partitions, retention_ms: Some(-1), retention_bytes };
        match tokio::time::timeout(Duration::from_secs(30), system.broker(0).create_topic(req)).await {
            Ok(Ok(r)) if r.get_ref().error_code == 0 => {
                let id_bytes: [u8; 16] = r.get_ref().topic_id.as_slice().try_into()?;
                history.complete(SETUP, id, Outcome::Ok(Res::Done));
                return Ok(Topic { name, id: id_bytes, partitions });
            }
            other => {
                let e = match other {
                    Ok(Ok(r)) => format!("{} {:?}", r.get_ref().error_code, r.get_ref().error_message),
                    Ok(Err(s)) => s.to_string(),
                    Err(_) => "no answer".into(),
                };
                history.complete(SETUP, id, Outcome::Unknown(e.clone()));
                anyhow::ensure!(Instant::now() < deadline, "creating topic {name}: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

type Workers = Vec<tokio::task::JoinHandle<()>>;

/// Starts the workload: the workers that stop with the fault phase, and the tail consumers, which
/// read on until they have caught up.
fn spawn_workers(ctx: &Arc<Ctx>, mix: &Mix, rng: &Rng) -> (Workers, Workers) {
    let mut handles = vec![];
    let mut process = 0u32;
    let mut next = || {
        process += 1;
        (process, rng.fork(process as u64))
    };
    let producers = [
        (mix.grpc_producers, Via::Grpc, false),
        (mix.grpc_idempotent_producers, Via::Grpc, true),
        (mix.kafka_producers, Via::Kafka, false),
        (mix.kafka_idempotent_producers, Via::Kafka, true),
    ];
    for (count, via, idempotent) in producers {
        for _ in 0..count {
            let (p, r) = next();
            handles.push(tokio::spawn(workload::producer(ctx.clone(), p, r, via, idempotent)));
        }
    }
    for (count, via) in [(mix.consumers, Via::Grpc), (mix.kafka_consumers, Via::Kafka)] {
        for _ in 0..count {
            let (p, r) = next();
            handles.push(tokio::spawn(workload::consumer(ctx.clone(), p, r, via)));
        }
    }
    for _ in 0..mix.strict_readers {
        let (p, r) = next();
        handles.push(tokio::spawn(workload::strict_reader(ctx.clone(), p, r)));
    }
    if mix.admin {
        let (p, r) = next();
        handles.push(tokio::spawn(workload::admin(ctx.clone(), p, r)));
    }
    let mut tails = vec![];
    if mix.tail_consumers {
        for broker in 0..ctx.system.brokers.len() {
            let (p, _) = next();
            tails.push(tokio::spawn(workload::tail_consumer(ctx.clone(), p, broker)));
        }
    }
    // After the others, so the others' process numbers (and random streams) stay as they were.
    for _ in 0..mix.txn_producers {
        let (p, r) = next();
        handles.push(tokio::spawn(workload::txn_producer(ctx.clone(), p, r)));
    }
    for _ in 0..mix.committed_readers {
        let (p, r) = next();
        handles.push(tokio::spawn(workload::committed_reader(ctx.clone(), p, r)));
    }
    for _ in 0..mix.kip848_members {
        let (p, r) = next();
        handles.push(tokio::spawn(workload::kip848_member(ctx.clone(), p, r)));
    }
    // Share consumers read on through the tail phase, as the tail consumers do.
    for _ in 0..mix.share_consumers {
        let (p, r) = next();
        tails.push(tokio::spawn(workload::share_consumer(ctx.clone(), p, r)));
    }
    (handles, tails)
}
