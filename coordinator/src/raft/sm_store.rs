//! The openraft state machine of one metadata partition: applies log entries with
//! [`StateMachine`](crate::state_machine::StateMachine), builds and installs snapshots.
//!
//! The entries of one `apply` call (a run of committed entries) are applied in one transaction,
//! which also records the last one's log id and the last membership (the `A` key of the metadata
//! partition's state), so a crash can never separate the data from the index it reflects; answers
//! are sent once it is written. Writes are not fsynced here: a restart re-applies, from the Raft
//! log, the entries past the durable applied id, and the log lets entries go only after the synced
//! RocksDB write of its purge point (`log_store`), which makes the applied state before it durable.
//! The metadata partition's hot keys (`state_machine::keys::is_hot`) are cached across calls;
//! installing a snapshot empties the cache.
//!
//! Installing a snapshot replaces the metadata partition's whole state. It first records, synced,
//! that an install of a given file is under way; then deletes the metadata partition's keys, writes
//! the file's pairs in bounded batches, and finally writes the applied state and clears the record
//! in one synced write. A node that crashes in between finds the record at start and redoes the
//! install from the file.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};

use super::home::Home;
use super::snapshot::{self, SnapshotFile};
use super::watch::WatchHub;
use super::{io_err, keys, LogId, Snapshot, SnapshotMeta, StoredMembership, TypeConfig};
use crate::state_machine::changes::{self, Changes};
use crate::state_machine::{Outcome, StateMachine};
use crate::storage::{codec, Family, HotKeys, KvRead, Txn, WriteBatch};

type AppliedState = (Option<LogId>, StoredMembership);

/// One metadata partition's state machine store. Cheap to clone: clones share the database.
#[derive(Clone)]
pub struct SmStore {
    /// The metadata partition's directory (see `raft::home`): writes, snapshot builds and installs
    /// hold its gate, so a replica move never switches directories in the middle of one.
    home: Arc<Home>,
    sm: StateMachine,
    partition: u32,
    /// Serializes snapshot builds and installs of this metadata partition: openraft may run a build
    /// while it installs a snapshot received from the leader, and each rewrites the snapshot
    /// directory.
    snapshots: Arc<std::sync::Mutex<()>>,
    /// Test hook: how long an install pauses before adopting the received file and again after
    /// deleting the old state (zero outside fault tests).
    install_pause: std::time::Duration,
    stages: Arc<super::stages::Stages>,
    /// The committed values of the metadata partition's hot keys, shared by the clones.
    hot: Arc<std::sync::Mutex<HotSlot>>,
    /// Where the partition changes of applied entries go once written (`raft::watch`).
    watch: Arc<WatchHub>,
}

/// The hot-key cache between apply calls. An apply call takes it and gives it back; an install
/// empties it and bumps the generation, so a cache taken before the install is not given back.
#[derive(Default)]
struct HotSlot {
    generation: u64,
    keys: Option<HotKeys>,
}

/// An apply call writes its transaction and answers its entries once this many keys are pending
/// (a follower catching up applies many entries in one call; memory stays bounded).
const MAX_PENDING_KEYS: usize = 16_384;

/// Bytes of pairs per write batch while installing a snapshot.
const INSTALL_BATCH_BYTES: usize = 4 << 20;

impl SmStore {
    /// Opens the store; finishes a snapshot install a crash interrupted.
    pub fn open(home: Arc<Home>, sm: StateMachine) -> io::Result<SmStore> {
        let partition = sm.metadata_partition();
        let store = SmStore {
            home,
            sm,
            partition,
            snapshots: Arc::new(std::sync::Mutex::new(())),
            install_pause: std::time::Duration::ZERO,
            stages: Arc::default(),
            hot: Arc::default(),
            watch: Arc::default(),
        };
        let placed = store.home.current();
        snapshot::remove_partial(&placed.snapshot_dir(partition))?;
        if let Some(path) = placed.db.get(Family::Raft, &keys::installing(partition)).map_err(io_err)? {
            let path = PathBuf::from(String::from_utf8_lossy(&path).into_owned());
            tracing::warn!(metadata_partition = partition, path = %path.display(), "finishing a snapshot install interrupted by a crash");
            let meta = snapshot::verify(&path)?;
            store.install_file(&placed, &path, &meta)?;
        }
        Ok(store)
    }

    /// Test hook: pause every snapshot install (see the field).
    pub fn with_install_pause(mut self, pause: std::time::Duration) -> SmStore {
        self.install_pause = pause;
        self
    }

    /// Records apply timings in `stages` (see `raft::stages`).
    pub fn with_stages(mut self, stages: Arc<super::stages::Stages>) -> SmStore {
        self.stages = stages;
        self
    }

    /// Publishes the partition changes of applied entries to `hub`, which starts at the applied
    /// index now.
    pub fn with_watch(mut self, hub: Arc<WatchHub>) -> io::Result<SmStore> {
        let (applied, _) = self.read_applied(&self.home.current().db.read())?;
        hub.restart_at(applied.map_or(0, |l| l.index));
        self.watch = hub;
        Ok(self)
    }

    pub fn state_machine(&self) -> &StateMachine {
        &self.sm
    }

    /// The metadata partition's directory.
    pub fn home(&self) -> &Arc<Home> {
        &self.home
    }

    /// Whether `view` caught a snapshot install half-done: the metadata partition's keys are then
    /// partly deleted or rewritten and must not be read.
    pub fn installing_in(&self, view: &crate::storage::ReadView<'_>) -> io::Result<bool> {
        Ok(view.get_in(Family::Raft, &keys::installing(self.partition)).map_err(io_err)?.is_some())
    }

    fn applied_key(&self) -> Vec<u8> {
        crate::state_machine::keys::Keys::new(self.partition).applied()
    }

    fn read_applied(&self, view: &dyn KvRead) -> io::Result<AppliedState> {
        let key = self.applied_key();
        match view.get(&key).map_err(io_err)? {
            Some(v) => codec::decode(&key, &v).map_err(io_err),
            None => Ok((None, StoredMembership::default())),
        }
    }

    /// Replaces the metadata partition's state with the file's pairs (see the module docs for crash
    /// safety). `dir` is the metadata partition's directory, held by the caller (entered as a
    /// writer, or at start).
    fn install_file(&self, dir: &super::home::DataDir, path: &std::path::Path, meta: &SnapshotMeta) -> io::Result<()> {
        let _one_at_a_time = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        // The metadata partition's keys are rewritten behind the cache's back: empty it first.
        {
            let mut slot = self.hot.lock().unwrap_or_else(|e| e.into_inner());
            slot.generation += 1;
            slot.keys = None;
        }
        let db = &dir.db;
        let mut b = WriteBatch::default();
        db.batch_put(&mut b, Family::Raft, &keys::installing(self.partition), path.to_string_lossy().as_bytes());
        db.write(b, true).map_err(io_err)?;

        let (from, to) = crate::state_machine::keys::Keys::new(self.partition).metadata_partition_range();
        let mut b = WriteBatch::default();
        db.batch_delete_range(&mut b, Family::State, &from, &to);
        db.write(b, false).map_err(io_err)?;
        std::thread::sleep(self.install_pause);

        let mut batch = WriteBatch::default();
        let mut bytes = 0;
        snapshot::for_each_pair(path, &mut |k, v| {
            if !(k >= from.as_slice() && k < to.as_slice()) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot key of another metadata partition"));
            }
            db.batch_put(&mut batch, Family::State, k, v);
            bytes += k.len() + v.len();
            if bytes >= INSTALL_BATCH_BYTES {
                db.write(std::mem::take(&mut batch), false).map_err(io_err)?;
                bytes = 0;
            }
            Ok(())
        })?;
        let applied: AppliedState = (meta.last_log_id, meta.last_membership.clone());
        db.batch_put(&mut batch, Family::State, &self.applied_key(), &codec::encode(&applied).map_err(io_err)?);
        db.batch_delete(&mut batch, Family::Raft, &keys::installing(self.partition));
        db.write(batch, true).map_err(io_err)?;
        // The whole state was replaced: a move under way copies everything again at its switch.
        self.home.note_everything();
        snapshot::remove_older(&dir.snapshot_dir(self.partition), path)?;
        Ok(())
    }

    /// Writes `txn` with the applied state of the last entry of `done` (if any), then answers
    /// them.
    fn finish(
        &self,
        mut txn: Txn<'_>,
        membership: &StoredMembership,
        done: &mut Vec<(LogId, Option<openraft::storage::ApplyResponder<TypeConfig>>, Outcome)>,
        changed: &mut Vec<(u64, Changes)>,
        started: std::time::Instant,
    ) -> io::Result<()> {
        let Some(&(last, _, _)) = done.last() else { return Ok(()) };
        let applied: AppliedState = (Some(last), membership.clone());
        txn.put(self.applied_key(), codec::encode(&applied).map_err(io_err)?);
        let noted: Option<Vec<Vec<u8>>> = self.home.is_recording().then(|| txn.keys().cloned().collect());
        txn.commit(false).map_err(io_err)?;
        if let Some(keys) = &noted {
            self.home.note_keys(false, keys);
        }
        // Written: a watcher told of a change may read it here at once.
        self.watch.applied(last.index, std::mem::take(changed));
        crate::metrics::get().apply_duration.observe(started.elapsed().as_secs_f64());
        crate::metrics::get().applied_entries.inc_by(done.len() as u64);
        tracing::trace!(
            metadata_partition = self.partition,
            entries = done.len(),
            last = last.index,
            elapsed_us = started.elapsed().as_micros() as u64,
            "applied"
        );
        for (log_id, responder, outcome) in done.drain(..) {
            self.stages.applied(self.partition, log_id.index, started);
            if let Some(r) = responder {
                r.send(outcome);
            }
        }
        Ok(())
    }

    fn build(&self) -> io::Result<Snapshot> {
        // The gate first, then the snapshot lock (as installs do).
        let dir = self.home.enter_blocking();
        dir.check()?;
        let _one_at_a_time = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        let view = dir.db.read();
        let (last_log_id, last_membership) = self.read_applied(&view)?;
        let meta = SnapshotMeta { last_log_id, last_membership };
        let (from, to) = crate::state_machine::keys::Keys::new(self.partition).metadata_partition_range();
        let applied = self.applied_key();
        let started = std::time::Instant::now();
        let file =
            snapshot::write(&view, &from, &to, &|k| k == applied.as_slice(), &meta, &dir.snapshot_dir(self.partition))?;
        let m = crate::metrics::get();
        m.snapshot_builds.inc();
        m.snapshot_build_duration.observe(started.elapsed().as_secs_f64());
        m.snapshot_build_bytes.inc_by(std::fs::metadata(&file.path).map_or(0, |f| f.len()));
        tracing::info!(metadata_partition = self.partition, index = ?meta.last_log_id.map(|l| l.index), "snapshot built");
        Ok(Snapshot { meta, snapshot: file })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SmStore {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.build()).await.map_err(io_err)?
    }
}

impl RaftStateMachine<TypeConfig> for SmStore {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = SmStore;

    async fn applied_state(&mut self) -> Result<AppliedState, io::Error> {
        let dir = self.home.current();
        dir.check()?;
        let view = dir.db.read();
        self.read_applied(&view)
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let dir = self.home.enter().await;
        dir.check()?;
        let db = &dir.db;
        let (_, mut membership) = self.read_applied(&db.read())?;
        // The cache is taken for the call (its lock is not held across awaits) and given back
        // only if no install emptied it meanwhile; after an error it is dropped (a cold start).
        let (generation, mut hot) = {
            let mut slot = self.hot.lock().unwrap_or_else(|e| e.into_inner());
            (slot.generation, slot.keys.take().unwrap_or_else(StateMachine::hot_keys))
        };
        let mut txn = Txn::with_hot(db, &mut hot);
        let mut done = Vec::new();
        let mut changed = Vec::new();
        let mut started = std::time::Instant::now();
        // The stream holds the committed entries of this call, read from the log; it ends.
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let log_id = entry.log_id;
            let outcome = match entry.payload {
                EntryPayload::Blank => Outcome::Noop,
                EntryPayload::Normal(cmd) => {
                    let outcome = self.sm.apply(&mut txn, &cmd).map_err(io_err)?;
                    let c = changes::changes(&cmd, &outcome);
                    if !c.is_empty() {
                        changed.push((log_id.index, c));
                    }
                    outcome
                }
                EntryPayload::Membership(m) => {
                    membership = StoredMembership::new(Some(log_id), m);
                    Outcome::Noop
                }
            };
            done.push((log_id, responder, outcome));
            if txn.len() >= MAX_PENDING_KEYS {
                self.finish(txn, &membership, &mut done, &mut changed, started)?;
                txn = Txn::with_hot(db, &mut hot);
                started = std::time::Instant::now();
            }
        }
        self.finish(txn, &membership, &mut done, &mut changed, started)?;
        let mut slot = self.hot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.generation == generation {
            slot.keys = Some(hot);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snap: SnapshotFile) -> Result<(), io::Error> {
        let me = self.clone();
        let meta = meta.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(me.install_pause);
            // The whole install in one directory: a move waits for it.
            let dir = me.home.enter_blocking();
            dir.check()?;
            let (file, file_meta) = {
                let _one_at_a_time = me.snapshots.lock().unwrap_or_else(|e| e.into_inner());
                snapshot::adopt(&snap.path, &dir.snapshot_dir(me.partition))?
            };
            if file_meta.last_log_id != meta.last_log_id {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot file does not match its metadata"));
            }
            let started = std::time::Instant::now();
            me.install_file(&dir, &file.path, &meta)?;
            me.watch.restart_at(meta.last_log_id.map_or(0, |l| l.index));
            let m = crate::metrics::get();
            m.snapshot_installs.inc();
            m.snapshot_install_duration.observe(started.elapsed().as_secs_f64());
            m.snapshot_install_bytes.inc_by(std::fs::metadata(&file.path).map_or(0, |f| f.len()));
            tracing::info!(metadata_partition = me.partition, index = ?meta.last_log_id.map(|l| l.index), "snapshot installed");
            Ok(())
        })
        .await
        .map_err(io_err)?
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let dir = self.home.current().snapshot_dir(self.partition);
        let Some(file) = snapshot::newest(&dir)? else { return Ok(None) };
        let meta = snapshot::read_meta(&file.path)?;
        Ok(Some(Snapshot { meta, snapshot: file }))
    }
}

#[cfg(test)]
#[path = "sm_store_test.rs"]
mod tests;
