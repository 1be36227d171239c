//! The data path's transactions step: what a transaction costs a producer, against the
//! plain idempotent producer users run without them, from the same run. For each count of
//! producers (1 and 4), each producer writes `count` requests of one batch per partition of a
//! 4-partition topic (64 records of 1 KiB a batch, acks=all):
//!
//! - **transactional**: FindCoordinator(TRANSACTION) for its own transactional id, InitProducerId
//!   with it, then one transaction at a time, as a Kafka transactional producer has it:
//!   AddPartitionsToTxn (the 4 partitions), one Produce of transactional batches (producer id and
//!   epoch, sequences continuing across transactions per partition), EndTxn(commit). Per
//!   transaction: AddPartitionsToTxn, Produce, EndTxn and the whole transaction's latency (send to
//!   answer);
//! - **idempotent**: InitProducerId without a transactional id, then the same requests of the same
//!   batches (sequences, no transactional bit), 1 in flight (the transactional producer's shape)
//!   and 5 in flight (librdkafka's idempotent default), each producer sending as soon as a slot is
//!   free; produce acknowledgement latency (send to answer).
//!
//! Records/s and MiB/s (batch bytes acknowledged) over each side's wall time. A transactional call
//! answered with a retriable error (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS,
//! COORDINATOR_NOT_AVAILABLE) is asked again after 20 ms, as clients do, and counted; any other
//! error ends the step. It owns its topic and transactional ids; it must not share the machine
//! with another step, nor read what it wrote (the replay and throughput steps measure reads).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use diskless_broker_shim::records::{self, Idempotence};
use hdrhistogram::Histogram;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Request, StrBytes};

use super::{chrono_ms, create_topic, name, IN_FLIGHT, PRODUCE_V};
use crate::kafka_wire::{self, call};

const TOPIC: &str = "bench-transactions";
const PARTITIONS: i32 = 4;
/// Records of a batch, and their size: a 64 KiB batch per partition, 256 KiB a request.
pub const RECORDS: usize = 64;
pub const RECORD_BYTES: usize = 1024;
const FIND_COORDINATOR_V: i16 = 3;
const INIT_PRODUCER_ID_V: i16 = 4;
const ADD_PARTITIONS_V: i16 = 3;
const END_TXN_V: i16 = 3;
/// `transaction.timeout.ms` asked for (librdkafka's default).
const TXN_TIMEOUT_MS: i32 = 60_000;
/// Answers a client asks again: CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS,
/// COORDINATOR_NOT_AVAILABLE.
const RETRIABLE: [i16; 3] = [51, 14, 15];

/// The transactional producers' figures (latencies in µs).
pub struct Txn {
    pub transactions: u64,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub add_partitions: Histogram<u64>,
    pub produce: Histogram<u64>,
    pub end_txn: Histogram<u64>,
    pub whole: Histogram<u64>,
    /// Calls asked again after a retriable answer.
    pub retries: u64,
}

/// The idempotent producers' figures at one in-flight limit.
pub struct Idem {
    pub in_flight: usize,
    pub requests: u64,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub ack: Histogram<u64>,
    pub errors: u64,
}

/// One count of producers: the transactional run, then the idempotent ones.
pub struct Run {
    pub producers: usize,
    pub txn: Txn,
    pub idem: Vec<Idem>,
}

/// Runs the step: for each entry of `producers`, `count` transactions per producer, then as many
/// idempotent requests per producer at 1 and at IN_FLIGHT in flight.
pub async fn transactions(addr: &str, producers: &[usize], count: u64) -> anyhow::Result<Vec<Run>> {
    create_topic(addr, TOPIC, PARTITIONS).await?;
    let mut runs = vec![];
    for (n, &p) in producers.iter().enumerate() {
        let txn = txn_run(addr, n, p, count).await?;
        let mut idem = vec![];
        for in_flight in [1, IN_FLIGHT] {
            idem.push(idem_run(addr, p, count, in_flight).await?);
        }
        runs.push(Run { producers: p, txn, idem });
    }
    Ok(runs)
}

fn hist() -> Arc<Mutex<Histogram<u64>>> {
    Arc::new(Mutex::new(Histogram::new(3).expect("3 significant figures")))
}

fn record(h: &Mutex<Histogram<u64>>, since: Instant) {
    let _ = h.lock().unwrap_or_else(|e| e.into_inner()).record((since.elapsed().as_micros() as u64).max(1));
}

fn take(h: Arc<Mutex<Histogram<u64>>>) -> Histogram<u64> {
    h.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The records of every batch: 1 KiB values, no keys.
fn batch_records() -> Vec<(Option<Bytes>, Option<Bytes>)> {
    let value = Bytes::from(vec![b't'; RECORD_BYTES]);
    (0..RECORDS).map(|_| (None, Some(value.clone()))).collect()
}

/// One Produce of a batch per partition, sequences from `next` (advanced by the batch).
fn produce_request(
    transactional_id: Option<&str>,
    producer: (i64, i16),
    next: &mut [i32],
    recs: &[(Option<Bytes>, Option<Bytes>)],
) -> anyhow::Result<(ProduceRequest, u64)> {
    let mut partitions = vec![];
    let mut bytes = 0u64;
    for p in 0..PARTITIONS {
        let seq = &mut next[p as usize];
        let idem = Idempotence { producer_id: producer.0, producer_epoch: producer.1, base_sequence: *seq };
        let batch = match transactional_id {
            Some(_) => records::encode_transactional(recs, chrono_ms(), idem)?,
            None => records::encode(recs, chrono_ms(), kafka_protocol::records::Compression::None, idem)?,
        };
        *seq = seq.wrapping_add(recs.len() as i32);
        bytes += batch.len() as u64;
        partitions.push(produce_request::PartitionProduceData::default().with_index(p).with_records(Some(batch)));
    }
    let req = ProduceRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))))
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(partitions)]);
    Ok((req, bytes))
}

/// One call of `req` on `conn`, asked again while its answer's `code` is retriable (counted in
/// `retries`), for up to 30 s.
async fn retrying<R: Request>(
    what: &str,
    conn: &mut (kafka_wire::Sender, kafka_wire::Receiver),
    req: &R,
    version: i16,
    code: fn(&R::Response) -> i16,
    retries: &AtomicU64,
) -> anyhow::Result<R::Response> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = call(conn, req, version).await?;
        let c = code(&r);
        if c == 0 {
            return Ok(r);
        }
        anyhow::ensure!(RETRIABLE.contains(&c) && Instant::now() < deadline, "{what}: error {c}");
        retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// InitProducerId (with `transactional_id` or without): the producer id and epoch.
async fn init_producer_id(
    conn: &mut (kafka_wire::Sender, kafka_wire::Receiver),
    transactional_id: Option<&str>,
    retries: &AtomicU64,
) -> anyhow::Result<(i64, i16)> {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))))
        .with_transaction_timeout_ms(TXN_TIMEOUT_MS)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r = retrying("InitProducerId", conn, &req, INIT_PRODUCER_ID_V, |r| r.error_code, retries).await?;
    Ok((r.producer_id.0, r.producer_epoch))
}

/// AddPartitionsToTxn's first partition error, else its top-level code.
fn add_partitions_code(r: &AddPartitionsToTxnResponse) -> i16 {
    r.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| &t.results_by_partition)
        .map(|p| p.partition_error_code)
        .find(|&c| c != 0)
        .unwrap_or(r.error_code)
}

/// `producers` transactional producers, `count` transactions each, at once.
async fn txn_run(addr: &str, run: usize, producers: usize, count: u64) -> anyhow::Result<Txn> {
    let s = TxnShared {
        add: hist(),
        produce: hist(),
        end: hist(),
        whole: hist(),
        bytes: Arc::default(),
        retries: Arc::default(),
    };
    // Every producer has its id and epoch before the clock starts.
    let mut ready = vec![];
    for i in 0..producers {
        let id = format!("bench-txn-{run}-{i}");
        ready.push(txn_producer_start(addr, id, &s.retries).await?);
    }
    let started = Instant::now();
    let tasks: Vec<_> = ready
        .into_iter()
        .map(|p| {
            let s = s.clone();
            tokio::spawn(async move { txn_producer(p, count, s).await })
        })
        .collect();
    for t in tasks {
        t.await.context("transactional producer")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let transactions = producers as u64 * count;
    Ok(Txn {
        transactions,
        records: transactions * (PARTITIONS as u64 * RECORDS as u64),
        bytes: s.bytes.load(Ordering::Relaxed),
        seconds,
        add_partitions: take(s.add),
        produce: take(s.produce),
        end_txn: take(s.end),
        whole: take(s.whole),
        retries: s.retries.load(Ordering::Relaxed),
    })
}

/// What the transactional producers of a run record into.
#[derive(Clone)]
struct TxnShared {
    add: Arc<Mutex<Histogram<u64>>>,
    produce: Arc<Mutex<Histogram<u64>>>,
    end: Arc<Mutex<Histogram<u64>>>,
    whole: Arc<Mutex<Histogram<u64>>>,
    bytes: Arc<AtomicU64>,
    retries: Arc<AtomicU64>,
}

/// A transactional producer ready to begin: its id, producer id and epoch, a connection to its
/// transaction coordinator and one to the broker it produces to.
struct TxnProducer {
    id: String,
    producer: (i64, i16),
    coordinator: (kafka_wire::Sender, kafka_wire::Receiver),
    data: (kafka_wire::Sender, kafka_wire::Receiver),
}

/// FindCoordinator(TRANSACTION) for `id`, then InitProducerId with it on the coordinator.
async fn txn_producer_start(addr: &str, id: String, retries: &AtomicU64) -> anyhow::Result<TxnProducer> {
    let mut data = kafka_wire::connect(addr).await?;
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_string(id.clone())).with_key_type(1);
    let deadline = Instant::now() + Duration::from_secs(30);
    let coordinator = loop {
        let r = call(&mut data, &find, FIND_COORDINATOR_V).await?;
        if r.error_code == 0 {
            break format!("{}:{}", r.host.as_str(), r.port);
        }
        anyhow::ensure!(
            RETRIABLE.contains(&r.error_code) && Instant::now() < deadline,
            "FindCoordinator(TRANSACTION) {id}: error {}",
            r.error_code
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut coordinator = kafka_wire::connect(&coordinator).await?;
    let producer = init_producer_id(&mut coordinator, Some(&id), retries).await?;
    Ok(TxnProducer { id, producer, coordinator, data })
}

/// One producer's `count` transactions, one at a time.
async fn txn_producer(mut p: TxnProducer, count: u64, s: TxnShared) -> anyhow::Result<()> {
    let txn_id = TransactionalId(StrBytes::from_string(p.id.clone()));
    let add_req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id.clone())
        .with_v3_and_below_producer_id(ProducerId(p.producer.0))
        .with_v3_and_below_producer_epoch(p.producer.1)
        .with_v3_and_below_topics(vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
            .with_name(name(TOPIC))
            .with_partitions((0..PARTITIONS).collect())]);
    let end_req = EndTxnRequest::default()
        .with_transactional_id(txn_id)
        .with_producer_id(ProducerId(p.producer.0))
        .with_producer_epoch(p.producer.1)
        .with_committed(true);
    let recs = batch_records();
    let mut next = vec![0i32; PARTITIONS as usize];
    for _ in 0..count {
        let begin = Instant::now();
        retrying("AddPartitionsToTxn", &mut p.coordinator, &add_req, ADD_PARTITIONS_V, add_partitions_code, &s.retries)
            .await?;
        record(&s.add, begin);
        let (req, n) = produce_request(Some(&p.id), p.producer, &mut next, &recs)?;
        let sent = Instant::now();
        let r = call(&mut p.data, &req, PRODUCE_V).await?;
        let code = r.responses.iter().flat_map(|t| &t.partition_responses).map(|x| x.error_code).find(|&c| c != 0);
        anyhow::ensure!(code.is_none(), "transactional Produce {}: error {code:?}", p.id);
        record(&s.produce, sent);
        s.bytes.fetch_add(n, Ordering::Relaxed);
        let ending = Instant::now();
        retrying("EndTxn", &mut p.coordinator, &end_req, END_TXN_V, |r| r.error_code, &s.retries).await?;
        record(&s.end, ending);
        record(&s.whole, begin);
    }
    Ok(())
}

/// `producers` idempotent producers, `count` requests each at `in_flight` in flight, at once.
async fn idem_run(addr: &str, producers: usize, count: u64, in_flight: usize) -> anyhow::Result<Idem> {
    let ack = hist();
    let (bytes, errors, records) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let retries = AtomicU64::new(0);
    let mut ready = vec![];
    for _ in 0..producers {
        let mut conn = kafka_wire::connect(addr).await?;
        let producer = init_producer_id(&mut conn, None, &retries).await?;
        ready.push((conn, producer));
    }
    let started = Instant::now();
    let tasks: Vec<_> = ready
        .into_iter()
        .map(|(conn, producer)| {
            let (ack, bytes, errors, records) = (ack.clone(), bytes.clone(), errors.clone(), records.clone());
            tokio::spawn(
                async move { idem_producer(conn, producer, count, in_flight, ack, bytes, errors, records).await },
            )
        })
        .collect();
    for t in tasks {
        t.await.context("idempotent producer")??;
    }
    Ok(Idem {
        in_flight,
        requests: producers as u64 * count,
        records: records.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
        ack: take(ack),
        errors: errors.load(Ordering::Relaxed),
    })
}

/// One idempotent producer: `count` requests, up to `in_flight` unanswered, as fast as answered.
#[allow(clippy::too_many_arguments)]
async fn idem_producer(
    (mut tx, mut rx): (kafka_wire::Sender, kafka_wire::Receiver),
    producer: (i64, i16),
    count: u64,
    in_flight: usize,
    ack: Arc<Mutex<Histogram<u64>>>,
    bytes: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    records: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let created_at: Arc<Mutex<HashMap<i32, (Instant, u64)>>> = Arc::default();
    let answers = {
        let (created_at, slots) = (created_at.clone(), slots.clone());
        tokio::spawn(async move {
            for _ in 0..count {
                let (id, r): (i32, ProduceResponse) = rx.recv(PRODUCE_V).await?;
                let sent = created_at.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                slots.add_permits(1);
                let ok = r.responses.iter().flat_map(|t| &t.partition_responses).all(|p| p.error_code == 0);
                match (ok, sent) {
                    (true, Some((t, n))) => {
                        bytes.fetch_add(n, Ordering::Relaxed);
                        records.fetch_add(PARTITIONS as u64 * RECORDS as u64, Ordering::Relaxed);
                        record(&ack, t);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            anyhow::Ok(())
        })
    };
    let recs = batch_records();
    let mut next = vec![0i32; PARTITIONS as usize];
    for _ in 0..count {
        // Closed loop: latency from the send (a wait for a slot is the previous answers').
        slots.acquire().await?.forget();
        let (req, n) = produce_request(None, producer, &mut next, &recs)?;
        let created = Instant::now();
        // Stamped before the send: the answer may come before `send` returns.
        let id = tx.next_correlation();
        created_at.lock().unwrap_or_else(|e| e.into_inner()).insert(id, (created, n));
        anyhow::ensure!(tx.send(&req, PRODUCE_V).await? == id, "correlation ids out of step");
    }
    tokio::time::timeout(Duration::from_secs(60), answers)
        .await
        .context("idempotent producer: answers not in within 60 s")?
        .context("idempotent answers")??;
    Ok(())
}
