//! A data directory's RocksDB: opening it, durable writes, snapshot reads.

use std::path::{Path, PathBuf};

use rocksdb::{ColumnFamilyDescriptor, Options, ReadOptions, WriteBatch, WriteOptions, DB};

use super::{KvRead, StorageError};

/// The column families. The Raft log itself is not here: it is the data directory's segmented log
/// (`raft::seglog`), with its own fsync thread (`raft::log_sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Every metadata partition's state machine keys (prefixed by partition id).
    State,
    /// Per-partition Raft bookkeeping (prefixed by partition id): votes, purge points, snapshot
    /// install marks, the directory's record; in a directory of an earlier version, also the log
    /// entries moved out into the segmented log at start.
    Raft,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::State => "state",
            Family::Raft => "raft",
        }
    }
}

/// One RocksDB instance per data directory.
pub struct Db {
    pub(super) db: DB,
    path: PathBuf,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

impl Db {
    /// Opens (creating if needed) the database in `path`.
    pub fn open(path: &Path) -> Result<Db, StorageError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        // Recover up to the last intact WAL record: an fsynced write is never lost, a torn tail is.
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        opts.set_keep_log_file_num(4);
        opts.increase_parallelism(2);
        let cfs = [Family::State, Family::Raft].map(|f| ColumnFamilyDescriptor::new(f.name(), cf_options()));
        let db = DB::open_cf_descriptors(&opts, path, cfs)?;
        Ok(Db { db, path: path.to_path_buf() })
    }

    /// Where the database lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A consistent view of the state keys as of now.
    pub fn read(&self) -> ReadView<'_> {
        ReadView { db: self, snapshot: self.db.snapshot(), family: Family::State }
    }

    /// A consistent view of the Raft keys as of now.
    pub fn read_raft(&self) -> ReadView<'_> {
        ReadView { db: self, snapshot: self.db.snapshot(), family: Family::Raft }
    }

    /// Writes a batch atomically; with `sync` the WAL is fsynced before this returns, which also
    /// makes every earlier unsynced write durable.
    pub fn write(&self, batch: WriteBatch, sync: bool) -> Result<(), StorageError> {
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        self.db.write_opt(batch, &opts)?;
        Ok(())
    }

    /// Fsyncs the WAL: every write made before this call is durable when it returns.
    pub fn sync_wal(&self) -> Result<(), StorageError> {
        self.db.flush_wal(true)?;
        Ok(())
    }

    /// Flushes memtables to SST files (benchmarks and tools; durability never depends on it).
    pub fn flush(&self) -> Result<(), StorageError> {
        for f in [Family::State, Family::Raft] {
            self.db.flush_cf(self.cf(f))?;
        }
        Ok(())
    }

    /// Puts `key = value` in `family` in `batch`.
    pub fn batch_put(&self, batch: &mut WriteBatch, family: Family, key: &[u8], value: &[u8]) {
        batch.put_cf(self.cf(family), key, value);
    }

    /// Deletes `key` from `family` in `batch`.
    pub fn batch_delete(&self, batch: &mut WriteBatch, family: Family, key: &[u8]) {
        batch.delete_cf(self.cf(family), key);
    }

    /// Deletes the keys in `[from, to)` of `family` in `batch` (one range tombstone).
    pub fn batch_delete_range(&self, batch: &mut WriteBatch, family: Family, from: &[u8], to: &[u8]) {
        batch.delete_range_cf(self.cf(family), from, to);
    }

    /// Reads a key outside any snapshot (the latest written value).
    pub fn get(&self, family: Family, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.db.get_cf(self.cf(family), key)?)
    }

    /// Hands the latest value of a key (outside any snapshot) to `read` without copying it.
    pub fn get_with(
        &self,
        family: Family,
        key: &[u8],
        read: &mut dyn FnMut(Option<&[u8]>) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let v = self.db.get_pinned_cf(self.cf(family), key)?;
        read(v.as_deref())
    }

    /// The last entry with `from <= key < to`, if any.
    pub fn last_in(&self, family: Family, from: &[u8], to: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>, StorageError> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(from.to_vec());
        ro.set_iterate_upper_bound(to.to_vec());
        let mut it = self.db.raw_iterator_cf_opt(self.cf(family), ro);
        it.seek_to_last();
        let out = match (it.valid(), it.key(), it.value()) {
            (true, Some(k), Some(v)) => Some((k.to_vec(), v.to_vec())),
            _ => None,
        };
        it.status()?;
        Ok(out)
    }

    pub(super) fn scan_family(
        &self,
        family: Family,
        snapshot: Option<&rocksdb::Snapshot<'_>>,
        from: &[u8],
        to: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(to.to_vec());
        if let Some(s) = snapshot {
            ro.set_snapshot(s);
        }
        let mut it = self.db.raw_iterator_cf_opt(self.cf(family), ro);
        it.seek(from);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else { break };
            if !visit(k, v)? {
                return Ok(());
            }
            it.next();
        }
        it.status()?;
        Ok(())
    }

    pub(super) fn cf(&self, family: Family) -> &rocksdb::ColumnFamily {
        // Both families are created by `open`; a missing one is a bug in this file, not bad input.
        self.db.cf_handle(family.name()).expect("column families are created at open")
    }
}

fn cf_options() -> Options {
    let mut o = Options::default();
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // Small memtables: every read and write searches the memtable's skiplist, and its depth grows
    // with the entries it holds (profiling showed skiplist searches as the top cost with the 64 MiB
    // default). Hot keys (partition records, applied index) are rewritten constantly.
    o.set_write_buffer_size(8 << 20);
    o.set_max_write_buffer_number(4);
    o.set_memtable_prefix_bloom_ratio(0.1);
    o.set_memtable_whole_key_filtering(true);
    // Bloom filters: many reads are for keys that do not exist (a new object key, a producer new
    // to a partition); without filters each such read searches every level's blocks.
    let mut t = rocksdb::BlockBasedOptions::default();
    t.set_bloom_filter(10.0, false);
    t.set_whole_key_filtering(true);
    t.set_cache_index_and_filter_blocks(true);
    t.set_pin_l0_filter_and_index_blocks_in_cache(true);
    o.set_block_based_table_factory(&t);
    o
}

/// A snapshot of one column family: every read sees the same point in time.
pub struct ReadView<'a> {
    db: &'a Db,
    snapshot: rocksdb::Snapshot<'a>,
    family: Family,
}

impl ReadView<'_> {
    /// Reads a key of another column family at the same point in time.
    pub fn get_in(&self, family: Family, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.snapshot.get_cf(self.db.cf(family), key)?)
    }
}

impl KvRead for ReadView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.snapshot.get_cf(self.db.cf(self.family), key)?)
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        self.db.scan_family(self.family, Some(&self.snapshot), from, to, visit)
    }
}
