//! Share consumers (KIP-932): members of one share group consuming the first long-lived topic
//! through random brokers with ShareFetch, each fetch carrying the ACCEPT acknowledgements of what
//! the consumer acquired before, as librdkafka's implicit acknowledgement does; share sessions per
//! broker (epoch 0 opens, a session lost to a fault opens again). They heartbeat the group now and
//! then, and go on after the workload stops until the tail phase ends, so the checker can ask that
//! every record was delivered. It must not judge results: it records them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{decode, kafka_client, Ctx, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, Res};
use crate::nemesis::kafka_client::KafkaClient;
use crate::nemesis::rng::Rng;

/// The share group every share consumer of a run belongs to.
pub const GROUP: &str = "nemesis-share";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Offsets as (first, last) runs.
fn runs(offsets: &[i64]) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = vec![];
    for &o in offsets {
        match out.last_mut() {
            Some(r) if r.1 + 1 == o => r.1 = o,
            _ => out.push((o, o)),
        }
    }
    out
}

/// One share consumer, until the tail phase ends.
pub async fn share_consumer(ctx: Arc<Ctx>, process: u32, mut rng: Rng) {
    let Some(topic) = ctx.topics.first().cloned() else { return };
    let member = format!("nemesis-share-member-{process}");
    let brokers = ctx.system.brokers.len();
    let mut kafka: Vec<Option<KafkaClient>> = (0..brokers).map(|_| None).collect();
    let mut sessions = vec![0i32; brokers];
    // Acquired and not yet acknowledged: partition → offsets.
    let mut pending: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    let mut heartbeat_at = Instant::now();
    let mut member_epoch = 0;
    while !*ctx.tail_stop.borrow() {
        let b = rng.below(brokers);
        if heartbeat_at <= Instant::now() {
            heartbeat_at = Instant::now() + Duration::from_secs(2);
            member_epoch = heartbeat(&ctx, &mut kafka, b, &topic.name, &member, member_epoch).await;
        }
        let acks: Vec<(i32, i64, i64)> = if sessions[b] == 0 {
            vec![]
        } else {
            pending.iter().flat_map(|(p, offs)| runs(offs).into_iter().map(move |(f, l)| (*p, f, l))).collect()
        };
        let op = Op::ShareFetch {
            target: b as u64,
            group: GROUP.into(),
            topic: topic.name.clone(),
            session_epoch: sessions[b],
            acks: acks.clone(),
        };
        let id = ctx.history.invoke(process, op);
        let mut partitions: BTreeMap<i32, share_fetch_request::FetchPartition> = (0..topic.partitions)
            .map(|p| (p, share_fetch_request::FetchPartition::default().with_partition_index(p)))
            .collect();
        for (p, f, l) in &acks {
            if let Some(fp) = partitions.get_mut(p) {
                fp.acknowledgement_batches.push(
                    share_fetch_request::AcknowledgementBatch::default()
                        .with_first_offset(*f)
                        .with_last_offset(*l)
                        .with_acknowledge_types(vec![1]),
                );
            }
        }
        let req = ShareFetchRequest::default()
            .with_group_id(Some(GroupId(s(GROUP))))
            .with_member_id(Some(s(&member)))
            .with_share_session_epoch(sessions[b])
            .with_max_wait_ms(200)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(200)
            .with_batch_size(200)
            .with_topics(vec![share_fetch_request::FetchTopic::default()
                .with_topic_id(uuid::Uuid::from_bytes(topic.id))
                .with_partitions(partitions.into_values().collect())]);
        let answer = match kafka_client(&ctx, &mut kafka, b).await {
            Err(e) => Err(Outcome::Fail(e)),
            Ok(c) => match tokio::time::timeout(REQUEST_TIMEOUT, c.call(&req, 1)).await {
                Err(_) => Err(Outcome::Unknown("no answer within the request timeout".into())),
                Ok(Err(e)) => Err(Outcome::Unknown(format!("connection: {e:#}"))),
                Ok(Ok(r)) => Ok(r),
            },
        };
        let r = match answer {
            Err(o) => {
                // The session is gone with the connection (or its state is unknown).
                kafka[b] = None;
                sessions[b] = 0;
                ctx.history.complete(process, id, o);
                ctx.pause_tail(Duration::from_millis(100)).await;
                continue;
            }
            Ok(r) => r,
        };
        if r.error_code != 0 {
            // SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, ...: open a new session.
            sessions[b] = 0;
            ctx.history.complete(process, id, Outcome::Fail(format!("{} {:?}", r.error_code, r.error_message)));
            ctx.pause_tail(Duration::from_millis(50)).await;
            continue;
        }
        sessions[b] = sessions[b].checked_add(1).unwrap_or(1);
        let mut acquired = vec![];
        let mut ack_codes = vec![];
        for t in &r.responses {
            for p in &t.partitions {
                if acks.iter().any(|(ap, _, _)| *ap == p.partition_index) {
                    ack_codes.push((p.partition_index, p.acknowledge_error_code));
                }
                let Some(records) = p.records.clone() else { continue };
                let Ok(recs) = decode(records) else { continue };
                for a in &p.acquired_records {
                    for (off, _, value) in recs.iter().filter(|r| r.0 >= a.first_offset && r.0 <= a.last_offset) {
                        acquired.push((p.partition_index, *off, value.clone(), i32::from(a.delivery_count)));
                    }
                    // Offsets with no record (control batches) are acknowledged too, as gaps are.
                    let offs = pending.entry(p.partition_index).or_default();
                    offs.extend(a.first_offset..=a.last_offset);
                }
            }
        }
        // What was acknowledged is settled (accepted, or refused: those come back after their lock).
        for (p, _, _) in &acks {
            pending.remove(p);
        }
        for offs in pending.values_mut() {
            offs.sort_unstable();
            offs.dedup();
        }
        ctx.history.complete(process, id, Outcome::Ok(Res::Shared { acquired, ack_codes }));
        ctx.pause_tail(Duration::from_millis(10 + rng.range(0..40))).await;
    }
}

/// A ShareGroupHeartbeat (not recorded: the checker judges deliveries), to the broker that
/// coordinates the group; returns the member epoch to send next.
async fn heartbeat(
    ctx: &Ctx,
    kafka: &mut [Option<KafkaClient>],
    first: usize,
    topic: &str,
    member: &str,
    epoch: i32,
) -> i32 {
    let brokers = kafka.len();
    for i in 0..brokers {
        let b = (first + i) % brokers;
        let req = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_member_id(s(member))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names((epoch == 0).then(|| vec![TopicName(s(topic))]));
        let Ok(c) = kafka_client(ctx, kafka, b).await else { continue };
        match tokio::time::timeout(Duration::from_secs(5), c.call(&req, 1)).await {
            Ok(Ok(r)) if r.error_code == 0 => return r.member_epoch,
            // Not the coordinator: the next broker.
            Ok(Ok(r)) if r.error_code == 16 || r.error_code == 15 || r.error_code == 14 => continue,
            // Fenced or unknown: join again.
            Ok(Ok(_)) => return 0,
            _ => kafka[b] = None,
        }
    }
    epoch
}
