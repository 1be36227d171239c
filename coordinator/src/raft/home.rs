//! Where one metadata partition's replica lives: which data directory (its RocksDB, its Raft log,
//! its fsync thread, its snapshot files), switchable while the metadata partition runs.
//!
//! Owns: [`DataDir`] (one configured directory, opened) and [`Home`] (a metadata partition's
//! current directory plus the gate that lets a replica move switch directories atomically). The log
//! and state machine stores ask the home for the directory on every operation: writers hold the
//! gate's read side for the whole operation ([`Home::enter`]), so a switch ([`Home::pause`]) waits
//! for the writes in flight and holds new ones back while it copies the last changes and repoints
//! the home. Readers only take the current directory ([`Home::current`]); the [`Placed`] they hold
//! keeps the old copy from being deleted under them (see [`Home::wait_unused`]).
//!
//! It must not decide where a replica goes nor copy anything (that is `node::dirs` and
//! `node::mover`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::seglog::SegLog;
use super::LogSyncer;
use crate::storage::Db;

/// A directory id (KIP-858's directory UUID), drawn when the directory is first used.
pub use super::placement::{dir_id_hex, DirId};

/// One data directory of this node, opened.
pub struct DataDir {
    pub id: DirId,
    pub path: PathBuf,
    pub db: Arc<Db>,
    /// The Raft log of every metadata partition placed here.
    pub log: Arc<SegLog>,
    pub syncer: LogSyncer,
    /// Set when an I/O error was seen in this directory: its replicas are offline (shared with
    /// its fsync thread).
    offline: Arc<AtomicBool>,
}

impl std::fmt::Debug for DataDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataDir").field("path", &self.path).finish()
    }
}

impl DataDir {
    /// `offline`: the flag its fsync thread raises when an fsync fails.
    pub fn new(
        id: DirId,
        path: PathBuf,
        db: Arc<Db>,
        log: Arc<SegLog>,
        syncer: LogSyncer,
        offline: Arc<AtomicBool>,
    ) -> DataDir {
        DataDir { id, path, db, log, syncer, offline }
    }

    /// Where a data directory keeps its Raft log.
    pub fn log_path(path: &Path) -> PathBuf {
        path.join("raft-log")
    }

    /// Deletes metadata partition `g`'s replica here: its log (a drop record, synced), then its
    /// keys and placement record (one synced write). A crash between the two leaves a placement
    /// without a log, which start-up settles like any unfinished move (`node::dirs`).
    pub fn delete_replica(&self, g: u32) -> anyhow::Result<()> {
        self.log.drop_partition(g)?;
        super::placement::delete_replica(&self.db, g)
    }

    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Relaxed)
    }

    /// Takes the directory offline: every later read or write of its replicas fails, so openraft
    /// stops them (nothing is acknowledged from a directory that failed); the node's other
    /// directories carry on. Until the node restarts.
    pub fn set_offline(&self, why: &dyn std::fmt::Display) {
        if !self.offline.swap(true, Ordering::Relaxed) {
            tracing::error!(dir = %self.path.display(), "data directory offline: {why}; its replicas stop");
        }
    }

    /// Fails when the directory is offline.
    pub fn check(&self) -> std::io::Result<()> {
        if self.is_offline() {
            return Err(std::io::Error::other(format!("data directory {} is offline", self.path.display())));
        }
        Ok(())
    }

    /// Notes a storage error of this directory (it goes offline) and passes it on.
    pub fn failed(&self, e: impl std::fmt::Display) -> std::io::Error {
        self.set_offline(&e);
        std::io::Error::other(format!("data directory {}: {e}", self.path.display()))
    }

    /// Where metadata partition `g`'s snapshot files are in this directory.
    pub fn snapshot_dir(&self, g: u32) -> PathBuf {
        super::snapshot::partition_dir(&self.path, g)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One placement of a metadata partition: the directory it is in. A new `Placed` is made at each
/// switch; a reader holds one for as long as it reads.
pub struct Placed {
    pub dir: Arc<DataDir>,
}

impl std::ops::Deref for Placed {
    type Target = DataDir;
    fn deref(&self) -> &DataDir {
        &self.dir
    }
}

/// A metadata partition's current directory and the gate of its writers.
pub struct Home {
    partition: u32,
    slot: RwLock<Arc<Placed>>,
    gate: Arc<tokio::sync::RwLock<()>>,
    /// While a move runs: the keys the metadata partition's writers changed (see [`Dirty`]).
    recording: AtomicBool,
    dirty: Mutex<Dirty>,
}

/// What a metadata partition's writers changed since it was last taken, so a move's switch copies
/// only that (not a scan of the whole replica). Recording is switched on and off only while the
/// writers are paused, so a writer sees one setting for its whole operation; it notes its keys
/// after writing them. So a write either precedes a pass's RocksDB snapshot (its note may also be
/// taken by that pass: harmless) or is in the notes the next pass or the switch takes.
#[derive(Debug, Default)]
pub struct Dirty {
    pub state: BTreeSet<Vec<u8>>,
    pub raft: BTreeSet<Vec<u8>>,
    /// The lowest log index appended or truncated from (the log is copied again from there).
    pub log_from: Option<u64>,
    /// Too much, or a change not recorded key by key (a snapshot install): copy everything.
    pub overflow: bool,
}

/// Past this many keys a dirty set gives up (overflow).
const MAX_DIRTY_KEYS: usize = 1 << 20;

/// A writer's pass: the directory to write to, which cannot change until it is dropped.
pub struct Entered {
    _pass: tokio::sync::OwnedRwLockReadGuard<()>,
    pub placed: Arc<Placed>,
}

impl std::ops::Deref for Entered {
    type Target = DataDir;
    fn deref(&self) -> &DataDir {
        &self.placed.dir
    }
}

/// Held by a switch: no writer of the metadata partition runs until it is dropped.
pub struct Paused {
    _all: tokio::sync::OwnedRwLockWriteGuard<()>,
}

impl Home {
    pub fn new(partition: u32, dir: Arc<DataDir>) -> Arc<Home> {
        Arc::new(Home {
            partition,
            slot: RwLock::new(Arc::new(Placed { dir })),
            gate: Arc::new(tokio::sync::RwLock::new(())),
            recording: AtomicBool::new(false),
            dirty: Mutex::default(),
        })
    }

    fn dirty(&self) -> Option<std::sync::MutexGuard<'_, Dirty>> {
        self.recording.load(Ordering::Relaxed).then(|| self.dirty.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether writers note their keys now.
    pub fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    /// Starts (or with `false` stops) recording the changed keys, empty. Start only while
    /// [`pause`](Self::pause)d (see [`Dirty`]).
    pub fn record(&self, on: bool) {
        *self.dirty.lock().unwrap_or_else(|e| e.into_inner()) = Dirty::default();
        self.recording.store(on, Ordering::Relaxed);
    }

    /// The changes recorded since the last call (recording goes on).
    pub fn take_dirty(&self) -> Dirty {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Notes keys a writer is about to change (`raft`: in the raft family, else state).
    pub fn note_keys<'k>(&self, raft: bool, keys: impl IntoIterator<Item = &'k Vec<u8>>) {
        if let Some(mut d) = self.dirty() {
            let set = if raft { &mut d.raft } else { &mut d.state };
            set.extend(keys.into_iter().cloned());
            if d.state.len() + d.raft.len() > MAX_DIRTY_KEYS {
                d.overflow = true;
                d.state.clear();
                d.raft.clear();
            }
        }
    }

    /// Notes that a writer appended to the log, or truncated it, from index `from` on.
    pub fn note_log(&self, from: u64) {
        if let Some(mut d) = self.dirty() {
            d.log_from = Some(d.log_from.map_or(from, |f| f.min(from)));
        }
    }

    /// Notes a change that is not recorded key by key.
    pub fn note_everything(&self) {
        if let Some(mut d) = self.dirty() {
            d.overflow = true;
        }
    }

    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The current directory, for reading.
    pub fn current(&self) -> Arc<Placed> {
        self.slot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Enters as a writer (async callers).
    pub async fn enter(&self) -> Entered {
        let pass = self.gate.clone().read_owned().await;
        Entered { _pass: pass, placed: self.current() }
    }

    /// Enters as a writer from a blocking thread of the runtime (`spawn_blocking`), never from
    /// an async task.
    pub fn enter_blocking(&self) -> Entered {
        let pass = tokio::runtime::Handle::current().block_on(self.gate.clone().read_owned());
        Entered { _pass: pass, placed: self.current() }
    }

    /// Waits for the writers in flight and holds new ones back (a switch).
    pub async fn pause(&self) -> Paused {
        Paused { _all: self.gate.clone().write_owned().await }
    }

    /// Repoints the metadata partition at `dir` (only while [`pause`](Self::pause)d); returns the
    /// old placement.
    pub fn switch(&self, _paused: &Paused, dir: Arc<DataDir>) -> Arc<Placed> {
        let mut slot = self.slot.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *slot, Arc::new(Placed { dir }))
    }

    /// Waits until nobody but the caller holds `old` (readers that took it before a switch are
    /// done), at most `limit`; says whether that happened.
    pub async fn wait_unused(old: &Arc<Placed>, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while Arc::strong_count(old) > 1 {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// A metadata partition's home in a one-directory RocksDB at `path/db`, its log in `path/raft-log`
/// (unit tests).
#[cfg(test)]
pub fn test_home(path: &Path, partition: u32) -> Arc<Home> {
    let db = Arc::new(Db::open(&path.join("db")).expect("open db"));
    let log = Arc::new(SegLog::open(&DataDir::log_path(path), 1 << 20).expect("open the Raft log"));
    let syncer = LogSyncer::start(log.clone(), Default::default(), None);
    Home::new(partition, Arc::new(DataDir::new([1; 16], path.to_path_buf(), db, log, syncer, Arc::default())))
}
