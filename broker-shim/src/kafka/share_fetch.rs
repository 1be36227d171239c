//! ShareFetch and ShareAcknowledge (v1, KIP-932): share sessions (`groups::share::sessions`),
//! acknowledgements applied to share-partition states, and records acquired for the member from
//! the log (read by the fetcher, `crate::fetch`) with their acquisition locks, every change stored
//! in the coordinator cluster before it is answered (`groups::share::states`).
//!
//! Follows Kafka 4.1's `KafkaApis.handleShareFetchRequest` / `handleShareAcknowledgeRequest` and
//! `SharePartitionManager` (docs/research/kip-932-kafka-rules.md): acknowledgements at epoch 0 are
//! INVALID_REQUEST; the session's errors are top-level; each acknowledged partition is answered
//! (AcknowledgeErrorCode), as are partitions with records, errors or newly added. A fetch that
//! acquires nothing parks until a partition's high watermark moves (`cluster::marks`), a lock
//! expires or `max_wait_ms` passes. Records are whole batches; only the offsets in AcquiredRecords
//! are the member's (the client skips the others). The partitions of one fetch are acquired
//! concurrently, each with an equal share of `max_records` (Kafka acquires them in turn, in
//! memory; here each acquisition is a store). Any broker serves any partition: the
//! compare-and-set on the share-partition state keeps two brokers from handing out one record. It
//! must not read object storage or the coordinator cluster itself.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use diskless_proto::ErrorCode;
use futures_util::future::join_all;
use kafka_protocol::messages::*;
use tokio::time::Instant;

use super::response::{encode, text as s, Reply};
use super::session::Session;
use crate::authz::{Operation, Resource};
use crate::coordinators::groups::share::partition::{AckBatch, Acquired, Limits};
use crate::coordinators::groups::share::sessions::{Opened, Tp};
use crate::error::KafkaError;
use crate::fetch::FetchPartition;

/// How many times, at most, the partitions of a share fetch that filled their share of its
/// records are acquired again for what the others left.
const FILL_ROUNDS: usize = 3;

/// The longest a share fetch waits for records.
const MAX_WAIT: Duration = Duration::from_secs(30);

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn limits(l: &Session) -> Limits {
    let c = &l.shim.groups_config;
    Limits {
        lock_ms: c.share_record_lock_duration_ms as i64,
        delivery_count_limit: c.share_delivery_count_limit,
        max_in_flight: c.share_partition_max_record_locks,
    }
}

/// The `[base, last]` offsets and byte ranges of the record batches in `records`, in order; stops
/// at the first that does not frame (the fetcher returns whole batches).
pub fn batch_spans(records: &[u8]) -> Vec<(usize, usize, i64, i64)> {
    let mut out = vec![];
    let mut at = 0usize;
    while let Some(rest) = records.get(at..) {
        let Some(len) = crate::wal::record_batch::framed_len(rest) else { break };
        if rest.len() < len || len < 27 {
            break;
        }
        let base = i64::from_be_bytes(rest[0..8].try_into().unwrap_or([0; 8]));
        let delta = i32::from_be_bytes(rest[23..27].try_into().unwrap_or([0; 4]));
        out.push((at, at + len, base, base.saturating_add(i64::from(delta.max(0)))));
        at += len;
    }
    out
}

/// Where a share group starts on a partition it has no state for (`share.auto.offset.reset`).
async fn initial_offset(l: &Session, tp: Tp) -> Result<i64, KafkaError> {
    let spec = if l.shim.groups_config.share_auto_offset_reset == "earliest" { -2 } else { -1 };
    let (_, offset) = l.shim.cluster.list_offset(tp.0, tp.1, spec).await?;
    Ok(offset)
}

/// A member's acknowledgements of one partition in a ShareFetch, applied with its acquisition.
struct Acks {
    /// Not applied yet.
    pending: Option<Vec<AckBatch>>,
    /// Applied, with this outcome.
    outcome: Option<ErrorCode>,
}

/// Acquires records of `tp` for `member`: the batches read and what was acquired of them. The
/// member's acknowledgements of `tp` in this request (`acks`), when given, are applied in the same
/// store as the acquisition (one write per acknowledged poll); left pending when they were not
/// applied (the caller applies them alone).
async fn acquire_one(
    l: &Session,
    group_id: &str,
    member: &str,
    tp: Tp,
    (max_records, max_bytes): (i64, i32),
    acks: &mut Acks,
) -> Result<(Bytes, Vec<Acquired>, i64), KafkaError> {
    let key = (group_id.to_string(), tp.0, tp.1);
    let states = &l.shim.share_states;
    let lim = limits(l);
    let now = now_ms();
    let held = states.peek(&key).await?;
    let start = match &held {
        Some(_) => -1,
        None => initial_offset(l, tp).await?,
    };
    let from = match held {
        Some(mut p) => {
            p.expire(now, lim.delivery_count_limit);
            p.next_available(i64::MAX).unwrap_or(p.end())
        }
        None => start,
    };
    // Nothing new and nothing to deliver again: no read.
    let marks = l.shim.cluster.marks();
    if let Some((hwm, _)) = marks.caught_up(tp.0, tp.1, from) {
        if states.peek(&key).await?.is_some() {
            return Ok((Bytes::new(), vec![], hwm));
        }
    }
    let ask = FetchPartition { topic_id: tp.0, partition: tp.1, offset: from, max_bytes, read_committed: false };
    let mut fetched = l.shim.fetcher.fetch(&[ask], max_bytes).await?;
    let f =
        fetched.pop().ok_or_else(|| KafkaError::new(ErrorCode::UnknownServerError, "no answer for the partition"))?;
    let log_start = f.log_start_offset;
    if let Some(e) = f.error {
        if e.code != ErrorCode::OffsetOutOfRange {
            return Err(e);
        }
        // Below the log start (records deleted): the state moves up, the next fetch reads there.
        states.update(&key, move || log_start.max(0), move |p| p.advance_to(log_start)).await?;
        return Ok((Bytes::new(), vec![], f.high_watermark));
    }
    let spans = batch_spans(&f.records);
    tracing::debug!(
        group = group_id,
        partition = tp.1,
        from,
        hwm = f.high_watermark,
        batches = spans.len(),
        "share fetch: read"
    );
    let offsets: Vec<(i64, i64)> = spans.iter().map(|s| (s.2, s.3)).collect();
    let start_at = if start >= 0 { start } else { from };
    let who = member.to_string();
    let ack_batches = acks.pending.clone();
    let acquired = states
        .update(
            &key,
            move || start_at,
            move |p| {
                p.expire(now, lim.delivery_count_limit);
                let acked = ack_batches.as_ref().map(|b| p.acknowledge(&who, b, lim.delivery_count_limit));
                if log_start > 0 {
                    p.advance_to(log_start);
                }
                (acked, p.acquire(&who, from, &offsets, now, &lim, max_records))
            },
        )
        .await;
    let acquired = match acquired {
        Ok((ack, a)) => {
            if let Some(r) = ack {
                acks.pending = None;
                acks.outcome = Some(r.err().unwrap_or(ErrorCode::None));
            }
            a
        }
        // A lock not yet expired by the cluster's clock: nothing this time.
        Err(e) if e.code == ErrorCode::InvalidRecordState => vec![],
        Err(e) => return Err(e),
    };
    if acquired.is_empty() {
        return Ok((Bytes::new(), vec![], f.high_watermark));
    }
    // Only the batches holding an acquired record are sent.
    let mut out = BytesMut::new();
    for &(a, b, base, last) in &spans {
        if acquired.iter().any(|q| q.first <= last && q.last >= base) {
            out.extend_from_slice(&f.records[a..b]);
        }
    }
    Ok((out.freeze(), acquired, f.high_watermark))
}

/// Applies `batches` of `member` to `tp`'s state: the partition's acknowledgement error (a state
/// that is not stored, e.g. deleted meanwhile, holds nothing of the member: INVALID_RECORD_STATE).
async fn acknowledge_one(l: &Session, group_id: &str, member: &str, tp: Tp, batches: &[AckBatch]) -> ErrorCode {
    let key = (group_id.to_string(), tp.0, tp.1);
    let limit = l.shim.groups_config.share_delivery_count_limit;
    let now = now_ms();
    let (who, batches) = (member.to_string(), batches.to_vec());
    let r = l
        .shim
        .share_states
        .update_existing(&key, move |p| {
            p.expire(now, limit);
            p.acknowledge(&who, &batches, limit)
        })
        .await;
    match r {
        Ok(Some(Ok(()))) => ErrorCode::None,
        Ok(Some(Err(code))) => code,
        Ok(None) => ErrorCode::InvalidRecordState,
        Err(e) => e.code,
    }
}

/// Gives back what `member` holds in `partitions` (its share session closed).
async fn release(l: &Session, group_id: &str, member: &str, partitions: &[Tp]) {
    l.shim.share_states.release_member(group_id, member, partitions).await;
}

/// Closes `member`'s share session here and gives back its records (the member left its group).
pub(super) async fn close_sessions(l: &Session, group_id: &str, member: &str) {
    let partitions = l.shim.share_sessions.close_member(group_id, member);
    release(l, group_id, member, &partitions).await;
}

fn batches_of(bs: &[share_fetch_request::AcknowledgementBatch]) -> Vec<AckBatch> {
    bs.iter()
        .map(|b| AckBatch { first: b.first_offset, last: b.last_offset, types: b.acknowledge_types.clone() })
        .collect()
}

fn ack_batches_of(bs: &[share_acknowledge_request::AcknowledgementBatch]) -> Vec<AckBatch> {
    bs.iter()
        .map(|b| AckBatch { first: b.first_offset, last: b.last_offset, types: b.acknowledge_types.clone() })
        .collect()
}

/// What is answered for one partition.
#[derive(Default)]
struct Part {
    error: Option<KafkaError>,
    ack: Option<ErrorCode>,
    records: Bytes,
    acquired: Vec<Acquired>,
    listed: bool,
}

/// The topic catalog by id, read once per request.
async fn catalog(l: &Session) -> Result<BTreeMap<[u8; 16], crate::cluster::TopicMeta>, KafkaError> {
    let topics = l.shim.cluster.all_topics().await.map_err(|e| KafkaError::unavailable("list topics", &e))?;
    Ok(topics.into_iter().map(|t| (t.id, t)).collect())
}

/// READ on the partition's topic is required (TOPIC_AUTHORIZATION_FAILED), an unknown id is
/// UNKNOWN_TOPIC_ID, a partition past the topic's UNKNOWN_TOPIC_OR_PARTITION. Checked for every
/// partition of the session at every request, as Kafka does (an ACL removed takes effect at once).
fn check_topic(
    l: &Session,
    catalog: &Result<BTreeMap<[u8; 16], crate::cluster::TopicMeta>, KafkaError>,
    access: &crate::authz::Access,
    tp: Tp,
) -> Result<(), KafkaError> {
    let topics = catalog.as_ref().map_err(Clone::clone)?;
    let Some(t) = topics.get(&tp.0) else {
        return Err(KafkaError::new(ErrorCode::UnknownTopicId, "no topic with that id"));
    };
    if !access.allowed(Operation::Read, Resource::Topic, &t.name) {
        return Err(super::session::refused(Resource::Topic, Operation::Read, &t.name));
    }
    l.partition(t, tp.1)
}

pub(super) async fn share_fetch(l: &Session, header: &RequestHeader, req: ShareFetchRequest) -> Reply {
    let v = header.request_api_version;
    let group_id = req.group_id.as_ref().map(|g| g.to_string()).unwrap_or_default();
    let member = req.member_id.as_ref().map(|m| m.to_string()).unwrap_or_default();
    let lock_ms = l.shim.groups_config.share_record_lock_duration_ms.min(i32::MAX as u64) as i32;
    let top = |code: ErrorCode, message: &str| {
        let body = ShareFetchResponse::default()
            .with_error_code(code.code())
            .with_error_message(Some(s(message)))
            .with_acquisition_lock_timeout_ms(lock_ms);
        encode(ApiKey::ShareFetch, header, v, &body)
    };
    if group_id.is_empty() || member.is_empty() {
        return top(ErrorCode::InvalidRequest, "GroupId and MemberId must be set.");
    }
    let access = l.access().await;
    if !access.allowed(Operation::Read, Resource::Group, &group_id) {
        return top(ErrorCode::GroupAuthorizationFailed, "not authorized to read the group");
    }
    // The request's partitions, merged (a topic may be named twice), with their acknowledgements.
    let mut asked: BTreeMap<Tp, Vec<AckBatch>> = BTreeMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            asked
                .entry((t.topic_id.into_bytes(), p.partition_index))
                .or_default()
                .extend(batches_of(&p.acknowledgement_batches));
        }
    }
    let has_acks = asked.values().any(|b| !b.is_empty());
    if req.share_session_epoch == 0 && has_acks {
        return top(ErrorCode::InvalidRequest, "Acknowledge data present in initial ShareFetch request.");
    }
    let forget: Vec<Tp> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id.into_bytes(), *p)))
        .collect();
    let catalog = catalog(l).await;
    let mut parts: BTreeMap<Tp, Part> = BTreeMap::new();
    // Partitions the client may not read, or that do not exist, are answered so, never join the
    // session and are not fetched; their acknowledgements are answered with the same error.
    for &tp in asked.keys() {
        if let Err(e) = check_topic(l, &catalog, &access, tp) {
            let ack = asked.get(&tp).is_some_and(|b| !b.is_empty()).then_some(e.code);
            parts.insert(tp, Part { error: Some(e), ack, listed: true, ..Part::default() });
        }
    }
    let add: Vec<Tp> = asked.keys().copied().filter(|tp| !parts.contains_key(tp)).collect();
    let opened = match l.shim.share_sessions.step(
        l.conn,
        &group_id,
        &member,
        req.share_session_epoch,
        &add,
        &forget,
        true,
    ) {
        Ok(o) => o,
        Err(code) => {
            tracing::debug!(group = group_id, member, epoch = req.share_session_epoch, %code, "share fetch: session refused");
            return top(code, code.name());
        }
    };
    tracing::debug!(group = group_id, member, epoch = req.share_session_epoch, ?opened, "share fetch");
    if matches!(opened, Opened::New(_)) {
        l.opened_share_session(&group_id, &member);
    }
    let (fetchable, closing) = match &opened {
        Opened::New(ps) | Opened::Continued(ps) => (ps.clone(), false),
        Opened::Closed(ps) => (ps.clone(), true),
    };
    // Acknowledgements of a partition fetched now go with its acquisition, in one store; the
    // others are applied here.
    let fetching = !closing && req.max_bytes != 0;
    let mut deferred: BTreeMap<Tp, Vec<AckBatch>> = BTreeMap::new();
    for (tp, batches) in &asked {
        if batches.is_empty() || parts.contains_key(tp) {
            continue;
        }
        if fetching && fetchable.contains(tp) {
            deferred.insert(*tp, batches.clone());
            continue;
        }
        let code = acknowledge_one(l, &group_id, &member, *tp, batches).await;
        parts.entry(*tp).or_default().ack = Some(code);
    }
    if closing {
        release(l, &group_id, &member, &fetchable).await;
    }
    // Every partition of the session is authorized again.
    let mut allowed = vec![];
    for tp in fetchable {
        match check_topic(l, &catalog, &access, tp) {
            Ok(()) => allowed.push(tp),
            Err(e) => {
                let p = parts.entry(tp).or_default();
                p.error = Some(e);
            }
        }
    }
    let fetchable = allowed;
    // Deferred acknowledgements of a partition that is no longer fetched are applied alone.
    for (tp, batches) in std::mem::take(&mut deferred) {
        if fetchable.contains(&tp) {
            deferred.insert(tp, batches);
        } else {
            let code = acknowledge_one(l, &group_id, &member, tp, &batches).await;
            parts.entry(tp).or_default().ack = Some(code);
        }
    }
    if matches!(opened, Opened::New(_)) {
        for tp in &add {
            parts.entry(*tp).or_default().listed = true;
        }
    }
    if !closing && req.max_bytes != 0 && !fetchable.is_empty() {
        let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT);
        let max_records = if req.max_records <= 0 { 500 } else { i64::from(req.max_records) };
        let max_bytes = if req.max_bytes < 0 { i32::MAX } else { req.max_bytes };
        let per_partition = (max_bytes / fetchable.len().max(1) as i32).max(1);
        let marks = l.shim.cluster.marks();
        // Records acquired in any round are kept (a later round adds to them): every acquisition
        // is stored, so it must be answered.
        let mut got = 0i64;
        loop {
            let waiter = marks.waiter(fetchable.iter().copied());
            let mut answered = vec![-1i64; fetchable.len()];
            // The partitions are acquired at once (each is its own store), each with an equal
            // share of the records still wanted; those that filled their share take more of what
            // the others left, in a further round.
            let mut round: Vec<usize> = (0..fetchable.len()).collect();
            for _ in 0..FILL_ROUNDS {
                let left = (max_records - got).max(0);
                let share = (left + round.len() as i64 - 1) / round.len().max(1) as i64;
                let tries = round.iter().map(|&i| {
                    let tp = fetchable[i];
                    let pending = deferred.remove(&tp);
                    let (group_id, member) = (&group_id, &member);
                    async move {
                        let mut acks = Acks { pending, outcome: None };
                        // With nothing left to acquire, only the acknowledgements are applied.
                        let r = if share > 0 {
                            Some(acquire_one(l, group_id, member, tp, (share, per_partition), &mut acks).await)
                        } else {
                            None
                        };
                        if let Some(batches) = acks.pending.take() {
                            acks.outcome = Some(acknowledge_one(l, group_id, member, tp, &batches).await);
                        }
                        (i, acks.outcome, r)
                    }
                });
                let mut filled = vec![];
                for (i, ack, r) in join_all(tries).await {
                    let tp = fetchable[i];
                    if let Some(code) = ack {
                        parts.entry(tp).or_default().ack = Some(code);
                    }
                    match r {
                        None => {}
                        Some(Ok((records, acquired, hwm))) => {
                            let n = acquired.iter().map(|a| a.last - a.first + 1).sum::<i64>();
                            got += n;
                            answered[i] = hwm;
                            if n >= share {
                                filled.push(i);
                            }
                            if !acquired.is_empty() {
                                let p = parts.entry(tp).or_default();
                                if p.records.is_empty() {
                                    p.records = records;
                                } else {
                                    let mut all = BytesMut::from(&p.records[..]);
                                    all.extend_from_slice(&records);
                                    p.records = all.freeze();
                                }
                                p.acquired.extend(acquired);
                            }
                        }
                        Some(Err(e)) => {
                            tracing::info!(group = group_id, partition = tp.1, error = %e.message, code = %e.code, "share fetch: acquiring failed");
                            parts.entry(tp).or_default().error = Some(e);
                        }
                    }
                }
                if got >= max_records || filled.is_empty() {
                    break;
                }
                round = filled;
            }
            let min_bytes = req.min_bytes.max(1) as usize;
            let bytes: usize = parts.values().map(|p| p.records.len()).sum();
            if bytes >= min_bytes || parts.values().any(|p| p.error.is_some()) || Instant::now() >= deadline {
                break;
            }
            // Wake for new records, or when a lock held by someone expires.
            let mut wake = deadline;
            for &tp in &fetchable {
                let key = (group_id.clone(), tp.0, tp.1);
                if let Ok(Some(p)) = l.shim.share_states.peek(&key).await {
                    if let Some(at) = p.next_expiry() {
                        let ms = (at - now_ms()).max(0) as u64;
                        wake = wake.min(Instant::now() + Duration::from_millis(ms + 1));
                    }
                }
            }
            let _ = waiter.wait(&answered, wake, false).await;
            if Instant::now() >= deadline {
                break;
            }
        }
    }
    let mut by_topic: BTreeMap<[u8; 16], Vec<share_fetch_response::PartitionData>> = BTreeMap::new();
    for (tp, p) in parts {
        if !(p.listed || p.ack.is_some() || p.error.is_some() || !p.acquired.is_empty()) {
            continue;
        }
        let (code, message) = p.error.map_or((ErrorCode::None, None), |e| (e.code, Some(e.message)));
        let data = share_fetch_response::PartitionData::default()
            .with_partition_index(tp.1)
            .with_error_code(code.code())
            .with_error_message(message.as_deref().map(s))
            .with_acknowledge_error_code(p.ack.unwrap_or(ErrorCode::None).code())
            .with_current_leader(
                share_fetch_response::LeaderIdAndEpoch::default()
                    .with_leader_id(l.shim.broker_id)
                    .with_leader_epoch(l.shim.registry.leader_epoch()),
            )
            .with_records(Some(p.records))
            .with_acquired_records(
                p.acquired
                    .iter()
                    .map(|a| {
                        share_fetch_response::AcquiredRecords::default()
                            .with_first_offset(a.first)
                            .with_last_offset(a.last)
                            .with_delivery_count(a.delivery_count.clamp(0, i32::from(i16::MAX)) as i16)
                    })
                    .collect(),
            );
        by_topic.entry(tp.0).or_default().push(data);
    }
    let responses = by_topic
        .into_iter()
        .map(|(t, ps)| {
            share_fetch_response::ShareFetchableTopicResponse::default()
                .with_topic_id(uuid::Uuid::from_bytes(t))
                .with_partitions(ps)
        })
        .collect();
    let body = ShareFetchResponse::default().with_acquisition_lock_timeout_ms(lock_ms).with_responses(responses);
    encode(ApiKey::ShareFetch, header, v, &body)
}

pub(super) async fn share_acknowledge(l: &Session, header: &RequestHeader, req: ShareAcknowledgeRequest) -> Reply {
    let v = header.request_api_version;
    let group_id = req.group_id.as_ref().map(|g| g.to_string()).unwrap_or_default();
    let member = req.member_id.as_ref().map(|m| m.to_string()).unwrap_or_default();
    let top = |code: ErrorCode, message: &str| {
        let body =
            ShareAcknowledgeResponse::default().with_error_code(code.code()).with_error_message(Some(s(message)));
        encode(ApiKey::ShareAcknowledge, header, v, &body)
    };
    if group_id.is_empty() || member.is_empty() {
        return top(ErrorCode::InvalidRequest, "GroupId and MemberId must be set.");
    }
    let access = l.access().await;
    if !access.allowed(Operation::Read, Resource::Group, &group_id) {
        return top(ErrorCode::GroupAuthorizationFailed, "not authorized to read the group");
    }
    let opened = match l.shim.share_sessions.step(l.conn, &group_id, &member, req.share_session_epoch, &[], &[], false)
    {
        Ok(o) => o,
        Err(code) => return top(code, code.name()),
    };
    let mut asked: BTreeMap<Tp, Vec<AckBatch>> = BTreeMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            asked
                .entry((t.topic_id.into_bytes(), p.partition_index))
                .or_default()
                .extend(ack_batches_of(&p.acknowledgement_batches));
        }
    }
    let catalog = catalog(l).await;
    let mut by_topic: BTreeMap<[u8; 16], Vec<share_acknowledge_response::PartitionData>> = BTreeMap::new();
    for (tp, batches) in &asked {
        let code = match check_topic(l, &catalog, &access, *tp) {
            Err(e) => e.code,
            Ok(()) => acknowledge_one(l, &group_id, &member, *tp, batches).await,
        };
        by_topic.entry(tp.0).or_default().push(
            share_acknowledge_response::PartitionData::default()
                .with_partition_index(tp.1)
                .with_error_code(code.code())
                .with_current_leader(
                    share_acknowledge_response::LeaderIdAndEpoch::default()
                        .with_leader_id(l.shim.broker_id)
                        .with_leader_epoch(l.shim.registry.leader_epoch()),
                ),
        );
    }
    if let Opened::Closed(ps) = &opened {
        release(l, &group_id, &member, ps).await;
    }
    let responses = by_topic
        .into_iter()
        .map(|(t, ps)| {
            share_acknowledge_response::ShareAcknowledgeTopicResponse::default()
                .with_topic_id(uuid::Uuid::from_bytes(t))
                .with_partitions(ps)
        })
        .collect();
    encode(ApiKey::ShareAcknowledge, header, v, &ShareAcknowledgeResponse::default().with_responses(responses))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_spans_frame_whole_batches_and_stop_at_a_torn_one() {
        let one = crate::wal::record_batch::tests::fake_batch(3, -1, -1);
        let mut two = one.clone();
        two[0..8].copy_from_slice(&10i64.to_be_bytes());
        let mut all = one.clone();
        all.extend_from_slice(&two);
        all.extend_from_slice(&one[..20]);
        let spans = batch_spans(&all);
        assert_eq!(spans, vec![(0, one.len(), 0, 2), (one.len(), 2 * one.len(), 10, 12)]);
        assert!(batch_spans(&[1, 2, 3]).is_empty());
    }
}
