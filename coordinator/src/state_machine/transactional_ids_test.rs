//! Transactional ids' state: the compare-and-set on the version, the times from the command.

use super::fixture::*;
use super::{ErrorCode, Op, Outcome, TxnRecord, TxnState};

fn record(state: TxnState, txn_number: u64, owner: &str) -> TxnRecord {
    TxnRecord {
        producer_id: 5,
        producer_epoch: 0,
        last_producer_id: -1,
        last_producer_epoch: -1,
        timeout_ms: 60_000,
        state,
        txn_number,
        partitions: vec![tp(1, 0)],
        groups: vec![],
        started_ms: 123,
        updated_ms: 456,
        owner: owner.into(),
        version: 99,
        pending_offsets: vec![],
    }
}

fn store(f: &mut Fixture, r: TxnRecord, expected: u64) -> Result<TxnRecord, super::Failure> {
    let op = Op::StoreTxn { transactional_id: "t".into(), record: r, expected_version: expected };
    let Outcome::Txn(r) = f.apply(op) else { panic!("wrong outcome") };
    r
}

#[test]
fn a_store_applies_only_at_the_version_its_owner_last_saw() {
    let mut f = Fixture::new();
    let first = store(&mut f, record(TxnState::Empty, 0, "a"), 0).unwrap();
    // Created anew: numbered from the command's time.
    let v = (f.now as u64) << 20;
    assert_eq!((first.version, first.started_ms, first.updated_ms), (v, -1, f.now));
    // A second broker that did not see that version is fenced; so is one that saw an older one.
    assert_eq!(
        store(&mut f, record(TxnState::Empty, 0, "b"), 0).unwrap_err().code,
        ErrorCode::TransactionCoordinatorFenced
    );
    let b = store(&mut f, record(TxnState::Ongoing, 1, "b"), v).unwrap();
    assert_eq!(b.version, v + 1);
    let err = store(&mut f, record(TxnState::PrepareCommit, 1, "a"), v).unwrap_err();
    assert_eq!(err.code, ErrorCode::TransactionCoordinatorFenced);
    let stored = f.sm.transaction(&f.db.read(), "t").unwrap().unwrap();
    assert_eq!((stored.owner.as_str(), stored.state, stored.version), ("b", TxnState::Ongoing, v + 1));
    assert_eq!(f.sm.list_transactions(&f.db.read()).unwrap().len(), 1);
    assert!(f.sm.transaction(&f.db.read(), "other").unwrap().is_none());
}

#[test]
fn a_transaction_starts_when_it_becomes_ongoing_and_keeps_that_time_until_it_ends() {
    let mut f = Fixture::new();
    let v = store(&mut f, record(TxnState::Empty, 0, "a"), 0).unwrap().version;
    f.now = 1_000;
    let on = store(&mut f, record(TxnState::Ongoing, 1, "a"), v).unwrap();
    assert_eq!(on.started_ms, 1_000);
    f.now = 2_000;
    // More partitions added: the same transaction.
    assert_eq!(store(&mut f, record(TxnState::Ongoing, 1, "a"), v + 1).unwrap().started_ms, 1_000);
    let done = store(&mut f, record(TxnState::CompleteCommit, 1, "a"), v + 2).unwrap();
    assert_eq!((done.started_ms, done.updated_ms), (1_000, 2_000));
    f.now = 3_000;
    assert_eq!(store(&mut f, record(TxnState::Ongoing, 2, "a"), v + 3).unwrap().started_ms, 3_000);
}

#[test]
fn an_empty_transactional_id_is_refused() {
    let mut f = Fixture::new();
    let op =
        Op::StoreTxn { transactional_id: String::new(), record: record(TxnState::Empty, 0, "a"), expected_version: 0 };
    let Outcome::Txn(r) = f.apply(op) else { panic!("wrong outcome") };
    assert_eq!(r.unwrap_err().code, ErrorCode::InvalidRequest);
}

fn expire(f: &mut Fixture, expected: u64) -> Result<(), ErrorCode> {
    let op = Op::ExpireTxn { transactional_id: "t".into(), expected_version: expected };
    let Outcome::TxnExpired(r) = f.apply(op) else { panic!("wrong outcome") };
    r.map_err(|e| e.code)
}

#[test]
fn an_idle_transactional_id_expires_at_its_version_and_an_open_one_never() {
    let mut f = Fixture::new();
    assert_eq!(expire(&mut f, 0), Err(ErrorCode::TransactionCoordinatorFenced), "nothing stored");
    let v = store(&mut f, record(TxnState::Ongoing, 1, "a"), 0).unwrap().version;
    assert_eq!(expire(&mut f, v), Err(ErrorCode::InvalidTxnState), "a transaction is open");
    store(&mut f, record(TxnState::CompleteCommit, 1, "a"), v).unwrap();
    assert_eq!(expire(&mut f, v), Err(ErrorCode::TransactionCoordinatorFenced), "a stale version");
    assert_eq!(expire(&mut f, v + 1), Ok(()));
    assert!(f.sm.transaction(&f.db.read(), "t").unwrap().is_none());
    // The id starts over, at a version no copy of the expired record holds: a broker that still
    // holds that copy (it read it before the expiry) cannot store over the new one.
    f.now += 1;
    let again = store(&mut f, record(TxnState::Empty, 0, "b"), 0).unwrap();
    assert!(again.version > v + 1, "{} after {}", again.version, v + 1);
    for stale in [v, v + 1] {
        let e = store(&mut f, record(TxnState::Ongoing, 2, "a"), stale).unwrap_err();
        assert_eq!(e.code, ErrorCode::TransactionCoordinatorFenced, "a copy at version {stale}");
    }
    let stored = f.sm.transaction(&f.db.read(), "t").unwrap().unwrap();
    assert_eq!((stored.owner.as_str(), stored.version), ("b", again.version));
}
