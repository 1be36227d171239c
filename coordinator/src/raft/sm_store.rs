//! The openraft state machine of one group: applies log entries with
//! [`StateMachine`](crate::state_machine::StateMachine), builds and installs snapshots.
//!
//! Each entry is applied in one transaction that also records the applied log id and the last
//! membership (the `A` key of the group's state), so a crash can never separate the data from the
//! index it reflects. Writes are not fsynced here: the WAL fsync of a later log append or of a log
//! purge covers them, and a restart re-applies entries past the durable applied id.
//!
//! Installing a snapshot replaces the group's whole state. It first records, synced, that an
//! install of a given file is under way; then deletes the group's keys, writes the file's pairs in
//! bounded batches, and finally writes the applied state and clears the record in one synced write.
//! A node that crashes in between finds the record at start and redoes the install from the file.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};

use super::snapshot::{self, SnapshotFile};
use super::{io_err, keys, LogId, Snapshot, SnapshotMeta, StoredMembership, TypeConfig};
use crate::state_machine::{Outcome, StateMachine};
use crate::storage::{codec, Db, Family, KvRead, Txn, WriteBatch};

type AppliedState = (Option<LogId>, StoredMembership);

/// One group's state machine store. Cheap to clone: clones share the database.
#[derive(Clone)]
pub struct SmStore {
    db: Arc<Db>,
    sm: StateMachine,
    group: u32,
    dir: PathBuf,
    /// Serializes snapshot builds and installs of this group: openraft may run a build while it
    /// installs a snapshot received from the leader, and each rewrites the snapshot directory.
    snapshots: Arc<std::sync::Mutex<()>>,
    /// Test hook: how long an install pauses before adopting the received file and again after
    /// deleting the old state (zero outside fault tests).
    install_pause: std::time::Duration,
    stages: Arc<super::stages::Stages>,
}

/// Bytes of pairs per write batch while installing a snapshot.
const INSTALL_BATCH_BYTES: usize = 4 << 20;

impl SmStore {
    /// Opens the store; finishes a snapshot install a crash interrupted.
    pub fn open(db: Arc<Db>, sm: StateMachine, data_dir: &std::path::Path) -> io::Result<SmStore> {
        let group = sm.group();
        let store = SmStore {
            db,
            sm,
            group,
            dir: snapshot::group_dir(data_dir, group),
            snapshots: Arc::new(std::sync::Mutex::new(())),
            install_pause: std::time::Duration::ZERO,
            stages: Arc::default(),
        };
        snapshot::remove_partial(&store.dir)?;
        if let Some(path) = store.db.get(Family::Raft, &keys::installing(group)).map_err(io_err)? {
            let path = PathBuf::from(String::from_utf8_lossy(&path).into_owned());
            tracing::warn!(group, path = %path.display(), "finishing a snapshot install interrupted by a crash");
            let meta = snapshot::verify(&path)?;
            store.install_file(&path, &meta)?;
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

    pub fn state_machine(&self) -> &StateMachine {
        &self.sm
    }

    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// Whether `view` caught a snapshot install half-done: the group's keys are then partly
    /// deleted or rewritten and must not be read.
    pub fn installing_in(&self, view: &crate::storage::ReadView<'_>) -> io::Result<bool> {
        Ok(view.get_in(Family::Raft, &keys::installing(self.group)).map_err(io_err)?.is_some())
    }

    fn applied_key(&self) -> Vec<u8> {
        crate::state_machine::keys::Keys::new(self.group).applied()
    }

    fn read_applied(&self, view: &dyn KvRead) -> io::Result<AppliedState> {
        let key = self.applied_key();
        match view.get(&key).map_err(io_err)? {
            Some(v) => codec::decode(&key, &v).map_err(io_err),
            None => Ok((None, StoredMembership::default())),
        }
    }

    /// Replaces the group's state with the file's pairs (see the module docs for crash safety).
    fn install_file(&self, path: &std::path::Path, meta: &SnapshotMeta) -> io::Result<()> {
        let _one_at_a_time = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        let db = &self.db;
        let mut b = WriteBatch::default();
        db.batch_put(&mut b, Family::Raft, &keys::installing(self.group), path.to_string_lossy().as_bytes());
        db.write(b, true).map_err(io_err)?;

        let (from, to) = crate::state_machine::keys::Keys::new(self.group).group_range();
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
        db.batch_delete(&mut batch, Family::Raft, &keys::installing(self.group));
        db.write(batch, true).map_err(io_err)?;
        snapshot::remove_older(&self.dir, path)?;
        Ok(())
    }

    fn build(&self) -> io::Result<Snapshot> {
        let _one_at_a_time = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        let view = self.db.read();
        let (last_log_id, last_membership) = self.read_applied(&view)?;
        let meta = SnapshotMeta { last_log_id, last_membership };
        let (from, to) = crate::state_machine::keys::Keys::new(self.group).group_range();
        let applied = self.applied_key();
        let file = snapshot::write(&view, &from, &to, &|k| k == applied.as_slice(), &meta, &self.dir)?;
        tracing::info!(group = self.group, index = ?meta.last_log_id.map(|l| l.index), "snapshot built");
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
        self.read_applied(&self.db.read())
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let (_, mut membership) = self.read_applied(&self.db.read())?;
        let applied_key = self.applied_key();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let log_id = entry.log_id;
            let started = std::time::Instant::now();
            let mut txn = Txn::new(&self.db);
            let outcome = match entry.payload {
                EntryPayload::Blank => Outcome::Noop,
                EntryPayload::Normal(cmd) => self.sm.apply(&mut txn, &cmd).map_err(io_err)?,
                EntryPayload::Membership(m) => {
                    membership = StoredMembership::new(Some(log_id), m);
                    Outcome::Noop
                }
            };
            let applied: AppliedState = (Some(log_id), membership.clone());
            txn.put(applied_key.clone(), codec::encode(&applied).map_err(io_err)?);
            self.db.write(txn.into_write_batch(), false).map_err(io_err)?;
            tracing::trace!(
                group = self.group,
                index = log_id.index,
                elapsed_us = started.elapsed().as_micros() as u64,
                "applied"
            );
            self.stages.applied(self.group, log_id.index, started);
            if let Some(r) = responder {
                r.send(outcome);
            }
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
            let (file, file_meta) = {
                let _one_at_a_time = me.snapshots.lock().unwrap_or_else(|e| e.into_inner());
                snapshot::adopt(&snap.path, &me.dir)?
            };
            if file_meta.last_log_id != meta.last_log_id {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot file does not match its metadata"));
            }
            me.install_file(&file.path, &meta)?;
            tracing::info!(group = me.group, index = ?meta.last_log_id.map(|l| l.index), "snapshot installed");
            Ok(())
        })
        .await
        .map_err(io_err)?
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let Some(file) = snapshot::newest(&self.dir)? else { return Ok(None) };
        let meta = snapshot::read_meta(&file.path)?;
        Ok(Some(Snapshot { meta, snapshot: file }))
    }
}
