//! The Raft log of one metadata partition: its entries in the data directory's segmented log
//! (`seglog`), its vote and purge point in the `raft` column family of the directory's RocksDB.
//!
//! Appends are written unsynced, readable at once, and acknowledged through [`LogSyncer`] after the
//! shared fsync of the segmented log. The vote is written synced (rare). The committed log id is
//! *not* persisted (openraft's `save_committed` is optional: it only lets a restarted replica apply
//! committed entries before a leader tells it the commit index again); a key written by earlier
//! versions is still read: it is at most the true commit index. Purging writes the purge point
//! synced — which also makes the applied state a snapshot was built from durable — before the
//! log lets the entries behind it go. [`move_log_out_of_rocksdb`] moves a log kept in RocksDB by
//! earlier versions into the segmented log at start.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;

use super::home::Home;
use super::stages::Stages;
use super::{io_err, keys, Entry, LogId, TypeConfig, Vote};
use crate::storage::{codec, Db, Family, KvRead, WriteBatch};

/// One metadata partition's log. Cheap to clone: clones share the database.
#[derive(Clone)]
pub struct LogStore {
    /// The metadata partition's directory: read from the current one, written through the home's
    /// gate (a replica move switches it).
    home: Arc<Home>,
    partition: u32,
    stages: Arc<Stages>,
}

impl LogStore {
    pub fn new(home: Arc<Home>) -> LogStore {
        LogStore { partition: home.partition(), home, stages: Arc::default() }
    }

    /// Records the entries' timings in `stages` (see `raft::stages`).
    pub fn with_stages(mut self, stages: Arc<Stages>) -> LogStore {
        self.stages = stages;
        self
    }

    fn get<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> io::Result<Option<T>> {
        let dir = self.home.current();
        dir.check()?;
        match dir.db.get(Family::Raft, key).map_err(|e| dir.failed(e))? {
            Some(v) => Ok(Some(codec::decode(key, &v).map_err(io_err)?)),
            None => Ok(None),
        }
    }

    fn put<T: serde::Serialize>(db: &Db, key: &[u8], value: &T, sync: bool) -> io::Result<()> {
        let mut b = WriteBatch::default();
        db.batch_put(&mut b, Family::Raft, key, &codec::encode(value).map_err(io_err)?);
        db.write(b, sync).map_err(io_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        };
        let placed = self.home.current();
        placed.check()?;
        let (_, entries) = placed.log.read(self.partition, start, end).map_err(|e| placed.failed(e))?;
        entries.iter().map(|b| codec::decode::<Entry>(b"log entry", b).map_err(io_err)).collect()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get(&keys::vote(self.partition))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged: Option<LogId> = self.get(&keys::purged(self.partition))?;
        let placed = self.home.current();
        let last = match placed.log.bounds(self.partition) {
            Some((_, last)) => {
                let (_, e) = placed.log.read(self.partition, last, last + 1).map_err(|e| placed.failed(e))?;
                let bytes = e.first().ok_or_else(|| io::Error::other("the log's last entry vanished"))?;
                Some(codec::decode::<Entry>(b"log entry", bytes).map_err(io_err)?.log_id())
            }
            None => last_purged,
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let dir = self.home.enter().await;
        dir.check()?;
        Self::put(&dir.db, &keys::vote(self.partition), vote, true).map_err(|e| dir.failed(e))?;
        self.home.note_keys(true, [&keys::vote(self.partition)]);
        Ok(())
    }

    async fn save_committed(&mut self, _committed: Option<LogId>) -> Result<(), io::Error> {
        // Not persisted (see the module note): a leader re-sends the commit index.
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        self.get(&keys::committed(self.partition))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let dir = self.home.enter().await;
        dir.check()?;
        let mut encoded = vec![];
        for e in entries {
            encoded.push((e.index(), codec::encode(&e).map_err(io_err)?));
        }
        let (first, last) = match (encoded.first(), encoded.last()) {
            (Some((f, _)), Some((l, _))) => (*f, *l),
            _ => (u64::MAX, 0),
        };
        dir.log.append(self.partition, &encoded).map_err(|e| dir.failed(e))?;
        if first <= last {
            self.home.note_log(first);
        }
        self.stages.appended(self.partition, first..=last);
        let (stages, partition) = (self.stages.clone(), self.partition);
        // A move that switches directories before this fsync copies these entries and fsyncs the
        // new directory itself; this callback still waits for the old directory's fsync.
        dir.syncer.after_sync(move |r| {
            stages.durable(partition, first..=last);
            callback.io_completed(r)
        });
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |l| l.index() + 1);
        let dir = self.home.enter().await;
        dir.check()?;
        dir.log.truncate(self.partition, from).map_err(|e| dir.failed(e))?;
        self.home.note_log(from);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // Synced: the purge point, and with it the applied state the purge relies on, must be on
        // disk before the log lets the entries behind it go.
        let dir = self.home.enter().await;
        dir.check()?;
        Self::put(&dir.db, &keys::purged(self.partition), &log_id, true).map_err(|e| dir.failed(e))?;
        self.home.note_keys(true, [&keys::purged(self.partition)]);
        dir.log.purge(self.partition, log_id.index()).map_err(|e| dir.failed(e))
    }
}

/// Metadata partition `g`'s purge point as recorded in `db`: its index.
pub fn purged_index(db: &Db, g: u32) -> anyhow::Result<Option<u64>> {
    Ok(match db.get(Family::Raft, &keys::purged(g))? {
        Some(v) => Some(codec::decode::<LogId>(&keys::purged(g), &v)?.index()),
        None => None,
    })
}

/// Moves the log entries earlier versions kept in RocksDB's `raft` family into `log`, for the
/// metadata partitions placed in this directory: copied (after a drop record, so a repeat after a
/// crash starts clean), synced, then deleted from RocksDB (synced). Returns how many entries moved.
pub fn move_log_out_of_rocksdb(db: &Db, log: &crate::raft::seglog::SegLog, partitions: &[u32]) -> anyhow::Result<u64> {
    let mut moved = 0;
    let mut found = vec![];
    for &g in partitions {
        let (from, to) = keys::log_range(g);
        let mut entries = vec![];
        db.read_raft().scan(&from, &to, &mut |k, v| {
            let e: Entry = codec::decode(k, v)?;
            entries.push((e.index(), v.to_vec()));
            Ok(true)
        })?;
        if entries.is_empty() {
            continue;
        }
        log.drop_partition(g)?;
        for chunk in entries.chunks(256) {
            log.append(g, chunk)?;
        }
        moved += entries.len() as u64;
        found.push(g);
    }
    if found.is_empty() {
        return Ok(0);
    }
    log.sync()?;
    let mut b = WriteBatch::default();
    for g in found {
        let (from, to) = keys::log_range(g);
        db.batch_delete_range(&mut b, Family::Raft, &from, &to);
    }
    db.write(b, true)?;
    Ok(moved)
}
