//! The data path's throughput step: `producers` (4) producers together writing `mib_per_s` (50)
//! MiB/s to a 4-partition topic through the broker, as librdkafka producers under load send it —
//! each request one 256 KiB batch (1 KiB records) for every partition, up to 5 requests in flight
//! a connection, acks=all — and one consumer long-polling all four partitions through the same
//! broker. Produce acknowledgement (from each request's tick, so a wait for an in-flight slot is
//! in it) and end-to-end latency (every record carries its creation time), P50/P99, and the rate
//! reached. It must not share the machine with another step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use kafka_protocol::messages::*;

use super::{chrono_ms, create_topic, end_offset, name, FETCH_V, IN_FLIGHT, PRODUCE_V};
use crate::kafka_wire::{self, call};

const TOPIC: &str = "bench-throughput";
const PARTITIONS: i32 = 4;
/// Records of a batch, and their size: a 256 KiB batch per partition and request.
const RECORDS: usize = 256;
const RECORD_BYTES: usize = 1024;

/// What the step measured (latencies in µs).
pub struct Throughput {
    pub producers: usize,
    pub target_mib_per_s: f64,
    pub seconds: f64,
    pub acked_mib: f64,
    pub consumed_mib: f64,
    pub ack: Histogram<u64>,
    pub e2e: Histogram<u64>,
    pub errors: u64,
}

/// Runs the step for `secs`.
pub async fn throughput(addr: &str, producers: usize, mib_per_s: f64, secs: Duration) -> anyhow::Result<Throughput> {
    create_topic(addr, TOPIC, PARTITIONS).await?;
    let epoch = Instant::now();
    let mut conn = kafka_wire::connect(addr).await?;
    let mut starts = vec![];
    for p in 0..PARTITIONS {
        starts.push(end_offset(&mut conn, TOPIC, p).await?);
    }
    let e2e = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let consumed = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let reader = tokio::spawn(consume(conn, starts, epoch, e2e.clone(), consumed.clone(), stop));
    // Each request carries PARTITIONS batches of RECORDS × RECORD_BYTES.
    let request_mib = (PARTITIONS as usize * RECORDS * RECORD_BYTES) as f64 / (1 << 20) as f64;
    let per_producer = (mib_per_s / producers.max(1) as f64 / request_mib).max(0.1);
    let ack = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let errors = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..producers)
        .map(|_| {
            let (addr, ack, errors, acked) = (addr.to_string(), ack.clone(), errors.clone(), acked.clone());
            tokio::spawn(async move { produce(&addr, per_producer, secs, epoch, ack, errors, acked).await })
        })
        .collect();
    for t in tasks {
        t.await.context("producer task")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    // The consumer's last records.
    let drained = Instant::now() + Duration::from_secs(30);
    while consumed.load(Ordering::Relaxed) < acked.load(Ordering::Relaxed) && Instant::now() < drained {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    reader.await.context("consumer task")??;
    let ack = ack.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let e2e = e2e.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    Ok(Throughput {
        producers,
        target_mib_per_s: mib_per_s,
        seconds,
        acked_mib: mib(acked.load(Ordering::Relaxed)),
        consumed_mib: mib(consumed.load(Ordering::Relaxed)),
        ack,
        e2e,
        errors: errors.load(Ordering::Relaxed),
    })
}

/// One producer: `rate` requests a second for `secs`, up to IN_FLIGHT unanswered.
async fn produce(
    addr: &str,
    rate: f64,
    secs: Duration,
    epoch: Instant,
    ack: Arc<Mutex<Histogram<u64>>>,
    errors: Arc<AtomicU64>,
    acked: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let (mut tx, mut rx) = kafka_wire::connect(addr).await?;
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let created_at: Arc<Mutex<std::collections::HashMap<i32, (Instant, u64)>>> = Arc::default();
    let answers = {
        let (created_at, in_flight) = (created_at.clone(), in_flight.clone());
        tokio::spawn(async move {
            loop {
                let (id, r): (i32, ProduceResponse) = rx.recv(PRODUCE_V).await?;
                let sent = created_at.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                in_flight.add_permits(1);
                let ok = r.responses.iter().flat_map(|t| &t.partition_responses).all(|p| p.error_code == 0);
                match (ok, sent) {
                    (true, Some((t, bytes))) => {
                        acked.fetch_add(bytes, Ordering::Relaxed);
                        let _ = ack
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record((t.elapsed().as_micros() as u64).max(1));
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            #[allow(unreachable_code)]
            anyhow::Ok(())
        })
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let until = Instant::now() + secs;
    let padding = vec![b'x'; RECORD_BYTES - 8];
    while Instant::now() < until {
        tick.tick().await;
        let created = Instant::now();
        let stamp = (epoch.elapsed().as_micros() as u64).to_be_bytes();
        let value: Bytes = [&stamp[..], &padding[..]].concat().into();
        let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..RECORDS).map(|_| (None, Some(value.clone()))).collect();
        in_flight.acquire().await?.forget();
        let mut partitions = vec![];
        let mut bytes = 0u64;
        for p in 0..PARTITIONS {
            let batch = diskless_broker_shim::records::encode(
                &records,
                chrono_ms(),
                kafka_protocol::records::Compression::None,
                diskless_broker_shim::records::NOT_IDEMPOTENT,
            )?;
            bytes += batch.len() as u64;
            partitions.push(produce_request::PartitionProduceData::default().with_index(p).with_records(Some(batch)));
        }
        let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
            produce_request::TopicProduceData::default().with_name(name(TOPIC)).with_partition_data(partitions),
        ]);
        // Stamped before the send: the answer may come before `send` returns.
        let id = tx.next_correlation();
        created_at.lock().unwrap_or_else(|e| e.into_inner()).insert(id, (created, bytes));
        anyhow::ensure!(tx.send(&req, PRODUCE_V).await? == id, "correlation ids out of step");
    }
    let drained = Instant::now() + Duration::from_secs(30);
    while in_flight.available_permits() < IN_FLIGHT && Instant::now() < drained {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    answers.abort();
    Ok(())
}

/// The consumer: long polls over every partition from `offsets`, recording each record's end to
/// end latency and the batch bytes read, until `stop`.
async fn consume(
    mut conn: (kafka_wire::Sender, kafka_wire::Receiver),
    mut offsets: Vec<i64>,
    epoch: Instant,
    e2e: Arc<Mutex<Histogram<u64>>>,
    consumed: Arc<AtomicU64>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    loop {
        let partitions = (0..PARTITIONS)
            .map(|p| {
                fetch_request::FetchPartition::default()
                    .with_partition(p)
                    .with_fetch_offset(offsets[p as usize])
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect();
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic(name(TOPIC))
                .with_partitions(partitions)]);
        let r = tokio::select! {
            r = call(&mut conn, &req, FETCH_V) => r?,
            _ = stop.wait_for(|&s| s) => return Ok(()),
        };
        let now = epoch.elapsed().as_micros() as u64;
        let mut h = e2e.lock().unwrap_or_else(|e| e.into_inner());
        for p in r.responses.iter().flat_map(|t| &t.partitions) {
            anyhow::ensure!(p.error_code == 0, "throughput fetch: error {}", p.error_code);
            let Some(records) = p.records.clone().filter(|r| !r.is_empty()) else { continue };
            let Some(offset) = offsets.get_mut(p.partition_index as usize) else { continue };
            consumed.fetch_add(records.len() as u64, Ordering::Relaxed);
            for m in diskless_broker_shim::records::decode(records)? {
                *offset = (*offset).max(m.offset + 1);
                let created = m
                    .value
                    .as_ref()
                    .and_then(|v| v.get(..8))
                    .map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
                if let Some(created) = created {
                    let _ = h.record(now.saturating_sub(created).max(1));
                }
            }
        }
    }
}
