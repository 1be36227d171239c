//! Retention: delete the oldest batches beyond a topic's retention.ms and retention.bytes.
//!
//! One EnforceRetention command first works the purge queue, then forgets tombstones of fenced
//! object keys older than `fenced_object_retention_ms` (oldest first, a unit each, see `files`);
//! only when both are done does it walk
//! the partitions, from a cursor kept in the state (so the walk resumes where the previous command
//! stopped, identically on every replica), one budget unit per partition examined and per batch
//! deleted. From a partition's start, a batch goes while its effective timestamp is older than
//! `now - retention.ms`, or while the partition would still hold at least `retention.bytes` without
//! it (Kafka's rule for segments); the first batch that stays ends the partition's turn, and so
//! does the first batch of an open transaction (retention never cuts into a transaction that can
//! still commit; the transaction coordinator's timeout bounds how long it can hold retention back).
//! The log start offset follows the deleted batches.
//!
//! After a complete pass over the partitions, the same kind of walk (its own cursor, one unit per
//! state examined) expires idempotent-producer states whose last append is `producer.id.
//! expiration.ms` old, as Kafka does, so producer churn does not grow the state forever (never a
//! producer with a transaction open on the partition); then the next command starts a new pass
//! over the partitions. Time is the command's.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::command::RetentionReport;
use super::keys::{Keys, TopicPartition, BATCH, META_PRODUCER_CURSOR, META_RETENTION_CURSOR, PARTITION, PRODUCER};
use super::purge::{self, Progress};
use super::records::{BatchRecord, PartitionRecord, ProducerRecord, TopicRecord};
use super::{files, partition_txns, tables, time_index, StateMachine};
use crate::storage::{codec, KvRead, StorageError, Txn};

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    mut budget: u32,
    producer_expiration_ms: i64,
    fenced_object_retention_ms: i64,
) -> Result<RetentionReport, StorageError> {
    let keys = &sm.keys;
    let mut report = RetentionReport::default();
    let mut progress = Progress::default();
    let queue_empty = purge::run(sm, txn, now, &mut budget, &mut progress)?;
    report.batches_deleted = progress.batches_deleted;
    if !queue_empty {
        report.more = true;
        return Ok(report);
    }
    if fenced_object_retention_ms >= 0 {
        let before = now.saturating_sub(fenced_object_retention_ms);
        if !files::forget_fenced(sm, txn, before, &mut budget, &mut report.fenced_forgotten)? {
            report.more = true;
            return Ok(report);
        }
    }

    let producer_cursor_key = keys.meta(META_PRODUCER_CURSOR);
    let mut producer_cursor: Option<Vec<u8>> = tables::get(txn, &producer_cursor_key)?;
    if producer_expiration_ms < 0 && producer_cursor.take().is_some() {
        txn.delete(producer_cursor_key.clone());
    }
    let from = match producer_cursor {
        Some(from) => from,
        None => {
            if !walk_partitions(sm, txn, now, &mut budget, &mut report)? {
                report.more = true;
                return Ok(report);
            }
            if producer_expiration_ms < 0 {
                return Ok(report);
            }
            keys.table(PRODUCER).0
        }
    };
    let expired_at_or_before = now.saturating_sub(producer_expiration_ms);
    match expire_producers(sm, txn, from, expired_at_or_before, &mut budget, &mut report)? {
        Some(next) => {
            tables::put(txn, producer_cursor_key, &next)?;
            report.more = true;
        }
        None => txn.delete(producer_cursor_key),
    }
    Ok(report)
}

/// One step of the walk over the partitions, from the cursor in the state. Returns true when the
/// walk reached the end (the cursor is then cleared), false when the budget ran out first.
fn walk_partitions(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    budget: &mut u32,
    report: &mut RetentionReport,
) -> Result<bool, StorageError> {
    let keys = &sm.keys;
    let cursor_key = keys.meta(META_RETENTION_CURSOR);
    let mut cursor: Option<TopicPartition> = tables::get(txn, &cursor_key)?;
    let mut topics: BTreeMap<Uuid, Option<TopicRecord>> = BTreeMap::new();
    loop {
        let page = next_partitions(txn, sm, cursor.as_ref(), (*budget as usize).clamp(1, 256))?;
        if page.is_empty() {
            // A whole pass is done: the next one starts from the beginning.
            txn.delete(cursor_key);
            return Ok(true);
        }
        for (tp, mut part) in page {
            if *budget == 0 {
                tables::put(txn, cursor_key, &tp)?;
                return Ok(false);
            }
            *budget -= 1;
            report.partitions_examined += 1;
            cursor = Some(tp);
            let topic = match topics.get(&tp.topic_id) {
                Some(t) => t.clone(),
                None => {
                    let t = tables::topic(txn, keys, &tp.topic_id)?;
                    topics.insert(tp.topic_id, t.clone());
                    t
                }
            };
            let Some(topic) = topic else { continue };
            if topic.retention_ms < 0 && topic.retention_bytes < 0 {
                continue;
            }
            if !trim(sm, txn, now, &tp, &mut part, &topic, budget, report)? {
                tables::put(txn, cursor_key, &tp)?;
                return Ok(false);
            }
        }
        // Continue after the last partition of the page.
        cursor = cursor.map(successor);
    }
}

/// Deletes idempotent-producer states whose last append is at or before `expired_at_or_before`
/// (Kafka's `producer.id.expiration.ms`), walking the producer table from key `from`, one budget
/// unit per state examined. Returns the key to resume from when the budget ran out first.
fn expire_producers(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    mut from: Vec<u8>,
    expired_at_or_before: i64,
    budget: &mut u32,
    report: &mut RetentionReport,
) -> Result<Option<Vec<u8>>, StorageError> {
    let end = sm.keys.table(PRODUCER).1;
    loop {
        let page_len = (*budget as usize).clamp(1, 256);
        let mut page: Vec<(Vec<u8>, ProducerRecord)> = Vec::new();
        txn.scan(&from, &end, &mut |k, v| {
            page.push((k.to_vec(), codec::decode(k, v)?));
            Ok(page.len() < page_len)
        })?;
        let Some(last) = page.last() else { return Ok(None) };
        let mut next = last.0.clone();
        next.push(0);
        for (k, state) in page {
            if *budget == 0 {
                return Ok(Some(k));
            }
            *budget -= 1;
            let idle = state.batches.last().is_none_or(|b| b.log_append_time <= expired_at_or_before);
            if idle && !has_open_txn(txn, &sm.keys, &k)? {
                txn.delete(k);
                report.producers_expired += 1;
            }
        }
        from = next;
    }
}

/// Whether the producer of producer-state key `key` has a transaction open on its partition.
fn has_open_txn(view: &dyn KvRead, keys: &Keys, key: &[u8]) -> Result<bool, StorageError> {
    let (Some(tp), Some(producer_id)) = (keys.decode_tp(key), Keys::decode_offset_suffix(key)) else {
        return Err(StorageError::Corrupt {
            key: crate::storage::display_key(key),
            reason: "malformed producer state key".into(),
        });
    };
    Ok(partition_txns::open(view, keys, &tp, producer_id)?.is_some())
}

/// The key-order successor of `tp` (the next possible partition of the same topic).
fn successor(tp: TopicPartition) -> TopicPartition {
    TopicPartition { topic_id: tp.topic_id, partition: tp.partition + 1 }
}

/// Live partitions at or after `from`, at most `limit`.
fn next_partitions(
    view: &dyn KvRead,
    sm: &StateMachine,
    from: Option<&TopicPartition>,
    limit: usize,
) -> Result<Vec<(TopicPartition, PartitionRecord)>, StorageError> {
    let (start, end) = sm.keys.table(PARTITION);
    let start = from.map_or(start, |tp| sm.keys.partition(tp));
    let mut out = Vec::new();
    view.scan(&start, &end, &mut |k, v| {
        let tp = sm.keys.decode_tp(k).ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(k),
            reason: "malformed partition key".into(),
        })?;
        let part: PartitionRecord = codec::decode(k, v)?;
        if !part.deleted {
            out.push((tp, part));
        }
        Ok(out.len() < limit)
    })?;
    Ok(out)
}

/// Deletes `tp`'s batches beyond retention. Returns false when the budget ran out first.
#[allow(clippy::too_many_arguments)]
fn trim(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    tp: &TopicPartition,
    part: &mut PartitionRecord,
    topic: &TopicRecord,
    budget: &mut u32,
    report: &mut RetentionReport,
) -> Result<bool, StorageError> {
    let keys = &sm.keys;
    let expired_before = if topic.retention_ms >= 0 { Some(now.saturating_sub(topic.retention_ms)) } else { None };
    let first_unstable = partition_txns::first_unstable(txn, keys, tp)?.unwrap_or(i64::MAX);
    let mut changed = false;
    let mut finished = true;
    'pages: loop {
        let page_len = (*budget as usize).clamp(1, 256);
        let mut page: Vec<(Vec<u8>, BatchRecord)> = Vec::new();
        txn.scan(&keys.tp_start(BATCH, tp), &keys.tp_end(BATCH, tp), &mut |k, v| {
            page.push((k.to_vec(), codec::decode(k, v)?));
            Ok(page.len() < page_len)
        })?;
        if page.is_empty() {
            break;
        }
        for (k, b) in page {
            let too_old = expired_before.is_some_and(|t| b.effective_timestamp() < t);
            let too_big =
                topic.retention_bytes >= 0 && part.byte_size - i64::from(b.byte_size) >= topic.retention_bytes;
            if !(too_old || too_big) || b.last_offset >= first_unstable {
                break 'pages;
            }
            if *budget == 0 {
                finished = false;
                break 'pages;
            }
            *budget -= 1;
            report.batches_deleted += 1;
            txn.delete(k);
            purge::forget_batch(txn, sm, tp, part, &b, now)?;
            part.log_start_offset = part.log_start_offset.max(b.last_offset + 1);
            changed = true;
        }
    }
    if changed {
        time_index::purge_below(txn, keys, tp, part.log_start_offset)?;
        tables::put(txn, keys.partition(tp), part)?;
    }
    Ok(finished)
}
