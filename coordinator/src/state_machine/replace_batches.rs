//! ReplaceBatches: the atomic replace of object consolidation (KIP-1165). A broker copied some
//! committed batches of one partition, byte for byte, into a new object; this moves their
//! coordinates (object key, byte offset) there in one log entry, keeping everything else of them:
//! offsets, sizes, timestamps, batch ids, producer state, transaction markers, the time index.
//!
//! Each batch is named by its key (its last offset), the batch id the broker read and the object
//! it copied the bytes from; it is replaced only if it is still that batch, in that object, with
//! the same size, and not below the log start (deleted, waiting to be purged): a batch that changed
//! meanwhile (retention, DeleteRecords, topic deletion, another replace) keeps its coordinates and
//! is answered `Changed`. The old objects lose the replaced bytes through `tables::release_file_bytes`, so an
//! object left without live bytes is marked for deletion and deleted by the existing fence-then-
//! delete path after its grace (a fetch that read the old coordinates still finds its bytes).
//!
//! The new object is recorded as a file of this metadata partition with the replaced bytes live;
//! with none (every batch changed, the partition deleted) it is marked for deletion at once, so no
//! uploaded object is left unreferenced. Refused whole, nothing recorded: a malformed request
//! (INVALID_REQUEST) and an object key that was fenced (KAFKA_STORAGE_ERROR: deleted or being
//! deleted). A key this metadata partition knows already is a repeat (a resend whose answer was
//! lost): each batch already at the requested coordinates in it is answered `Replaced`, the others
//! `Changed`, and nothing is changed.

use serde::{Deserialize, Serialize};

use super::command::{ErrorCode, Failure, OBJECT_FORMAT_WAL_MULTI_SEGMENT};
use super::commit_file::MAX_OBJECT_KEY_LEN;
use super::keys::TopicPartition;
use super::records::{BatchRecord, FileRecord};
use super::{tables, StateMachine};
use crate::storage::{StorageError, Txn};

/// The most batches one ReplaceBatches names.
pub const MAX_REPLACED_BATCHES: usize = 100_000;

/// A set of committed batches of one partition, copied into a new object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaceBatches {
    /// The new object.
    pub object_key: String,
    pub object_format: i8,
    pub file_size: i64,
    pub uploader_broker_id: i32,
    pub tp: TopicPartition,
    /// The objects the batches were copied from (each batch names one by its index).
    pub sources: Vec<String>,
    /// In increasing offset order.
    pub batches: Vec<ReplacedBatch>,
}

/// One batch moved into the new object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacedBatch {
    /// Its key: the batch's last offset.
    pub last_offset: i64,
    /// The batch id the broker read: the stored batch must still be this one.
    pub batch_id: i64,
    /// The object it was copied from (an index into `sources`): the batch must still be there.
    pub source: u32,
    /// Where it is in the new object; its size must be the stored one.
    pub byte_offset: i32,
    pub byte_size: i32,
}

/// What became of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Replaced {
    /// Its coordinates are now in the new object.
    Replaced,
    /// It is no longer the batch that was copied (or is gone): its coordinates are unchanged.
    Changed,
}

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    r: &ReplaceBatches,
) -> Result<Result<Vec<Replaced>, Failure>, StorageError> {
    let keys = &sm.keys;
    if let Err(f) = validate(r) {
        return Ok(Err(f));
    }
    if let Some(t) = tables::fenced(txn, keys, &r.object_key)? {
        return Ok(Err(Failure::new(
            ErrorCode::KafkaStorageError,
            format!(
                "object {:?} was deleted (fenced at {}) before this replace applied; nothing was replaced",
                r.object_key, t.fenced_at
            ),
        )));
    }
    if tables::file(txn, keys, &r.object_key)?.is_some() {
        // A repeat: answered from what the batches hold now.
        let mut out = Vec::with_capacity(r.batches.len());
        for b in &r.batches {
            let stored: Option<BatchRecord> = tables::get(txn, &keys.batch(&r.tp, b.last_offset))?;
            let there = stored.is_some_and(|s| {
                s.batch_id == b.batch_id && s.object_key == r.object_key && s.byte_offset == b.byte_offset
            });
            out.push(if there { Replaced::Replaced } else { Replaced::Changed });
        }
        return Ok(Ok(out));
    }
    let part = if r.tp.partition < 0 { None } else { tables::live_partition(txn, keys, &r.tp)? };
    let mut out = Vec::with_capacity(r.batches.len());
    let mut live_bytes = 0i64;
    for b in &r.batches {
        let Some(part) = &part else {
            out.push(Replaced::Changed);
            continue;
        };
        let key = keys.batch(&r.tp, b.last_offset);
        let stored: Option<BatchRecord> = tables::get(txn, &key)?;
        let source = &r.sources[b.source as usize];
        let Some(mut stored) = stored.filter(|s| {
            s.batch_id == b.batch_id
                && !s.is_marker()
                && s.byte_size == b.byte_size
                && s.object_key == *source
                && s.last_offset >= part.log_start_offset
        }) else {
            out.push(Replaced::Changed);
            continue;
        };
        tables::release_file_bytes(txn, keys, &stored.object_key, i64::from(stored.byte_size), now)?;
        stored.object_key = r.object_key.clone();
        stored.byte_offset = b.byte_offset;
        tables::put(txn, key, &stored)?;
        live_bytes += i64::from(b.byte_size);
        out.push(Replaced::Replaced);
    }
    let mut file = FileRecord {
        object_format: r.object_format,
        file_size: r.file_size,
        uploader_broker_id: r.uploader_broker_id,
        owner_ids: vec![sm.metadata_partition as i32],
        committed_at: now,
        live_bytes,
        marked_for_deletion_at: None,
    };
    if live_bytes == 0 {
        tables::mark_for_deletion(txn, keys, &r.object_key, &mut file, now);
    }
    tables::put(txn, keys.file(&r.object_key), &file)?;
    Ok(Ok(out))
}

fn validate(r: &ReplaceBatches) -> Result<(), Failure> {
    let bad = |m: String| Err(Failure::new(ErrorCode::InvalidRequest, m));
    if r.object_key.is_empty() || r.object_key.len() > MAX_OBJECT_KEY_LEN {
        return bad(format!("an object key has 1 to {MAX_OBJECT_KEY_LEN} bytes, not {}", r.object_key.len()));
    }
    if r.object_format != OBJECT_FORMAT_WAL_MULTI_SEGMENT {
        return bad(format!("unknown object format {}", r.object_format));
    }
    if r.file_size < 0 {
        return bad(format!("file size {} is negative", r.file_size));
    }
    if r.batches.is_empty() || r.batches.len() > MAX_REPLACED_BATCHES {
        return bad(format!("a replace names 1 to {MAX_REPLACED_BATCHES} batches, not {}", r.batches.len()));
    }
    if r.sources.is_empty() || r.sources.len() > r.batches.len() {
        return bad(format!("{} source objects for {} batches", r.sources.len(), r.batches.len()));
    }
    if let Some(s) = r.sources.iter().find(|s| s.is_empty() || s.len() > MAX_OBJECT_KEY_LEN || **s == r.object_key) {
        return bad(format!("source object key {s:?} is empty, too long or the new object's"));
    }
    let mut previous: Option<i64> = None;
    for b in &r.batches {
        if previous.is_some_and(|p| b.last_offset <= p) || b.last_offset < 0 {
            return bad(format!("batch last offsets must increase and not be negative ({})", b.last_offset));
        }
        previous = Some(b.last_offset);
        if b.source as usize >= r.sources.len() {
            return bad(format!(
                "batch ending at offset {} names source {} of {}",
                b.last_offset,
                b.source,
                r.sources.len()
            ));
        }
        let end = i64::from(b.byte_offset) + i64::from(b.byte_size);
        if b.byte_offset < 0 || b.byte_size <= 0 || end > r.file_size {
            return bad(format!(
                "batch ending at offset {} is at bytes {}+{} of a {}-byte object",
                b.last_offset, b.byte_offset, b.byte_size, r.file_size
            ));
        }
    }
    Ok(())
}
