//! One share group's state of one partition (KIP-932's share partition), as Kafka's
//! `SharePartition` keeps it: the start offset (everything below it is acknowledged or archived),
//! and the records handed out at and above it, as contiguous ranges each in one state:
//! AVAILABLE, ACQUIRED (by a member, until its lock expires), ACKNOWLEDGED or ARCHIVED, with their
//! delivery counts.
//!
//! Pure and synchronous: time comes in as arguments, storage is the caller's (`states`). The
//! transitions follow Kafka 4.1's `SharePartition` (see docs/research/kip-932-kafka-rules.md):
//! acquisition counts a delivery; ACCEPT acknowledges, RELEASE makes available again, REJECT and
//! GAP archive; a lock that expires, or a RELEASE, archives a record whose delivery count reached
//! the limit instead; a member's session closing gives its records back without counting that
//! delivery; the start offset moves past the acknowledged or archived prefix. It must not read
//! the log nor speak the protocol.

use diskless_proto::v1::{share_state, ShareState};
use diskless_proto::ErrorCode;

/// The most ranges a state may split into (the cluster stores at most 10,000): acknowledgements
/// that would split it further are refused.
pub const MAX_RANGES: usize = 5_000;

/// Kafka's `RecordState`, with its ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available = 0,
    Acquired = 1,
    Acknowledged = 2,
    Archived = 4,
}

impl RecordState {
    fn from_id(id: i32) -> Option<RecordState> {
        Some(match id {
            0 => RecordState::Available,
            1 => RecordState::Acquired,
            2 => RecordState::Acknowledged,
            4 => RecordState::Archived,
            _ => return None,
        })
    }

    fn done(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// Records `[first, last]`, all in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub first: i64,
    pub last: i64,
    pub state: RecordState,
    pub delivery_count: i32,
    /// The member holding an ACQUIRED range ("" otherwise).
    pub member: String,
    /// When an ACQUIRED range's lock expires (ms on the broker's clock; 0 otherwise).
    pub lock_until_ms: i64,
}

impl Range {
    fn same_kind(&self, o: &Range) -> bool {
        self.state == o.state
            && self.delivery_count == o.delivery_count
            && self.member == o.member
            && self.lock_until_ms == o.lock_until_ms
    }
}

/// Records handed to a member by one acquisition: `[first, last]`, delivered `delivery_count`
/// times (this one included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub delivery_count: i32,
}

/// An acknowledgement batch as the protocol carries it: one type for the whole range, or one per
/// offset. Types: 0 GAP, 1 ACCEPT, 2 RELEASE, 3 REJECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<i8>,
}

/// The limits acquisition and acknowledgement obey.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `group.share.record.lock.duration.ms`.
    pub lock_ms: i64,
    /// `group.share.delivery.count.limit`: a record delivered this many times is archived when its
    /// lock expires or it is released.
    pub delivery_count_limit: i32,
    /// `group.share.partition.max.record.locks`: no new records are acquired while this many
    /// offsets are in flight (from the start offset to the end of the last range).
    pub max_in_flight: i64,
}

/// A share group's state of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharePartition {
    pub state_epoch: i32,
    pub start: i64,
    /// Contiguous from `start`, in order.
    pub ranges: Vec<Range>,
}

impl SharePartition {
    /// A partition whose records are delivered from `start` on.
    pub fn at(start: i64, state_epoch: i32) -> SharePartition {
        SharePartition { state_epoch, start, ranges: vec![] }
    }

    /// The state as stored; `None` when the stored record does not hold a valid state (an unknown
    /// record state, ranges out of order).
    pub fn from_stored(s: &ShareState) -> Option<SharePartition> {
        let mut p = SharePartition { state_epoch: s.state_epoch, start: s.start_offset, ranges: vec![] };
        let mut next = s.start_offset;
        for r in &s.ranges {
            if r.first_offset != next || r.last_offset < r.first_offset {
                return None;
            }
            p.ranges.push(Range {
                first: r.first_offset,
                last: r.last_offset,
                state: RecordState::from_id(r.state)?,
                delivery_count: r.delivery_count,
                member: r.member_id.clone(),
                lock_until_ms: r.lock_until_ms,
            });
            next = r.last_offset.checked_add(1)?;
        }
        Some(p)
    }

    /// The record to store (version, time and owner are the caller's).
    pub fn to_stored(&self, topic_id: [u8; 16], partition: i32) -> ShareState {
        ShareState {
            topic_id: topic_id.to_vec(),
            partition_index: partition,
            state_epoch: self.state_epoch,
            start_offset: self.start,
            ranges: self
                .ranges
                .iter()
                .map(|r| share_state::Range {
                    first_offset: r.first,
                    last_offset: r.last,
                    state: r.state as i32,
                    delivery_count: r.delivery_count,
                    member_id: r.member.clone(),
                    lock_until_ms: r.lock_until_ms,
                })
                .collect(),
            ..ShareState::default()
        }
    }

    /// The first offset never handed out.
    pub fn end(&self) -> i64 {
        self.ranges.last().map_or(self.start, |r| r.last + 1)
    }

    /// The earliest lock expiry of an acquired record, if any is acquired.
    pub fn next_expiry(&self) -> Option<i64> {
        self.ranges.iter().filter(|r| r.state == RecordState::Acquired).map(|r| r.lock_until_ms).min()
    }

    /// Records whose lock expired at `now_ms` become available again, or archived at the delivery
    /// count limit (Kafka's `releaseAcquisitionLockOnTimeout`). Whether anything changed.
    pub fn expire(&mut self, now_ms: i64, limit: i32) -> bool {
        let mut changed = false;
        for r in &mut self.ranges {
            if r.state == RecordState::Acquired && r.lock_until_ms <= now_ms {
                r.state = if r.delivery_count >= limit { RecordState::Archived } else { RecordState::Available };
                r.member.clear();
                r.lock_until_ms = 0;
                changed = true;
            }
        }
        if changed {
            self.compact();
        }
        changed
    }

    /// Records below `log_start` no longer exist: the start moves up to it.
    pub fn advance_to(&mut self, log_start: i64) -> bool {
        if log_start <= self.start {
            return false;
        }
        self.split_at(log_start);
        self.ranges.retain(|r| r.first >= log_start);
        self.start = log_start;
        if self.ranges.first().is_some_and(|r| r.first != log_start) {
            // Only when everything handed out lies below the log start.
            self.ranges.clear();
        }
        true
    }

    /// Where the next acquisition reads from: the first available record (redelivered first), else
    /// the first offset never handed out when it is below `high_watermark`.
    pub fn next_available(&self, high_watermark: i64) -> Option<i64> {
        if let Some(r) = self.ranges.iter().find(|r| r.state == RecordState::Available) {
            return Some(r.first);
        }
        let end = self.end();
        (end < high_watermark).then_some(end)
    }

    /// Acquires for `member` the records of `batches` (each a record batch's `[base, last]`
    /// offsets, in order, as the log returned them from offset `read_from`) that are available: until `max_records` are
    /// acquired (a soft limit: the batch that reaches it is taken whole, as Kafka does), and new
    /// records only while fewer than `limits.max_in_flight` offsets are in flight. Returns what was
    /// acquired, in order.
    pub fn acquire(
        &mut self,
        member: &str,
        read_from: i64,
        batches: &[(i64, i64)],
        now_ms: i64,
        limits: &Limits,
        max_records: i64,
    ) -> Vec<Acquired> {
        let mut out: Vec<Acquired> = vec![];
        let mut count = 0i64;
        let lock_until_ms = now_ms.saturating_add(limits.lock_ms);
        let acquired = |r: &mut Range| {
            r.state = RecordState::Acquired;
            r.delivery_count = r.delivery_count.saturating_add(1);
            r.member = member.to_string();
            r.lock_until_ms = lock_until_ms;
        };
        for &(base, last) in batches {
            if count >= max_records.max(1) {
                break;
            }
            let lo = base.max(self.start);
            if last < lo {
                continue;
            }
            // Records handed out before: the available ones are acquired again.
            let end = self.end();
            if lo < end {
                let hi = last.min(end - 1);
                self.split_at(lo);
                self.split_at(hi + 1);
                for r in self.ranges.iter_mut().filter(|r| r.first >= lo && r.last <= hi) {
                    if r.state == RecordState::Available {
                        acquired(r);
                        count += r.last - r.first + 1;
                        push(&mut out, Acquired { first: r.first, last: r.last, delivery_count: r.delivery_count });
                    }
                }
            }
            // New records.
            let end = self.end();
            if last >= end {
                if end - self.start >= limits.max_in_flight {
                    continue;
                }
                let first = lo.max(end);
                if first > end {
                    if read_from > end {
                        // The read began past what this state handed out (it was read from an
                        // older copy): nothing new is acquired; the next fetch reads from here.
                        break;
                    }
                    // Offsets the log does not hold (none should be missing): never delivered.
                    self.ranges.push(Range {
                        first: end,
                        last: first - 1,
                        state: RecordState::Archived,
                        delivery_count: 0,
                        member: String::new(),
                        lock_until_ms: 0,
                    });
                }
                let mut r = Range {
                    first,
                    last,
                    state: RecordState::Available,
                    delivery_count: 0,
                    member: String::new(),
                    lock_until_ms: 0,
                };
                acquired(&mut r);
                count += last - first + 1;
                push(&mut out, Acquired { first, last, delivery_count: 1 });
                self.ranges.push(r);
            }
        }
        self.compact();
        out
    }

    /// Acknowledges `batches` for `member`, all or nothing: every offset named must be acquired by
    /// `member` (else INVALID_RECORD_STATE), the batches in order, disjoint, with one type or one
    /// per offset, each 0–3 (else INVALID_REQUEST), as Kafka's `SharePartition.acknowledge`.
    pub fn acknowledge(&mut self, member: &str, batches: &[AckBatch], limit: i32) -> Result<(), ErrorCode> {
        let mut next = i64::MIN;
        for b in batches {
            let len = b.last.checked_sub(b.first).and_then(|d| d.checked_add(1)).unwrap_or(0);
            if b.first > b.last || b.first < next || b.types.is_empty() {
                return Err(ErrorCode::InvalidRequest);
            }
            if b.types.len() != 1 && i64::try_from(b.types.len()).ok() != Some(len) {
                return Err(ErrorCode::InvalidRequest);
            }
            if b.types.iter().any(|t| !(0..=3).contains(t)) {
                return Err(ErrorCode::InvalidRequest);
            }
            next = b.last.saturating_add(1);
        }
        let mut work = self.clone();
        for b in batches {
            // Offsets below the start offset are acknowledged or archived already (or were deleted
            // from the log): ignored, as Kafka ignores them.
            let first = b.first.max(work.start);
            if first > b.last {
                continue;
            }
            let held = b.last < work.end()
                && work
                    .ranges
                    .iter()
                    .filter(|r| r.last >= first && r.first <= b.last)
                    .all(|r| r.state == RecordState::Acquired && r.member == member);
            if !held {
                return Err(ErrorCode::InvalidRecordState);
            }
            // Per-offset types apply as runs of one type.
            let mut run_first = b.first;
            for (i, t) in b.types.iter().enumerate() {
                let o = b.first + i as i64;
                let run_ends = b.types.len() == 1 || b.types.get(i + 1) != Some(t);
                if run_ends {
                    let last = if b.types.len() == 1 { b.last } else { o };
                    if last >= first {
                        work.set(run_first.max(first), last, *t, limit);
                    }
                    run_first = last + 1;
                    if work.ranges.len() > MAX_RANGES {
                        return Err(ErrorCode::InvalidRequest);
                    }
                }
            }
        }
        work.compact();
        *self = work;
        Ok(())
    }

    /// Everything `member` holds becomes available again, its delivery not counted (Kafka's
    /// release when a share session closes). Whether anything changed.
    pub fn release_member(&mut self, member: &str) -> bool {
        let mut changed = false;
        for r in &mut self.ranges {
            if r.state == RecordState::Acquired && r.member == member {
                r.state = RecordState::Available;
                r.delivery_count = (r.delivery_count - 1).max(0);
                r.member.clear();
                r.lock_until_ms = 0;
                changed = true;
            }
        }
        if changed {
            self.compact();
        }
        changed
    }

    /// Records acquired (by anyone) now.
    pub fn in_flight_acquired(&self) -> i64 {
        self.ranges.iter().filter(|r| r.state == RecordState::Acquired).map(|r| r.last - r.first + 1).sum()
    }

    fn set(&mut self, first: i64, last: i64, ack_type: i8, limit: i32) {
        self.split_at(first);
        self.split_at(last + 1);
        for r in self.ranges.iter_mut().filter(|r| r.first >= first && r.last <= last) {
            r.state = match ack_type {
                1 => RecordState::Acknowledged,
                2 if r.delivery_count < limit => RecordState::Available,
                _ => RecordState::Archived,
            };
            r.member.clear();
            r.lock_until_ms = 0;
        }
    }

    /// Makes `o` the first offset of a range, when a range holds it past its first.
    fn split_at(&mut self, o: i64) {
        if let Some(i) = self.ranges.iter().position(|r| r.first < o && o <= r.last) {
            let mut tail = self.ranges[i].clone();
            tail.first = o;
            self.ranges[i].last = o - 1;
            self.ranges.insert(i + 1, tail);
        }
    }

    /// Moves the start past the acknowledged or archived prefix, and merges neighbours alike.
    fn compact(&mut self) {
        let done = self.ranges.iter().take_while(|r| r.state.done()).count();
        if done > 0 {
            self.start = self.ranges[done - 1].last + 1;
            self.ranges.drain(..done);
        }
        for r in &mut self.ranges {
            if r.state.done() {
                r.delivery_count = 0;
            }
        }
        let mut merged: Vec<Range> = Vec::with_capacity(self.ranges.len());
        for r in self.ranges.drain(..) {
            match merged.last_mut() {
                Some(m) if m.same_kind(&r) && m.last + 1 == r.first => m.last = r.last,
                _ => merged.push(r),
            }
        }
        self.ranges = merged;
    }
}

fn push(out: &mut Vec<Acquired>, a: Acquired) {
    match out.last_mut() {
        Some(l) if l.last + 1 == a.first && l.delivery_count == a.delivery_count => l.last = a.last,
        _ => out.push(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { lock_ms: 1_000, delivery_count_limit: 3, max_in_flight: 100 };

    fn ack(first: i64, last: i64, t: i8) -> AckBatch {
        AckBatch { first, last, types: vec![t] }
    }

    #[test]
    fn records_are_acquired_once_until_released_or_expired() {
        let mut p = SharePartition::at(0, 0);
        let a = p.acquire("a", 0, &[(0, 4), (5, 9)], 0, &LIMITS, 500);
        assert_eq!(a, vec![Acquired { first: 0, last: 9, delivery_count: 1 }]);
        // Nothing is available for another member until the lock expires.
        assert_eq!(p.next_available(10), None);
        assert!(p.acquire("b", 0, &[(0, 4), (5, 9)], 10, &LIMITS, 500).is_empty());
        assert!(!p.expire(999, 3));
        assert!(p.expire(1_000, 3));
        assert_eq!(p.next_available(10), Some(0));
        let b = p.acquire("b", 0, &[(0, 4)], 1_000, &LIMITS, 500);
        assert_eq!(b, vec![Acquired { first: 0, last: 4, delivery_count: 2 }]);
    }

    #[test]
    fn accepted_records_move_the_start_and_are_never_delivered_again() {
        let mut p = SharePartition::at(0, 0);
        p.acquire("a", 0, &[(0, 4), (5, 9)], 0, &LIMITS, 500);
        p.acknowledge("a", &[ack(0, 4, 1)], 3).unwrap();
        assert_eq!(p.start, 5);
        // Acknowledging again: below the start offset, ignored (as Kafka ignores it).
        let before = p.clone();
        assert_eq!(p.acknowledge("a", &[ack(0, 4, 1)], 3), Ok(()));
        assert_eq!(p, before);
        // Another member cannot acknowledge what `a` holds.
        assert_eq!(p.acknowledge("b", &[ack(5, 9, 1)], 3), Err(ErrorCode::InvalidRecordState));
        p.expire(5_000, 3);
        let again = p.acquire("b", 0, &[(0, 4), (5, 9)], 5_000, &LIMITS, 500);
        assert_eq!(again, vec![Acquired { first: 5, last: 9, delivery_count: 2 }]);
    }

    #[test]
    fn per_offset_acknowledgements_release_reject_and_accept() {
        let mut p = SharePartition::at(0, 0);
        p.acquire("a", 0, &[(0, 3)], 0, &LIMITS, 500);
        p.acknowledge("a", &[AckBatch { first: 0, last: 3, types: vec![1, 2, 3, 1] }], 3).unwrap();
        // 0 accepted (start moves to 1), 1 available, 2 archived, 3 accepted.
        assert_eq!(p.start, 1);
        assert_eq!(p.next_available(4), Some(1));
        let a = p.acquire("b", 0, &[(0, 3)], 10, &LIMITS, 500);
        assert_eq!(a, vec![Acquired { first: 1, last: 1, delivery_count: 2 }]);
        p.acknowledge("b", &[ack(1, 1, 1)], 3).unwrap();
        assert_eq!((p.start, p.ranges.len()), (4, 0));
    }

    #[test]
    fn a_record_delivered_to_the_limit_is_archived() {
        let mut p = SharePartition::at(0, 0);
        for round in 1..=3 {
            let a = p.acquire("a", 0, &[(0, 0)], round * 10_000, &LIMITS, 500);
            assert_eq!(a, vec![Acquired { first: 0, last: 0, delivery_count: round as i32 }]);
            if round < 3 {
                p.acknowledge("a", &[ack(0, 0, 2)], 3).unwrap();
            }
        }
        // The third delivery's lock expires: archived, the start moves past it.
        p.expire(100_000, 3);
        assert_eq!((p.start, p.next_available(1)), (1, None));
    }

    #[test]
    fn a_closed_session_gives_records_back_without_counting_the_delivery() {
        let mut p = SharePartition::at(0, 0);
        p.acquire("a", 0, &[(0, 9)], 0, &LIMITS, 500);
        assert!(p.release_member("a"));
        let a = p.acquire("b", 0, &[(0, 9)], 1, &LIMITS, 500);
        assert_eq!(a, vec![Acquired { first: 0, last: 9, delivery_count: 1 }]);
    }

    #[test]
    fn acquisition_stops_at_max_records_on_a_batch_boundary_and_at_the_in_flight_limit() {
        let mut p = SharePartition::at(0, 0);
        let a = p.acquire("a", 0, &[(0, 4), (5, 9), (10, 14)], 0, &LIMITS, 6);
        assert_eq!(a, vec![Acquired { first: 0, last: 9, delivery_count: 1 }]);
        let tight = Limits { max_in_flight: 10, ..LIMITS };
        assert!(p.acquire("a", 0, &[(10, 14)], 0, &tight, 500).is_empty());
        p.acknowledge("a", &[ack(0, 4, 1)], 3).unwrap();
        assert_eq!(p.acquire("a", 0, &[(10, 14)], 0, &tight, 500).len(), 1);
    }

    #[test]
    fn malformed_acknowledgements_change_nothing() {
        let mut p = SharePartition::at(0, 0);
        p.acquire("a", 0, &[(0, 9)], 0, &LIMITS, 500);
        let before = p.clone();
        for bad in [
            vec![ack(5, 4, 1)],
            vec![ack(5, 6, 1), ack(0, 1, 1)],
            vec![AckBatch { first: 0, last: 2, types: vec![1, 1] }],
            vec![ack(0, 0, 4)],
            vec![AckBatch { first: 0, last: 0, types: vec![] }],
        ] {
            assert_eq!(p.acknowledge("a", &bad, 3), Err(ErrorCode::InvalidRequest));
        }
        // A valid first batch and an invalid second: nothing applied.
        assert_eq!(p.acknowledge("a", &[ack(0, 0, 1), ack(20, 21, 1)], 3), Err(ErrorCode::InvalidRecordState));
        assert_eq!(p, before);
    }

    #[test]
    fn the_stored_form_round_trips_and_a_broken_one_is_refused() {
        let mut p = SharePartition::at(7, 2);
        p.acquire("a", 0, &[(7, 9), (10, 12)], 0, &LIMITS, 500);
        p.acknowledge("a", &[ack(10, 10, 3)], 3).unwrap();
        let stored = p.to_stored([1; 16], 3);
        assert_eq!(SharePartition::from_stored(&stored), Some(p));
        let mut broken = stored.clone();
        broken.ranges[0].first_offset = 3;
        assert_eq!(SharePartition::from_stored(&broken), None);
        let mut unknown = stored;
        unknown.ranges[0].state = 3;
        assert_eq!(SharePartition::from_stored(&unknown), None);
    }

    #[test]
    fn acknowledgements_below_the_start_offset_are_ignored() {
        let mut p = SharePartition::at(0, 0);
        p.acquire("a", 0, &[(0, 9)], 0, &LIMITS, 500);
        p.advance_to(5);
        p.acknowledge("a", &[ack(0, 9, 1)], 3).unwrap();
        assert_eq!((p.start, p.ranges.len()), (10, 0));
        p.acquire("a", 0, &[(10, 12)], 0, &LIMITS, 500);
        p.acknowledge("a", &[AckBatch { first: 8, last: 12, types: vec![1, 1, 1, 2, 1] }], 3).unwrap();
        assert_eq!((p.start, p.next_available(13)), (11, Some(11)));
    }

    #[test]
    fn a_read_from_an_older_copy_archives_nothing_it_did_not_see() {
        // The state was reset to 0 elsewhere; this broker read from 150 on its older copy.
        let mut p = SharePartition::at(0, 1);
        assert!(p.acquire("a", 150, &[(150, 159)], 0, &LIMITS, 500).is_empty());
        assert_eq!((p.start, p.ranges.len()), (0, 0));
        // A read that began at the end and found later offsets: the missing ones are archived.
        assert_eq!(p.acquire("a", 0, &[(3, 4)], 0, &LIMITS, 500).len(), 1);
        assert_eq!(p.start, 3);
    }

    #[test]
    fn records_deleted_below_the_log_start_are_skipped() {
        let mut p = SharePartition::at(0, 0);
        p.acquire("a", 0, &[(0, 9)], 0, &LIMITS, 500);
        assert!(p.advance_to(5));
        assert_eq!((p.start, p.ranges[0].first), (5, 5));
        assert!(p.advance_to(20));
        assert_eq!((p.start, p.ranges.len()), (20, 0));
    }
}
