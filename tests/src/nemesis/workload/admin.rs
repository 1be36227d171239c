//! The admin client: DeleteRecords on the long-lived topics, and short-lived topics' lives
//! (create, produce, read back, delete), with the recorded topic operations and ListTopics. It
//! must not judge results: it records them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use diskless_proto::broker as b;
use diskless_proto::v1 as c;

use super::consume::read;
use super::produce::produce_grpc;
use super::strict::list_offsets_broker;
use super::{unknown_code, Ctx, Topic, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, Res, Via};
use crate::nemesis::rng::Rng;

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
                ids: topics.iter().map(|t| crate::nemesis::settle::hex(&t.id)).collect(),
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
                txn: None,
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
