//! Strict readers: ListOffsets (latest, earliest) through a coordinator node, a broker's gRPC API
//! or a broker's Kafka listener, each recorded. It must not judge results: it records them.

use std::sync::Arc;
use std::time::Duration;

use diskless_proto::broker as b;
use diskless_proto::v1 as c;

use super::{kafka_client, Ctx, Topic, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, Res, Via};
use crate::nemesis::kafka_client::KafkaClient;
use crate::nemesis::rng::Rng;

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
        isolation_level: 0,
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
