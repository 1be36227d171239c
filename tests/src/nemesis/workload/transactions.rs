//! Transactional producers and `read_committed` consumers, over the transactional
//! topic only (the long-lived topics' checks know nothing of markers and aborted records).
//!
//! A transactional producer speaks Kafka's transaction protocol v1 as librdkafka does, or v2 as
//! Kafka 4's Java producer does (no AddPartitionsToTxn: Produce v12 adds the partition; EndTxn v5
//! answers the bumped epoch its next transaction uses from sequence 0): it finds
//! its transactional id's coordinator (FindCoordinator), gets its producer id and epoch
//! (InitProducerId, which fences an earlier session of the id and settles its open transaction),
//! then per transaction adds 1–3 partitions (AddPartitionsToTxn), produces one transactional batch
//! to each through any broker (retrying the same bytes, as an idempotent producer does), and ends
//! it (EndTxn): COMMIT when every batch was acknowledged (three times in four), else ABORT. An
//! error it cannot go on from (fenced, a batch given up on, an end not answered) makes it start
//! over with InitProducerId; a transaction it never asked to COMMIT can only be aborted. Each
//! batch is recorded as a `Produce` naming its transaction (`<transactional id>#<n>`), each end as
//! an `EndTxn`.
//!
//! A `read_committed` consumer reads random partitions of the transactional topic from where it
//! stopped, dropping control records and the records of aborted transactions as a Kafka
//! consumer's fetcher does (the answer's `aborted_transactions`, closed by the ABORT markers), and
//! records what it delivers with the answer's last stable offset. The final phase reads the topic
//! the same way. It must not judge results: it records them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{unknown_code, Ctx, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, ProducerSeq, Rec, Res, Via};
use crate::nemesis::kafka_client::{Fetched, KafkaClient};
use crate::nemesis::rng::Rng;
use crate::{transactional_batch_of, Idempotence};

/// The producers' `transaction.timeout.ms`: a transaction a stopped producer left open is aborted
/// by its coordinator this long after it began.
pub const TXN_TIMEOUT_MS: i32 = 10_000;
/// How long a producer keeps at one step (a batch, an end) before it gives up on it.
const STEP_DEADLINE: Duration = Duration::from_secs(30);

/// Codes after which a transactional producer must start over with InitProducerId: its epoch or
/// id is stale, or its transaction is not in the state it thought.
fn restart_code(code: i16) -> bool {
    matches!(code, 47 | 48 | 49 | 90)
}

/// Codes that say the coordinator is elsewhere (find it again).
fn moved_code(code: i16) -> bool {
    matches!(code, 14..=16)
}

/// A Kafka connection per broker, made on demand; `read_committed` ones for the consumers.
struct Clients {
    conns: Vec<Option<KafkaClient>>,
    read_committed: bool,
}

impl Clients {
    fn new(ctx: &Ctx, read_committed: bool) -> Clients {
        Clients { conns: (0..ctx.system.brokers.len()).map(|_| None).collect(), read_committed }
    }

    async fn get(&mut self, ctx: &Ctx, broker: usize) -> Result<&mut KafkaClient, String> {
        if self.conns[broker].is_none() {
            let connect = KafkaClient::connect(&ctx.system.brokers[broker].kafka_addr);
            let c = tokio::time::timeout(REQUEST_TIMEOUT, connect)
                .await
                .map_err(|_| "connect: no answer".to_string())?
                .map_err(|e| format!("connect: {e:#}"))?;
            self.conns[broker] = Some(if self.read_committed { c.read_committed() } else { c });
        }
        Ok(self.conns[broker].as_mut().expect("just connected"))
    }

    /// Runs `f` on broker `broker`'s connection within the request timeout; a connection that
    /// failed or did not answer is dropped (the next call connects again).
    async fn call<T>(
        &mut self,
        ctx: &Ctx,
        broker: usize,
        f: impl for<'c> FnOnce(&'c mut KafkaClient) -> futures_util::future::BoxFuture<'c, anyhow::Result<T>>,
    ) -> Result<T, String> {
        let client = self.get(ctx, broker).await?;
        match tokio::time::timeout(REQUEST_TIMEOUT, f(client)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.conns[broker] = None;
                Err(format!("connection: {e:#}"))
            }
            Err(_) => {
                self.conns[broker] = None;
                Err("no answer within the request timeout".into())
            }
        }
    }
}

/// One transactional producer (transactional id `nemesis-tx-<process>`), of transactions v1 or
/// v2 (half of them each, drawn from the seed).
pub async fn txn_producer(ctx: Arc<Ctx>, process: u32, mut rng: Rng) {
    let Some(topic) = ctx.txn_topic.clone() else { return };
    let id = format!("nemesis-tx-{process}");
    let v2 = rng.chance(0.5);
    let brokers = ctx.system.brokers.len();
    let mut clients = Clients::new(&ctx, false);
    let mut coordinator: Option<usize> = None;
    let mut producer: Option<(i64, i16)> = None;
    let mut seqs: HashMap<i32, i32> = HashMap::new();
    let mut n = 0u64;
    while !ctx.stopped() {
        let Some(c) = coordinator else {
            coordinator = find_coordinator(&ctx, &mut clients, &id, &mut rng).await;
            if coordinator.is_none() {
                ctx.pause(Duration::from_millis(200)).await;
            }
            continue;
        };
        let Some(p) = producer else {
            let txid = id.clone();
            let init = clients
                .call(&ctx, c, |k| Box::pin(async move { k.init_transactional_id(&txid, TXN_TIMEOUT_MS).await }))
                .await;
            match init {
                Ok((0, pid, epoch)) => {
                    producer = Some((pid, epoch));
                    seqs.clear();
                }
                Ok((code, ..)) => {
                    if moved_code(code) {
                        coordinator = None;
                    }
                    ctx.pause(Duration::from_millis(100 + rng.range(0..200))).await;
                }
                Err(_) => {
                    coordinator = None;
                    ctx.pause(Duration::from_millis(100 + rng.range(0..200))).await;
                }
            }
            continue;
        };
        n += 1;
        let tag = format!("{id}#{n}");
        let mut partitions: Vec<i32> = (0..topic.partitions).collect();
        rng.shuffle(&mut partitions);
        partitions.truncate(1 + rng.below(3.min(topic.partitions as usize)));
        partitions.sort_unstable();

        // AddPartitionsToTxn, retried while the answer says to (v2: Produce adds them).
        let deadline = Instant::now() + STEP_DEADLINE;
        let added = if v2 {
            Some(true)
        } else {
            loop {
                let (c, name, txid) = (coordinator.unwrap_or(c), topic.name.clone(), id.clone());
                let parts = partitions.clone();
                let r = clients
                    .call(&ctx, c, |k| Box::pin(async move { k.add_partitions_to_txn(&txid, p, &name, &parts).await }))
                    .await;
                match r {
                    Ok(0) => break Some(true),
                    Ok(code) if restart_code(code) => break None,
                    Ok(code) if moved_code(code) => {
                        coordinator = find_coordinator(&ctx, &mut clients, &id, &mut rng).await
                    }
                    // CONCURRENT_TRANSACTIONS and the like: again.
                    Ok(_) => {}
                    // Maybe added: the transaction is ended (aborted) below either way.
                    Err(_) => coordinator = find_coordinator(&ctx, &mut clients, &id, &mut rng).await,
                }
                if Instant::now() > deadline || ctx.stopped() {
                    break Some(false);
                }
                ctx.pause(Duration::from_millis(50 + rng.range(0..200))).await;
            }
        };
        let Some(added) = added else {
            // Nothing was sent in this transaction: start over.
            producer = None;
            continue;
        };

        // One transactional batch per partition, through any broker.
        let mut all_acked = added;
        for &partition in partitions.iter().filter(|_| added) {
            let values: Vec<String> =
                (0..1 + rng.below(3)).map(|i| format!("{process}-t{n}-{partition}-{i}")).collect();
            let seq = *seqs.get(&partition).unwrap_or(&0);
            let idem = Idempotence { producer_id: p.0, producer_epoch: p.1, base_sequence: seq };
            let bytes = Bytes::from(transactional_batch_of(&values, idem));
            let deadline = Instant::now() + STEP_DEADLINE;
            let acked = loop {
                let broker = rng.below(brokers);
                let op = Op::Produce {
                    via: Via::Kafka,
                    target: broker as u64,
                    topic: topic.name.clone(),
                    partition,
                    values: values.clone(),
                    producer: Some(ProducerSeq { id: p.0, epoch: p.1, seq }),
                    txn: Some(tag.clone()),
                };
                let op_id = ctx.history.invoke(process, op);
                let (name, b, txid) = (topic.name.clone(), bytes.clone(), id.clone());
                let r = clients
                    .call(&ctx, broker, |k| {
                        Box::pin(async move {
                            if v2 {
                                k.produce_txn_v2(&txid, &name, partition, b).await
                            } else {
                                k.produce_as(Some(&txid), &name, partition, b).await
                            }
                        })
                    })
                    .await;
                let (outcome, done) = match r {
                    Ok((0, offset)) => (Outcome::Ok(Res::Offset { offset }), Some(true)),
                    Ok((code, _)) if unknown_code(i32::from(code)) => {
                        (Outcome::Unknown(format!("error code {code}")), None)
                    }
                    // Refused (fenced, not in the transaction, out of order): the transaction is
                    // aborted.
                    Ok((code, _)) if restart_code(code) || matches!(code, 2 | 10 | 17 | 42 | 45 | 46 | 87) => {
                        (Outcome::Fail(format!("error code {code}")), Some(false))
                    }
                    Ok((code, _)) => (Outcome::Fail(format!("error code {code}")), None),
                    Err(e) => (Outcome::Unknown(e), None),
                };
                ctx.history.complete(process, op_id, outcome);
                if let Some(done) = done {
                    break done;
                }
                if Instant::now() > deadline || ctx.stopped() {
                    break false;
                }
                ctx.pause(Duration::from_millis(50 + rng.range(0..300))).await;
            };
            if !acked {
                all_acked = false;
                break;
            }
            seqs.insert(partition, seq.wrapping_add(values.len() as i32));
        }

        let commit = all_acked && rng.chance(0.75);
        let end = End { process, id: &id, producer: p, tag: &tag, commit, v2 };
        let ended = end_txn(&ctx, &mut clients, &mut coordinator, &mut rng, end).await;
        match ended {
            // Transactions v2: every end bumps the epoch, which starts at sequence 0 again.
            Some(next) if v2 => {
                producer = Some(next);
                seqs.clear();
            }
            Some(_) if all_acked => {}
            // What the producer's partitions hold is uncertain: a new epoch starts at sequence 0,
            // and InitProducerId settles the transaction if it is still open.
            _ => producer = None,
        }
        ctx.pause(Duration::from_millis(rng.range(0..50))).await;
    }
}

/// FindCoordinator of transactional id `id` through a random broker: the coordinator's index.
async fn find_coordinator(ctx: &Ctx, clients: &mut Clients, id: &str, rng: &mut Rng) -> Option<usize> {
    let broker = rng.below(ctx.system.brokers.len());
    let txid = id.to_string();
    match clients.call(ctx, broker, |k| Box::pin(async move { k.find_txn_coordinator(&txid).await })).await {
        // Broker ids are the brokers' numbers + 1.
        Ok((0, node)) => usize::try_from(node - 1).ok().filter(|&b| b < ctx.system.brokers.len()),
        _ => None,
    }
}

/// One end of a transaction to ask for.
struct End<'a> {
    process: u32,
    id: &'a str,
    producer: (i64, i16),
    tag: &'a str,
    commit: bool,
    /// EndTxn v5 (transactions v2), which answers the producer's next id and epoch.
    v2: bool,
}

/// EndTxn, retried as a client retries it (the same request, through the coordinator as found
/// again); each attempt recorded. When an attempt was answered NONE, the producer id and epoch
/// to go on with.
async fn end_txn(
    ctx: &Ctx,
    clients: &mut Clients,
    coordinator: &mut Option<usize>,
    rng: &mut Rng,
    end: End<'_>,
) -> Option<(i64, i16)> {
    let End { process, id, producer, tag, commit, v2 } = end;
    let deadline = Instant::now() + STEP_DEADLINE;
    loop {
        if coordinator.is_none() {
            *coordinator = find_coordinator(ctx, clients, id, rng).await;
        }
        if let Some(c) = *coordinator {
            let op = Op::EndTxn { via: Via::Kafka, target: c as u64, txn: tag.to_string(), commit, v2 };
            let op_id = ctx.history.invoke(process, op);
            let txid = id.to_string();
            let r = clients
                .call(ctx, c, |k| {
                    Box::pin(async move {
                        if v2 {
                            k.end_txn_v2(&txid, producer, commit).await
                        } else {
                            k.end_txn(&txid, producer, commit).await.map(|code| (code, producer.0, producer.1))
                        }
                    })
                })
                .await;
            // An end not answered NONE may still happen (a prepared end is finished by whichever
            // broker coordinates the id next): never a definite failure.
            let (outcome, next) = match r {
                Ok((0, pid, epoch)) => (Outcome::Ok(Res::Done), Some(Some((pid, epoch)))),
                Ok((code, ..)) if restart_code(code) => (Outcome::Unknown(format!("error code {code}")), Some(None)),
                Ok((code, ..)) => {
                    if moved_code(code) {
                        *coordinator = None;
                    }
                    (Outcome::Unknown(format!("error code {code}")), None)
                }
                Err(e) => {
                    *coordinator = None;
                    (Outcome::Unknown(e), None)
                }
            };
            ctx.history.complete(process, op_id, outcome);
            if let Some(done) = next {
                return done;
            }
        }
        if Instant::now() > deadline || ctx.stopped() {
            return None;
        }
        ctx.pause(Duration::from_millis(50 + rng.range(0..300))).await;
    }
}

/// One `read_committed` consumer of the transactional topic: random partitions through random
/// brokers, mostly from where it stopped, now and then from the start.
pub async fn committed_reader(ctx: Arc<Ctx>, process: u32, mut rng: Rng) {
    let Some(topic) = ctx.txn_topic.clone() else { return };
    let mut clients = Clients::new(&ctx, true);
    let mut positions: HashMap<i32, i64> = HashMap::new();
    while !ctx.stopped() {
        let partition = rng.below(topic.partitions as usize) as i32;
        let broker = rng.below(ctx.system.brokers.len());
        let offset = if rng.chance(0.05) { 0 } else { *positions.get(&partition).unwrap_or(&0) };
        let (_, next) = read_committed(&ctx, &mut clients, broker, &topic.name, partition, offset, process).await;
        if let Some(next) = next {
            positions.insert(partition, next);
        }
        ctx.pause(Duration::from_millis(20 + rng.range(0..80))).await;
    }
}

/// `read_committed` reads of the final phase, one connection per broker.
pub struct CommittedReads(Clients);

impl CommittedReads {
    pub fn new(ctx: &Ctx) -> CommittedReads {
        CommittedReads(Clients::new(ctx, true))
    }

    /// One recorded `read_committed` read (see [`read_committed`]).
    pub async fn read(
        &mut self,
        ctx: &Ctx,
        broker: usize,
        topic: &str,
        partition: i32,
        offset: i64,
        process: u32,
    ) -> (Outcome, Option<i64>) {
        read_committed(ctx, &mut self.0, broker, topic, partition, offset, process).await
    }
}

/// One `read_committed` Kafka fetch of a partition from `offset`, recorded with what a consumer
/// delivers of it; returns the outcome and the offset to read from next.
async fn read_committed(
    ctx: &Ctx,
    clients: &mut Clients,
    broker: usize,
    topic: &str,
    partition: i32,
    offset: i64,
    process: u32,
) -> (Outcome, Option<i64>) {
    let op = Op::Read {
        via: Via::Kafka,
        target: broker as u64,
        topic: topic.into(),
        partition,
        offset,
        wait_ms: 0,
        isolation: 1,
    };
    let id = ctx.history.invoke(process, op);
    let name = topic.to_string();
    let fetched: Result<Fetched, String> =
        clients.call(ctx, broker, |k| Box::pin(async move { k.fetch(&name, partition, offset).await })).await;
    let (outcome, next) = match fetched {
        Err(e) => (Outcome::Fail(e), None),
        Ok(f) if f.error_code == 1 => (Outcome::Fail("1 out of range".into()), Some(f.log_start_offset.max(0))),
        Ok(f) if f.error_code != 0 => (Outcome::Fail(format!("{}", f.error_code)), None),
        Ok(f) => match diskless_broker_shim::records::decode(f.records.clone()) {
            Err(e) => (Outcome::Fail(format!("undecodable records: {e}")), None),
            Ok(msgs) => {
                let next = msgs.last().map_or(offset, |m| m.offset + 1);
                let records = committed_only(msgs, &f.aborted);
                let res = Res::Records {
                    records,
                    high_watermark: f.high_watermark,
                    log_start: f.log_start_offset,
                    last_stable_offset: Some(f.last_stable_offset),
                };
                (Outcome::Ok(res), Some(next))
            }
        },
    };
    ctx.history.complete(process, id, outcome.clone());
    (outcome, next)
}

/// What a `read_committed` consumer delivers of fetched records (Kafka's `CompletedFetch`): no
/// control record, and no record of a transactional batch whose producer has an aborted
/// transaction begun at or before it and not yet closed by that producer's ABORT marker.
pub fn committed_only(msgs: Vec<diskless_broker_shim::records::Message>, aborted: &[(i64, i64)]) -> Vec<Rec> {
    let mut pending: Vec<(i64, i64)> = aborted.iter().map(|&(pid, first)| (first, pid)).collect();
    pending.sort_unstable();
    let mut pending = pending.into_iter().peekable();
    let mut aborting: HashSet<i64> = HashSet::new();
    let text = |b: Option<Bytes>| b.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let mut out = vec![];
    for m in msgs {
        while let Some(&(first, pid)) = pending.peek() {
            if first > m.offset {
                break;
            }
            aborting.insert(pid);
            pending.next();
        }
        if m.control {
            if m.is_abort_marker() {
                aborting.remove(&m.producer_id);
            }
            continue;
        }
        if m.transactional && aborting.contains(&m.producer_id) {
            continue;
        }
        out.push((m.offset, text(m.key), text(m.value)));
    }
    out
}

#[cfg(test)]
mod tests {
    use diskless_broker_shim::records::Message;

    use super::*;

    fn msg(offset: i64, producer_id: i64, transactional: bool, control: Option<bool>) -> Message {
        let (key, value) = match control {
            // A control record's key: version 0, type 0 (ABORT) or 1 (COMMIT).
            Some(commit) => (Some(Bytes::from(vec![0, 0, 0, u8::from(commit)])), Some(Bytes::from_static(b"m"))),
            None => (Some(Bytes::from(format!("kv{offset}"))), Some(Bytes::from(format!("v{offset}")))),
        };
        Message {
            offset,
            timestamp: 0,
            key,
            value,
            producer_id,
            transactional: transactional || control.is_some(),
            control: control.is_some(),
        }
    }

    #[test]
    fn a_read_committed_consumer_drops_aborted_transactions_and_markers_only() {
        // Producer 7 aborts [0, 1] (marker 3); producer 8 commits [2, 4] (marker 5); producer 7's
        // next transaction [6] commits (marker 7); 9 is a plain record.
        let msgs = vec![
            msg(0, 7, true, None),
            msg(1, 7, true, None),
            msg(2, 8, true, None),
            msg(3, 7, true, Some(false)),
            msg(4, 8, true, None),
            msg(5, 8, true, Some(true)),
            msg(6, 7, true, None),
            msg(7, 7, true, Some(true)),
            msg(9, -1, false, None),
        ];
        let got: Vec<i64> = committed_only(msgs, &[(7, 0)]).into_iter().map(|r| r.0).collect();
        assert_eq!(got, vec![2, 4, 6, 9]);
    }
}
