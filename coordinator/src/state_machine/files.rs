//! WAL segment files: which are still needed, which wait for the broker to delete them, and
//! forgetting the ones it deleted.

use super::command::{ErrorCode, Failure};
use super::keys::{Keys, TO_DELETE};
use super::records::FileRecord;
use super::{tables, StateMachine};
use crate::storage::{KvRead, StorageError, Txn};

/// DescribeFiles' answer for one object key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileState {
    /// This metadata partition knows the object (live, or waiting to be deleted).
    pub known: bool,
    pub has_live_batches: bool,
}

/// A file whose batches are all gone, waiting for the broker to delete the object.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// The broker deleted these objects. Unknown keys are fine (a retried confirmation); a file that
/// still has live batches is refused.
pub fn confirm_deleted(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
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
