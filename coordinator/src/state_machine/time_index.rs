//! The timestamp index: "first batch at or after the log start whose timestamp is ≥ t" and "the
//! batch with the largest timestamp" in O(F·L + n/F^L) reads, whatever the partition's depth.
//!
//! Batch timestamps need not grow with offsets (CreateTime), and deletions cut the log at its
//! start, so a running-maximum index (Kafka's per-segment time index) would go stale when the log
//! start moves. Instead batches are grouped, in offset order, into chunks of [`FANOUT`] batches;
//! chunks into chunks of [`FANOUT`] chunks, up to [`LEVELS`] levels. A closed chunk is written once
//! (`I` table, keyed by its last batch's last offset) with its first batch's last offset and its
//! maximum timestamp; the chunk being filled at each level lives in the partition record, so an
//! append costs no extra write except when a chunk closes (1 in 64 appends).
//!
//! A query walks the closed top-level chunks from the log start and descends only into a chunk
//! whose maximum qualifies. Only the one chunk per level that straddles the log start can hold
//! deleted batches, so at most one descent per level is wasted. Chunks wholly below the log start
//! are removed by the purge.

use super::keys::{Keys, TopicPartition};
use super::records::{BatchRecord, BatchRecordRef, PartitionRecord};
pub use super::records::{Chunk, OpenChunk, LEVELS};
use crate::storage::{codec, KvRead, StorageError, Txn};

/// Items per chunk.
pub const FANOUT: u32 = 64;
/// Records a batch just appended to `tp`, closing and writing chunks that become full.
pub fn on_append(
    txn: &mut Txn<'_>,
    keys: &Keys,
    tp: &TopicPartition,
    part: &mut PartitionRecord,
    batch: &BatchRecordRef<'_>,
) -> Result<(), StorageError> {
    let mut item = Chunk {
        first_last_offset: batch.last_offset,
        max_timestamp: batch.effective_timestamp(),
        max_base_offset: batch.base_offset,
    };
    let last_offset = batch.last_offset;
    for level in 0..LEVELS {
        let open = &mut part.open_chunks[level];
        if open.count == 0 {
            open.chunk = item;
        } else if item.max_timestamp > open.chunk.max_timestamp {
            open.chunk.max_timestamp = item.max_timestamp;
            open.chunk.max_base_offset = item.max_base_offset;
        }
        open.count += 1;
        if open.count < FANOUT {
            return Ok(());
        }
        let closed = open.chunk;
        *open = OpenChunk::EMPTY;
        txn.put(keys.index_chunk(tp, level as u8 + 1, last_offset), codec::encode(&closed)?);
        item = closed;
    }
    Ok(())
}

/// A batch found by a time lookup: its base offset and its effective timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub base_offset: i64,
    pub timestamp: i64,
}

/// The first batch with last offset ≥ `log_start` whose effective timestamp is ≥ `t`.
pub fn first_at_or_after(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    log_start: i64,
    t: i64,
) -> Result<Option<Found>, StorageError> {
    find_first(view, keys, tp, LEVELS, log_start, i64::MAX, t)
}

/// The batch with the largest effective timestamp among those with last offset ≥ `log_start`
/// (the earliest one on ties).
pub fn max_timestamp(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    log_start: i64,
) -> Result<Option<Found>, StorageError> {
    find_max(view, keys, tp, LEVELS, log_start, i64::MAX)
}

/// Deletes the chunks that lie wholly below `log_start`.
pub fn purge_below(txn: &mut Txn<'_>, keys: &Keys, tp: &TopicPartition, log_start: i64) -> Result<(), StorageError> {
    for level in 1..=LEVELS as u8 {
        let (from, _) = keys.index_chunks_from(tp, level, 0);
        let to = keys.index_chunk(tp, level, log_start.max(0));
        delete_range(txn, &from, &to)?;
    }
    Ok(())
}

/// Deletes every chunk of `tp`.
pub fn purge_all(txn: &mut Txn<'_>, keys: &Keys, tp: &TopicPartition) -> Result<(), StorageError> {
    let from = keys.tp_start(super::keys::INDEX, tp);
    let to = keys.tp_end(super::keys::INDEX, tp);
    delete_range(txn, &from, &to)
}

fn delete_range(txn: &mut Txn<'_>, from: &[u8], to: &[u8]) -> Result<(), StorageError> {
    let mut doomed = vec![];
    txn.scan(from, to, &mut |k, _| {
        doomed.push(k.to_vec());
        Ok(true)
    })?;
    for k in doomed {
        txn.delete(k);
    }
    Ok(())
}

/// Key range of `level`'s items (batches at level 0) whose last offset is in `[from, to]`.
fn level_range(keys: &Keys, tp: &TopicPartition, level: usize, from: i64, to: i64) -> (Vec<u8>, Vec<u8>) {
    if level == 0 {
        let (start, end) = keys.batches_from(tp, from);
        let end = if to == i64::MAX { end } else { keys.batch(tp, to + 1) };
        (start, end)
    } else {
        let (start, end) = keys.index_chunks_from(tp, level as u8, from);
        let end = if to == i64::MAX { end } else { keys.index_chunk(tp, level as u8, to + 1) };
        (start, end)
    }
}

fn find_first(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    level: usize,
    from: i64,
    to: i64,
    t: i64,
) -> Result<Option<Found>, StorageError> {
    if from > to {
        return Ok(None);
    }
    let (start, end) = level_range(keys, tp, level, from, to);
    let mut found = None;
    if level == 0 {
        view.scan(&start, &end, &mut |k, v| {
            let b: BatchRecord = codec::decode(k, v)?;
            if b.effective_timestamp() >= t {
                found = Some(Found { base_offset: b.base_offset, timestamp: b.effective_timestamp() });
                return Ok(false);
            }
            Ok(true)
        })?;
        return Ok(found);
    }
    let mut pos = from;
    view.scan(&start, &end, &mut |k, v| {
        let c: Chunk = codec::decode(k, v)?;
        let chunk_last = chunk_last_offset(k)?;
        if c.max_timestamp >= t {
            found = find_first(view, keys, tp, level - 1, pos.max(c.first_last_offset), chunk_last, t)?;
            if found.is_some() {
                return Ok(false);
            }
        }
        pos = chunk_last.saturating_add(1);
        Ok(true)
    })?;
    if found.is_some() {
        return Ok(found);
    }
    find_first(view, keys, tp, level - 1, pos, to, t)
}

fn find_max(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    level: usize,
    from: i64,
    to: i64,
) -> Result<Option<Found>, StorageError> {
    if from > to {
        return Ok(None);
    }
    let (start, end) = level_range(keys, tp, level, from, to);
    let mut best: Option<Found> = None;
    let keep = |best: &mut Option<Found>, cand: Option<Found>| {
        if let Some(c) = cand {
            if best.is_none_or(|b| c.timestamp > b.timestamp) {
                *best = Some(c);
            }
        }
    };
    if level == 0 {
        view.scan(&start, &end, &mut |k, v| {
            let b: BatchRecord = codec::decode(k, v)?;
            keep(&mut best, Some(Found { base_offset: b.base_offset, timestamp: b.effective_timestamp() }));
            Ok(true)
        })?;
        return Ok(best);
    }
    let mut pos = from;
    view.scan(&start, &end, &mut |k, v| {
        let c: Chunk = codec::decode(k, v)?;
        let chunk_last = chunk_last_offset(k)?;
        let cand = if c.first_last_offset >= pos {
            // Wholly inside the range: its summary is exact.
            Some(Found { base_offset: c.max_base_offset, timestamp: c.max_timestamp })
        } else {
            // Straddles the start of the range: look inside.
            find_max(view, keys, tp, level - 1, pos, chunk_last)?
        };
        keep(&mut best, cand);
        pos = chunk_last.saturating_add(1);
        Ok(true)
    })?;
    let tail = find_max(view, keys, tp, level - 1, pos, to)?;
    keep(&mut best, tail);
    Ok(best)
}

fn chunk_last_offset(key: &[u8]) -> Result<i64, StorageError> {
    Keys::decode_offset_suffix(key).ok_or_else(|| StorageError::Corrupt {
        key: crate::storage::display_key(key),
        reason: "index key too short".into(),
    })
}
