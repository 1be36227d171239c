//! WAL segment files: which are still needed, which wait for the broker to delete them, fencing
//! object keys before the broker deletes them, and forgetting the ones it deleted.
//!
//! The broker deletes an object only after fencing its key in every metadata partition that may
//! hold batches of it (FenceObjects, a log entry): a partition that still has live batches says so;
//! one that does not know the key records a tombstone, so a commit of the key that reaches the log
//! after the fence — delayed in a queue, in flight to a slow leader, appended by a leader that lost
//! its quorum and committed later — is refused. Confirming a deletion turns the file record into a
//! tombstone too (a late repeat of the commit is refused the same way). Retention forgets
//! tombstones after the node's `fenced_object_retention_ms`.

use super::command::{ErrorCode, Failure, FenceAnswer};
use super::commit_file::MAX_OBJECT_KEY_LEN;
use super::keys::{Keys, FENCED_BY_TIME, TO_DELETE};
use super::records::FileRecord;
use super::{tables, StateMachine};
use crate::storage::{KvRead, StorageError, Txn};

/// DescribeFiles' answer for one object key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileState {
    /// This metadata partition knows the object (live, or waiting to be deleted).
    pub known: bool,
    pub has_live_batches: bool,
}

/// A file whose batches are all gone, waiting for the broker to delete the object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileToDelete {
    pub object_key: String,
    pub marked_for_deletion_at: i64,
    pub file_size: i64,
    pub owner_ids: Vec<i32>,
}

/// The most files one ListFilesToDelete answers with.
pub const MAX_FILES_TO_DELETE: usize = 10_000;

pub fn describe(view: &dyn KvRead, keys: &Keys, object_key: &str) -> Result<FileState, StorageError> {
    let f = tables::file(view, keys, object_key)?;
    Ok(FileState { known: f.is_some(), has_live_batches: f.is_some_and(|f| f.marked_for_deletion_at.is_none()) })
}

/// Files marked for deletion, oldest first (then by object key), at most `limit`.
pub fn to_delete(view: &dyn KvRead, keys: &Keys, limit: usize) -> Result<Vec<FileToDelete>, StorageError> {
    let limit = limit.min(MAX_FILES_TO_DELETE);
    let (from, to) = keys.table(TO_DELETE);
    if limit == 0 {
        return Ok(vec![]);
    }
    let mut marked: Vec<(i64, String)> = Vec::new();
    view.scan(&from, &to, &mut |k, _| {
        let (at, key) = Keys::decode_to_delete(k).ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(k),
            reason: "malformed files-to-delete key".into(),
        })?;
        marked.push((at, key));
        Ok(marked.len() < limit)
    })?;
    let mut out = Vec::with_capacity(marked.len());
    for (at, object_key) in marked {
        let f = tables::file(view, keys, &object_key)?.ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(&keys.to_delete(at, &object_key)),
            reason: "a file marked for deletion has no file record".into(),
        })?;
        out.push(FileToDelete {
            object_key,
            marked_for_deletion_at: at,
            file_size: f.file_size,
            owner_ids: f.owner_ids,
        });
    }
    Ok(out)
}

/// FenceObjects: per key, live / released / fenced (recording the tombstone of an unknown key).
pub fn fence(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    object_keys: &[String],
) -> Result<Vec<(String, Result<FenceAnswer, Failure>)>, StorageError> {
    let keys = &sm.keys;
    let mut out = Vec::with_capacity(object_keys.len());
    for key in object_keys {
        let answer = if key.is_empty() || key.len() > MAX_OBJECT_KEY_LEN {
            Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!("an object key has 1 to {MAX_OBJECT_KEY_LEN} bytes, not {}", key.len()),
            ))
        } else {
            match tables::file(txn, keys, key)? {
                Some(FileRecord { marked_for_deletion_at: None, .. }) => Ok(FenceAnswer::Live),
                Some(FileRecord { marked_for_deletion_at: Some(at), .. }) => {
                    Ok(FenceAnswer::Released { marked_at: at })
                }
                None => match tables::fenced(txn, keys, key)? {
                    Some(t) => Ok(FenceAnswer::Fenced { fenced_at: t.fenced_at }),
                    None => {
                        tables::put_fenced(txn, keys, key, now)?;
                        Ok(FenceAnswer::Fenced { fenced_at: now })
                    }
                },
            }
        };
        out.push((key.clone(), answer));
    }
    Ok(out)
}

/// Forgets tombstones made at or before `fenced_at_or_before`, oldest first, one budget unit each.
/// Returns false when the budget ran out with some left.
pub fn forget_fenced(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    fenced_at_or_before: i64,
    budget: &mut u32,
    forgotten: &mut u64,
) -> Result<bool, StorageError> {
    let keys = &sm.keys;
    let (from, to) = keys.table(FENCED_BY_TIME);
    loop {
        // Read a page of expired tombstones (one more than the budget: is any left?), then delete.
        let page = (*budget as usize).clamp(1, 1024);
        let mut doomed: Vec<(i64, String)> = Vec::new();
        txn.scan(&from, &to, &mut |k, _| {
            let (at, key) = Keys::decode_to_delete(k).ok_or_else(|| StorageError::Corrupt {
                key: crate::storage::display_key(k),
                reason: "malformed tombstone key".into(),
            })?;
            if at > fenced_at_or_before {
                return Ok(false);
            }
            doomed.push((at, key));
            Ok(doomed.len() < page + 1)
        })?;
        if doomed.is_empty() {
            return Ok(true);
        }
        for (at, key) in doomed {
            if *budget == 0 {
                return Ok(false);
            }
            *budget -= 1;
            *forgotten += 1;
            txn.delete(keys.fenced_by_time(at, &key));
            txn.delete(keys.fenced(&key));
        }
    }
}

/// The broker deleted these objects: each file record becomes a tombstone. Unknown keys are fine
/// (a retried confirmation, or a metadata partition that never had the file); a file that still
/// has live batches is refused.
pub fn confirm_deleted(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    object_keys: &[String],
) -> Result<Vec<(String, Result<(), Failure>)>, StorageError> {
    let keys = &sm.keys;
    let mut out = Vec::with_capacity(object_keys.len());
    for key in object_keys {
        let f: Option<FileRecord> = tables::file(txn, keys, key)?;
        let r = match f {
            None => Ok(()),
            Some(FileRecord { marked_for_deletion_at: Some(at), .. }) => {
                txn.delete(keys.file(key));
                txn.delete(keys.to_delete(at, key));
                txn.delete(keys.commit_results(key));
                tables::put_fenced(txn, keys, key, now)?;
                Ok(())
            }
            Some(_) => Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!("object {key:?} still has live batches; it must not be deleted"),
            )),
        };
        out.push((key.clone(), r));
    }
    Ok(out)
}
