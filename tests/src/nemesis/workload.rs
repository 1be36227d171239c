//! The workload: concurrent clients doing what real ones do, each operation recorded in the
//! history (invoke, then ok / fail / unknown).
//!
//! - Producers through the broker's gRPC API and through its Kafka listener, idempotent or not.
//!   They retry as real clients do: an idempotent producer re-sends the same bytes with the same
//!   sequence after any error or unknown outcome, and starts a new epoch (sequence 0) when it gives
//!   up on a batch; a plain producer re-sends only after a definite failure (after an unknown
//!   outcome it moves on: a re-send would be a legitimate duplicate).
//! - Consumers reading every partition, mostly from where they stopped, sometimes from the start.
//! - Strict readers: ListOffsets (latest, earliest) through a coordinator node and a broker.
//! - An admin client: DeleteRecords on the long-lived topics, topic create / produce / delete.
//!
//! Every value is unique (`<process>-<n>-<i>`, key `k<value>`), so the checker can tell each
//! record's origin. It must not judge results: it records them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::broker as b;
use diskless_proto::v1 as c;
use tokio::sync::watch;

use super::history::{History, Op, Outcome, ProducerSeq, Rec, Res, Via};
use super::kafka_client::KafkaClient;
use super::rng::Rng;
use super::system::System;
use crate::{idempotent_batch_of, Idempotence, NOT_IDEMPOTENT};

/// A topic the workload writes to.
#[derive(Debug, Clone)]
pub struct Topic {
    pub name: String,
    pub id: [u8; 16],
    pub partitions: i32,
}

/// How many workers of each kind.
#[derive(Debug, Clone)]
pub struct Mix {
    pub grpc_producers: usize,
    pub grpc_idempotent_producers: usize,
    pub kafka_producers: usize,
    pub kafka_idempotent_producers: usize,
    pub consumers: usize,
    pub kafka_consumers: usize,
    pub strict_readers: usize,
    pub admin: bool,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            grpc_producers: 2,
            grpc_idempotent_producers: 2,
            kafka_producers: 1,
            kafka_idempotent_producers: 1,
            consumers: 1,
            kafka_consumers: 1,
            strict_readers: 2,
            admin: true,
        }
    }
}

/// What every worker shares.
pub struct Ctx {
    pub history: Arc<History>,
    pub system: Arc<System>,
    /// The long-lived topics (never deleted).
    pub topics: Vec<Topic>,
    pub stop: watch::Receiver<bool>,
}

impl Ctx {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps, returning early when the run stops.
    async fn pause(&self, d: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    fn pick_partition(&self, rng: &mut Rng) -> (Topic, i32) {
        let t = rng.pick(&self.topics).clone();
        let p = rng.below(t.partitions as usize) as i32;
        (t, p)
    }
}

/// How long a client waits for one answer before calling the outcome unknown. Kafka's
/// `request.timeout.ms` is 30 s; a shorter one makes more unknown outcomes, which is the point.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a producer keeps retrying one batch (Kafka's `delivery.timeout.ms` is 120 s).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(40);

/// How a produce attempt ended, for the retry decision.
enum Attempt {
    Acked,
    /// Definitely not written, worth retrying.
    Retry,
    /// May have been written.
    Unknown,
    /// Definitely not written, not worth retrying (the producer's state is off).
    Fatal,
}

/// Kafka error codes a producer does not retry (the rest are retriable, or unknown outcomes).
fn fatal(code: i32) -> bool {
    matches!(code, 2 | 10 | 17 | 42 | 45 | 46 | 47 | 87)
}

/// Codes that leave a write's outcome unknown: REQUEST_TIMED_OUT, and UNKNOWN_SERVER_ERROR (a
/// server that cannot tell).
fn unknown_code(code: i32) -> bool {
    matches!(code, 7 | -1)
}

fn classify(code: i32) -> Attempt {
    match code {
        0 => Attempt::Acked,
        c if unknown_code(c) => Attempt::Unknown,
        c if fatal(c) => Attempt::Fatal,
        _ => Attempt::Retry,
    }
}

fn values_for(process: u32, n: u64, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{process}-{n}-{i}")).collect()
}

/// One producer: through the gRPC API or the Kafka listener, idempotent or not.
pub async fn producer(ctx: Arc<Ctx>, process: u32, mut rng: Rng, via: Via, idempotent: bool) {
    let brokers = ctx.system.brokers.len();
    let mut kafka: Vec<Option<KafkaClient>> = (0..brokers).map(|_| None).collect();
    // A gRPC idempotent producer picks its own id (the gRPC API has no InitProducerId): high
    // enough never to meet a broker's (broker id in bits 48..), unique per worker and seed.
    let mut grpc_pid = (1i64 << 40) + (rng.range(0..1 << 30) as i64) * 64 + process as i64;
    let mut kafka_pid: Option<(usize, i64, i16)> = None;
    let mut epoch: i16 = 0;
    let mut seqs: HashMap<(String, i32), i32> = HashMap::new();
    let mut n = 0u64;
    while !ctx.stopped() {
        n += 1;
        let (topic, partition) = ctx.pick_partition(&mut rng);
        let values = values_for(process, n, 1 + rng.below(5));
        let mut broker = rng.below(brokers);
        // The producer id and epoch this batch is sent under (fixed across its retries).
        let producer = if !idempotent {
            None
        } else if via == Via::Kafka {
            if kafka_pid.is_none() {
                kafka_pid = init_producer_id(&ctx, &mut kafka, &mut rng).await;
            }
            let Some((b, id, e)) = kafka_pid else {
                ctx.pause(Duration::from_millis(200)).await;
                continue;
            };
            broker = b;
            let seq = *seqs.get(&(topic.name.clone(), partition)).unwrap_or(&0);
            Some(ProducerSeq { id, epoch: e, seq })
        } else {
            let seq = *seqs.get(&(topic.name.clone(), partition)).unwrap_or(&0);
            Some(ProducerSeq { id: grpc_pid, epoch, seq })
        };
        let idem = producer.map_or(NOT_IDEMPOTENT, |p| Idempotence {
            producer_id: p.id,
            producer_epoch: p.epoch,
            base_sequence: p.seq,
        });
        let bytes = Bytes::from(idempotent_batch_of(&values, idem));
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        let mut give_up = false;
        loop {
            let op = Op::Produce {
                via,
                target: broker as u64,
                topic: topic.name.clone(),
                partition,
                values: values.clone(),
                producer,
            };
            let id = ctx.history.invoke(process, op);
            let (attempt, outcome) = match via {
                Via::Kafka => produce_kafka(&ctx, &mut kafka, broker, &topic.name, partition, &bytes).await,
                _ => produce_grpc(&ctx, broker, &topic.name, partition, &bytes).await,
            };
            ctx.history.complete(process, id, outcome);
            match attempt {
                Attempt::Acked => {
                    if let Some(p) = producer {
                        seqs.insert((topic.name.clone(), partition), p.seq.wrapping_add(values.len() as i32));
                    }
                    break;
                }
                Attempt::Fatal => {
                    give_up = true;
                    break;
                }
                // A plain producer does not re-send what may have been written.
                Attempt::Unknown if producer.is_none() => break,
                Attempt::Retry | Attempt::Unknown => {
                    if Instant::now() > deadline || ctx.stopped() {
                        give_up = true;
                        break;
                    }
                    ctx.pause(Duration::from_millis(50 + rng.range(0..400))).await;
                    // Real clients move to another broker when one does not answer (a Kafka
                    // idempotent producer keeps its id: any broker serves it).
                    if rng.chance(0.3) {
                        broker = rng.below(brokers);
                    }
                }
            }
        }
        if give_up && producer.is_some() {
            // The producer's last batch may or may not be in: a new epoch starts at sequence 0
            // (KIP-360); for the Kafka producer, a new id from InitProducerId.
            seqs.clear();
            if via == Via::Kafka {
                kafka_pid = None;
            } else if epoch == i16::MAX {
                grpc_pid += 1 << 36;
                epoch = 0;
            } else {
                epoch += 1;
            }
        }
        ctx.pause(Duration::from_millis(rng.range(0..30))).await;
    }
}

async fn produce_grpc(ctx: &Ctx, broker: usize, topic: &str, partition: i32, bytes: &Bytes) -> (Attempt, Outcome) {
    let mut client = ctx.system.broker(broker);
    let req = b::ProduceRequest { topic: topic.into(), partition, records: bytes.to_vec() };
    match tokio::time::timeout(REQUEST_TIMEOUT, client.produce(req)).await {
        Err(_) => (Attempt::Unknown, Outcome::Unknown("no answer within the request timeout".into())),
        // Never connected: nothing was sent.
        Ok(Err(s)) if s.message().contains("tcp connect error") => {
            (Attempt::Retry, Outcome::Fail(format!("rpc: {}", s.message())))
        }
        Ok(Err(s)) => (Attempt::Unknown, Outcome::Unknown(format!("rpc: {}", s.message()))),
        Ok(Ok(r)) => {
            let r = r.into_inner();
            let outcome = match classify(r.error_code) {
                Attempt::Acked => Outcome::Ok(Res::Offset { offset: r.base_offset }),
                Attempt::Unknown => {
                    Outcome::Unknown(format!("{} {}", r.error_code, r.error_message.unwrap_or_default()))
                }
                _ => Outcome::Fail(format!("{} {}", r.error_code, r.error_message.unwrap_or_default())),
            };
            (classify(r.error_code), outcome)
        }
    }
}

async fn kafka_client<'a>(
    ctx: &Ctx,
    clients: &'a mut [Option<KafkaClient>],
    broker: usize,
) -> Result<&'a mut KafkaClient, String> {
    if clients[broker].is_none() {
        let c = tokio::time::timeout(REQUEST_TIMEOUT, KafkaClient::connect(&ctx.system.brokers[broker].kafka_addr))
            .await
            .map_err(|_| "connect: no answer".to_string())?
            .map_err(|e| format!("connect: {e:#}"))?;
        let mut c = c;
        // As a real client does first: Metadata, to learn the partitions (and their leader: the
        // broker itself).
        if let Some(t) = ctx.topics.first() {
            match tokio::time::timeout(REQUEST_TIMEOUT, c.partitions(&t.name)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("metadata: {e:#}")),
                Err(_) => return Err("metadata: no answer".into()),
            }
        }
        clients[broker] = Some(c);
    }
    Ok(clients[broker].as_mut().expect("just connected"))
}

async fn produce_kafka(
    ctx: &Ctx,
    clients: &mut [Option<KafkaClient>],
    broker: usize,
    topic: &str,
    partition: i32,
    bytes: &Bytes,
) -> (Attempt, Outcome) {
    let client = match kafka_client(ctx, clients, broker).await {
        Ok(c) => c,
        // Nothing was sent.
        Err(e) => return (Attempt::Retry, Outcome::Fail(e)),
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, client.produce(topic, partition, bytes.clone())).await {
        Err(_) => {
            clients[broker] = None;
            (Attempt::Unknown, Outcome::Unknown("no answer within the request timeout".into()))
        }
        Ok(Err(e)) => {
            clients[broker] = None;
            (Attempt::Unknown, Outcome::Unknown(format!("connection: {e:#}")))
        }
        Ok(Ok((code, base_offset))) => {
            let code = i32::from(code);
            let outcome = match classify(code) {
                Attempt::Acked => Outcome::Ok(Res::Offset { offset: base_offset }),
                Attempt::Unknown => Outcome::Unknown(format!("error code {code}")),
                _ => Outcome::Fail(format!("error code {code}")),
            };
            (classify(code), outcome)
        }
    }
}

/// InitProducerId through some broker's Kafka listener: `(broker, id, epoch)`.
async fn init_producer_id(ctx: &Ctx, clients: &mut [Option<KafkaClient>], rng: &mut Rng) -> Option<(usize, i64, i16)> {
    let broker = rng.below(clients.len());
    let client = kafka_client(ctx, clients, broker).await.ok()?;
    match tokio::time::timeout(REQUEST_TIMEOUT, client.init_producer_id()).await {
        Ok(Ok((0, id, epoch))) => Some((broker, id, epoch)),
        _ => {
            clients[broker] = None;
            None
        }
    }
}

/// One consumer: reads a random partition from its position (sometimes from the log start),
/// through a random broker, by the gRPC API or the Kafka listener.
pub async fn consumer(ctx: Arc<Ctx>, process: u32, mut rng: Rng, via: Via) {
    let brokers = ctx.system.brokers.len();
    let mut kafka: Vec<Option<KafkaClient>> = (0..brokers).map(|_| None).collect();
    let mut positions: HashMap<(String, i32), i64> = HashMap::new();
    while !ctx.stopped() {
        let (topic, partition) = ctx.pick_partition(&mut rng);
        let broker = rng.below(brokers);
        let key = (topic.name.clone(), partition);
        let offset = if rng.chance(0.1) { 0 } else { *positions.get(&key).unwrap_or(&0) };
        let (outcome, next) = read(&ctx, &mut kafka, via, broker, &topic.name, partition, offset, process).await;
        if let Some(next) = next {
            positions.insert(key, next);
        }
        let _ = outcome;
        ctx.pause(Duration::from_millis(20 + rng.range(0..80))).await;
    }
}

/// One read, recorded: returns the outcome and the position to read from next.
#[allow(clippy::too_many_arguments)]
pub async fn read(
    ctx: &Ctx,
    kafka: &mut [Option<KafkaClient>],
    via: Via,
    broker: usize,
    topic: &str,
    partition: i32,
    offset: i64,
    process: u32,
) -> (Outcome, Option<i64>) {
    let op = Op::Read { via, target: broker as u64, topic: topic.into(), partition, offset };
    let id = ctx.history.invoke(process, op);
    let fetched: Result<(i32, String, i64, i64, Bytes), Outcome> = match via {
        Via::Kafka => match kafka_client(ctx, kafka, broker).await {
            Err(e) => Err(Outcome::Fail(e)),
            Ok(client) => match tokio::time::timeout(REQUEST_TIMEOUT, client.fetch(topic, partition, offset)).await {
                Err(_) => {
                    kafka[broker] = None;
                    Err(Outcome::Fail("no answer within the request timeout".into()))
                }
                Ok(Err(e)) => {
                    kafka[broker] = None;
                    Err(Outcome::Fail(format!("connection: {e:#}")))
                }
                Ok(Ok(f)) => {
                    Ok((i32::from(f.error_code), String::new(), f.high_watermark, f.log_start_offset, f.records))
                }
            },
        },
        _ => {
            let mut client = ctx.system.broker(broker);
            let req = b::FetchRequest { topic: topic.into(), partition, offset, max_bytes: 256 << 10 };
            match tokio::time::timeout(REQUEST_TIMEOUT, client.fetch(req)).await {
                Err(_) => Err(Outcome::Fail("no answer within the request timeout".into())),
                Ok(Err(s)) => Err(Outcome::Fail(format!("rpc: {}", s.message()))),
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    Ok((
                        r.error_code,
                        r.error_message.unwrap_or_default(),
                        r.high_watermark,
                        r.log_start_offset,
                        Bytes::from(r.records),
                    ))
                }
            }
        }
    };
    let (outcome, next) = match fetched {
        Err(o) => (o, None),
        Ok((1, msg, _, log_start, _)) => {
            // Out of range: below the log start (DeleteRecords) or past the end.
            (Outcome::Fail(format!("1 {msg}")), Some(log_start.max(0)))
        }
        Ok((code, msg, ..)) if code != 0 => (Outcome::Fail(format!("{code} {msg}")), None),
        Ok((_, _, hw, log_start, bytes)) => match decode(bytes) {
            Err(e) => (Outcome::Fail(format!("undecodable records: {e}")), None),
            Ok(records) => {
                let next = records.last().map_or(offset, |r| r.0 + 1);
                (Outcome::Ok(Res::Records { records, high_watermark: hw, log_start }), Some(next))
            }
        },
    };
    ctx.history.complete(process, id, outcome.clone());
    (outcome, next)
}

/// Records of back-to-back record batches as `(offset, key, value)`.
pub fn decode(bytes: Bytes) -> anyhow::Result<Vec<Rec>> {
    let msgs = diskless_broker_shim::records::decode(bytes)?;
    let text = |b: Option<Bytes>| b.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    Ok(msgs.into_iter().map(|m| (m.offset, text(m.key), text(m.value))).collect())
}

/// One strict reader: ListOffsets latest (mostly) or earliest, through a coordinator node, a
/// broker's gRPC API or a broker's Kafka listener.
pub async fn strict_reader(ctx: Arc<Ctx>, process: u32, mut rng: Rng) {
    let nodes = ctx.system.node_ids();
    let mut kafka: Vec<Option<KafkaClient>> = (0..ctx.system.brokers.len()).map(|_| None).collect();
    while !ctx.stopped() {
        let (topic, partition) = ctx.pick_partition(&mut rng);
        let timestamp = if rng.chance(0.2) { -2 } else { -1 };
        let broker = rng.below(ctx.system.brokers.len());
        match rng.below(3) {
            0 => {
                let node = *rng.pick(&nodes);
                list_offsets_coordinator(&ctx, process, node, &topic, partition, timestamp).await;
            }
            1 => {
                list_offsets_broker(&ctx, process, broker, &topic.name, partition, timestamp).await;
            }
            _ => {
                list_offsets_kafka(&ctx, &mut kafka, process, broker, &topic.name, partition, timestamp).await;
            }
        }
        ctx.pause(Duration::from_millis(10 + rng.range(0..40))).await;
    }
}

/// A ListOffsets through broker `broker`'s Kafka listener, recorded.
async fn list_offsets_kafka(
    ctx: &Ctx,
    kafka: &mut [Option<KafkaClient>],
    process: u32,
    broker: usize,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Outcome {
    let op = Op::ListOffsets { via: Via::Kafka, target: broker as u64, topic: topic.into(), partition, timestamp };
    let id = ctx.history.invoke(process, op);
    let outcome = match kafka_client(ctx, kafka, broker).await {
        Err(e) => Outcome::Fail(e),
        Ok(client) => {
            match tokio::time::timeout(REQUEST_TIMEOUT, client.list_offsets(topic, partition, timestamp)).await {
                Ok(Ok((0, offset))) => Outcome::Ok(Res::Offset { offset }),
                Ok(Ok((code, _))) => Outcome::Fail(format!("error code {code}")),
                Ok(Err(e)) => {
                    kafka[broker] = None;
                    Outcome::Fail(format!("connection: {e:#}"))
                }
                Err(_) => {
                    kafka[broker] = None;
                    Outcome::Fail("no answer within the request timeout".into())
                }
            }
        }
    };
    ctx.history.complete(process, id, outcome.clone());
    outcome
}

/// The admin client: every few seconds, DeleteRecords on a long-lived partition (a quarter of
/// what it retains), or a short-lived topic's life: create it, produce to it, read it back, and
/// (mostly) delete it.
pub async fn admin(ctx: Arc<Ctx>, process: u32, mut rng: Rng) {
    let mut n = 0u64;
    while !ctx.stopped() {
        ctx.pause(Duration::from_millis(500 + rng.range(0..3000))).await;
        if ctx.stopped() {
            return;
        }
        n += 1;
        let broker = rng.below(ctx.system.brokers.len());
        if rng.chance(0.5) {
            delete_records(&ctx, process, &mut rng, broker).await;
        } else {
            topic_life(&ctx, process, &mut rng, broker, n).await;
        }
    }
}

async fn delete_records(ctx: &Ctx, process: u32, rng: &mut Rng, broker: usize) {
    let (topic, partition) = ctx.pick_partition(rng);
    let bounds = (
        list_offsets_broker(ctx, process, broker, &topic.name, partition, -2).await,
        list_offsets_broker(ctx, process, broker, &topic.name, partition, -1).await,
    );
    let (Outcome::Ok(Res::Offset { offset: start }), Outcome::Ok(Res::Offset { offset: hw })) = bounds else {
        return;
    };
    let offset = start + (hw - start) / 4;
    if offset <= start {
        return;
    }
    let op = Op::DeleteRecords { via: Via::Grpc, target: broker as u64, topic: topic.name.clone(), partition, offset };
    let id = ctx.history.invoke(process, op);
    let mut client = ctx.system.broker(broker);
    let req = b::DeleteRecordsRequest { topic: topic.name.clone(), partition, offset };
    let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, client.delete_records(req)).await {
        Err(_) => Outcome::Unknown("no answer within the request timeout".into()),
        Ok(Err(s)) => Outcome::Unknown(format!("rpc: {}", s.message())),
        Ok(Ok(r)) => {
            let r = r.into_inner();
            let msg = format!("{} {}", r.error_code, r.error_message.unwrap_or_default());
            match r.error_code {
                0 => Outcome::Ok(Res::Offset { offset: r.low_watermark }),
                c if unknown_code(c) => Outcome::Unknown(msg),
                _ => Outcome::Fail(msg),
            }
        }
    };
    ctx.history.complete(process, id, outcome);
}

/// One recorded topic operation through broker `broker`'s gRPC API: `(ok, already exists)`.
async fn topic_op(ctx: &Ctx, process: u32, broker: usize, topic: &str, create: Option<i32>) -> (bool, bool) {
    let mut client = ctx.system.broker(broker);
    let (op, answer) = match create {
        Some(partitions) => {
            let op = Op::CreateTopic { via: Via::Grpc, target: broker as u64, topic: topic.into(), partitions };
            let req =
                b::CreateTopicRequest { name: topic.into(), partitions, retention_ms: None, retention_bytes: None };
            let id = ctx.history.invoke(process, op);
            let r = tokio::time::timeout(REQUEST_TIMEOUT, client.create_topic(req)).await;
            (id, r.map(|r| r.map(|r| (r.get_ref().error_code, r.get_ref().error_message.clone()))))
        }
        None => {
            let op = Op::DeleteTopic { via: Via::Grpc, target: broker as u64, topic: topic.into() };
            let id = ctx.history.invoke(process, op);
            let r = tokio::time::timeout(
                REQUEST_TIMEOUT,
                client.delete_topic(b::DeleteTopicRequest { name: topic.into() }),
            )
            .await;
            (id, r.map(|r| r.map(|r| (r.get_ref().error_code, r.get_ref().error_message.clone()))))
        }
    };
    let (outcome, ok, exists) = match answer {
        Err(_) => (Outcome::Unknown("no answer within the request timeout".into()), false, false),
        Ok(Err(s)) => (Outcome::Unknown(format!("rpc: {}", s.message())), false, false),
        Ok(Ok((0, _))) => (Outcome::Ok(Res::Done), true, false),
        Ok(Ok((code, msg))) => {
            let msg = format!("{code} {}", msg.unwrap_or_default());
            if unknown_code(code) {
                (Outcome::Unknown(msg), false, false)
            } else {
                (Outcome::Fail(msg), false, code == 36)
            }
        }
    };
    ctx.history.complete(process, op, outcome);
    (ok, exists)
}

/// One recorded ListTopics through `node` (names, ids, partition counts).
pub async fn list_topics(ctx: &Ctx, process: u32, node: u64) -> Option<Vec<Topic>> {
    let id = ctx.history.invoke(process, Op::ListTopics { via: Via::Coordinator, target: node });
    let mut client = ctx.system.coordinator(node);
    let req = c::ListTopicsRequest { names: vec![], timeout_ms: 10_000 };
    let (outcome, topics) = match tokio::time::timeout(REQUEST_TIMEOUT, client.list_topics(req)).await {
        Ok(Ok(r)) => {
            let topics: Vec<Topic> = r
                .into_inner()
                .topics
                .into_iter()
                .filter_map(|t| {
                    Some(Topic {
                        id: t.topic_id.as_slice().try_into().ok()?,
                        name: t.name,
                        partitions: t.num_partitions,
                    })
                })
                .collect();
            let res = Res::Topics {
                names: topics.iter().map(|t| t.name.clone()).collect(),
                ids: topics.iter().map(|t| super::settle::hex(&t.id)).collect(),
                partitions: topics.iter().map(|t| t.partitions).collect(),
            };
            (Outcome::Ok(res), Some(topics))
        }
        Ok(Err(s)) => (Outcome::Fail(s.message().to_string()), None),
        Err(_) => (Outcome::Fail("no answer within the request timeout".into()), None),
    };
    ctx.history.complete(process, id, outcome);
    topics
}

async fn topic_life(ctx: &Ctx, process: u32, rng: &mut Rng, broker: usize, n: u64) {
    let name = format!("churn-{process}-{n}");
    let partitions = 1 + rng.below(3) as i32;
    // Created (or found created by an earlier attempt whose answer was lost), retried a while.
    let mut created = false;
    for _ in 0..5 {
        let (ok, exists) = topic_op(ctx, process, broker, &name, Some(partitions)).await;
        if ok || exists {
            created = true;
            break;
        }
        ctx.pause(Duration::from_millis(300)).await;
    }
    if !created || ctx.stopped() {
        return;
    }
    // Learn its id (so the end can tell whether a deleted topic is gone everywhere).
    let nodes = ctx.system.node_ids();
    list_topics(ctx, process, *rng.pick(&nodes)).await;
    let mut k = 0u64;
    for p in 0..partitions {
        for _ in 0..1 + rng.below(3) {
            k += 1;
            let values = vec![format!("{process}-c{n}.{k}-0"), format!("{process}-c{n}.{k}-1")];
            let op = Op::Produce {
                via: Via::Grpc,
                target: broker as u64,
                topic: name.clone(),
                partition: p,
                values: values.clone(),
                producer: None,
            };
            let id = ctx.history.invoke(process, op);
            let bytes = Bytes::from(crate::batch_of(&values));
            let (_, outcome) = produce_grpc(ctx, broker, &name, p, &bytes).await;
            ctx.history.complete(process, id, outcome);
        }
        let mut no_kafka = vec![];
        read(ctx, &mut no_kafka, Via::Grpc, broker, &name, p, 0, process).await;
    }
    if rng.chance(0.7) {
        for _ in 0..5 {
            if topic_op(ctx, process, broker, &name, None).await.0 {
                break;
            }
            ctx.pause(Duration::from_millis(300)).await;
        }
    }
}

/// A strict ListOffsets through node `node`'s CoordinatorService, recorded.
pub async fn list_offsets_coordinator(
    ctx: &Ctx,
    process: u32,
    node: u64,
    topic: &Topic,
    partition: i32,
    timestamp: i64,
) -> Outcome {
    let op = Op::ListOffsets { via: Via::Coordinator, target: node, topic: topic.name.clone(), partition, timestamp };
    let id = ctx.history.invoke(process, op);
    let req = c::ListOffsetsRequest {
        topics: vec![c::list_offsets_request::ListOffsetsTopic {
            topic_id: topic.id.to_vec(),
            partitions: vec![c::list_offsets_request::ListOffsetsPartition { partition_index: partition, timestamp }],
        }],
        timeout_ms: 10_000,
    };
    let mut client = ctx.system.coordinator(node);
    let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, client.list_offsets(req)).await {
        Err(_) => Outcome::Fail("no answer within the request timeout".into()),
        Ok(Err(s)) => Outcome::Fail(format!("rpc: {}", s.message())),
        Ok(Ok(r)) => match r.into_inner().topics.first().and_then(|t| t.partitions.first()).cloned() {
            None => Outcome::Fail("no partition in the answer".into()),
            Some(p) if p.error_code != 0 => {
                Outcome::Fail(format!("{} {}", p.error_code, p.error_message.unwrap_or_default()))
            }
            Some(p) => Outcome::Ok(Res::Offset { offset: p.offset }),
        },
    };
    ctx.history.complete(process, id, outcome.clone());
    outcome
}

/// A strict ListOffsets through broker `broker`'s gRPC API, recorded.
pub async fn list_offsets_broker(
    ctx: &Ctx,
    process: u32,
    broker: usize,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Outcome {
    let op = Op::ListOffsets { via: Via::Grpc, target: broker as u64, topic: topic.into(), partition, timestamp };
    let id = ctx.history.invoke(process, op);
    let mut client = ctx.system.broker(broker);
    let req = b::ListOffsetsRequest { topic: topic.into(), partition, timestamp };
    let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, client.list_offsets(req)).await {
        Err(_) => Outcome::Fail("no answer within the request timeout".into()),
        Ok(Err(s)) => Outcome::Fail(format!("rpc: {}", s.message())),
        Ok(Ok(r)) => {
            let r = r.into_inner();
            if r.error_code != 0 {
                Outcome::Fail(format!("{} {}", r.error_code, r.error_message.unwrap_or_default()))
            } else {
                Outcome::Ok(Res::Offset { offset: r.offset })
            }
        }
    };
    ctx.history.complete(process, id, outcome.clone());
    outcome
}
