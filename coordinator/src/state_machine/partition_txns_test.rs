//! Transactions on a partition: open transactions and the last stable offset, markers, aborted
//! ranges, fencing of late batches, and what retention, DeleteRecords and topic deletion do.

use super::fixture::*;
use super::keys::{ABORTED_TXN, MARKER, OPEN_TXN, OPEN_TXN_BY_OFFSET, PRODUCER};
use super::partition_txns::AbortedTxn;
use super::ErrorCode;
use crate::storage::KvRead;

/// How many keys of table `tag` the fixture's metadata partition holds.
fn count(f: &Fixture, tag: u8) -> usize {
    let (from, to) = super::keys::Keys::new(0).table(tag);
    let mut n = 0;
    f.db.read()
        .scan(&from, &to, &mut |_, _| {
            n += 1;
            Ok(true)
        })
        .unwrap();
    n
}

#[test]
fn an_open_transaction_holds_the_last_stable_offset_until_its_commit_marker() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_one(batch(t, 3)).unwrap();
    assert_eq!(f.commit_in_txn(idem(t, 7, 0, 0, 2)).unwrap().assigned_base_offset, 3);
    f.commit_one(batch(t, 4)).unwrap();
    assert_eq!(f.commit_in_txn(idem(t, 7, 0, 2, 1)).unwrap().assigned_base_offset, 9);
    // High watermark 10; the transaction began at 3.
    assert_eq!(f.list_offsets(t, -1).unwrap().offset, 10);
    assert_eq!(f.list_committed(t, -1).unwrap().offset, 3);
    let r = f.find_committed(t, 0);
    assert_eq!((r.high_watermark, r.last_stable_offset), (10, 3));
    assert_eq!(r.batches.iter().map(|b| b.base_offset).collect::<Vec<_>>(), vec![0]);
    assert!(f.find_committed(t, 3).batches.is_empty(), "nothing at or past the last stable offset");
    // read_uncommitted sees everything.
    assert_eq!(f.find(t, 0, i32::MAX).batches.len(), 4);

    assert_eq!(f.end_txn(t, 7, 1, true).unwrap(), Some(10));
    let r = f.find_committed(t, 0);
    assert_eq!((r.high_watermark, r.last_stable_offset), (11, 11));
    assert_eq!(r.batches.len(), 5);
    let marker = r.batches.last().unwrap();
    assert!(marker.is_marker() && marker.byte_size == 0 && marker.base_offset == 10 && marker.last_offset == 10);
    assert_eq!(r.markers.len(), 1);
    let (at, m) = r.markers[0];
    assert_eq!((at, m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch), (10, 7, 1, true, 3));
    assert!(r.aborted.is_empty());
}

#[test]
fn an_abort_marker_names_the_aborted_range_to_read_committed_fetches() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_in_txn(idem(t, 7, 0, 0, 2)).unwrap(); // 0..1
    f.commit_one(batch(t, 1)).unwrap(); // 2
    assert_eq!(f.end_txn(t, 7, 1, false).unwrap(), Some(3));
    let r = f.find_committed(t, 0);
    assert_eq!(r.last_stable_offset, 4);
    assert_eq!(r.aborted, vec![AbortedTxn { producer_id: 7, first_offset: 0 }]);
    assert!(!r.markers[0].1.commit);
    // A fetch from past the marker does not name it; read_uncommitted never does.
    assert!(f.find_committed(t, 4).aborted.is_empty());
    assert!(f.find(t, 0, i32::MAX).aborted.is_empty());
}

#[test]
fn a_long_transaction_is_named_to_a_fetch_that_ends_before_a_shorter_ones_marker() {
    // Producer 7 opens at 0 and aborts last; producer 8 opens at 1 and aborts first. A fetch of
    // [0, 3) must name both, though 8's marker (3) lies at the fetch's end: 7 was still open then.
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_in_txn(idem(t, 7, 0, 0, 1)).unwrap(); // 0
    f.commit_in_txn(idem(t, 8, 0, 0, 1)).unwrap(); // 1
    f.commit_in_txn(idem(t, 8, 0, 1, 1)).unwrap(); // 2
    assert_eq!(f.end_txn(t, 8, 1, false).unwrap(), Some(3));
    assert_eq!(f.list_committed(t, -1).unwrap().offset, 0, "7 is still open");
    assert_eq!(f.end_txn(t, 7, 1, false).unwrap(), Some(4));
    let all = f.find_committed(t, 0);
    assert_eq!(all.last_stable_offset, 5);
    assert_eq!(
        all.aborted,
        vec![AbortedTxn { producer_id: 8, first_offset: 1 }, AbortedTxn { producer_id: 7, first_offset: 0 }]
    );
}

#[test]
fn a_late_batch_of_an_ended_transaction_is_fenced_and_the_next_epoch_starts_at_sequence_zero() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    let (t, other) = (tp(1, 0), tp(1, 1));
    f.commit_in_txn(idem(t, 7, 4, 0, 1)).unwrap();
    f.end_txn(t, 7, 5, true).unwrap();
    let late = f.commit_in_txn(idem(t, 7, 4, 1, 1));
    assert_eq!(code(&late), ErrorCode::InvalidProducerEpoch);
    assert_eq!(f.commit_in_txn(idem(t, 7, 5, 0, 1)).unwrap().assigned_base_offset, 2);
    // A partition the transaction wrote nothing to gets no marker, but is fenced all the same.
    assert_eq!(f.end_txn(other, 7, 5, true).unwrap(), None);
    assert_eq!(f.list_offsets(other, -1).unwrap().offset, 0);
    assert_eq!(code(&f.commit_in_txn(idem(other, 7, 4, 0, 1))), ErrorCode::InvalidProducerEpoch);
    // A marker older than the producer's epoch is refused; so is one of the open transaction's own
    // epoch: a deposed coordinator retrying the last transaction's markers (epoch 5) cannot end
    // the next one, whose batches carry 5 too.
    assert_eq!(code(&f.end_txn(t, 7, 4, false)), ErrorCode::InvalidProducerEpoch);
    assert_eq!(code(&f.end_txn(t, 7, 5, false)), ErrorCode::InvalidProducerEpoch);
    assert_eq!(f.find_committed(t, 0).last_stable_offset, 2, "the transaction is still open");
    assert_eq!(f.end_txn(t, 7, 6, true).unwrap(), Some(3));
    assert_eq!(code(&f.end_txn(tp(1, 9), 7, 5, false)), ErrorCode::UnknownTopicOrPartition);
}

#[test]
fn a_non_transactional_batch_of_a_producer_with_an_open_transaction_is_refused() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_in_txn(idem(t, 7, 0, 0, 1)).unwrap();
    assert_eq!(code(&f.commit_one(idem(t, 7, 0, 1, 1))), ErrorCode::InvalidTxnState);
    assert_eq!(code(&f.commit_in_txn(batch(t, 1))), ErrorCode::InvalidRecord, "no producer id");
    // Other producers are not concerned; a repeat of the transactional batch is a duplicate.
    f.commit_one(batch(t, 1)).unwrap();
    assert!(f.commit_in_txn(idem(t, 7, 0, 0, 1)).unwrap().is_duplicate);
}

#[test]
fn retention_stops_at_an_open_transaction_and_markers_go_with_their_batches() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 1, Some(1), None).unwrap();
    let t = tp(1, 0);
    f.commit_in_txn(idem(t, 7, 0, 0, 1)).unwrap(); // 0
    f.end_txn(t, 7, 1, false).unwrap(); // marker 1
    f.commit_one(batch(t, 1)).unwrap(); // 2
    f.commit_in_txn(idem(t, 8, 0, 0, 1)).unwrap(); // 3, stays open
    f.commit_one(batch(t, 1)).unwrap(); // 4
    f.now += 10_000;
    f.retention(1000);
    // Everything is past retention.ms, but 3 starts an open transaction.
    assert_eq!(f.offsets(t), (3, 5));
    assert_eq!((count(&f, MARKER), count(&f, ABORTED_TXN)), (0, 0), "the marker's records went with it");
    // Producer 8's state does not expire while its transaction is open; 7's does.
    f.retention_expiring_producers(1000, 1);
    f.retention_expiring_producers(1000, 1);
    assert_eq!(count(&f, PRODUCER), 1);
    f.end_txn(t, 8, 1, true).unwrap();
    f.now += 10_000;
    f.retention(1000);
    assert_eq!(f.offsets(t), (6, 6));
}

#[test]
fn delete_records_may_pass_an_open_transaction_and_the_last_stable_offset_follows_the_log_start() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_in_txn(idem(t, 7, 0, 0, 1)).unwrap();
    f.commit_one(batch(t, 2)).unwrap();
    assert_eq!(f.delete_records(t, 2, 100).unwrap(), 2);
    assert_eq!(f.list_committed(t, -1).unwrap().offset, 2);
    assert_eq!(f.end_txn(t, 7, 1, true).unwrap(), Some(3));
    assert_eq!(f.list_committed(t, -1).unwrap().offset, 4);
}

#[test]
fn deleting_a_topic_forgets_its_open_transactions_markers_and_aborted_ranges() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_in_txn(idem(t, 7, 0, 0, 1)).unwrap();
    f.end_txn(t, 7, 1, false).unwrap();
    f.commit_in_txn(idem(t, 8, 0, 0, 1)).unwrap();
    assert_eq!((count(&f, OPEN_TXN), count(&f, OPEN_TXN_BY_OFFSET), count(&f, MARKER)), (1, 1, 1));
    f.delete_topic(1, 1000).unwrap();
    f.retention(1000);
    for tag in [OPEN_TXN, OPEN_TXN_BY_OFFSET, MARKER, ABORTED_TXN, PRODUCER] {
        assert_eq!(count(&f, tag), 0, "table {}", tag as char);
    }
}

#[test]
fn a_repeat_of_a_transactional_commit_is_answered_as_the_first_and_other_flags_are_refused() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    let key = f.fresh_key();
    let file = |flags: Vec<bool>| super::FileToCommit {
        file: super::CommitFile {
            deadline_ms: None,
            object_key: key.clone(),
            object_format: super::command::OBJECT_FORMAT_WAL_MULTI_SEGMENT,
            file_size: 100,
            uploader_broker_id: 1,
            owner_ids: vec![0],
            batches: vec![idem(t, 7, 0, 0, 1)],
        },
        transactional: flags,
        txn_numbers: vec![],
    };
    let first = f.apply(super::Op::CommitFiles(vec![file(vec![true])]));
    assert_eq!(f.apply(super::Op::CommitFiles(vec![file(vec![true])])), first);
    let super::Outcome::CommitFiles(r) = f.apply(super::Op::CommitFiles(vec![file(vec![false])])) else { panic!() };
    assert_eq!(code(&r[0][0]), ErrorCode::InvalidRequest, "the same key with other content");
    let super::Outcome::CommitFiles(r) = f.apply(super::Op::CommitFiles(vec![file(vec![true, true])])) else {
        panic!()
    };
    assert_eq!(code(&r[0][0]), ErrorCode::InvalidRequest, "a flag per batch");
}

/// Transactions v1 clients keep one epoch across transactions: the number tells them apart.
#[test]
fn a_numbered_marker_ends_only_its_own_transaction_and_a_late_batch_of_an_ended_one_is_refused() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    let numbered =
        |f: &mut Fixture, seq: i32, n: u64| f.commit_numbered(vec![(idem(t, 7, 0, seq, 1), true, n)]).remove(0);
    // Transaction 1 at epoch 0, ended by its marker at the same epoch (v1: no bump).
    assert_eq!(numbered(&mut f, 0, 1).unwrap().assigned_base_offset, 0);
    assert_eq!(f.end_numbered(t, 7, 0, true, 1).unwrap(), Some(1));
    // Transaction 2, same epoch: a late repeat of transaction 1's marker ends nothing.
    assert_eq!(numbered(&mut f, 1, 2).unwrap().assigned_base_offset, 2);
    assert_eq!(f.end_numbered(t, 7, 0, true, 1).unwrap(), None);
    assert_eq!(f.find_committed(t, 0).last_stable_offset, 2, "transaction 2 is still open");
    // A batch numbered 3 while 2 is open is refused.
    assert_eq!(numbered(&mut f, 2, 3).unwrap_err().code, ErrorCode::InvalidTxnState);
    assert_eq!(f.end_numbered(t, 7, 0, false, 2).unwrap(), Some(3));
    assert_eq!(f.find_committed(t, 0).last_stable_offset, 4);
    // A batch of transaction 2 that comes after its marker is refused, not opened again.
    assert_eq!(numbered(&mut f, 2, 2).unwrap_err().code, ErrorCode::InvalidTxnState);
    // So is one of transaction 4 whose marker came first (it ended with nothing written here).
    assert_eq!(f.end_numbered(t, 7, 0, true, 4).unwrap(), None);
    assert_eq!(numbered(&mut f, 2, 4).unwrap_err().code, ErrorCode::InvalidTxnState);
    // Transaction 5 opens and ends as usual; a timeout's abort may bump the epoch.
    assert_eq!(numbered(&mut f, 2, 5).unwrap().assigned_base_offset, 4);
    assert_eq!(f.end_numbered(t, 7, 1, false, 5).unwrap(), Some(5));
    assert_eq!(numbered(&mut f, 3, 6).unwrap_err().code, ErrorCode::InvalidProducerEpoch, "fenced by the bump");
    assert_eq!(f.find_committed(t, 0).last_stable_offset, 6);
}

#[test]
fn a_new_epoch_keeps_the_last_ended_transaction_number() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_numbered(vec![(idem(t, 7, 0, 0, 1), true, 1)]).remove(0).unwrap();
    assert_eq!(f.end_numbered(t, 7, 0, true, 1).unwrap(), Some(1));
    // A plain batch of a new epoch (InitProducerId bumped it) replaces the producer's batches...
    f.commit_one(idem(t, 7, 1, 0, 1)).unwrap();
    // ...but a late batch of transaction 1 at the new epoch is still refused.
    let late = f.commit_numbered(vec![(idem(t, 7, 1, 1, 1), true, 1)]).remove(0);
    assert_eq!(late.unwrap_err().code, ErrorCode::InvalidTxnState);
}

#[test]
fn describe_producers_names_each_producers_epoch_last_sequence_and_open_transaction() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    let t = tp(1, 0);
    f.commit_one(idem(t, 5, 0, 0, 3)).unwrap(); // 0..2, producer 5 idempotent
    f.commit_in_txn(idem(t, 9, 2, 0, 2)).unwrap(); // 3..4, producer 9 in a transaction
    f.commit_one(batch(t, 1)).unwrap(); // 5, no producer
    let described = |f: &Fixture| {
        let sm = &f.sm;
        sm.describe_producers(&f.db.read(), &t).unwrap().unwrap()
    };
    let d = described(&f);
    assert_eq!(
        d.iter()
            .map(|p| (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset))
            .collect::<Vec<_>>(),
        vec![(5, 0, 2, -1), (9, 2, 1, 3)]
    );
    assert!(d.iter().all(|p| p.last_timestamp >= 0));
    // The commit marker ends producer 9's transaction at its next epoch.
    f.end_txn(t, 9, 3, true).unwrap();
    let d = described(&f);
    assert_eq!((d[1].producer_id, d[1].producer_epoch, d[1].current_txn_start_offset), (9, 3, -1));
    // A partition with no producer describes none; one that does not exist is unknown.
    assert!(f.sm.describe_producers(&f.db.read(), &tp(1, 1)).unwrap().unwrap().is_empty());
    let unknown = f.sm.describe_producers(&f.db.read(), &tp(1, 7)).unwrap().unwrap_err();
    assert_eq!(unknown.code, ErrorCode::UnknownTopicOrPartition);
}
