//! The one place RocksDB is touched.
//!
//! Owns: opening a data directory's RocksDB with the column families this project uses, durable
//! writes (every acknowledged write is WAL-fsynced), consistent read views, the read/write
//! transaction the state machine applies commands in, and its write-through cache of hot keys.
//! Nothing above this module names a RocksDB type except [`WriteBatch`], which the Raft layer
//! uses to write snapshot installs.
//!
//! It must not know what the keys mean: key layout belongs to the state machine (`keys`), value
//! encoding is the generic [`codec`].

pub mod codec;
pub mod copy;
mod db;
mod hot;
mod txn;

pub use db::{Db, Family, ReadView};
pub use hot::HotKeys;
pub use rocksdb::WriteBatch;
pub use txn::Txn;

/// Why a storage operation failed. Every variant is fatal for the replica that sees it: the state
/// machine cannot go on deterministically past a failed read or write.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("rocksdb: {0}")]
    RocksDb(#[from] rocksdb::Error),
    #[error("corrupt value under key {key}: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("cannot encode a value: {0}")]
    Encode(String),
    /// A copy between directories was stopped by its caller (`copy::sync_ranges`); not a fault.
    #[error("cancelled")]
    Cancelled,
}

/// Reads over a consistent view of the keys: a RocksDB snapshot, or a transaction that overlays
/// its own pending writes on the database.
pub trait KvRead {
    /// The value under `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    /// Hands the value under `key` (if any) to `read` without copying it where the source allows
    /// (a transaction's pending writes, the hot-key cache).
    fn get_with(
        &self,
        key: &[u8],
        read: &mut dyn FnMut(Option<&[u8]>) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        read(self.get(key)?.as_deref())
    }

    /// Visits the entries with `from <= key < to` in key order while `visit` returns `Ok(true)`.
    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError>;
}

/// Shows a key for error messages: printable bytes as they are, the rest as hex.
pub fn display_key(key: &[u8]) -> String {
    key.iter().map(|&b| if b.is_ascii_graphic() { (b as char).to_string() } else { format!("\\x{b:02x}") }).collect()
}
