//! Consumer groups: what survives the broker that coordinates a group — its last completed
//! generation with its members, and its committed offsets.
//!
//! Owns the `K` (group), `O` (offset) and `W` (offsets by topic) tables of the metadata partition
//! a group id maps to (`metadata_partition_for_group`). A commit is fenced here, at apply, against
//! the stored generation and members, so a zombie member of an old generation is refused however
//! late its commit reaches the log. The group record is stored by compare-and-set on its version
//! (`versioned`), whatever its kind (see [`store`]). Member liveness, heartbeats and rebalances are not here: they
//! live in the coordinating broker's memory, as in Kafka; this module never reads a clock (expiry
//! compares with the command's "now").

use super::command::{CommitOffsets, ErrorCode, Failure};
use super::keys::{self, Keys, TopicPartition, MAX_GROUP_ID_BYTES};
use super::records::{GroupRecord, OffsetRecord};
use super::versioned::{self, Versioned};
use super::{tables, StateMachine};
use crate::storage::{KvRead, StorageError, Txn};

fn check_group_id(group_id: &str) -> Result<(), Failure> {
    if group_id.is_empty() || group_id.len() > MAX_GROUP_ID_BYTES {
        return Err(Failure::new(ErrorCode::InvalidGroupId, format!("group id {group_id:?} is empty or too long")));
    }
    Ok(())
}

pub fn group(view: &dyn KvRead, keys: &Keys, group_id: &str) -> Result<Option<GroupRecord>, StorageError> {
    tables::get(view, &keys.group(group_id))
}

/// StoreGroup, for every kind of group (classic, KIP-848, share): a compare-and-set
/// (`versioned`): the group replaces the stored one only if that is at the version the broker
/// read (0: none stored), else ILLEGAL_GENERATION naming the version and who stored it — so while
/// two brokers briefly both coordinate a group, the one that did not read the other's last store
/// changes nothing and reloads, and no answered change is overwritten. A store whose group is
/// already stored as it is, by the same coordinator, answers what is stored: it is a resend of
/// one that applied (the broker's client resends when an answer is lost).
///
/// The stored group gets the next version (`versioned::next`) and the command's time.
pub fn store(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    group_id: &str,
    record: &GroupRecord,
    expected_version: u64,
) -> Result<Result<GroupRecord, Failure>, StorageError> {
    if let Err(f) = check_group_id(group_id) {
        return Ok(Err(f));
    }
    let old = group(txn, &sm.keys, group_id)?;
    if let Some(o) = old.as_ref().filter(|o| o.version != expected_version && same_group(o, record)) {
        return Ok(Ok(o.clone()));
    }
    let what = format_args!("group {group_id}");
    if let Err(f) = versioned::check(old.as_ref(), expected_version, what, ErrorCode::IllegalGeneration) {
        return Ok(Err(f));
    }
    let mut record = record.clone();
    record.updated_ms = now;
    record.version = versioned::next(old.as_ref().map_or(0, |o| o.version), now);
    tables::put(txn, sm.keys.group(group_id), &record)?;
    Ok(Ok(record))
}

/// Whether `stored` is `record` as its coordinator would store it (everything but the time and
/// the version alike).
fn same_group(stored: &GroupRecord, record: &GroupRecord) -> bool {
    GroupRecord { updated_ms: 0, version: 0, ..stored.clone() }
        == GroupRecord { updated_ms: 0, version: 0, ..record.clone() }
}

impl Versioned for GroupRecord {
    fn version(&self) -> u64 {
        self.version
    }
    fn owner(&self) -> &str {
        &self.coordinator
    }
}

/// The generation a transaction coordinator commits a transaction's offsets with (TxnOffsetCommit,
/// at the transaction's COMMIT): the member and generation were checked when the client sent them,
/// and Kafka makes pending offsets committed at the marker whatever the group did since. Brokers
/// never pass a client's generation below -1 on.
pub const TXN_OFFSETS_GENERATION: i32 = i32::MIN;

/// Kafka's commit rules, against the stored group: a classic group's generation, or a KIP-848
/// group's member epoch (`ConsumerGroup.validateOffsetCommit`: STALE_MEMBER_EPOCH).
fn fence(group_id: &str, stored: Option<&GroupRecord>, generation: i32, member_id: &str) -> Result<(), Failure> {
    if generation == TXN_OFFSETS_GENERATION {
        return Ok(());
    }
    if let Some(g) = stored.filter(|g| g.protocol.as_deref() == Some(diskless_proto::CONSUMER_PROTOCOL_MARK)) {
        if generation < 0 && member_id.is_empty() && g.members.is_empty() {
            return Ok(());
        }
        let Some(m) = g.members.iter().find(|m| m.member_id == member_id) else {
            return Err(Failure::new(
                ErrorCode::UnknownMemberId,
                format!("{member_id:?} is not a member of group {group_id}"),
            ));
        };
        if m.member_epoch != generation {
            return Err(Failure::new(
                ErrorCode::StaleMemberEpoch,
                format!("member {member_id:?} of group {group_id} is at epoch {}, not {generation}", m.member_epoch),
            ));
        }
        return Ok(());
    }
    let members = stored.map(|g| g.members.as_slice()).unwrap_or_default();
    if generation < 0 && member_id.is_empty() {
        if members.is_empty() {
            return Ok(());
        }
        return Err(Failure::new(
            ErrorCode::UnknownMemberId,
            format!("group {group_id} has members: a commit needs a member id and generation"),
        ));
    }
    let Some(g) = stored.filter(|_| members.iter().any(|m| m.member_id == member_id)) else {
        return Err(Failure::new(
            ErrorCode::UnknownMemberId,
            format!("{member_id:?} is not a member of group {group_id}"),
        ));
    };
    if g.generation != generation {
        return Err(Failure::new(
            ErrorCode::IllegalGeneration,
            format!("group {group_id} is at generation {}, not {generation}", g.generation),
        ));
    }
    Ok(())
}

/// OffsetCommit: every offset, or none when the member is fenced; per offset, the topic-partition
/// must exist in the catalog.
pub fn commit(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    c: &CommitOffsets,
) -> Result<Vec<Result<(), Failure>>, StorageError> {
    let keys = &sm.keys;
    let fenced = match check_group_id(&c.group_id) {
        Ok(()) => fence(&c.group_id, group(txn, keys, &c.group_id)?.as_ref(), c.generation, &c.member_id),
        Err(f) => Err(f),
    };
    if let Err(f) = fenced {
        return Ok(vec![Err(f); c.offsets.len()]);
    }
    let mut out = Vec::with_capacity(c.offsets.len());
    for o in &c.offsets {
        let known = tables::topic(txn, keys, &o.tp.topic_id)?;
        if !known.is_some_and(|t| (0..t.num_partitions).contains(&o.tp.partition)) {
            out.push(Err(Failure::new(ErrorCode::UnknownTopicOrPartition, format!("no partition {}", o.tp))));
            continue;
        }
        let record = OffsetRecord {
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata.clone(),
            commit_ms: now,
        };
        tables::put(txn, keys.offset(&c.group_id, &o.tp), &record)?;
        txn.put(keys.offset_by_topic(&o.tp.topic_id, &c.group_id), Vec::new());
        out.push(Ok(()));
    }
    Ok(out)
}

/// The committed offsets of a group: of `partitions`, or all when `None` (in key order).
pub fn fetch(
    view: &dyn KvRead,
    keys: &Keys,
    group_id: &str,
    partitions: Option<&[TopicPartition]>,
) -> Result<Vec<(TopicPartition, Option<OffsetRecord>)>, StorageError> {
    if check_group_id(group_id).is_err() {
        return Ok(partitions.unwrap_or_default().iter().map(|tp| (*tp, None)).collect());
    }
    if let Some(tps) = partitions {
        let mut out = Vec::with_capacity(tps.len());
        for tp in tps {
            out.push((*tp, tables::get(view, &keys.offset(group_id, tp))?));
        }
        return Ok(out);
    }
    let (from, to) = keys.offsets_of_group(group_id);
    let mut out = vec![];
    view.scan(&from, &to, &mut |k, v| {
        let (_, tp) = Keys::decode_offset(k).ok_or_else(|| corrupt(k, "not an offset key"))?;
        out.push((tp, Some(crate::storage::codec::decode(k, v)?)));
        Ok(true)
    })?;
    Ok(out)
}

fn corrupt(k: &[u8], reason: &str) -> StorageError {
    StorageError::Corrupt { key: crate::storage::display_key(k), reason: reason.into() }
}

/// Every group this metadata partition holds: stored groups, and groups that only have offsets
/// (commits from outside any generation), in id order.
pub fn list(view: &dyn KvRead, keys: &Keys) -> Result<Vec<(String, Option<GroupRecord>)>, StorageError> {
    let mut out: std::collections::BTreeMap<String, Option<GroupRecord>> = Default::default();
    let (from, to) = keys.table(keys::GROUP);
    view.scan(&from, &to, &mut |k, v| {
        let id = Keys::decode_group(k).ok_or_else(|| corrupt(k, "not a group key"))?;
        out.insert(id, Some(crate::storage::codec::decode(k, v)?));
        Ok(true)
    })?;
    let (from, to) = keys.table(keys::OFFSET_BY_TOPIC);
    view.scan(&from, &to, &mut |k, _| {
        let id = Keys::decode_offset_by_topic(k).ok_or_else(|| corrupt(k, "not an offset index key"))?;
        out.entry(id).or_insert(None);
        Ok(true)
    })?;
    Ok(out.into_iter().collect())
}

/// Removes one offset row and, if it was the group's last in that topic, the topic index row.
fn delete_offset(txn: &mut Txn<'_>, keys: &Keys, group_id: &str, tp: &TopicPartition) -> Result<bool, StorageError> {
    let key = keys.offset(group_id, tp);
    if txn.get(&key)?.is_none() {
        return Ok(false);
    }
    txn.delete(key);
    let (from, to) = keys.offsets_of_group_topic(group_id, &tp.topic_id);
    let mut left = false;
    txn.scan(&from, &to, &mut |_, _| {
        left = true;
        Ok(false)
    })?;
    if !left {
        txn.delete(keys.offset_by_topic(&tp.topic_id, group_id));
    }
    Ok(true)
}

fn delete_all_offsets(txn: &mut Txn<'_>, keys: &Keys, group_id: &str) -> Result<(), StorageError> {
    let (from, to) = keys.offsets_of_group(group_id);
    let mut rows = vec![];
    txn.scan(&from, &to, &mut |k, _| {
        rows.push(Keys::decode_offset(k).ok_or_else(|| corrupt(k, "not an offset key"))?.1);
        Ok(true)
    })?;
    for tp in rows {
        txn.delete(keys.offset(group_id, &tp));
        txn.delete(keys.offset_by_topic(&tp.topic_id, group_id));
    }
    Ok(())
}

/// DeleteGroups.
pub fn delete_groups(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    group_ids: &[String],
) -> Result<Vec<Result<(), Failure>>, StorageError> {
    let keys = &sm.keys;
    let mut out = Vec::with_capacity(group_ids.len());
    for id in group_ids {
        if let Err(f) = check_group_id(id) {
            out.push(Err(f));
            continue;
        }
        let g = group(txn, keys, id)?;
        if g.as_ref().is_some_and(|g| !g.members.is_empty()) {
            out.push(Err(Failure::new(ErrorCode::NonEmptyGroup, format!("group {id} has members"))));
            continue;
        }
        let (from, to) = keys.offsets_of_group(id);
        let mut has_offsets = false;
        txn.scan(&from, &to, &mut |_, _| {
            has_offsets = true;
            Ok(false)
        })?;
        let has_share_states = !super::share_states::list(txn, keys, id)?.is_empty();
        if g.is_none() && !has_offsets && !has_share_states {
            out.push(Err(Failure::new(ErrorCode::GroupIdNotFound, format!("there is no group {id}"))));
            continue;
        }
        txn.delete(keys.group(id));
        delete_all_offsets(txn, keys, id)?;
        if let Err(f) = super::share_states::delete(sm, txn, id, &[])? {
            out.push(Err(f));
            continue;
        }
        out.push(Ok(()));
    }
    Ok(out)
}

/// OffsetDelete: refused while the group has members (they may be consuming the partitions).
pub fn delete_offsets(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    group_id: &str,
    partitions: &[TopicPartition],
) -> Result<Vec<Result<(), Failure>>, StorageError> {
    let keys = &sm.keys;
    let refused = match check_group_id(group_id) {
        Err(f) => Err(f),
        Ok(()) => match group(txn, keys, group_id)? {
            Some(g) if !g.members.is_empty() => Err(Failure::new(
                ErrorCode::GroupSubscribedToTopic,
                format!("group {group_id} has members; offsets are deleted only from an empty group"),
            )),
            _ => Ok(()),
        },
    };
    if let Err(f) = refused {
        return Ok(vec![Err(f); partitions.len()]);
    }
    let mut out = Vec::with_capacity(partitions.len());
    for tp in partitions {
        delete_offset(txn, keys, group_id, tp)?;
        out.push(Ok(()));
    }
    Ok(out)
}

/// A deleted topic's offsets go from every group (called by DeleteTopics in every metadata
/// partition, so wherever the groups live).
pub fn drop_topic(sm: &StateMachine, txn: &mut Txn<'_>, topic_id: &uuid::Uuid) -> Result<(), StorageError> {
    let keys = &sm.keys;
    let (from, to) = keys.topic_span(keys::OFFSET_BY_TOPIC, topic_id);
    let mut groups = vec![];
    txn.scan(&from, &to, &mut |k, _| {
        groups.push(Keys::decode_offset_by_topic(k).ok_or_else(|| corrupt(k, "not an offset index key"))?);
        Ok(true)
    })?;
    for g in groups {
        let (from, to) = keys.offsets_of_group_topic(&g, topic_id);
        let mut rows = vec![];
        txn.scan(&from, &to, &mut |k, _| {
            rows.push(k.to_vec());
            Ok(true)
        })?;
        for k in rows {
            txn.delete(k);
        }
        txn.delete(keys.offset_by_topic(topic_id, &g));
    }
    Ok(())
}

/// ExpireOffsets: see `Op::ExpireOffsets`. Returns (offsets expired, groups expired, more).
pub fn expire(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    retention_ms: i64,
    budget: u32,
) -> Result<(u64, u64, bool), StorageError> {
    let keys = &sm.keys;
    if retention_ms < 0 {
        return Ok((0, 0, false));
    }
    let cursor_key = keys.meta(keys::META_OFFSETS_CURSOR);
    let cursor: Option<Vec<u8>> = tables::get(txn, &cursor_key)?;
    let (start, to) = keys.table(keys::OFFSET);
    let from = cursor.filter(|c| c.as_slice() >= start.as_slice()).unwrap_or(start);
    let mut rows: Vec<(Vec<u8>, OffsetRecord)> = vec![];
    let mut next: Option<Vec<u8>> = None;
    txn.scan(&from, &to, &mut |k, v| {
        if rows.len() >= budget as usize {
            next = Some(k.to_vec());
            return Ok(false);
        }
        rows.push((k.to_vec(), crate::storage::codec::decode(k, v)?));
        Ok(true)
    })?;
    let (mut offsets, mut groups) = (0u64, 0u64);
    let mut touched: Vec<String> = vec![];
    for (k, o) in rows {
        let (gid, tp) = Keys::decode_offset(&k).ok_or_else(|| corrupt(&k, "not an offset key"))?;
        let g = group(txn, keys, &gid)?;
        if g.as_ref().is_some_and(|g| !g.members.is_empty()) {
            continue;
        }
        let since = o.commit_ms.max(g.map(|g| g.updated_ms).unwrap_or(i64::MIN));
        if now.saturating_sub(since) >= retention_ms {
            delete_offset(txn, keys, &gid, &tp)?;
            offsets += 1;
            if touched.last() != Some(&gid) {
                touched.push(gid);
            }
        }
    }
    // A group without members whose offsets all expired is forgotten (Kafka's Dead).
    for gid in touched {
        let (from, to) = keys.offsets_of_group(&gid);
        let mut left = false;
        txn.scan(&from, &to, &mut |_, _| {
            left = true;
            Ok(false)
        })?;
        if !left && txn.get(&keys.group(&gid))?.is_some() {
            txn.delete(keys.group(&gid));
            groups += 1;
        }
    }
    match &next {
        Some(n) => tables::put(txn, cursor_key, n)?,
        None => txn.delete(cursor_key),
    }
    Ok((offsets, groups, next.is_some()))
}
