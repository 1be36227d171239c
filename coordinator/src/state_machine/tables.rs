//! Typed reads and writes of the state tables, so operations speak in records, not bytes.

use serde::{de::DeserializeOwned, Serialize};
use uuid::Uuid;

use super::keys::{Keys, TopicPartition};
use super::records::{FencedRecord, FileRecord, PartitionRecord, ProducerRecord, TopicRecord};
use crate::storage::{codec, KvRead, StorageError, Txn};

pub fn get<T: DeserializeOwned>(view: &dyn KvRead, key: &[u8]) -> Result<Option<T>, StorageError> {
    let mut out = None;
    view.get_with(key, &mut |bytes| {
        if let Some(bytes) = bytes {
            out = Some(codec::decode(key, bytes)?);
        }
        Ok(())
    })?;
    Ok(out)
}

pub fn put<T: Serialize>(txn: &mut Txn<'_>, key: Vec<u8>, value: &T) -> Result<(), StorageError> {
    txn.put(key, codec::encode(value)?);
    Ok(())
}

pub fn topic(view: &dyn KvRead, keys: &Keys, topic_id: &Uuid) -> Result<Option<TopicRecord>, StorageError> {
    get(view, &keys.topic(topic_id))
}

/// A partition that is not deleted, if this metadata partition owns it.
pub fn live_partition(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
) -> Result<Option<PartitionRecord>, StorageError> {
    let p: Option<PartitionRecord> = get(view, &keys.partition(tp))?;
    Ok(p.filter(|p| !p.deleted))
}

pub fn producer(
    view: &dyn KvRead,
    keys: &Keys,
    tp: &TopicPartition,
    producer_id: i64,
) -> Result<Option<ProducerRecord>, StorageError> {
    get(view, &keys.producer(tp, producer_id))
}

pub fn file(view: &dyn KvRead, keys: &Keys, object_key: &str) -> Result<Option<FileRecord>, StorageError> {
    get(view, &keys.file(object_key))
}

/// The tombstone of a fenced object key, if it has one.
pub fn fenced(view: &dyn KvRead, keys: &Keys, object_key: &str) -> Result<Option<FencedRecord>, StorageError> {
    get(view, &keys.fenced(object_key))
}

/// Records `object_key` as fenced at `now` (the caller checked it has no file record).
pub fn put_fenced(txn: &mut Txn<'_>, keys: &Keys, object_key: &str, now: i64) -> Result<(), StorageError> {
    put(txn, keys.fenced(object_key), &FencedRecord { fenced_at: now })?;
    txn.put(keys.fenced_by_time(now, object_key), Vec::new());
    Ok(())
}

/// Takes `bytes` off a file's live bytes; at zero the file is marked for deletion at `now`.
pub fn release_file_bytes(
    txn: &mut Txn<'_>,
    keys: &Keys,
    object_key: &str,
    bytes: i64,
    now: i64,
) -> Result<(), StorageError> {
    let Some(mut f) = file(txn, keys, object_key)? else {
        return Err(StorageError::Corrupt {
            key: crate::storage::display_key(&keys.file(object_key)),
            reason: "a stored batch points at a file this metadata partition does not know".into(),
        });
    };
    f.live_bytes -= bytes;
    if f.live_bytes <= 0 && f.marked_for_deletion_at.is_none() {
        mark_for_deletion(txn, keys, object_key, &mut f, now);
    }
    put(txn, keys.file(object_key), &f)
}

/// Marks a file for deletion at `now` (the caller writes the file record).
pub fn mark_for_deletion(txn: &mut Txn<'_>, keys: &Keys, object_key: &str, f: &mut FileRecord, now: i64) {
    f.live_bytes = 0;
    f.marked_for_deletion_at = Some(now);
    txn.put(keys.to_delete(now, object_key), Vec::new());
}
