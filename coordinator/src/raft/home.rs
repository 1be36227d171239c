//! Where one group's replica lives: which data directory (its RocksDB, its fsync thread, its
//! snapshot files), switchable while the group runs.
//!
//! Owns: [`DataDir`] (one configured directory, opened) and [`Home`] (a group's current directory
//! plus the gate that lets a replica move switch directories atomically). The log and state
//! machine stores ask the home for the directory on every operation: writers hold the gate's read
//! side for the whole operation ([`Home::enter`]), so a switch ([`Home::pause`]) waits for the
//! writes in flight and holds new ones back while it copies the last changes and repoints the
//! home. Readers only take the current directory ([`Home::current`]); the [`Placed`] they hold
//! keeps the old copy from being deleted under them (see [`Home::wait_unused`]).
//!
//! It must not decide where a replica goes nor copy anything (that is `node::dirs` and
//! `node::mover`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::WalSyncer;
use crate::storage::Db;

/// A directory id (KIP-858's directory UUID), drawn when the directory is first used.
pub type DirId = [u8; 16];

pub fn dir_id_hex(id: &DirId) -> String {
    uuid::Uuid::from_bytes(*id).to_string()
}

/// One data directory of this node, opened.
pub struct DataDir {
    pub id: DirId,
    pub path: PathBuf,
    pub db: Arc<Db>,
    pub syncer: WalSyncer,
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
    pub fn new(id: DirId, path: PathBuf, db: Arc<Db>, syncer: WalSyncer, offline: Arc<AtomicBool>) -> DataDir {
        DataDir { id, path, db, syncer, offline }
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

    /// Where group `g`'s snapshot files are in this directory.
    pub fn snapshot_dir(&self, g: u32) -> PathBuf {
        super::snapshot::group_dir(&self.path, g)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One placement of a group: the directory it is in. A new `Placed` is made at each switch; a
/// reader holds one for as long as it reads.
pub struct Placed {
    pub dir: Arc<DataDir>,
}

impl std::ops::Deref for Placed {
    type Target = DataDir;
    fn deref(&self) -> &DataDir {
        &self.dir
    }
}

/// A group's current directory and the gate of its writers.
pub struct Home {
    group: u32,
    slot: RwLock<Arc<Placed>>,
    gate: Arc<tokio::sync::RwLock<()>>,
}

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

/// Held by a switch: no writer of the group runs until it is dropped.
pub struct Paused {
    _all: tokio::sync::OwnedRwLockWriteGuard<()>,
}

impl Home {
    pub fn new(group: u32, dir: Arc<DataDir>) -> Arc<Home> {
        Arc::new(Home {
            group,
            slot: RwLock::new(Arc::new(Placed { dir })),
            gate: Arc::new(tokio::sync::RwLock::new(())),
        })
    }

    pub fn group(&self) -> u32 {
        self.group
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

    /// Repoints the group at `dir` (only while [`pause`](Self::pause)d); returns the old placement.
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

/// A group's home in a one-directory RocksDB at `path/db` (unit tests).
#[cfg(test)]
pub fn test_home(path: &Path, group: u32) -> Arc<Home> {
    let db = Arc::new(Db::open(&path.join("db")).expect("open db"));
    let syncer = WalSyncer::start(db.clone(), Default::default(), None);
    Home::new(group, Arc::new(DataDir::new([1; 16], path.to_path_buf(), db, syncer, Arc::default())))
}
