//! Idempotent-producer checks, exactly as Kafka's `ProducerStateEntry` makes them.
//!
//! Pure functions over a [`ProducerRecord`]: no storage here. For a batch of producer `pid` with
//! epoch `e` and sequences `[base, last]` on one partition:
//! 1. `e` older than the stored epoch → `INVALID_PRODUCER_EPOCH`;
//! 2. same epoch and `[base, last]` equal to one of the last 5 batches → a duplicate: nothing is
//!    appended and the original offset and time are returned;
//! 3. a new epoch (or a producer new to the partition) must start at sequence 0;
//! 4. in the same epoch, `base` must be the last sequence + 1, wrapping from `i32::MAX` to 0;
//! 5. anything else → `OUT_OF_ORDER_SEQUENCE_NUMBER`.

use super::command::{CommitBatch, ErrorCode, Failure};
use super::records::{ProducerBatch, ProducerRecord, PRODUCER_BATCHES_KEPT};

/// What to do with an idempotent producer's batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Append,
    Duplicate(ProducerBatch),
    Reject(Failure),
}

/// The sequence that follows `seq`.
pub fn next_sequence(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

/// The number of records `[base, last]` spans, counting the wrap at `i32::MAX`.
pub fn sequence_span(base: i32, last: i32) -> i64 {
    let (base, last) = (i64::from(base), i64::from(last));
    if last >= base {
        last - base + 1
    } else {
        (i64::from(i32::MAX) - base + 1) + last + 1
    }
}

pub fn check(state: Option<&ProducerRecord>, batch: &CommitBatch) -> Verdict {
    let Some(state) = state else {
        return if batch.base_sequence == 0 {
            Verdict::Append
        } else {
            Verdict::Reject(Failure::new(
                ErrorCode::OutOfOrderSequenceNumber,
                format!(
                    "producer {} is new to {}: its first batch must start at sequence 0, not {}",
                    batch.producer_id, batch.tp, batch.base_sequence
                ),
            ))
        };
    };
    if batch.producer_epoch < state.epoch {
        return Verdict::Reject(Failure::new(
            ErrorCode::InvalidProducerEpoch,
            format!(
                "producer {} epoch {} is older than the current epoch {}",
                batch.producer_id, batch.producer_epoch, state.epoch
            ),
        ));
    }
    if batch.producer_epoch > state.epoch {
        return if batch.base_sequence == 0 {
            Verdict::Append
        } else {
            Verdict::Reject(Failure::new(
                ErrorCode::OutOfOrderSequenceNumber,
                format!(
                    "producer {} new epoch {} must start at sequence 0, not {}",
                    batch.producer_id, batch.producer_epoch, batch.base_sequence
                ),
            ))
        };
    }
    if let Some(dup) =
        state.batches.iter().find(|b| b.base_sequence == batch.base_sequence && b.last_sequence == batch.last_sequence)
    {
        return Verdict::Duplicate(*dup);
    }
    let last = state.batches.last().map_or(-1, |b| b.last_sequence);
    let expected = next_sequence(last);
    if batch.base_sequence == expected {
        Verdict::Append
    } else {
        Verdict::Reject(Failure::new(
            ErrorCode::OutOfOrderSequenceNumber,
            format!(
                "producer {} epoch {} on {}: expected sequence {}, got {}",
                batch.producer_id, batch.producer_epoch, batch.tp, expected, batch.base_sequence
            ),
        ))
    }
}

/// Records an appended batch: a new epoch forgets the old epoch's batches; at most 5 are kept.
pub fn record(
    state: Option<ProducerRecord>,
    batch: &CommitBatch,
    assigned_base_offset: i64,
    log_append_time: i64,
) -> ProducerRecord {
    let mut state = match state {
        Some(s) if s.epoch == batch.producer_epoch => s,
        other => ProducerRecord {
            epoch: batch.producer_epoch,
            batches: Vec::with_capacity(PRODUCER_BATCHES_KEPT),
            ended_txn: other.map_or(0, |s| s.ended_txn),
        },
    };
    if state.batches.len() == PRODUCER_BATCHES_KEPT {
        state.batches.remove(0);
    }
    state.batches.push(ProducerBatch {
        base_sequence: batch.base_sequence,
        last_sequence: batch.last_sequence,
        assigned_base_offset,
        log_append_time,
    });
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_machine::keys::TopicPartition;

    fn batch(epoch: i16, base: i32, last: i32) -> CommitBatch {
        CommitBatch {
            magic: 2,
            request_id: 0,
            tp: TopicPartition { topic_id: uuid::Uuid::from_bytes([1; 16]), partition: 0 },
            byte_offset: 0,
            size: 10,
            base_offset: 0,
            last_offset: i64::from(last.wrapping_sub(base)),
            batch_max_timestamp: 0,
            timestamp_type: 0,
            producer_id: 7,
            producer_epoch: epoch,
            base_sequence: base,
            last_sequence: last,
        }
    }

    fn after(batches: &[(i16, i32, i32)]) -> Option<ProducerRecord> {
        let mut s = None;
        for (i, &(e, b, l)) in batches.iter().enumerate() {
            s = Some(record(s, &batch(e, b, l), i as i64 * 100, 1000 + i as i64));
        }
        s
    }

    #[test]
    fn new_producer_must_start_at_zero() {
        assert_eq!(check(None, &batch(0, 0, 4)), Verdict::Append);
        let Verdict::Reject(f) = check(None, &batch(0, 5, 9)) else { panic!() };
        assert_eq!(f.code, ErrorCode::OutOfOrderSequenceNumber);
    }

    #[test]
    fn sequences_follow_on_within_an_epoch() {
        let s = after(&[(0, 0, 4)]);
        assert_eq!(check(s.as_ref(), &batch(0, 5, 9)), Verdict::Append);
        let Verdict::Reject(f) = check(s.as_ref(), &batch(0, 6, 9)) else { panic!() };
        assert_eq!(f.code, ErrorCode::OutOfOrderSequenceNumber);
    }

    #[test]
    fn sequence_wraps_from_max_to_zero() {
        let s = after(&[(0, 0, 0), (0, 1, i32::MAX)]);
        assert_eq!(check(s.as_ref(), &batch(0, 0, 3)), Verdict::Append);
        assert_eq!(sequence_span(i32::MAX - 1, 1), 4);
    }

    #[test]
    fn older_epoch_is_fenced() {
        let s = after(&[(3, 0, 0)]);
        let Verdict::Reject(f) = check(s.as_ref(), &batch(2, 1, 1)) else { panic!() };
        assert_eq!(f.code, ErrorCode::InvalidProducerEpoch);
    }

    #[test]
    fn new_epoch_restarts_at_zero_and_forgets_old_batches() {
        let s = after(&[(0, 0, 0), (0, 1, 1)]);
        let Verdict::Reject(f) = check(s.as_ref(), &batch(1, 2, 2)) else { panic!() };
        assert_eq!(f.code, ErrorCode::OutOfOrderSequenceNumber);
        assert_eq!(check(s.as_ref(), &batch(1, 0, 0)), Verdict::Append);
        let s = record(s, &batch(1, 0, 0), 500, 9);
        assert_eq!(s.batches.len(), 1);
        // (0, 1, 1) was epoch 0: not a duplicate in epoch 1, and out of order.
        assert!(matches!(check(Some(&s), &batch(1, 1, 1)), Verdict::Append));
    }

    #[test]
    fn any_of_the_last_five_is_a_duplicate_but_the_sixth_is_not() {
        let s = after(&[(0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3), (0, 4, 4), (0, 5, 5)]).unwrap();
        assert_eq!(s.batches.len(), 5);
        let Verdict::Duplicate(d) = check(Some(&s), &batch(0, 1, 1)) else { panic!() };
        assert_eq!((d.assigned_base_offset, d.log_append_time), (100, 1001));
        assert!(matches!(check(Some(&s), &batch(0, 0, 0)), Verdict::Reject(_)));
    }
}
