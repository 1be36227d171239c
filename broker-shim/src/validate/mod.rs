//! What a producer's record batch must be before anything of it is uploaded or committed: Kafka's
//! checks for a client's v2 batch on a leader (`ProduceRequest.validateRecords`,
//! `UnifiedLog.analyzeAndValidateRecords`, `LogValidator.validateBatch` / `validateRecord` /
//! `validateTimestamp` / `processRecordErrors`), in Kafka's order, with Kafka's codes and messages.
//! Every byte is read: the records are decoded (decompressed through `decompress`, never past
//! `max_uncompressed_bytes`, never held whole) and must be exactly what the header says.
//!
//! | check | error |
//! | --- | --- |
//! | at least a 61-byte header, the length field matching | CORRUPT_MESSAGE (2) |
//! | magic 2; base offset 0 | INVALID_RECORD (87) |
//! | the batch fits `max.message.bytes` | MESSAGE_TOO_LARGE (10) |
//! | CRC-32C | CORRUPT_MESSAGE (2) |
//! | compression id 0-4 | UNSUPPORTED_COMPRESSION_TYPE (76) |
//! | record count ≥ 1 and lastOffsetDelta + 1; no control batch; a producer id with a base sequence and epoch ≥ 0 | INVALID_RECORD (87) |
//! | transactional, without a verified transaction (`Validated::txn_number`, set by the Kafka listener's Produce) | TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), Kafka's answer to a transactional batch without a transactional id (refused by the producer, `produce`) |
//! | compressed data decodes | CORRUPT_MESSAGE (2) |
//! | it decompresses to at most `max_uncompressed_bytes` | MESSAGE_TOO_LARGE (10): a Java producer splits the batch and retries |
//! | each record's layout (`records`), exactly `recordCount` records, offset delta = index | INVALID_RECORD (87) |
//! | CreateTime within `message.timestamp.before.max.ms` / `after.max.ms`; no LogAppendTime bit from the producer | INVALID_TIMESTAMP (32) with `record_errors` |
//!
//! Where Kafka rewrites rather than refuses, this broker (which stores the producer's bytes) does
//! the same when it is a header field, and refuses only what a consumer would misread:
//! - the max timestamp is set to the records' largest CreateTime (Kafka's `setMaxTimestamp`, CRC
//!   recomputed), so time lookups see the truth; a LogAppendTime topic gets the LogAppendTime bit;
//! - wrong inner offset deltas, which Kafka fixes by recompressing, are refused (no client writes
//!   them);
//! - where Kafka answers UNKNOWN_SERVER_ERROR (a corrupt compressed payload under a good CRC,
//!   compression ids 5-7) this broker names the fault (CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE).
//!
//! Owns no state and does no I/O: the caller runs it off the async threads for compressed
//! batches (it is CPU work), with the topic's limits and the broker's clock.

pub mod build;
pub mod decompress;
pub mod records;
#[cfg(test)]
mod tests;

use std::io::BufReader;

use bytes::{Bytes, BytesMut};
use diskless_proto::ErrorCode;

use self::decompress::Codec;
use self::records::{RecordError, RecordReader};
use crate::error::KafkaError;
use crate::wal::record_batch::{self, BatchError, BatchHeader, HEADER_LEN};

/// Kafka's default `max.message.bytes` / `message.max.bytes` (1 MiB + the 12-byte log overhead).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_588;
/// The default bound on a compressed batch's decompressed records (Kafka has none; a zip bomb
/// costs this much CPU at most and never this much memory).
pub const DEFAULT_MAX_UNCOMPRESSED_BYTES: usize = 32 << 20;
/// How many record errors one answer lists (Kafka lists every one; a batch can have millions).
const MAX_RECORD_ERRORS: usize = 64;
/// The buffer between a decompressor and the record reader.
const READ_BUFFER: usize = 32 << 10;

/// What a topic (and the broker) allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `max.message.bytes`: the largest batch, as sent.
    pub max_message_bytes: usize,
    /// The most bytes a compressed batch's records may decompress to.
    pub max_uncompressed_bytes: usize,
    /// `message.timestamp.before.max.ms`: how far before the broker's clock a CreateTime may be
    /// (`None`: no limit, Kafka's default `Long.MAX_VALUE`).
    pub timestamp_before_max_ms: Option<i64>,
    /// `message.timestamp.after.max.ms`: how far after it (`None`: no limit).
    pub timestamp_after_max_ms: Option<i64>,
    /// `message.timestamp.type=LogAppendTime`: the broker stamps batches; producers' timestamps
    /// are kept but not checked.
    pub log_append_time: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_uncompressed_bytes: DEFAULT_MAX_UNCOMPRESSED_BYTES,
            timestamp_before_max_ms: None,
            timestamp_after_max_ms: None,
            log_append_time: false,
        }
    }
}

/// A topic's own settings over the broker's limits (Kafka's topic configs `max.message.bytes`,
/// `message.timestamp.type`, `message.timestamp.before.max.ms`, `message.timestamp.after.max.ms`),
/// kept by the coordinator cluster; `None`: the broker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    pub max_message_bytes: Option<i32>,
    pub log_append_time: Option<bool>,
    pub timestamp_before_max_ms: Option<i64>,
    pub timestamp_after_max_ms: Option<i64>,
}

impl Limits {
    /// These limits with a topic's settings over them. A topic's `max.message.bytes` is held to
    /// `ceiling` (the largest batch this broker's WAL segment takes: the broker refuses a larger
    /// value when it is set, but another broker may take larger ones), and the bound on the bytes a
    /// batch decompresses to never falls below the batch size allowed.
    pub fn with_overrides(self, o: &Overrides, ceiling: usize) -> Limits {
        let max_message_bytes = match o.max_message_bytes {
            Some(v) => usize::try_from(v).unwrap_or(0).min(ceiling),
            None => self.max_message_bytes,
        };
        Limits {
            max_message_bytes,
            max_uncompressed_bytes: self.max_uncompressed_bytes.max(max_message_bytes),
            timestamp_before_max_ms: o.timestamp_before_max_ms.or(self.timestamp_before_max_ms),
            timestamp_after_max_ms: o.timestamp_after_max_ms.or(self.timestamp_after_max_ms),
            log_append_time: o.log_append_time.unwrap_or(self.log_append_time),
        }
    }
}

/// A batch that passed: its bytes as they are to be stored, and its header.
#[derive(Debug, Clone)]
pub struct Validated {
    pub bytes: Bytes,
    pub header: BatchHeader,
    /// The number of the batch's transaction once the Kafka listener verified it with the
    /// transaction coordinator (0 until then: the producer refuses a transactional batch without).
    pub txn_number: u64,
}

fn refuse(code: ErrorCode, message: impl Into<String>) -> KafkaError {
    KafkaError::new(code, message)
}

/// Whether the batch needs decompressing (so is worth running off the async threads).
pub fn is_compressed(batch: &[u8]) -> bool {
    batch.len() > 22 && batch[22] & 0x07 != 0
}

/// One partition's records of a Produce request (v3+) as `ProduceRequest.validateRecords` wants
/// them: exactly one record batch, whole; zstd only from v7. Returns the batch.
pub fn one_batch(version: i16, mut records: Bytes, partition: &str) -> Result<Bytes, KafkaError> {
    let invalid = |m: String| refuse(ErrorCode::InvalidRecord, m);
    let len = record_batch::framed_len(&records).ok_or_else(|| {
        invalid(format!("Produce requests with version {version} must have at least one record batch per partition"))
    })?;
    if len > records.len() {
        return Err(refuse(
            ErrorCode::CorruptMessage,
            format!("the record batch for {partition} claims {len} bytes, {} were sent", records.len()),
        ));
    }
    let batch = records.split_to(len);
    if !records.is_empty() {
        return Err(invalid(format!(
            "Produce requests with version {version} are only allowed to contain exactly one record batch per partition"
        )));
    }
    if version < 7 && batch.len() > 22 && batch[22] & 0x07 == Codec::Zstd as u8 {
        return Err(refuse(
            ErrorCode::UnsupportedCompressionType,
            format!("Produce requests with version {version} are not allowed to use ZStandard compression"),
        ));
    }
    Ok(batch)
}

/// Validates one producer batch (`batch` is exactly one batch, as framed by its length field)
/// for `partition` (named in messages) at the broker's time `now_ms`.
pub fn validate(batch: Bytes, limits: &Limits, now_ms: i64, partition: &str) -> Result<Validated, KafkaError> {
    let corrupt = |m: String| refuse(ErrorCode::CorruptMessage, m);
    let invalid = |m: String| refuse(ErrorCode::InvalidRecord, m);
    if batch.len() < HEADER_LEN {
        return Err(corrupt(format!(
            "Record batch is corrupt (the size {} is smaller than the minimum allowed overhead {HEADER_LEN})",
            batch.len()
        )));
    }
    if record_batch::framed_len(&batch) != Some(batch.len()) {
        return Err(corrupt(format!("Record batch length field does not match its {} bytes", batch.len())));
    }
    let magic = batch[16] as i8;
    if magic != record_batch::MAGIC_V2 {
        return Err(invalid(format!(
            "Produce requests are only allowed to contain record batches with magic version 2, not {magic}"
        )));
    }
    let base_offset = i64::from_be_bytes(batch[..8].try_into().unwrap_or_default());
    if base_offset != 0 {
        return Err(invalid(format!(
            "The baseOffset of the record batch in the append to {partition} should be 0, but it is {base_offset}"
        )));
    }
    if batch.len() > limits.max_message_bytes {
        return Err(refuse(
            ErrorCode::MessageTooLarge,
            format!(
                "The record batch size in the append to {partition} is {} bytes which exceeds the maximum configured value of {}.",
                batch.len(),
                limits.max_message_bytes
            ),
        ));
    }
    let h = record_batch::parse(&batch).map_err(|e| match e {
        BatchError::Crc { stored, .. } => {
            corrupt(format!("Record is corrupt (stored crc = {stored}) in topic partition {partition}."))
        }
        e => corrupt(format!("Record batch for {partition} is corrupt: {e}")),
    })?;
    let Some(codec) = Codec::from_id(h.compression) else {
        return Err(refuse(
            ErrorCode::UnsupportedCompressionType,
            format!("Unknown compression type id: {}", h.compression),
        ));
    };
    // LogValidator.validateBatch, origin CLIENT.
    let from_offsets = i64::from(h.last_offset_delta) + 1;
    if from_offsets <= 0 {
        return Err(invalid(format!(
            "Batch has an invalid offset range: [0, {}] in topic partition {partition}.",
            h.last_offset_delta
        )));
    }
    if h.record_count <= 0 {
        return Err(invalid(format!(
            "Invalid reported count for record batch: {} in topic partition {partition}.",
            h.record_count
        )));
    }
    if from_offsets != i64::from(h.record_count) {
        return Err(invalid(format!(
            "Inconsistent batch offset range [0, {}] and count of records {} in topic partition {partition}.",
            h.last_offset_delta, h.record_count
        )));
    }
    if h.is_control() {
        return Err(invalid(format!(
            "Clients are not allowed to write control records in topic partition {partition}."
        )));
    }
    // Kafka checks the sequence only; the coordinator needs the epoch too.
    if h.producer_id < -1 || (h.producer_id >= 0 && (h.base_sequence < 0 || h.producer_epoch < 0)) {
        return Err(invalid(format!(
            "Invalid sequence number {} (epoch {}) in record batch with producerId {} in topic partition {partition}.",
            h.base_sequence, h.producer_epoch, h.producer_id
        )));
    }

    // Kafka's `LogValidator.validateBatch`: a transactional batch comes from an idempotent producer.
    if h.is_transactional() && h.producer_id < 0 {
        return Err(invalid(format!(
            "Transactional record batch without a producer id in topic partition {partition}."
        )));
    }

    let max_timestamp = read_records(&batch, &h, codec, limits, now_ms, partition)?;

    // The header as Kafka stores it: LogAppendTime topics get the bit (the time is the
    // commit's); CreateTime ones the records' largest timestamp.
    let (attributes, max_timestamp) = if limits.log_append_time {
        (h.attributes | record_batch::TIMESTAMP_TYPE_BIT, h.max_timestamp)
    } else {
        (h.attributes, max_timestamp)
    };
    if attributes == h.attributes && max_timestamp == h.max_timestamp {
        return Ok(Validated { bytes: batch, header: h, txn_number: 0 });
    }
    let mut b = BytesMut::from(&batch[..]);
    record_batch::set_header_times(&mut b, attributes, max_timestamp).map_err(|e| corrupt(e.to_string()))?;
    let header = record_batch::parse(&b).map_err(|e| corrupt(e.to_string()))?;
    Ok(Validated { bytes: b.freeze(), header, txn_number: 0 })
}

/// Reads every record; returns their largest timestamp (`-1` when none has one).
fn read_records(
    batch: &[u8],
    h: &BatchHeader,
    codec: Codec,
    limits: &Limits,
    now_ms: i64,
    partition: &str,
) -> Result<i64, KafkaError> {
    let body = &batch[HEADER_LEN..];
    let stream =
        decompress::reader(codec, body, limits.max_uncompressed_bytes).map_err(|e| decompress_error(e, partition))?;
    let mut rd = RecordReader::new(BufReader::with_capacity(READ_BUFFER, stream));
    let limit = limits.max_uncompressed_bytes;
    let stream_error = |e: std::io::Error| decompress_error(decompress::classify(codec, e, limit), partition);
    // A structural fault ends the batch at once (Kafka's record iterator throws); timestamp faults
    // are collected over every record (`validateRecord`) and reported together.
    let structural = |i: i32, m: String| {
        refuse(ErrorCode::InvalidRecord, format!("Record {i} of the batch for {partition} is invalid: {m}"))
    };
    let mut record_errors: Vec<(i32, String)> = vec![];
    let mut faulty = 0usize;
    let mut max_timestamp = -1i64;
    let producer_set_append_time = h.timestamp_type == 1 && !limits.log_append_time;
    for i in 0..h.record_count {
        let r = match rd.record() {
            Ok(r) => r,
            Err(RecordError::Io(e)) => return Err(stream_error(e)),
            Err(RecordError::Invalid(m)) => return Err(structural(i, m)),
        };
        if r.offset_delta != i {
            return Err(structural(i, format!("its offset delta is {}, not {i}", r.offset_delta)));
        }
        let timestamp = h.base_timestamp.wrapping_add(r.timestamp_delta);
        max_timestamp = max_timestamp.max(timestamp);
        // LogValidator.validateTimestamp: CreateTime topics only.
        let fault = if limits.log_append_time {
            None
        } else if producer_set_append_time {
            Some(format!(
                "Invalid timestamp type in message DefaultRecord(offset={i}, timestamp={timestamp}). Producer should not set timestamp type to LogAppendTime."
            ))
        } else {
            let before = limits.timestamp_before_max_ms.unwrap_or(i64::MAX);
            let after = limits.timestamp_after_max_ms.unwrap_or(i64::MAX);
            let early = now_ms.saturating_sub(timestamp) > before;
            let late = timestamp.saturating_sub(now_ms) > after;
            (timestamp != -1 && (early || late)).then(|| {
                format!(
                    "Timestamp {timestamp} of message with offset {i} is out of range. The timestamp should be within [{}, {}]",
                    now_ms.saturating_sub(before),
                    now_ms.saturating_add(after)
                )
            })
        };
        if let Some(m) = fault {
            faulty += 1;
            if record_errors.len() < MAX_RECORD_ERRORS {
                record_errors.push((i, m));
            }
        }
    }
    match rd.at_end() {
        Ok(true) => {}
        Ok(false) => {
            return Err(refuse(
                ErrorCode::InvalidRecord,
                format!("Incorrect declared batch size, records still remaining in file (batch for {partition})"),
            ))
        }
        Err(RecordError::Io(e)) => return Err(stream_error(e)),
        Err(RecordError::Invalid(m)) => return Err(refuse(ErrorCode::InvalidRecord, m)),
    }
    if record_errors.is_empty() {
        return Ok(max_timestamp);
    }
    // LogValidator.processRecordErrors: timestamp faults make the partition's INVALID_TIMESTAMP.
    let first = &record_errors[0].1;
    Err(KafkaError::new(
        ErrorCode::InvalidTimestamp,
        format!("One or more records have been rejected due to invalid timestamp ({faulty} in {partition}; the first: {first})"),
    )
    .with_record_errors(record_errors))
}

fn decompress_error(e: decompress::DecompressError, partition: &str) -> KafkaError {
    match e {
        decompress::DecompressError::TooLarge { limit } => refuse(
            ErrorCode::MessageTooLarge,
            format!(
                "The record batch for {partition} decompresses to more than {limit} bytes (produce.max_uncompressed_batch_bytes)"
            ),
        ),
        e @ decompress::DecompressError::Corrupt { .. } => {
            refuse(ErrorCode::CorruptMessage, format!("Record batch for partition {partition} is corrupt: {e}"))
        }
    }
}

/// Runs validations: small uncompressed batches inline, the rest on blocking threads, at most
/// `slots` at once (each may hold a decompression window and block of up to
/// `max_uncompressed_bytes`), so validation's memory and threads stay bounded however many
/// producers send compressed batches at once.
pub struct Validator {
    slots: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Batches this large or larger are validated off the async threads even uncompressed.
const INLINE_BYTES: usize = 64 << 10;

impl Validator {
    pub fn new(slots: usize) -> Validator {
        Validator { slots: std::sync::Arc::new(tokio::sync::Semaphore::new(slots.max(1))) }
    }

    /// One per core (at least two).
    pub fn per_core() -> Validator {
        Validator::new(std::thread::available_parallelism().map_or(2, |n| n.get()).max(2))
    }

    /// Validates one call's batches for a partition, in order; the first refusal refuses them all.
    pub async fn validate_all(
        &self,
        batches: Vec<Bytes>,
        limits: Limits,
        partition: String,
    ) -> Result<Vec<Validated>, KafkaError> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let heavy = batches.iter().any(|b| is_compressed(b) || b.len() >= INLINE_BYTES);
        let run = move || -> Result<Vec<Validated>, KafkaError> {
            batches.into_iter().map(|b| validate(b, &limits, now_ms, &partition)).collect()
        };
        if !heavy {
            return run();
        }
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| KafkaError::new(ErrorCode::KafkaStorageError, "the broker is shutting down"))?;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            run()
        })
        .await
        .unwrap_or_else(|e| Err(KafkaError::new(ErrorCode::UnknownServerError, format!("validation failed: {e}"))))
    }
}
