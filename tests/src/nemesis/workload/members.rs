//! KIP-848 consumer-group members (`group.protocol=consumer`): each heartbeats the group's
//! coordinator (ConsumerGroupHeartbeat v1, the `uniform` assignor, reporting what it owns, as
//! librdkafka does), and for each partition it owns reads on from the group's committed offset
//! (OffsetFetch when the partition is newly assigned) and commits its position with its member
//! epoch (OffsetCommit v9), one request at a time, as a consumer with manual commits. A partition
//! it is told to give up is given up at the next heartbeat, after its last commit was answered.
//! OffsetCommit and OffsetFetch are recorded; the checker asks that no committed offset goes back.
//! It must not judge results: it records them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{decode, kafka_client, Ctx, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, Res};
use crate::nemesis::kafka_client::KafkaClient;
use crate::nemesis::rng::Rng;

/// The KIP-848 group every member of a run belongs to.
pub const GROUP: &str = "nemesis-kip848";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// One member, until the workload stops (it leaves the group then).
pub async fn member(ctx: Arc<Ctx>, process: u32, mut rng: Rng) {
    let Some(topic) = ctx.topics.first().cloned() else { return };
    let member_id = format!("nemesis-member-{process}-{}", rng.below(1 << 30));
    let brokers = ctx.system.brokers.len();
    let mut kafka: Vec<Option<KafkaClient>> = (0..brokers).map(|_| None).collect();
    let mut epoch = 0;
    let mut coordinator = rng.below(brokers);
    // Owned partition → position (None: not read yet: the committed offset is fetched first).
    let mut owned: BTreeMap<i32, Option<i64>> = BTreeMap::new();
    // Per partition, the highest offset a commit was sent with: a commit whose outcome is unknown
    // may have been applied, so none goes below it (a real consumer's position never goes back).
    let mut attempted: BTreeMap<i32, i64> = BTreeMap::new();
    let mut heartbeat_at = Instant::now();
    while !ctx.stopped() {
        if heartbeat_at <= Instant::now() {
            heartbeat_at = Instant::now() + Duration::from_millis(500);
            let full = epoch == 0;
            let req = ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(GROUP)))
                .with_member_id(s(&member_id))
                .with_member_epoch(epoch)
                .with_rebalance_timeout_ms(10_000)
                .with_subscribed_topic_names(full.then(|| vec![TopicName(s(&topic.name))]))
                .with_server_assignor(full.then(|| s("uniform")))
                .with_topic_partitions(Some(vec![consumer_group_heartbeat_request::TopicPartitions::default()
                    .with_topic_id(uuid::Uuid::from_bytes(topic.id))
                    .with_partitions(owned.keys().copied().collect())]));
            let r = match kafka_client(&ctx, &mut kafka, coordinator).await {
                Err(_) => None,
                Ok(c) => match tokio::time::timeout(REQUEST_TIMEOUT, c.call(&req, 1)).await {
                    Ok(Ok(r)) => Some(r),
                    _ => {
                        kafka[coordinator] = None;
                        None
                    }
                },
            };
            match r {
                None => coordinator = rng.below(brokers),
                Some(r) => match r.error_code {
                    0 => {
                        epoch = r.member_epoch;
                        if let Some(a) = r.assignment {
                            let now: BTreeSet<i32> = a
                                .topic_partitions
                                .iter()
                                .filter(|t| t.topic_id.into_bytes() == topic.id)
                                .flat_map(|t| t.partitions.iter().copied())
                                .collect();
                            owned.retain(|p, _| now.contains(p));
                            for p in now {
                                owned.entry(p).or_insert(None);
                            }
                        }
                    }
                    // Not the coordinator (any more), or loading: another broker.
                    14..=16 => coordinator = rng.below(brokers),
                    // Fenced or unknown: rejoin with nothing owned.
                    _ => {
                        epoch = 0;
                        owned.clear();
                    }
                },
            }
        }
        if epoch > 0 && !owned.is_empty() {
            let partitions: Vec<i32> = owned.keys().copied().collect();
            let p = partitions[rng.below(partitions.len())];
            let b = rng.below(brokers);
            let position = match owned[&p] {
                Some(o) => Some(o),
                None => fetch_committed(&ctx, &mut kafka, coordinator, process, &topic.name, p).await,
            };
            if let Some(from) = position {
                owned.insert(p, Some(from));
                let next = match kafka_client(&ctx, &mut kafka, b).await {
                    Err(_) => None,
                    Ok(c) => match tokio::time::timeout(REQUEST_TIMEOUT, c.fetch(&topic.name, p, from)).await {
                        Ok(Ok(f)) if f.error_code == 0 => {
                            decode(f.records).ok().and_then(|r| r.last().map(|r| r.0 + 1)).or(Some(from))
                        }
                        // Below the log start (DeleteRecords, retention): on from there.
                        Ok(Ok(f)) if f.error_code == 1 && f.log_start_offset > from => Some(f.log_start_offset),
                        Ok(Ok(_)) => None,
                        _ => {
                            kafka[b] = None;
                            None
                        }
                    },
                };
                if let Some(next) = next {
                    let next = next.max(attempted.get(&p).copied().unwrap_or(0));
                    attempted.insert(p, next);
                    match commit(&ctx, &mut kafka, coordinator, process, &topic.name, p, next, &member_id, epoch).await
                    {
                        Some(0) => {
                            owned.insert(p, Some(next));
                        }
                        // Not the coordinator (any more), or loading: another broker.
                        Some(14..=16) | None => coordinator = rng.below(brokers),
                        // Fenced (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): the next heartbeat says.
                        Some(_) => heartbeat_at = Instant::now(),
                    }
                }
            }
        }
        ctx.pause(Duration::from_millis(20 + rng.range(0..60))).await;
    }
    // Leave, as a closed consumer does.
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s(&member_id))
        .with_member_epoch(-1);
    if let Ok(c) = kafka_client(&ctx, &mut kafka, coordinator).await {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.call(&req, 1)).await;
    }
}

/// The group's committed offset of `partition` (OffsetFetch v9 without a member, as librdkafka
/// asks it), recorded; `None` when it could not be read. No commit yet: the log start (0).
async fn fetch_committed(
    ctx: &Ctx,
    kafka: &mut [Option<KafkaClient>],
    broker: usize,
    process: u32,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let id = ctx.history.invoke(process, Op::FetchCommitted { group: GROUP.into(), topic: topic.into(), partition });
    let req = OffsetFetchRequest::default().with_groups(vec![offset_fetch_request::OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_topics(Some(vec![offset_fetch_request::OffsetFetchRequestTopics::default()
            .with_name(TopicName(s(topic)))
            .with_partition_indexes(vec![partition])]))]);
    let outcome = match kafka_client(ctx, kafka, broker).await {
        Err(e) => Outcome::Fail(e),
        Ok(c) => match tokio::time::timeout(REQUEST_TIMEOUT, c.call(&req, 9)).await {
            Ok(Ok(r)) => {
                let g = r.groups.first();
                let p = g.and_then(|g| g.topics.first()).and_then(|t| t.partitions.first());
                match (g.map(|g| g.error_code), p) {
                    (Some(0), Some(p)) if p.error_code == 0 => Outcome::Ok(Res::Offset { offset: p.committed_offset }),
                    (code, p) => Outcome::Fail(format!("{code:?} {:?}", p.map(|p| p.error_code))),
                }
            }
            _ => {
                kafka[broker] = None;
                Outcome::Fail("no answer".into())
            }
        },
    };
    ctx.history.complete(process, id, outcome.clone());
    match outcome {
        Outcome::Ok(Res::Offset { offset }) => Some(offset.max(0)),
        _ => None,
    }
}

/// OffsetCommit v9 of `offset` with the member's epoch, to the coordinator, recorded: the
/// partition's error code (`None`: no answer).
#[allow(clippy::too_many_arguments)]
async fn commit(
    ctx: &Ctx,
    kafka: &mut [Option<KafkaClient>],
    broker: usize,
    process: u32,
    topic: &str,
    partition: i32,
    offset: i64,
    member_id: &str,
    epoch: i32,
) -> Option<i16> {
    let op = Op::CommitOffset { group: GROUP.into(), topic: topic.into(), partition, offset, epoch };
    let id = ctx.history.invoke(process, op);
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id_or_member_epoch(epoch)
        .with_member_id(s(member_id))
        .with_topics(vec![offset_commit_request::OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)])]);
    let (outcome, code) = match kafka_client(ctx, kafka, broker).await {
        Err(e) => (Outcome::Fail(e), None),
        Ok(c) => match tokio::time::timeout(REQUEST_TIMEOUT, c.call(&req, 9)).await {
            Ok(Ok(r)) => match r.topics.first().and_then(|t| t.partitions.first()).map(|p| p.error_code) {
                Some(0) => (Outcome::Ok(Res::Done), Some(0)),
                Some(code) => (Outcome::Fail(format!("{code}")), Some(code)),
                None => (Outcome::Fail("no partition in the answer".into()), None),
            },
            Ok(Err(e)) => {
                kafka[broker] = None;
                (Outcome::Unknown(format!("connection: {e:#}")), None)
            }
            Err(_) => {
                kafka[broker] = None;
                (Outcome::Unknown("no answer within the request timeout".into()), None)
            }
        },
    };
    ctx.history.complete(process, id, outcome);
    code
}
