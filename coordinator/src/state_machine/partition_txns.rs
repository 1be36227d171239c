//! Transactions as one partition sees them: the open ones (so its last stable offset), the
//! markers that end them, and the aborted ones a `read_committed` consumer skips. Kafka's
//! `ProducerAppendInfo` (`appendDataBatch`, `appendEndTxnMarker`), `ProducerStateManager`
//! (`firstUnstableOffset`) and `TransactionIndex` (`collectAbortedTxns`), over tables `U`, `V`,
//! `E` and `C` (see `keys`).
//!
//! - A producer's first transactional batch on a partition opens its transaction there at the
//!   batch's offset (`U` by producer, `V` by first offset). A non-transactional batch of a producer
//!   with an open transaction is refused (INVALID_TXN_STATE).
//! - The **last stable offset** is the first offset of the oldest open transaction, else the high
//!   watermark, and never below the log start (DeleteRecords may pass an open transaction's start,
//!   as in Kafka; retention never does, see `retention`).
//! - A **marker** (DisklessEndTransaction) for a producer with an open transaction is a control
//!   batch of one offset at the high watermark: a `BatchRecord` with no object bytes (empty object
//!   key, size 0) and its `MarkerRecord`; the broker builds its bytes when it is fetched. An ABORT
//!   also records the aborted range (`E`, keyed by the marker's offset, as Kafka's transaction index
//!   is ordered). A producer without an open transaction there gets no marker (nothing to end).
//!   The marker is in the time index with its write time, as Kafka's control batches are in their
//!   segment's, so ListOffsets by time or MAX_TIMESTAMP may name it as Kafka's would.
//! - Either way the marker's epoch becomes the producer's epoch on the partition (transactions v2
//!   bump it at every end), so a batch of the ended transaction that reaches the log late is
//!   refused (INVALID_PRODUCER_EPOCH) instead of opening a transaction no one will end. A marker
//!   older than the producer's epoch is refused the same way, and so is a marker for an open
//!   transaction that does not carry an epoch above the transaction's batches: transactions v2
//!   end every transaction with its epoch + 1, so a deposed coordinator still retrying the markers
//!   of transaction N (epoch E + 1) cannot end transaction N + 1, whose batches carry E + 1 too
//!   (the fence Kafka's `checkCoordinatorEpoch` gives). The coordinator epoch is written into the
//!   control record but not checked: the producer epoch fences, and a transaction's outcome is
//!   decided in its transactional id's state before any marker is written.
//! - **Transaction numbers.** Clients of transactions v1 (librdkafka, aiokafka, KafkaJS) keep one
//!   epoch across transactions, so the epoch cannot tell a marker of transaction N from one of
//!   N + 1. The brokers number each transaction of a transactional id (`TxnRecord::txn_number`)
//!   and give the number with its batches and markers: a marker ends only the open transaction of
//!   its number (a late repeat of an ended one's marker ends nothing), and once a marker of
//!   number N was applied for a producer on a partition (`ProducerRecord::ended_txn`), a batch of
//!   N or older is refused (INVALID_TXN_STATE), as Kafka's verification guard (KIP-890 part 1)
//!   refuses a batch whose transaction ended before it was appended. Unnumbered (0) batches and
//!   markers keep the epoch rules alone.
//!
//! It must not decide a transaction's outcome, nor know which partitions a transaction spans:
//! that is the transaction coordinator's.

use super::command::{CommitBatch, ErrorCode, Failure, TxnMarker, MAGIC_V2, TIMESTAMP_CREATE_TIME};
use super::keys::{Keys, TopicPartition, ABORTED_TXN, META_NEXT_BATCH_ID, OPEN_TXN_BY_OFFSET};
use super::records::{
    AbortedTxnRecord, BatchRecordRef, MarkerRecord, OpenTxnRecord, PartitionRecord, ProducerBatch, ProducerRecord,
    BATCH_ID_COUNTER_BITS, PRODUCER_BATCHES_KEPT,
};
use super::{tables, time_index, StateMachine};
use crate::storage::{codec, KvRead, StorageError, Txn};

/// The most aborted-transaction records one FindBatches answer examines for a partition.
pub const MAX_ABORTED_EXAMINED: usize = 100_000;

/// A producer's open transaction on `tp`, if it has one.
pub fn open(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    producer_id: i64,
) -> Result<Option<OpenTxnRecord>, StorageError> {
    tables::get(view, &keys.open_txn(tp, producer_id))
}

/// Opens a producer's transaction on `tp` at `first_offset` (its first transactional batch there).
pub fn begin(
    txn: &mut Txn<'_>,
    keys: &Keys,
    tp: &TopicPartition,
    producer_id: i64,
    producer_epoch: i16,
    txn_number: u64,
    first_offset: i64,
) -> Result<(), StorageError> {
    tables::put(txn, keys.open_txn(tp, producer_id), &OpenTxnRecord { first_offset, producer_epoch, txn_number })?;
    tables::put(txn, keys.open_txn_by_offset(tp, first_offset), &producer_id)
}

/// A transactional batch of transaction `txn_number` (not 0) of its producer: refused
/// (INVALID_TXN_STATE) when another numbered transaction of the producer is open on the partition,
/// or when none is and a marker already ended this transaction or a later one there (a batch that
/// reached the log after its transaction's end must not open a transaction no marker will end).
pub fn check_number(
    b: &CommitBatch,
    open: Option<&OpenTxnRecord>,
    producer: Option<&ProducerRecord>,
    txn_number: u64,
) -> Result<(), Failure> {
    match open {
        Some(o) if o.txn_number != 0 && o.txn_number != txn_number => Err(Failure::new(
            ErrorCode::InvalidTxnState,
            format!(
                "a batch of transaction {txn_number} of producer {} on {}, whose transaction {} is open",
                b.producer_id, b.tp, o.txn_number
            ),
        )),
        None if producer.is_some_and(|p| p.ended_txn >= txn_number) => Err(Failure::new(
            ErrorCode::InvalidTxnState,
            format!("transaction {txn_number} of producer {} has ended on {}", b.producer_id, b.tp),
        )),
        _ => Ok(()),
    }
}

/// The last stable offset of `tp`: the first offset of its oldest open transaction, else its high
/// watermark; never below its log start.
pub fn last_stable_offset(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    part: &PartitionRecord,
) -> Result<i64, StorageError> {
    Ok(first_unstable(view, keys, tp)?
        .map_or(part.high_watermark, |o| o.min(part.high_watermark))
        .max(part.log_start_offset))
}

/// The first offset of the oldest open transaction of `tp`, if any is open.
pub fn first_unstable(view: &dyn KvRead, keys: &Keys, tp: &TopicPartition) -> Result<Option<i64>, StorageError> {
    let mut first = None;
    view.scan(&keys.tp_start(OPEN_TXN_BY_OFFSET, tp), &keys.tp_end(OPEN_TXN_BY_OFFSET, tp), &mut |k, _| {
        first = Keys::decode_offset_suffix(k);
        Ok(false)
    })?;
    Ok(first)
}

/// An aborted transaction a fetch of `[from, upper)` must name: its producer and first offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// The aborted transactions overlapping `[from, upper)` (Kafka's `collectAbortedTxns`): their
/// marker is at `from` or after and they began before `upper`, in marker order. The walk stops at
/// the first marker written when the last stable offset had reached `upper` (every transaction
/// that began before `upper` had ended by then), or after [`MAX_ABORTED_EXAMINED`] markers.
pub fn aborted_in(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    from: i64,
    upper: i64,
) -> Result<Vec<AbortedTxn>, StorageError> {
    let mut out = vec![];
    if upper <= from {
        return Ok(out);
    }
    let mut examined = 0;
    view.scan(&keys.aborted_txn(tp, from.max(0)), &keys.tp_end(ABORTED_TXN, tp), &mut |k, v| {
        let a: AbortedTxnRecord = codec::decode(k, v)?;
        if a.first_offset < upper {
            out.push(AbortedTxn { producer_id: a.producer_id, first_offset: a.first_offset });
        }
        examined += 1;
        Ok(a.last_stable_offset < upper && examined < MAX_ABORTED_EXAMINED)
    })?;
    Ok(out)
}

/// Writes one transaction marker (see the module's documentation). Returns the offset it was
/// written at, `None` when the producer had no open transaction on the partition.
pub fn end(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    m: &TxnMarker,
) -> Result<Result<Option<i64>, Failure>, StorageError> {
    let keys = &sm.keys;
    if m.producer_id < 0 || m.producer_epoch < 0 {
        return Ok(Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("a marker needs a producer id and epoch, got {} and {}", m.producer_id, m.producer_epoch),
        )));
    }
    let part = if m.tp.partition < 0 { None } else { tables::live_partition(txn, keys, &m.tp)? };
    let Some(mut part) = part else {
        return Ok(Err(Failure::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("this coordinator does not host partition {}", m.tp),
        )));
    };
    let producer = tables::producer(txn, keys, &m.tp, m.producer_id)?;
    if let Some(p) = &producer {
        if m.producer_epoch < p.epoch {
            return Ok(Err(Failure::new(
                ErrorCode::InvalidProducerEpoch,
                format!(
                    "marker of producer {} epoch {} on {} is older than the producer's epoch {}",
                    m.producer_id, m.producer_epoch, m.tp, p.epoch
                ),
            )));
        }
    }
    let mut open = open(txn, keys, &m.tp, m.producer_id)?;
    let numbered = |o: &OpenTxnRecord| m.txn_number != 0 && o.txn_number != 0;
    if open.is_some_and(|o| numbered(&o) && o.txn_number != m.txn_number) {
        // Another transaction of the producer: a late repeat of an ended one's marker ends nothing.
        open = None;
    }
    // Unnumbered, the epoch alone tells transactions apart (v2: each ends with its epoch + 1).
    if let Some(o) = open.filter(|o| !numbered(o) && m.producer_epoch <= o.producer_epoch) {
        return Ok(Err(Failure::new(
            ErrorCode::InvalidProducerEpoch,
            format!(
                "marker of producer {} epoch {} on {}: the open transaction's batches carry epoch {} (a marker ends it \
                 with a later one)",
                m.producer_id, m.producer_epoch, m.tp, o.producer_epoch
            ),
        )));
    }
    let written = match open {
        None => None,
        Some(o) => {
            let offset = part.high_watermark;
            let Some(hwm) = offset.checked_add(1) else {
                return Ok(Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    format!("partition {} would pass the largest offset", m.tp),
                )));
            };
            let mut next_batch_id: u64 = tables::get(txn, &keys.meta(META_NEXT_BATCH_ID))?.unwrap_or(0);
            let batch_id = (i64::from(sm.metadata_partition) << BATCH_ID_COUNTER_BITS)
                | (next_batch_id as i64 & ((1 << BATCH_ID_COUNTER_BITS) - 1));
            next_batch_id += 1;
            tables::put(txn, keys.meta(META_NEXT_BATCH_ID), &next_batch_id)?;
            let record = BatchRecordRef {
                batch_id,
                object_key: "",
                magic: MAGIC_V2,
                byte_offset: 0,
                byte_size: 0,
                base_offset: offset,
                last_offset: offset,
                log_append_time: now,
                batch_max_timestamp: now,
                timestamp_type: TIMESTAMP_CREATE_TIME,
            };
            tables::put(txn, keys.batch(&m.tp, offset), &record)?;
            // In the time index like any batch, as Kafka's control batches are in its segments'.
            time_index::on_append(txn, keys, &m.tp, &mut part, &record)?;
            let marker = MarkerRecord {
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                commit: m.commit,
                coordinator_epoch: m.coordinator_epoch,
            };
            tables::put(txn, keys.marker(&m.tp, offset), &marker)?;
            txn.delete(keys.open_txn(&m.tp, m.producer_id));
            txn.delete(keys.open_txn_by_offset(&m.tp, o.first_offset));
            if !m.commit {
                // Kafka's `lastStableOffset(completedTxn)`: the oldest other open transaction's
                // start, else just past this marker.
                let last_stable_offset = first_unstable(txn, keys, &m.tp)?.unwrap_or(hwm);
                let aborted =
                    AbortedTxnRecord { producer_id: m.producer_id, first_offset: o.first_offset, last_stable_offset };
                tables::put(txn, keys.aborted_txn(&m.tp, offset), &aborted)?;
            }
            part.high_watermark = hwm;
            tables::put(txn, keys.partition(&m.tp), &part)?;
            Some(offset)
        }
    };
    // The marker's epoch is the producer's from now on; a new epoch starts at sequence 0 and
    // forgets the old epoch's batches. The entry left (sequences -1, never a real batch's) carries
    // the marker's time, so the state expires like any other after its last write.
    let fenced_at = written.unwrap_or(part.high_watermark);
    let sentinel =
        ProducerBatch { base_sequence: -1, last_sequence: -1, assigned_base_offset: fenced_at, log_append_time: now };
    let ended_before = producer.as_ref().map_or(0, |p| p.ended_txn);
    let ended_txn = ended_before.max(m.txn_number);
    let updated = match producer {
        Some(p) if p.epoch == m.producer_epoch && ended_txn == ended_before => None,
        Some(p) if p.epoch == m.producer_epoch => Some(ProducerRecord { ended_txn, ..p }),
        _ => Some(ProducerRecord { epoch: m.producer_epoch, batches: vec![sentinel], ended_txn }),
    };
    if let Some(u) = updated {
        debug_assert!(u.batches.len() <= PRODUCER_BATCHES_KEPT);
        tables::put(txn, keys.producer(&m.tp, m.producer_id), &u)?;
    }
    Ok(Ok(written))
}

/// EndTransaction: every marker in request order.
pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    markers: &[TxnMarker],
) -> Result<Vec<Result<Option<i64>, Failure>>, StorageError> {
    markers.iter().map(|m| end(sm, txn, now, m)).collect()
}

/// What goes with a stored batch that purge or retention deletes: a marker's record and, for an
/// ABORT, its aborted range (keyed by the same offset).
pub fn forget_marker(txn: &mut Txn<'_>, keys: &Keys, tp: &TopicPartition, offset: i64) {
    txn.delete(keys.marker(tp, offset));
    txn.delete(keys.aborted_txn(tp, offset));
}

/// A marker's record, for a batch with no object bytes.
pub fn marker(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    offset: i64,
) -> Result<Option<MarkerRecord>, StorageError> {
    tables::get(view, &keys.marker(tp, offset))
}
