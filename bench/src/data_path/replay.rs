//! The data path's replay step: `mib` MiB written to a 4-partition topic, then read from offset 0
//! by `n` consumers at once (4 MiB fetches over the 4 partitions) while the latency step's producer
//! and tail consumer run again beside them; the broker's object GETs, the reads joined to another
//! fetch's GET and the catch-up reads, from its `/metrics`. It must not share the machine with
//! another step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use kafka_protocol::messages::*;

use super::{
    broker_metric, chrono_ms, create_topic, end_offset, latency_until, name, Latency, LocalBroker, CATCH_UP_AGE_MS,
    FETCH_V, IN_FLIGHT, PRODUCE_V,
};
use crate::kafka_wire::{self, call};

pub struct Replay {
    pub mib: f64,
    pub replayers: usize,
    pub fill_secs: f64,
    pub replay_secs: f64,
    pub gets: f64,
    pub joined: f64,
    pub catch_up_gets: f64,
    pub tail: Latency,
}

const REPLAY_TOPIC: &str = "bench-replay";
const REPLAY_PARTITIONS: i32 = 4;

/// Writes `mib` MiB to the replay topic: 1 KiB records, 256 KiB batches, IN_FLIGHT requests in flight.
async fn fill(addr: &str, mib: u64) -> anyhow::Result<()> {
    create_topic(addr, REPLAY_TOPIC, REPLAY_PARTITIONS).await?;
    let (mut tx, mut rx) = kafka_wire::connect(addr).await?;
    let value = Bytes::from(vec![b'r'; 1024]);
    let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..256).map(|_| (None, Some(value.clone()))).collect();
    let batches = mib * 4;
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let answers = {
        let in_flight = in_flight.clone();
        tokio::spawn(async move {
            for _ in 0..batches {
                let (_, r): (i32, ProduceResponse) = rx.recv(PRODUCE_V).await?;
                let code = r.responses.first().and_then(|t| t.partition_responses.first()).map_or(-1, |p| p.error_code);
                anyhow::ensure!(code == 0, "replay fill: produce error {code}");
                in_flight.add_permits(1);
            }
            anyhow::Ok(())
        })
    };
    for i in 0..batches {
        in_flight.acquire().await?.forget();
        let batch = diskless_broker_shim::records::encode(
            &records,
            chrono_ms(),
            kafka_protocol::records::Compression::None,
            diskless_broker_shim::records::NOT_IDEMPOTENT,
        )?;
        let p = (i % REPLAY_PARTITIONS as u64) as i32;
        let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
            produce_request::TopicProduceData::default().with_name(name(REPLAY_TOPIC)).with_partition_data(vec![
                produce_request::PartitionProduceData::default().with_index(p).with_records(Some(batch)),
            ]),
        ]);
        tx.send(&req, PRODUCE_V).await?;
    }
    answers.await.context("replay fill answers")??;
    Ok(())
}

/// One consumer reading every partition of the replay topic from 0 to `ends`: bytes read.
async fn replay_one(addr: String, ends: Vec<i64>) -> anyhow::Result<u64> {
    let mut conn = kafka_wire::connect(&addr).await?;
    let mut offsets = vec![0i64; ends.len()];
    let mut bytes = 0u64;
    while offsets.iter().zip(&ends).any(|(o, e)| o < e) {
        let partitions = (0..ends.len())
            .filter(|&p| offsets[p] < ends[p])
            .map(|p| {
                fetch_request::FetchPartition::default()
                    .with_partition(p as i32)
                    .with_fetch_offset(offsets[p])
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect();
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(4 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic(name(REPLAY_TOPIC))
                .with_partitions(partitions)]);
        let r = call(&mut conn, &req, FETCH_V).await?;
        for p in r.responses.iter().flat_map(|t| &t.partitions) {
            anyhow::ensure!(p.error_code == 0, "replay fetch: error {}", p.error_code);
            let Some(records) = p.records.clone().filter(|r| !r.is_empty()) else { continue };
            bytes += records.len() as u64;
            let last = diskless_broker_shim::records::decode(records)?.last().map(|m| m.offset);
            if let (Some(last), Some(o)) = (last, offsets.get_mut(p.partition_index as usize)) {
                *o = (*o).max(last + 1);
            }
        }
    }
    Ok(bytes)
}

/// Fills the replay topic, then replays it with `n` consumers at once while the latency step runs
/// again beside them.
pub async fn replay(b: &LocalBroker, mib: u64, n: usize, rate: f64) -> anyhow::Result<Replay> {
    let start = Instant::now();
    fill(&b.kafka, mib).await?;
    let fill_secs = start.elapsed().as_secs_f64();
    // Old enough to be catch-up reads.
    tokio::time::sleep(Duration::from_millis(CATCH_UP_AGE_MS + 500)).await;
    let mut conn = kafka_wire::connect(&b.kafka).await?;
    let mut ends = vec![];
    for p in 0..REPLAY_PARTITIONS {
        ends.push(end_offset(&mut conn, REPLAY_TOPIC, p).await?);
    }
    let get = "diskless_broker_object_store_requests_total{operation=\"get\"}";
    let (g0, j0, c0) = (
        broker_metric(b, get).await?,
        broker_metric(b, "diskless_broker_fetch_reads_joined_total").await?,
        broker_metric(b, "diskless_broker_catch_up_reads_total").await?,
    );
    let started = Instant::now();
    let replayers: Vec<_> = (0..n).map(|_| tokio::spawn(replay_one(b.kafka.clone(), ends.clone()))).collect();
    let (done_tx, done) = tokio::sync::watch::channel(false);
    let tail = {
        let addr = b.kafka.clone();
        tokio::spawn(async move { latency_until(&addr, rate, Duration::from_secs(3600), done).await })
    };
    let mut replayed = 0u64;
    for r in replayers {
        replayed += r.await.context("replayer")??;
    }
    let replay_secs = started.elapsed().as_secs_f64();
    let _ = done_tx.send(true);
    let tail = tail.await.context("tail task")??;
    let (g1, j1, c1) = (
        broker_metric(b, get).await?,
        broker_metric(b, "diskless_broker_fetch_reads_joined_total").await?,
        broker_metric(b, "diskless_broker_catch_up_reads_total").await?,
    );
    anyhow::ensure!(replayed > 0, "the replay read nothing");
    Ok(Replay {
        mib: replayed as f64 / (1 << 20) as f64,
        replayers: n,
        fill_secs,
        replay_secs,
        gets: g1 - g0,
        joined: j1 - j0,
        catch_up_gets: c1 - c0,
        tail,
    })
}
