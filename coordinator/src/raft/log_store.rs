//! The Raft log of one group, in the `raft` column family of its data directory's RocksDB.
//!
//! Appends are written unsynced, readable at once, and acknowledged through [`WalSyncer`] after the
//! shared fsync. The vote is written synced (rare). The committed log id is *not* persisted on
//! every advance (openraft's `save_committed` is optional: it only lets a restarted replica apply
//! committed entries before a leader tells it the commit index again). Writing it cost one
//! RocksDB write per entry on every replica for a restart-time nicety; the applied state is
//! written with every apply instead (see `sm_store`). A key written by earlier versions is still
//! read: it is at most the true commit index, so applying up to it stays correct. Purging first
//! fsyncs the WAL, so the applied state a snapshot was built from is durable before the log
//! behind it goes.

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
use crate::storage::{codec, Db, Family, WriteBatch};

/// One group's log. Cheap to clone: clones share the database.
#[derive(Clone)]
pub struct LogStore {
    /// The group's directory: read from the current one, written through the home's gate (a
    /// replica move switches it).
    home: Arc<Home>,
    group: u32,
    stages: Arc<Stages>,
}

impl LogStore {
    pub fn new(home: Arc<Home>) -> LogStore {
        LogStore { group: home.group(), home, stages: Arc::default() }
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

    fn delete_log_range(&self, db: &Db, from: u64, to: Option<u64>) -> io::Result<()> {
        let (_, end) = keys::log_range(self.group);
        let to = to.map_or(end, |i| keys::log(self.group, i));
        let mut b = WriteBatch::default();
        db.batch_delete_range(&mut b, Family::Raft, &keys::log(self.group, from), &to);
        db.write(b, false).map_err(io_err)?;
        self.home.note_raft_range(&keys::log(self.group, from), &to);
        Ok(())
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
        let (_, group_end) = keys::log_range(self.group);
        let end = match range.end_bound() {
            Bound::Included(&i) => i.checked_add(1).map_or(group_end.clone(), |e| keys::log(self.group, e)),
            Bound::Excluded(&i) => keys::log(self.group, i),
            Bound::Unbounded => group_end,
        };
        let mut out = Vec::new();
        let placed = self.home.current();
        placed.check()?;
        let view = placed.db.read_raft();
        crate::storage::KvRead::scan(&view, &keys::log(self.group, start), &end, &mut |k, v| {
            out.push(codec::decode::<Entry>(k, v)?);
            Ok(true)
        })
        .map_err(io_err)?;
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get(&keys::vote(self.group))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged: Option<LogId> = self.get(&keys::purged(self.group))?;
        let (from, to) = keys::log_range(self.group);
        let last = match self.home.current().db.last_in(Family::Raft, &from, &to).map_err(io_err)? {
            Some((k, v)) => Some(codec::decode::<Entry>(&k, &v).map_err(io_err)?.log_id()),
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
        Self::put(&dir.db, &keys::vote(self.group), vote, true).map_err(|e| dir.failed(e))?;
        self.home.note_keys(true, [&keys::vote(self.group)]);
        Ok(())
    }

    async fn save_committed(&mut self, _committed: Option<LogId>) -> Result<(), io::Error> {
        // Not persisted (see the module note): a leader re-sends the commit index.
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        self.get(&keys::committed(self.group))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let dir = self.home.enter().await;
        dir.check()?;
        let mut b = WriteBatch::default();
        let (mut first, mut last) = (u64::MAX, 0);
        for e in entries {
            let v = codec::encode(&e).map_err(io_err)?;
            dir.db.batch_put(&mut b, Family::Raft, &keys::log(self.group, e.index()), &v);
            (first, last) = (first.min(e.index()), last.max(e.index()));
        }
        dir.db.write(b, false).map_err(|e| dir.failed(e))?;
        if self.home.is_recording() && first <= last {
            let written: Vec<Vec<u8>> = (first..=last).map(|i| keys::log(self.group, i)).collect();
            self.home.note_keys(true, &written);
        }
        self.stages.appended(self.group, first..=last);
        let (stages, group) = (self.stages.clone(), self.group);
        // A move that switches directories before this fsync copies these entries and fsyncs the
        // new directory itself; this callback still waits for the old directory's fsync.
        dir.syncer.after_sync(move |r| {
            stages.durable(group, first..=last);
            callback.io_completed(r)
        });
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |l| l.index() + 1);
        let dir = self.home.enter().await;
        dir.check()?;
        self.delete_log_range(&dir.db, from, None)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // The applied state the purge relies on must be on disk before its log goes.
        let dir = self.home.enter().await;
        dir.check()?;
        dir.db.sync_wal().map_err(|e| dir.failed(e))?;
        Self::put(&dir.db, &keys::purged(self.group), &log_id, false)?;
        self.home.note_keys(true, [&keys::purged(self.group)]);
        self.delete_log_range(&dir.db, 0, Some(log_id.index() + 1))
    }
}
