//! The purge queue: removing the batches a deletion made unreachable, a bounded amount at a time.
//!
//! DeleteRecords moves a log start offset and DeleteTopics hides a topic at once, in O(partitions);
//! the batches they cut off are removed here, in queue order (topic id, partition) and offset
//! order, each costing one unit of the command's budget, so no single log entry does unbounded
//! work. Removing a batch takes its bytes off its file; a file left with none is marked for
//! deletion; a transaction marker takes its marker record and aborted range with it. A deleted
//! topic's partition then loses its producer states and open transactions (a unit each) and, last,
//! its record; leaving the queue costs one unit.

use super::keys::{TopicPartition, BATCH, OPEN_TXN, OPEN_TXN_BY_OFFSET, PRODUCER, PURGE};
use super::records::{BatchRecord, PartitionRecord};
use super::{partition_txns, tables, time_index, StateMachine};
use crate::storage::{codec, KvRead, StorageError, Txn};

/// Work done and left by one purge run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Progress {
    pub batches_deleted: u64,
}

/// Purges while `budget` lasts. Returns whether the queue is empty afterwards.
pub fn run(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    budget: &mut u32,
    progress: &mut Progress,
) -> Result<bool, StorageError> {
    let keys = &sm.keys;
    loop {
        let Some(tp) = first_queued(txn, sm)? else { return Ok(true) };
        let mut part: PartitionRecord =
            tables::get(txn, &keys.partition(&tp))?.ok_or_else(|| StorageError::Corrupt {
                key: crate::storage::display_key(&keys.purge(&tp)),
                reason: "a queued partition has no record".into(),
            })?;
        let below = if part.deleted { i64::MAX } else { part.log_start_offset };
        let done = purge_batches(sm, txn, now, &tp, &mut part, below, budget, progress)?;
        if part.deleted {
            time_index::purge_all(txn, keys, &tp)?;
        } else {
            time_index::purge_below(txn, keys, &tp, part.log_start_offset)?;
        }
        let per_partition_left = |txn: &mut Txn<'_>, budget: &mut u32| -> Result<bool, StorageError> {
            for tag in [PRODUCER, OPEN_TXN, OPEN_TXN_BY_OFFSET] {
                if !purge_table(txn, sm, tag, &tp, budget)? {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        if !done || (part.deleted && per_partition_left(txn, budget)?) || *budget == 0 {
            tables::put(txn, keys.partition(&tp), &part)?;
            return Ok(false);
        }
        *budget -= 1;
        txn.delete(keys.purge(&tp));
        if part.deleted {
            txn.delete(keys.partition(&tp));
        } else {
            tables::put(txn, keys.partition(&tp), &part)?;
        }
    }
}

fn first_queued(view: &dyn KvRead, sm: &StateMachine) -> Result<Option<TopicPartition>, StorageError> {
    let (from, to) = sm.keys.table(PURGE);
    let mut first = None;
    view.scan(&from, &to, &mut |k, _| {
        first = Some(sm.keys.decode_tp(k).ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(k),
            reason: "malformed purge queue key".into(),
        })?);
        Ok(false)
    })?;
    Ok(first)
}

/// Deletes the batches of `tp` whose last offset is below `below`, while the budget lasts.
/// Returns whether none is left.
#[allow(clippy::too_many_arguments)]
fn purge_batches(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    tp: &TopicPartition,
    part: &mut PartitionRecord,
    below: i64,
    budget: &mut u32,
    progress: &mut Progress,
) -> Result<bool, StorageError> {
    let keys = &sm.keys;
    loop {
        // Read a page of doomed batches, then delete them (a scan cannot write as it goes).
        let page = (*budget as usize).clamp(1, 1024);
        let from = keys.tp_start(BATCH, tp);
        let to = if below == i64::MAX { keys.tp_end(BATCH, tp) } else { keys.batch(tp, below.max(0)) };
        let mut doomed: Vec<(Vec<u8>, BatchRecord)> = Vec::new();
        txn.scan(&from, &to, &mut |k, v| {
            doomed.push((k.to_vec(), codec::decode(k, v)?));
            Ok(doomed.len() < page + 1)
        })?;
        if doomed.is_empty() {
            return Ok(true);
        }
        for (k, b) in doomed {
            if *budget == 0 {
                return Ok(false);
            }
            *budget -= 1;
            progress.batches_deleted += 1;
            txn.delete(k);
            forget_batch(txn, sm, tp, part, &b, now)?;
        }
    }
}

/// What deleting a stored batch releases: its bytes from the partition and its file, or, for a
/// transaction marker, its marker record and aborted range.
pub fn forget_batch(
    txn: &mut Txn<'_>,
    sm: &StateMachine,
    tp: &TopicPartition,
    part: &mut PartitionRecord,
    b: &BatchRecord,
    now: i64,
) -> Result<(), StorageError> {
    if b.is_marker() {
        partition_txns::forget_marker(txn, &sm.keys, tp, b.base_offset);
        return Ok(());
    }
    part.byte_size -= i64::from(b.byte_size);
    tables::release_file_bytes(txn, &sm.keys, &b.object_key, i64::from(b.byte_size), now)
}

/// Deletes the keys of `tp` in table `tag` (producer states, open transactions), while the budget
/// lasts. Returns whether none is left.
fn purge_table(
    txn: &mut Txn<'_>,
    sm: &StateMachine,
    tag: u8,
    tp: &TopicPartition,
    budget: &mut u32,
) -> Result<bool, StorageError> {
    let from = sm.keys.tp_start(tag, tp);
    let to = sm.keys.tp_end(tag, tp);
    loop {
        let mut doomed = Vec::new();
        let page = (*budget as usize).clamp(1, 1024);
        txn.scan(&from, &to, &mut |k, _| {
            doomed.push(k.to_vec());
            Ok(doomed.len() < page + 1)
        })?;
        if doomed.is_empty() {
            return Ok(true);
        }
        for k in doomed {
            if *budget == 0 {
                return Ok(false);
            }
            *budget -= 1;
            txn.delete(k);
        }
    }
}

/// Queues `tp` if some stored batch lies wholly below its log start offset.
pub fn enqueue_if_needed(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    tp: &TopicPartition,
    part: &PartitionRecord,
) -> Result<(), StorageError> {
    let from = sm.keys.tp_start(BATCH, tp);
    let to = sm.keys.batch(tp, part.log_start_offset.max(0));
    let mut any = false;
    txn.scan(&from, &to, &mut |_, _| {
        any = true;
        Ok(false)
    })?;
    if any {
        txn.put(sm.keys.purge(tp), Vec::new());
    }
    Ok(())
}
