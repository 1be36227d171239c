//! Transactional ids: the state of each one's transaction (`TxnRecord`, table `J` of the metadata
//! partition the id maps to, `metadata_partition_for_group` over the id), as Kafka's transaction
//! state log keeps `TransactionMetadata`.
//!
//! The broker coordinating an id decides every transition in memory, as Kafka's
//! `TransactionCoordinator` does, and makes it durable with one write, `StoreTxn`, a
//! compare-and-set: it applies only if the stored version is the one the broker last read or
//! wrote, else TRANSACTION_COORDINATOR_FENCED (the rule of `versioned`; a record created anew is
//! numbered from the command's time, so a broker's copy of an id that expired since can never
//! store over its re-creation). A deposed coordinator can so move nothing: the broker that took
//! the id over read it and stored it since. This module keeps the version and the
//! times (from the command's "now", never a clock) and checks nothing else of the transition: the
//! partitions' own fences (`partition_txns`) refuse what a transaction's number or epoch rule out.

use super::command::{ErrorCode, Failure};
use super::keys::{self, Keys, MAX_GROUP_ID_BYTES};
use super::records::{TxnRecord, TxnState};
use super::versioned::{self, Versioned};
use super::{tables, StateMachine};
use crate::storage::{KvRead, StorageError, Txn};

fn check_id(id: &str) -> Result<(), Failure> {
    if id.is_empty() || id.len() > MAX_GROUP_ID_BYTES {
        return Err(Failure::new(ErrorCode::InvalidRequest, format!("transactional id {id:?} is empty or too long")));
    }
    Ok(())
}

/// The stored state of `id`, if any.
pub fn get(view: &dyn KvRead, keys: &Keys, id: &str) -> Result<Option<TxnRecord>, StorageError> {
    if check_id(id).is_err() {
        return Ok(None);
    }
    tables::get(view, &keys.txn(id))
}

/// StoreTxn: `record` replaces the stored state if that is at `expected_version` (0: none is
/// stored). Returns what was stored: the next version (`versioned::next`), `updated_ms` the
/// command's "now", and
/// `started_ms` now when the record opens a transaction (Ongoing with a number the stored one did
/// not have), else the stored one's.
pub fn store(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    id: &str,
    record: &TxnRecord,
    expected_version: u64,
) -> Result<Result<TxnRecord, Failure>, StorageError> {
    if let Err(f) = check_id(id) {
        return Ok(Err(f));
    }
    let old = get(txn, &sm.keys, id)?;
    let what = format_args!("transactional id {id}");
    if let Err(f) = versioned::check(old.as_ref(), expected_version, what, ErrorCode::TransactionCoordinatorFenced) {
        return Ok(Err(f));
    }
    let mut record = record.clone();
    let opens = record.state == TxnState::Ongoing
        && !old.as_ref().is_some_and(|o| o.state == TxnState::Ongoing && o.txn_number == record.txn_number);
    record.started_ms = if opens { now } else { old.as_ref().map_or(-1, |o| o.started_ms) };
    record.updated_ms = now;
    record.version = versioned::next(old.as_ref().map_or(0, |o| o.version), now);
    tables::put(txn, sm.keys.txn(id), &record)?;
    Ok(Ok(record))
}

/// ExpireTxn: the record of `id` is deleted if it is at `expected_version` (else
/// TRANSACTION_COORDINATOR_FENCED) and holds no open transaction: Empty or Complete (else
/// INVALID_TXN_STATE). Whether it went idle long enough is the coordinating broker's call, as in
/// Kafka; a broker that read it since moved it to another version.
pub fn expire(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    id: &str,
    expected_version: u64,
) -> Result<Result<(), Failure>, StorageError> {
    if let Err(f) = check_id(id) {
        return Ok(Err(f));
    }
    let Some(old) = get(txn, &sm.keys, id)? else {
        return Ok(Err(Failure::new(
            ErrorCode::TransactionCoordinatorFenced,
            format!("transactional id {id} is not stored (expected version {expected_version})"),
        )));
    };
    let what = format_args!("transactional id {id}");
    if let Err(f) = versioned::check(Some(&old), expected_version, what, ErrorCode::TransactionCoordinatorFenced) {
        return Ok(Err(f));
    }
    if !matches!(old.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort) {
        return Ok(Err(Failure::new(
            ErrorCode::InvalidTxnState,
            format!("transactional id {id} is {}: only an idle one expires", old.state.name()),
        )));
    }
    txn.delete(sm.keys.txn(id));
    Ok(Ok(()))
}

impl Versioned for TxnRecord {
    fn version(&self) -> u64 {
        self.version
    }
    fn owner(&self) -> &str {
        &self.owner
    }
}

/// Every transactional id this metadata partition holds, in id order.
pub fn list(view: &dyn KvRead, keys: &Keys) -> Result<Vec<(String, TxnRecord)>, StorageError> {
    let mut out = vec![];
    let (from, to) = keys.table(keys::TXN);
    view.scan(&from, &to, &mut |k, v| {
        let id = Keys::decode_txn(k).ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(k),
            reason: "not a transactional id key".into(),
        })?;
        out.push((id, crate::storage::codec::decode(k, v)?));
        Ok(true)
    })?;
    Ok(out)
}
