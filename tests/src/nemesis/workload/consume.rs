//! Consumers, reading every partition mostly from where they stopped, and the recorded read (gRPC
//! Fetch or Kafka Fetch) that the admin client and the final reads use too. It must not judge
//! results: it records them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use diskless_proto::broker as b;

use super::{kafka_client, Ctx, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, Rec, Res, Via};
use crate::nemesis::kafka_client::KafkaClient;
use crate::nemesis::rng::Rng;

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
        // Mostly from where it stopped; now and then from the start again (what was read once
        // must read the same later).
        let offset = if rng.chance(0.05) { 0 } else { *positions.get(&key).unwrap_or(&0) };
        let (_, next) = read(&ctx, &mut kafka, via, broker, &topic.name, partition, offset, process).await;
        if let Some(next) = next {
            positions.insert(key, next);
        }
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
    let op = Op::Read { via, target: broker as u64, topic: topic.into(), partition, offset, wait_ms: 0, isolation: 0 };
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
                (
                    Outcome::Ok(Res::Records { records, high_watermark: hw, log_start, last_stable_offset: None }),
                    Some(next),
                )
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
