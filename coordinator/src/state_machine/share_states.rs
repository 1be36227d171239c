//! Share groups' share-partition states (KIP-932): per (group, topic-partition) the start offset
//! and the records in flight (`ShareStateRecord`, table `s` of the metadata partition the group id
//! maps to), as Kafka's share coordinator keeps them in `__share_group_state`.
//!
//! The broker serving the partition to the group decides every transition in memory (acquire,
//! acknowledge, release, lock expiry: Kafka's `SharePartition`) and makes it durable with one
//! write, `StoreShareState`, a compare-and-set (the rule of `versioned`; a state created anew is
//! numbered from the command's time): it applies only if the stored version is the one the
//! broker last read or wrote, else FENCED_STATE_EPOCH, so two brokers can never hand out the
//! same record at once; and it never gives another member a record whose lock has not expired by
//! the command's time (INVALID_RECORD_STATE), so brokers' clocks cannot disagree about a lock. This module checks the record's shape (ranges in order, disjoint, at or
//! above the start offset, bounded in number) and keeps the version and the time (the command's
//! "now"); it must not judge the transitions nor read a clock.

use super::command::{ErrorCode, Failure};
use super::keys::{Keys, TopicPartition, MAX_GROUP_ID_BYTES};
use super::records::ShareStateRecord;
use super::versioned::{self, Versioned};
use super::{tables, StateMachine};
use crate::storage::{KvRead, StorageError, Txn};

/// The most ranges one share-partition state may hold (Kafka bounds the records in flight per
/// share partition by `group.share.partition.max.record.locks`; ranges are fewer than records).
pub const MAX_SHARE_RANGES: usize = 10_000;
/// The longest member id a range may name (Kafka's member ids are UUIDs, 22–36 characters).
pub const MAX_SHARE_MEMBER_ID_BYTES: usize = 1024;

fn check_group_id(id: &str) -> Result<(), Failure> {
    if id.is_empty() || id.len() > MAX_GROUP_ID_BYTES {
        return Err(Failure::new(ErrorCode::InvalidGroupId, format!("group id {id:?} is empty or too long")));
    }
    Ok(())
}

fn check_shape(tp: &TopicPartition, r: &ShareStateRecord) -> Result<(), Failure> {
    let bad = |why: String| Err(Failure::new(ErrorCode::InvalidRequest, format!("share state of {tp}: {why}")));
    if tp.partition < 0 || r.start_offset < 0 {
        return bad(format!("partition {} or start offset {} is negative", tp.partition, r.start_offset));
    }
    if r.ranges.len() > MAX_SHARE_RANGES {
        return bad(format!("{} ranges, at most {MAX_SHARE_RANGES}", r.ranges.len()));
    }
    let mut next = r.start_offset;
    for g in &r.ranges {
        if g.first < next || g.last < g.first {
            return bad(format!("range [{}, {}] overlaps, is out of order or below the start offset", g.first, g.last));
        }
        if !matches!(g.state, 0 | 1 | 2 | 4) || g.delivery_count < 0 || g.member_id.len() > MAX_SHARE_MEMBER_ID_BYTES {
            return bad(format!(
                "range [{}, {}] has state {}, delivery count {}",
                g.first, g.last, g.state, g.delivery_count
            ));
        }
        next = g.last.saturating_add(1);
    }
    Ok(())
}

/// The stored state of `group_id` on `tp`, if any.
pub fn get(
    view: &dyn KvRead,
    keys: &Keys,
    group_id: &str,
    tp: &TopicPartition,
) -> Result<Option<ShareStateRecord>, StorageError> {
    if check_group_id(group_id).is_err() {
        return Ok(None);
    }
    tables::get(view, &keys.share_state(group_id, tp))
}

/// StoreShareState: `record` replaces the stored state of `tp` if that is at `expected_version`
/// (0: none is stored). Returns what was stored: the version one more, `updated_ms` now.
pub fn store(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    group_id: &str,
    tp: &TopicPartition,
    record: &ShareStateRecord,
    expected_version: u64,
) -> Result<Result<ShareStateRecord, Failure>, StorageError> {
    if let Err(f) = check_group_id(group_id).and_then(|()| check_shape(tp, record)) {
        return Ok(Err(f));
    }
    let old = get(txn, &sm.keys, group_id, tp)?;
    let what = format_args!("share group {group_id}'s state of {tp}");
    if let Err(f) = versioned::check(old.as_ref(), expected_version, what, ErrorCode::FencedStateEpoch) {
        return Ok(Err(f));
    }
    if let Some(old) = &old {
        if let Some((first, last, member, until)) = taken_while_locked(old, record, now) {
            return Ok(Err(Failure::new(
                ErrorCode::InvalidRecordState,
                format!(
                    "share group {group_id}'s records [{first}, {last}] of {tp} are acquired by member {member} until {until}, past this store's time {now}"
                ),
            )));
        }
    }
    let mut record = record.clone();
    // A state created anew (none stored: never, or deleted since) starts at a version no copy of
    // an earlier one can hold, so a broker's stale copy of a deleted state cannot overwrite it.
    record.version = versioned::next(old.as_ref().map_or(0, |o| o.version), now);
    record.updated_ms = now;
    tables::put(txn, sm.keys.share_state(group_id, tp), &record)?;
    Ok(Ok(record))
}

impl Versioned for ShareStateRecord {
    fn version(&self) -> u64 {
        self.version
    }
    fn owner(&self) -> &str {
        &self.owner
    }
}

/// The first records `record` gives to a member while `old` has them acquired by another whose lock
/// has not expired at `now` (the command's time: one clock judges every lock, whichever broker
/// stores): `(first, last, holder, lock until)`. Both range lists are sorted and disjoint.
fn taken_while_locked(old: &ShareStateRecord, record: &ShareStateRecord, now: i64) -> Option<(i64, i64, String, i64)> {
    let held = old.ranges.iter().filter(|o| o.state == 1 && o.lock_until_ms > now);
    let mut new = record.ranges.iter().filter(|r| r.state == 1).peekable();
    for o in held {
        while new.peek().is_some_and(|r| r.last < o.first) {
            new.next();
        }
        let mut ahead = new.clone();
        while let Some(r) = ahead.next().filter(|r| r.first <= o.last) {
            if r.member_id != o.member_id {
                return Some((r.first.max(o.first), r.last.min(o.last), o.member_id.clone(), o.lock_until_ms));
            }
        }
    }
    None
}

/// DeleteShareStates: the group's states of `topic_ids` (every topic when empty) are deleted.
pub fn delete(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    group_id: &str,
    topic_ids: &[uuid::Uuid],
) -> Result<Result<(), Failure>, StorageError> {
    if let Err(f) = check_group_id(group_id) {
        return Ok(Err(f));
    }
    for (tp, _) in list(txn, &sm.keys, group_id)? {
        if topic_ids.is_empty() || topic_ids.contains(&tp.topic_id) {
            txn.delete(sm.keys.share_state(group_id, &tp));
        }
    }
    Ok(Ok(()))
}

/// Every share-partition state of `group_id`, in topic-partition order.
pub fn list(
    view: &dyn KvRead,
    keys: &Keys,
    group_id: &str,
) -> Result<Vec<(TopicPartition, ShareStateRecord)>, StorageError> {
    let mut out = vec![];
    if check_group_id(group_id).is_err() {
        return Ok(out);
    }
    let (from, to) = keys.share_states_of_group(group_id);
    view.scan(&from, &to, &mut |k, v| {
        let tp = Keys::decode_share_state(k).ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(k),
            reason: "not a share state key".into(),
        })?;
        out.push((tp, crate::storage::codec::decode(k, v)?));
        Ok(true)
    })?;
    Ok(out)
}
