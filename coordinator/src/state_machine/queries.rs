//! The read side: ListOffsets, FindBatches and DescribeProducers, answered from any consistent
//! view of the state.
//!
//! Whether a view is fresh enough (leader after ReadIndex, or a replica that has applied a given
//! index) is the caller's business; these functions only read.
//!
//! `read_committed` (Kafka's `IsolationLevel.READ_COMMITTED`) bounds both by the partition's last
//! stable offset (`partition_txns`): ListOffsets answers it for LATEST and finds nothing at or past
//! it (Kafka's `ReplicaManager.fetchOffsetForTimestamp`); FindBatches returns no batch that starts
//! at or past it, and names the aborted transactions of the range it returns.

use super::command::{ErrorCode, Failure};
use super::keys::{Keys, TopicPartition};
use super::partition_txns::{self, AbortedTxn};
use super::records::{BatchRecord, MarkerRecord, OpenTxnRecord, PartitionRecord, ProducerRecord};
use super::{tables, time_index};
use crate::storage::{codec, KvRead, StorageError};

/// ListOffsets' special timestamps.
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL: i64 = -4;
pub const LATEST_TIERED: i64 = -5;

/// An offset and the timestamp that goes with it (-1 when there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffsetAndTimestamp {
    pub offset: i64,
    pub timestamp: i64,
}

const NONE_FOUND: OffsetAndTimestamp = OffsetAndTimestamp { offset: -1, timestamp: -1 };

fn unknown(tp: &TopicPartition) -> Failure {
    Failure::new(ErrorCode::UnknownTopicOrPartition, format!("this coordinator does not host partition {tp}"))
}

fn partition(view: &dyn KvRead, keys: &Keys, tp: &TopicPartition) -> Result<Option<PartitionRecord>, StorageError> {
    if tp.partition < 0 {
        return Ok(None);
    }
    tables::live_partition(view, keys, tp)
}

pub fn list_offsets(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    timestamp: i64,
    read_committed: bool,
) -> Result<Result<OffsetAndTimestamp, Failure>, StorageError> {
    let Some(part) = partition(view, keys, tp)? else { return Ok(Err(unknown(tp))) };
    // The first offset a consumer of this isolation may not read yet.
    let fetchable_end =
        if read_committed { partition_txns::last_stable_offset(view, keys, tp, &part)? } else { part.high_watermark };
    let at = |offset| Ok(Ok(OffsetAndTimestamp { offset, timestamp: -1 }));
    let found = |f: Option<time_index::Found>| {
        Ok(Ok(f.filter(|f| f.base_offset < fetchable_end).map_or(NONE_FOUND, |f| OffsetAndTimestamp {
            offset: f.base_offset.max(part.log_start_offset),
            timestamp: f.timestamp,
        })))
    };
    match timestamp {
        EARLIEST | EARLIEST_LOCAL => at(part.log_start_offset),
        LATEST => at(fetchable_end),
        LATEST_TIERED => Ok(Ok(NONE_FOUND)),
        MAX_TIMESTAMP => found(time_index::max_timestamp(view, keys, tp, part.log_start_offset)?),
        t if t >= 0 => found(time_index::first_at_or_after(view, keys, tp, part.log_start_offset, t)?),
        t => Ok(Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("timestamp {t} is not a time nor a known special value"),
        ))),
    }
}

/// The most batches one FindBatches answer holds, whatever the byte limits allow.
pub const MAX_BATCHES_PER_FETCH: usize = 50_000;

/// The limits one FindBatches request shares across its partitions, in request order.
#[derive(Debug, Clone)]
pub struct FetchBudget {
    remaining_bytes: i64,
    max_batches_per_partition: usize,
    batches_left: usize,
    returned_any: bool,
}

impl FetchBudget {
    /// `max_batches_per_partition <= 0` means no per-partition batch limit.
    pub fn new(fetch_max_bytes: i32, max_batches_per_partition: i32) -> FetchBudget {
        FetchBudget {
            remaining_bytes: i64::from(fetch_max_bytes.max(0)),
            max_batches_per_partition: if max_batches_per_partition <= 0 {
                usize::MAX
            } else {
                max_batches_per_partition as usize
            },
            batches_left: MAX_BATCHES_PER_FETCH,
            returned_any: false,
        }
    }
}

/// FindBatches' answer for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionBatches {
    pub error: Option<Failure>,
    /// -1 when the partition is unknown.
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// -1 when the partition is unknown.
    pub last_stable_offset: i64,
    pub batches: Vec<BatchRecord>,
    /// The transaction markers among `batches` (those without object bytes), by offset.
    pub markers: Vec<(i64, MarkerRecord)>,
    /// `read_committed`: the aborted transactions overlapping the batches returned.
    pub aborted: Vec<AbortedTxn>,
}

/// The batches of `tp` holding `offset` and after, within the budget: the first partition with
/// data always gets at least one batch (Kafka's min-one-message rule); after that, batches are
/// taken in order while they fit both this partition's and the request's remaining bytes.
/// `read_committed`: only batches below the last stable offset, with the aborted transactions
/// they overlap.
pub fn find_batches(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    offset: i64,
    max_partition_fetch_bytes: i32,
    budget: &mut FetchBudget,
    read_committed: bool,
) -> Result<PartitionBatches, StorageError> {
    let Some(part) = partition(view, keys, tp)? else {
        return Ok(PartitionBatches {
            error: Some(unknown(tp)),
            log_start_offset: -1,
            high_watermark: -1,
            last_stable_offset: -1,
            batches: vec![],
            markers: vec![],
            aborted: vec![],
        });
    };
    let last_stable_offset = partition_txns::last_stable_offset(view, keys, tp, &part)?;
    let mut out = PartitionBatches {
        error: None,
        log_start_offset: part.log_start_offset,
        high_watermark: part.high_watermark,
        last_stable_offset,
        batches: vec![],
        markers: vec![],
        aborted: vec![],
    };
    let end = if read_committed { last_stable_offset } else { i64::MAX };
    if offset < part.log_start_offset || offset > part.high_watermark {
        out.error = Some(Failure::new(
            ErrorCode::OffsetOutOfRange,
            format!("offset {offset} of {tp} is outside [{}, {}]", part.log_start_offset, part.high_watermark),
        ));
        return Ok(out);
    }
    if max_partition_fetch_bytes < 0 {
        out.error = Some(Failure::new(ErrorCode::InvalidRequest, "max partition fetch bytes is negative"));
        return Ok(out);
    }
    let limit = i64::from(max_partition_fetch_bytes).min(budget.remaining_bytes);
    let mut taken = 0i64;
    let (from, to) = keys.batches_from(tp, offset);
    view.scan(&from, &to, &mut |k, v| {
        if out.batches.len() >= budget.max_batches_per_partition || budget.batches_left == 0 {
            return Ok(false);
        }
        let b: BatchRecord = codec::decode(k, v)?;
        if b.base_offset >= end {
            return Ok(false);
        }
        let min_one = out.batches.is_empty() && !budget.returned_any;
        if taken + i64::from(b.byte_size) > limit && !min_one {
            return Ok(false);
        }
        taken += i64::from(b.byte_size);
        budget.batches_left -= 1;
        out.batches.push(b);
        Ok(true)
    })?;
    budget.remaining_bytes = (budget.remaining_bytes - taken).max(0);
    budget.returned_any |= !out.batches.is_empty();
    for b in out.batches.iter().filter(|b| b.is_marker()) {
        let m = partition_txns::marker(view, keys, tp, b.base_offset)?.ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(&keys.batch(tp, b.last_offset)),
            reason: "a batch without object bytes has no marker record".into(),
        })?;
        out.markers.push((b.base_offset, m));
    }
    if read_committed {
        if let Some(last) = out.batches.last() {
            out.aborted = partition_txns::aborted_in(view, keys, tp, offset, last.last_offset + 1)?;
        }
    }
    Ok(out)
}

/// An operator's view of one partition (`coordctl topics describe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFigures {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Bytes of the batches still stored.
    pub byte_size: i64,
    /// Batches holding offsets at or above the log start (counted: O(batches)).
    pub batches: u64,
}

/// The figures of `tp`; `Err` if the partition does not exist here (or its topic was deleted).
pub fn describe_partition(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
) -> Result<Result<PartitionFigures, Failure>, StorageError> {
    let Some(part) = partition(view, keys, tp)? else { return Ok(Err(unknown(tp))) };
    let (from, to) = keys.batches_from(tp, part.log_start_offset);
    let mut batches = 0;
    view.scan(&from, &to, &mut |_, _| {
        batches += 1;
        Ok(true)
    })?;
    Ok(Ok(PartitionFigures {
        log_start_offset: part.log_start_offset,
        high_watermark: part.high_watermark,
        byte_size: part.byte_size,
        batches,
    }))
}

/// At most this many producers are described per partition (Kafka describes all; a partition's
/// producer states are bounded by `producer.id.expiration.ms` only).
pub const MAX_PRODUCERS_DESCRIBED: usize = 10_000;

/// A producer a partition keeps state for (Kafka's `DescribeProducersResponse.ProducerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerDescription {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The last sequence of the last batch kept, -1 when none is (a marker only).
    pub last_sequence: i32,
    /// The append time of the last batch kept, -1 when none is.
    pub last_timestamp: i64,
    /// The first offset of its open transaction here, -1 when none is open.
    pub current_txn_start_offset: i64,
}

/// DescribeProducers for `tp`: every producer with state on it, in producer id order, at most
/// [`MAX_PRODUCERS_DESCRIBED`]; `Err` if the partition does not exist here.
pub fn describe_producers(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
) -> Result<Result<Vec<ProducerDescription>, Failure>, StorageError> {
    if partition(view, keys, tp)?.is_none() {
        return Ok(Err(unknown(tp)));
    }
    let mut found: Vec<(i64, ProducerRecord)> = vec![];
    let (from, to) = (keys.tp_start(super::keys::PRODUCER, tp), keys.tp_end(super::keys::PRODUCER, tp));
    view.scan(&from, &to, &mut |k, v| {
        let producer_id = Keys::decode_offset_suffix(k).ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(k),
            reason: "not a producer-state key".into(),
        })?;
        found.push((producer_id, codec::decode(k, v)?));
        Ok(found.len() < MAX_PRODUCERS_DESCRIBED)
    })?;
    let mut out = Vec::with_capacity(found.len());
    for (producer_id, r) in found {
        let open: Option<OpenTxnRecord> = tables::get(view, &keys.open_txn(tp, producer_id))?;
        let last = r.batches.last();
        out.push(ProducerDescription {
            producer_id,
            producer_epoch: r.epoch,
            last_sequence: last.map_or(-1, |b| b.last_sequence),
            last_timestamp: last.map_or(-1, |b| b.log_append_time),
            current_txn_start_offset: open.map_or(-1, |o| o.first_offset),
        });
    }
    Ok(Ok(out))
}
