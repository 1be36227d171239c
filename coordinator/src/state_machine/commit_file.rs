//! DisklessCommitFile: validate each batch, check idempotent producers, assign offsets.
//!
//! Batches are taken in request order. A batch that fails its checks gets its own error and
//! changes nothing; the others go on. Accepted batches get `AssignedBaseOffset` = the partition's
//! high watermark, which then grows by the batch's record count. The file is recorded with the
//! bytes of its accepted batches as live bytes; a file with none is marked for deletion at once.
//! The answers are kept with the file (compactly, see `CommitRecord`).
//!
//! Refused whole, nothing recorded: a commit applied after its deadline (REQUEST_TIMED_OUT); a bad
//! file (key, format, size) or a part sent to a metadata partition its `owner_ids` do not name
//! (INVALID_REQUEST: the cleaner fences only the owners before deleting); an object key that was
//! fenced or confirmed deleted (KAFKA_STORAGE_ERROR: the object is gone or going, the producer must
//! produce again). An object key this metadata partition already knows is a repeat when the commit
//! carries exactly what the first one did (same batch count and CRC, see `checksum`): it gets the
//! first commit's answers again, changing nothing; any other commit of a known key is refused
//! (INVALID_REQUEST).
//!
//! A transactional batch must come from an idempotent producer; its first one on a partition
//! opens the producer's transaction there, and an idempotent non-transactional batch of a producer
//! whose transaction is open there is refused (INVALID_TXN_STATE), as Kafka's
//! `ProducerAppendInfo.appendDataBatch` does (see `partition_txns`).

use super::command::{
    CommitBatch, CommitFile, CommittedBatch, ErrorCode, Failure, MAGIC_V2, OBJECT_FORMAT_WAL_MULTI_SEGMENT,
    TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME,
};
use super::keys::META_NEXT_BATCH_ID;
use super::producer_state::{self, Verdict};
use super::records::{BatchRecordRef, CommitRecord, FileRecord, StoredResult, BATCH_ID_COUNTER_BITS};
use super::{partition_txns, tables, time_index, StateMachine};
use crate::storage::{StorageError, Txn};

/// The longest object key accepted.
pub const MAX_OBJECT_KEY_LEN: usize = 1024;

/// Commits one file; `transactional` says per batch whether it is transactional (empty: none is),
/// `txn_numbers` the number of its transaction (empty or 0: not said).
pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    c: &CommitFile,
    transactional: &[bool],
    txn_numbers: &[u64],
) -> Result<Vec<Result<CommittedBatch, Failure>>, StorageError> {
    let keys = &sm.keys;
    if c.deadline_ms.is_some_and(|d| now > d) {
        let late = Failure::new(
            ErrorCode::RequestTimedOut,
            format!("commit of {:?} reached the log after its deadline; nothing of it was committed", c.object_key),
        );
        return Ok(c.batches.iter().map(|_| Err(late.clone())).collect());
    }
    if let Err(f) = validate_file(sm, c, transactional, txn_numbers) {
        return Ok(c.batches.iter().map(|_| Err(f.clone())).collect());
    }
    if let Some(t) = tables::fenced(txn, keys, &c.object_key)? {
        let gone = Failure::new(
            ErrorCode::KafkaStorageError,
            format!(
                "object {:?} was deleted (fenced at {}) before this commit applied; nothing of it was committed: produce again",
                c.object_key, t.fenced_at
            ),
        );
        return Ok(c.batches.iter().map(|_| Err(gone.clone())).collect());
    }
    let checksum = checksum(c, transactional, txn_numbers);
    if let Some(file) = tables::file(txn, keys, &c.object_key)? {
        let first: Option<CommitRecord> = tables::get(txn, &keys.commit_results(&c.object_key))?;
        return match first {
            Some(first) if first.checksum == checksum && first.results.len() == c.batches.len() => {
                repeat(sm, txn, c, &file, &first)
            }
            _ => {
                let f = Failure::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "object {:?} is already committed with other batches; a WAL segment is committed once",
                        c.object_key
                    ),
                );
                Ok(c.batches.iter().map(|_| Err(f.clone())).collect())
            }
        };
    }

    let mut next_batch_id: u64 = tables::get(txn, &keys.meta(META_NEXT_BATCH_ID))?.unwrap_or(0);
    let mut live_bytes = 0i64;
    let mut results = Vec::with_capacity(c.batches.len());
    for (i, b) in c.batches.iter().enumerate() {
        let is_txn = transactional.get(i).copied().unwrap_or(false);
        let in_txn = is_txn.then(|| txn_numbers.get(i).copied().unwrap_or(0));
        let r = commit_batch(sm, txn, now, c, b, in_txn, &mut next_batch_id)?;
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
    let stored = results
        .iter()
        .map(|r| match r {
            Ok(b) if b.is_duplicate => {
                StoredResult::Duplicate { base_offset: b.assigned_base_offset, log_append_time: b.log_append_time }
            }
            Ok(b) => StoredResult::Appended { base_offset: b.assigned_base_offset },
            Err(f) => StoredResult::Failed { code: f.code },
        })
        .collect();
    tables::put(txn, keys.commit_results(&c.object_key), &CommitRecord { checksum, results: stored })?;
    Ok(results)
}

/// A CRC-32C of what a commit carries but its deadline (which a resend may change), over a fixed
/// little-endian layout of its fields.
///
/// It only has to tell a repeat of a commit from a different commit of the same object key, and
/// the second is a broker bug, not an attack: keys are unique per upload (a prefix and a random
/// UUID) and only the uploading broker commits its key. A repeat carries the same fields, so it
/// always matches. A different commit is refused unless it also has the same batch count (checked
/// beside the checksum) and its CRC collides: CRC-32C sees every change of one field of up to 32
/// bits (a burst that short) and any odd number of flipped bits, and lets through a random other
/// content with probability 2^-32. SHA-256 cost more than the rest of a small commit. The
/// transactional flags are covered when one is set, and the transactions' numbers when one is not
/// 0 (so a commit without any sums as it always did).
fn checksum(c: &CommitFile, transactional: &[bool], txn_numbers: &[u64]) -> u32 {
    let mut bytes = Vec::with_capacity(32 + c.object_key.len() + 4 * c.owner_ids.len() + 76 * c.batches.len());
    bytes.extend_from_slice(&(c.object_key.len() as u64).to_le_bytes());
    bytes.extend_from_slice(c.object_key.as_bytes());
    bytes.push(c.object_format as u8);
    bytes.extend_from_slice(&c.file_size.to_le_bytes());
    bytes.extend_from_slice(&c.uploader_broker_id.to_le_bytes());
    bytes.extend_from_slice(&(c.owner_ids.len() as u64).to_le_bytes());
    for o in &c.owner_ids {
        bytes.extend_from_slice(&o.to_le_bytes());
    }
    bytes.extend_from_slice(&(c.batches.len() as u64).to_le_bytes());
    for b in &c.batches {
        bytes.push(b.magic as u8);
        bytes.extend_from_slice(&b.request_id.to_le_bytes());
        bytes.extend_from_slice(b.tp.topic_id.as_bytes());
        bytes.extend_from_slice(&b.tp.partition.to_le_bytes());
        bytes.extend_from_slice(&b.byte_offset.to_le_bytes());
        bytes.extend_from_slice(&b.size.to_le_bytes());
        bytes.extend_from_slice(&b.base_offset.to_le_bytes());
        bytes.extend_from_slice(&b.last_offset.to_le_bytes());
        bytes.extend_from_slice(&b.batch_max_timestamp.to_le_bytes());
        bytes.push(b.timestamp_type as u8);
        bytes.extend_from_slice(&b.producer_id.to_le_bytes());
        bytes.extend_from_slice(&b.producer_epoch.to_le_bytes());
        bytes.extend_from_slice(&b.base_sequence.to_le_bytes());
        bytes.extend_from_slice(&b.last_sequence.to_le_bytes());
    }
    if transactional.contains(&true) {
        bytes.extend(transactional.iter().map(|&t| u8::from(t)));
    }
    if txn_numbers.iter().any(|&n| n != 0) {
        for n in txn_numbers {
            bytes.extend_from_slice(&n.to_le_bytes());
        }
    }
    crc32c::crc32c(&bytes)
}

/// The answers of the first commit of this file, for a repeat of it. Changes nothing.
fn repeat(
    sm: &StateMachine,
    txn: &Txn<'_>,
    c: &CommitFile,
    file: &FileRecord,
    first: &CommitRecord,
) -> Result<Vec<Result<CommittedBatch, Failure>>, StorageError> {
    let mut out = Vec::with_capacity(c.batches.len());
    for (b, r) in c.batches.iter().zip(&first.results) {
        let log_start_offset = || -> Result<i64, StorageError> {
            Ok(tables::live_partition(txn, &sm.keys, &b.tp)?.map_or(-1, |p| p.log_start_offset))
        };
        out.push(match *r {
            StoredResult::Appended { base_offset } => Ok(CommittedBatch {
                assigned_base_offset: base_offset,
                log_append_time: file.committed_at,
                log_start_offset: log_start_offset()?,
                is_duplicate: false,
            }),
            StoredResult::Duplicate { base_offset, log_append_time } => Ok(CommittedBatch {
                assigned_base_offset: base_offset,
                log_append_time,
                log_start_offset: log_start_offset()?,
                is_duplicate: true,
            }),
            StoredResult::Failed { code } => Err(Failure::new(
                code,
                format!("the first commit of object {:?} refused this batch with {code}", c.object_key),
            )),
        });
    }
    Ok(out)
}

fn commit_batch(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    c: &CommitFile,
    b: &CommitBatch,
    in_txn: Option<u64>,
    next_batch_id: &mut u64,
) -> Result<Result<CommittedBatch, Failure>, StorageError> {
    let keys = &sm.keys;
    // Transactional, and the number of its transaction (0: not said).
    let (is_txn, txn_number) = (in_txn.is_some(), in_txn.unwrap_or(0));
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
    if is_txn && !idempotent {
        return Ok(Err(Failure::new(
            ErrorCode::InvalidRecord,
            format!("a transactional batch for {} has no producer id", b.tp),
        )));
    }
    let open_txn = if idempotent { partition_txns::open(txn, keys, &b.tp, b.producer_id)? } else { None };
    if open_txn.is_some() && !is_txn {
        return Ok(Err(Failure::new(
            ErrorCode::InvalidTxnState,
            format!("producer {} has a transaction open on {}: expected a transactional batch", b.producer_id, b.tp),
        )));
    }
    if txn_number != 0 {
        if let Err(f) = partition_txns::check_number(b, open_txn.as_ref(), producer.as_ref(), txn_number) {
            return Ok(Err(f));
        }
    }

    let base = part.high_watermark;
    let Some(new_hwm) = base.checked_add(record_count) else {
        return Ok(Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("partition {} would pass the largest offset", b.tp),
        )));
    };
    let batch_id = (i64::from(sm.metadata_partition) << BATCH_ID_COUNTER_BITS)
        | (*next_batch_id as i64 & ((1 << BATCH_ID_COUNTER_BITS) - 1));
    *next_batch_id += 1;
    let record = BatchRecordRef {
        batch_id,
        object_key: &c.object_key,
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
    if is_txn && open_txn.is_none() {
        partition_txns::begin(txn, keys, &b.tp, b.producer_id, b.producer_epoch, txn_number, base)?;
    }
    Ok(Ok(CommittedBatch {
        assigned_base_offset: base,
        log_append_time: now,
        log_start_offset: part.log_start_offset,
        is_duplicate: false,
    }))
}

fn validate_file(
    sm: &StateMachine,
    c: &CommitFile,
    transactional: &[bool],
    txn_numbers: &[u64],
) -> Result<(), Failure> {
    if !txn_numbers.is_empty() && txn_numbers.len() != c.batches.len() {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!(
                "{} transaction numbers for {} batches; one per batch, or none",
                txn_numbers.len(),
                c.batches.len()
            ),
        ));
    }
    let bad = |m: String| Err(Failure::new(ErrorCode::InvalidRequest, m));
    if !transactional.is_empty() && transactional.len() != c.batches.len() {
        return bad(format!(
            "{} transactional flags for {} batches; a flag per batch, or none",
            transactional.len(),
            c.batches.len()
        ));
    }
    if c.object_key.is_empty() || c.object_key.len() > MAX_OBJECT_KEY_LEN {
        return bad(format!("an object key has 1 to {MAX_OBJECT_KEY_LEN} bytes, not {}", c.object_key.len()));
    }
    if c.object_format != OBJECT_FORMAT_WAL_MULTI_SEGMENT {
        return bad(format!("unknown object format {}", c.object_format));
    }
    if c.file_size < 0 {
        return bad(format!("file size {} is negative", c.file_size));
    }
    let n = sm.num_metadata_partitions as usize;
    let mut distinct = c.owner_ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != c.owner_ids.len() || c.owner_ids.iter().any(|&o| o < 0 || o as usize >= n) {
        return bad(format!("owner ids {:?} are not distinct metadata partitions of 0..{n}", c.owner_ids));
    }
    if !c.owner_ids.contains(&(sm.metadata_partition as i32)) {
        return bad(format!(
            "metadata partition {} is not among the file's owners {:?}; a commit part goes only to an owner",
            sm.metadata_partition, c.owner_ids
        ));
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
