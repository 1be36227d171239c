//! DisklessCommitFile: validate each batch, check idempotent producers, assign offsets.
//!
//! Batches are taken in request order. A batch that fails its checks gets its own error and
//! changes nothing; the others go on. Accepted batches get `AssignedBaseOffset` = the partition's
//! high watermark, which then grows by the batch's record count. The file is recorded with the
//! bytes of its accepted batches as live bytes; a file with none is marked for deletion at once.
//! An object key this metadata partition already knows is refused, leaving the existing file as it
//! was. A commit applied after its deadline is refused whole (REQUEST_TIMED_OUT) and not recorded.

use super::command::{
    CommitBatch, CommitFile, CommittedBatch, ErrorCode, Failure, OBJECT_FORMAT_WAL_MULTI_SEGMENT,
    TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME,
};
use super::keys::META_NEXT_BATCH_ID;
use super::producer_state::{self, Verdict};
use super::records::{BatchRecord, FileRecord, BATCH_ID_COUNTER_BITS};
use super::{tables, time_index, StateMachine};
use crate::storage::{StorageError, Txn};

/// The longest object key accepted.
pub const MAX_OBJECT_KEY_LEN: usize = 1024;
/// Record batch format v2, the only one diskless topics store.
pub const MAGIC_V2: i8 = 2;

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    c: &CommitFile,
) -> Result<Vec<Result<CommittedBatch, Failure>>, StorageError> {
    let keys = &sm.keys;
    if c.deadline_ms.is_some_and(|d| now > d) {
        let late = Failure::new(
            ErrorCode::RequestTimedOut,
            format!("commit of {:?} reached the log after its deadline; nothing of it was committed", c.object_key),
        );
        return Ok(c.batches.iter().map(|_| Err(late.clone())).collect());
    }
    let refused = match validate_file(c) {
        Err(f) => Some(f),
        Ok(()) if tables::file(txn, keys, &c.object_key)?.is_some() => Some(Failure::new(
            ErrorCode::InvalidRequest,
            format!("object {:?} is already committed; a WAL segment is committed once", c.object_key),
        )),
        Ok(()) => None,
    };
    if let Some(f) = refused {
        return Ok(c.batches.iter().map(|_| Err(f.clone())).collect());
    }

    let mut next_batch_id: u64 = tables::get(txn, &keys.meta(META_NEXT_BATCH_ID))?.unwrap_or(0);
    let mut live_bytes = 0i64;
    let mut results = Vec::with_capacity(c.batches.len());
    for b in &c.batches {
        let r = commit_batch(sm, txn, now, c, b, &mut next_batch_id)?;
        if let Ok(ok) = &r {
            if !ok.is_duplicate {
                live_bytes += i64::from(b.size);
            }
        }
        results.push(r);
    }
    tables::put(txn, keys.meta(META_NEXT_BATCH_ID), &next_batch_id)?;

    let mut file = FileRecord {
        object_format: c.object_format,
        file_size: c.file_size,
        uploader_broker_id: c.uploader_broker_id,
        owner_ids: c.owner_ids.clone(),
        committed_at: now,
        live_bytes,
        marked_for_deletion_at: None,
    };
    if live_bytes == 0 {
        tables::mark_for_deletion(txn, keys, &c.object_key, &mut file, now);
    }
    tables::put(txn, keys.file(&c.object_key), &file)?;
    Ok(results)
}

fn commit_batch(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    c: &CommitFile,
    b: &CommitBatch,
    next_batch_id: &mut u64,
) -> Result<Result<CommittedBatch, Failure>, StorageError> {
    let keys = &sm.keys;
    let record_count = match validate_batch(c, b) {
        Ok(n) => n,
        Err(f) => return Ok(Err(f)),
    };
    let unknown = || {
        Failure::new(ErrorCode::UnknownTopicOrPartition, format!("this coordinator does not host partition {}", b.tp))
    };
    if b.tp.partition < 0 {
        return Ok(Err(unknown()));
    }
    let Some(mut part) = tables::live_partition(txn, keys, &b.tp)? else {
        return Ok(Err(unknown()));
    };

    let idempotent = b.producer_id >= 0;
    let producer = if idempotent { tables::producer(txn, keys, &b.tp, b.producer_id)? } else { None };
    if idempotent {
        match producer_state::check(producer.as_ref(), b) {
            Verdict::Append => {}
            Verdict::Duplicate(d) => {
                return Ok(Ok(CommittedBatch {
                    assigned_base_offset: d.assigned_base_offset,
                    log_append_time: d.log_append_time,
                    log_start_offset: part.log_start_offset,
                    is_duplicate: true,
                }))
            }
            Verdict::Reject(f) => return Ok(Err(f)),
        }
    }

    let base = part.high_watermark;
    let Some(new_hwm) = base.checked_add(record_count) else {
        return Ok(Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("partition {} would pass the largest offset", b.tp),
        )));
    };
    let batch_id =
        (i64::from(sm.group) << BATCH_ID_COUNTER_BITS) | (*next_batch_id as i64 & ((1 << BATCH_ID_COUNTER_BITS) - 1));
    *next_batch_id += 1;
    let record = BatchRecord {
        batch_id,
        object_key: c.object_key.clone(),
        magic: b.magic,
        byte_offset: b.byte_offset,
        byte_size: b.size,
        base_offset: base,
        last_offset: new_hwm - 1,
        log_append_time: now,
        batch_max_timestamp: b.batch_max_timestamp,
        timestamp_type: b.timestamp_type,
    };
    tables::put(txn, keys.batch(&b.tp, record.last_offset), &record)?;
    time_index::on_append(txn, keys, &b.tp, &mut part, &record)?;
    part.high_watermark = new_hwm;
    part.byte_size += i64::from(b.size);
    tables::put(txn, keys.partition(&b.tp), &part)?;
    if idempotent {
        let updated = producer_state::record(producer, b, base, now);
        tables::put(txn, keys.producer(&b.tp, b.producer_id), &updated)?;
    }
    Ok(Ok(CommittedBatch {
        assigned_base_offset: base,
        log_append_time: now,
        log_start_offset: part.log_start_offset,
        is_duplicate: false,
    }))
}

fn validate_file(c: &CommitFile) -> Result<(), Failure> {
    let bad = |m: String| Err(Failure::new(ErrorCode::InvalidRequest, m));
    if c.object_key.is_empty() || c.object_key.len() > MAX_OBJECT_KEY_LEN {
        return bad(format!("an object key has 1 to {MAX_OBJECT_KEY_LEN} bytes, not {}", c.object_key.len()));
    }
    if c.object_format != OBJECT_FORMAT_WAL_MULTI_SEGMENT {
        return bad(format!("unknown object format {}", c.object_format));
    }
    if c.file_size < 0 {
        return bad(format!("file size {} is negative", c.file_size));
    }
    Ok(())
}

/// Checks a batch's coordinates against themselves and the file; returns its record count.
fn validate_batch(c: &CommitFile, b: &CommitBatch) -> Result<i64, Failure> {
    let invalid = |m: String| Err(Failure::new(ErrorCode::InvalidRequest, m));
    let corrupt = |m: String| Err(Failure::new(ErrorCode::CorruptMessage, m));
    if b.magic != MAGIC_V2 {
        return corrupt(format!("record batch magic {} is not supported (only {MAGIC_V2})", b.magic));
    }
    if b.timestamp_type != TIMESTAMP_CREATE_TIME && b.timestamp_type != TIMESTAMP_LOG_APPEND_TIME {
        return corrupt(format!("unknown timestamp type {}", b.timestamp_type));
    }
    if b.size <= 0 {
        return invalid(format!("batch size {} is not positive", b.size));
    }
    if b.byte_offset < 0 || i64::from(b.byte_offset) + i64::from(b.size) > c.file_size {
        return invalid(format!(
            "batch bytes [{}, {}) lie outside the file's {} bytes",
            b.byte_offset,
            i64::from(b.byte_offset) + i64::from(b.size),
            c.file_size
        ));
    }
    if b.base_offset < 0 || b.last_offset < b.base_offset {
        return corrupt(format!("batch offsets [{}, {}] are not a range", b.base_offset, b.last_offset));
    }
    let count = b.last_offset - b.base_offset + 1;
    if count > i64::from(i32::MAX) {
        return corrupt(format!("batch spans {count} offsets"));
    }
    if b.producer_id < -1 {
        return invalid(format!("producer id {} is negative", b.producer_id));
    }
    if b.producer_id >= 0 {
        if b.producer_epoch < 0 || b.base_sequence < 0 || b.last_sequence < 0 {
            return invalid(format!(
                "idempotent batch of producer {} needs an epoch and sequences, got epoch {} sequences [{}, {}]",
                b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence
            ));
        }
        let span = producer_state::sequence_span(b.base_sequence, b.last_sequence);
        if span != count {
            return corrupt(format!(
                "sequences [{}, {}] span {span} records but offsets span {count}",
                b.base_sequence, b.last_sequence
            ));
        }
    }
    Ok(count)
}
