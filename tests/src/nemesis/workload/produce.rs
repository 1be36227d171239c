//! Producers, through the broker's gRPC API or its Kafka listener, idempotent or not, and how they
//! retry: what an attempt's answer means (acked, retry, unknown, fatal) and the batch's fate after
//! it. It must not judge results: it records them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::broker as b;

use super::{kafka_client, unknown_code, Ctx, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, ProducerSeq, Res, Via};
use crate::nemesis::kafka_client::KafkaClient;
use crate::nemesis::rng::Rng;
use crate::{idempotent_batch_of, Idempotence, NOT_IDEMPOTENT};

/// How long a producer keeps retrying one batch (Kafka's `delivery.timeout.ms` is 120 s).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(40);

/// How a produce attempt ended, for the retry decision.
pub(super) enum Attempt {
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
                txn: None,
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

pub(super) async fn produce_grpc(
    ctx: &Ctx,
    broker: usize,
    topic: &str,
    partition: i32,
    bytes: &Bytes,
) -> (Attempt, Outcome) {
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
