//! The data path's wake step: how soon a parked fetch is answered after the commit that fills it,
//! on the broker that committed and on another. A second broker of the same cluster and store is
//! started; one producer writes `rate` records/s (one a request, 5 in flight, acks=all) through
//! broker A, and two consumers long-poll the partition's end (`max_wait_ms` 500), one through A
//! and one through B. For each record, the delay is the time a consumer received it minus the time
//! the producer received its acknowledgement (the commit is done by then): on A, woken by its own
//! commit; on B, by the coordinators' watch stream. Negative delays (the record reached the
//! consumer before its acknowledgement reached the producer) count as 0 and are counted apart. It
//! must not share the machine with another step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use kafka_protocol::messages::*;

use super::{chrono_ms, create_topic, end_offset, fetch_request, name, LocalBroker, FETCH_V, IN_FLIGHT, PRODUCE_V};
use crate::kafka_wire::{self, call};
use crate::ours::LocalCluster;

const TOPIC: &str = "bench-wake";

/// Times in µs since the step's epoch, by record number.
type Times = Arc<Mutex<HashMap<u64, u64>>>;

/// Wake delays (µs) through the committing broker and through the other one.
pub struct Wake {
    pub records: u64,
    pub same: Histogram<u64>,
    pub other: Histogram<u64>,
    /// Records a consumer received before the producer had their acknowledgement: (same, other).
    pub before_ack: (u64, u64),
}

pub async fn wake(cluster: &LocalCluster, a: &LocalBroker, rate: f64, secs: Duration) -> anyhow::Result<Wake> {
    let b = LocalBroker::start_as(cluster, 2, Some(a.storage.clone())).await?;
    create_topic(&a.kafka, TOPIC, 1).await?;
    let epoch = Instant::now();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut readers = vec![];
    let mut received = vec![];
    for addr in [&a.kafka, &b.kafka] {
        let mut conn = kafka_wire::connect(addr).await?;
        let start = end_offset(&mut conn, TOPIC, 0).await?;
        let times: Times = Arc::default();
        readers.push(tokio::spawn(consume(conn, start, epoch, times.clone(), stop.clone())));
        received.push(times);
    }
    let acked: Times = Arc::default();
    let sent = produce(&a.kafka, rate, secs, epoch, acked.clone()).await?;
    // The consumers' last records.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = stop_tx.send(true);
    for r in readers {
        r.await.context("wake consumer")??;
    }
    let acked = acked.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut out = Wake { records: sent, same: Histogram::new(3)?, other: Histogram::new(3)?, before_ack: (0, 0) };
    for (i, times) in received.iter().enumerate() {
        let times = times.lock().unwrap_or_else(|e| e.into_inner());
        for (n, got) in times.iter() {
            let Some(ack) = acked.get(n) else { continue };
            let (h, early) =
                if i == 0 { (&mut out.same, &mut out.before_ack.0) } else { (&mut out.other, &mut out.before_ack.1) };
            if got < ack {
                *early += 1;
            }
            let _ = h.record(got.saturating_sub(*ack).max(1));
        }
    }
    drop(b);
    Ok(out)
}

/// The producer: record `n` carries `n`; its acknowledgement time goes into `acked`.
async fn produce(addr: &str, rate: f64, secs: Duration, epoch: Instant, acked: Times) -> anyhow::Result<u64> {
    let (mut tx, mut rx) = kafka_wire::connect(addr).await?;
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let numbers: Arc<Mutex<HashMap<i32, u64>>> = Arc::default();
    let answers = {
        let (numbers, in_flight) = (numbers.clone(), in_flight.clone());
        tokio::spawn(async move {
            loop {
                let (id, r): (i32, ProduceResponse) = rx.recv(PRODUCE_V).await?;
                let now = epoch.elapsed().as_micros() as u64;
                in_flight.add_permits(1);
                let n = numbers.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                let ok = r.responses.iter().flat_map(|t| &t.partition_responses).all(|p| p.error_code == 0);
                if let (true, Some(n)) = (ok, n) {
                    acked.lock().unwrap_or_else(|e| e.into_inner()).insert(n, now);
                }
            }
            #[allow(unreachable_code)]
            anyhow::Ok(())
        })
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let until = Instant::now() + secs;
    let mut n = 0u64;
    while Instant::now() < until {
        tick.tick().await;
        in_flight.acquire().await?.forget();
        let batch = diskless_broker_shim::records::encode(
            &[(None, Some(Bytes::copy_from_slice(&n.to_be_bytes())))],
            chrono_ms(),
            kafka_protocol::records::Compression::None,
            diskless_broker_shim::records::NOT_IDEMPOTENT,
        )?;
        let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
            produce_request::TopicProduceData::default().with_name(name(TOPIC)).with_partition_data(vec![
                produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch)),
            ]),
        ]);
        let id = tx.next_correlation();
        numbers.lock().unwrap_or_else(|e| e.into_inner()).insert(id, n);
        anyhow::ensure!(tx.send(&req, PRODUCE_V).await? == id, "correlation ids out of step");
        n += 1;
    }
    let drained = Instant::now() + Duration::from_secs(30);
    while in_flight.available_permits() < IN_FLIGHT && Instant::now() < drained {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    answers.abort();
    Ok(n)
}

/// A consumer long-polling from `offset`: each record's receive time by its number.
async fn consume(
    mut conn: (kafka_wire::Sender, kafka_wire::Receiver),
    mut offset: i64,
    epoch: Instant,
    times: Times,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    loop {
        let req = fetch_request(TOPIC, 0, offset, 500);
        let r = tokio::select! {
            r = call(&mut conn, &req, FETCH_V) => r?,
            _ = stop.wait_for(|&s| s) => return Ok(()),
        };
        let now = epoch.elapsed().as_micros() as u64;
        let Some(p) = r.responses.first().and_then(|t| t.partitions.first()) else { continue };
        anyhow::ensure!(p.error_code == 0, "wake fetch: error {}", p.error_code);
        let Some(records) = p.records.clone().filter(|r| !r.is_empty()) else { continue };
        let mut t = times.lock().unwrap_or_else(|e| e.into_inner());
        for m in diskless_broker_shim::records::decode(records)? {
            offset = offset.max(m.offset + 1);
            if let Some(n) = m.value.as_ref().and_then(|v| v.get(..8)).and_then(|b| b.try_into().ok()) {
                t.insert(u64::from_be_bytes(n), now);
            }
        }
    }
}
