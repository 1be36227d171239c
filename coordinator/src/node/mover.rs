//! Moving this node's replica of a metadata partition to another data directory while the metadata
//! partition runs (KIP-113's AlterReplicaLogDirs), and the figures of each directory
//! (DescribeLogDirs).
//!
//! A move goes through these phases, each crash-safe (`node::dirs` settles what a crash left):
//! 1. **future**: a placement record in the destination marks the metadata partition's *future* replica there
//!    (synced). Until the switch, a crash drops it at start; the current replica is untouched.
//! 2. **copying**: the metadata partition's keys (state and Raft bookkeeping) are copied from one consistent
//!    RocksDB snapshot of the current directory, its Raft log from the directory's segmented log,
//!    throttled, plus its newest snapshot file.
//! 3. **catching up**: the difference since the last pass is copied again (only what changed;
//!    the log from the lowest index appended or truncated since), until a pass changes little.
//! 4. **switching**: the metadata partition's writers are paused (`raft::home`); the last difference is
//!    copied, and one synced write in the destination makes the replica *current* there with the
//!    next generation, naming the source. The metadata partition is repointed; writers resume. The pause is
//!    measured. A crash after the synced write leaves two current records of which the newer
//!    generation naming the other wins at start.
//! 5. **deleting**: once no reader holds the old placement, the old copy and its record are
//!    deleted (synced).
//!
//! At most `num_replica_move_threads` moves copy at once; all share one byte rate
//! (`intra_dir_throttled_rate`, changeable at run time). A move can be cancelled until it switches.
//!
//! It must not change Raft membership or the state machine: the data moves, the replica stays.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_proto::admin::{DirDescription, ReplicaDescription};
use openraft::async_runtime::WatchReceiver;

use super::dirs;
use super::Node;
use crate::raft::home::{dir_id_hex, DataDir, Home};
use crate::raft::placement::{self, Placement, Role};
use crate::raft::{seglog, snapshot, LogId, StoredMembership};
use crate::storage::{codec, copy, Family, KvRead, StorageError};

/// A catch-up pass that changes fewer keys than this ends the catching up.
const CATCH_UP_KEYS: u64 = 2_000;
/// At most this many catch-up passes before switching anyway (the switch copies the rest).
const CATCH_UP_PASSES: u32 = 20;

/// Why a move was refused.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("this node has no data directory {0} (its directories: {1})")]
    UnknownDir(String, String),
    #[error("there is no metadata partition {0}")]
    UnknownPartition(u32),
    #[error("metadata partition {partition}'s replica is already in {dir}")]
    AlreadyThere { partition: u32, dir: String },
    #[error("metadata partition {partition} is already moving (to {to}); cancel it first (--cancel)")]
    AlreadyMoving { partition: u32, to: String },
    #[error("data directory {0} is offline")]
    Offline(String),
    #[error("metadata partition {0} is not moving")]
    NotMoving(u32),
    #[error("metadata partition {0}'s move is switching over; it can no longer be cancelled")]
    TooLate(u32),
}

/// A move's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Queued = 0,
    Copying = 1,
    CatchingUp = 2,
    Switching = 3,
    Deleting = 4,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Copying,
            2 => Phase::CatchingUp,
            3 => Phase::Switching,
            4 => Phase::Deleting,
            _ => Phase::Queued,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Copying => "copying",
            Phase::CatchingUp => "catching_up",
            Phase::Switching => "switching",
            Phase::Deleting => "deleting",
        }
    }
}

/// One move under way.
pub struct Move {
    pub partition: u32,
    pub from: usize,
    pub to: usize,
    phase: AtomicU8,
    pub copied_bytes: AtomicU64,
    cancel: AtomicBool,
}

impl Move {
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    fn set_phase(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Relaxed);
        tracing::info!(metadata_partition = self.partition, phase = p.name(), "replica move");
    }
}

/// The node's moves: those under way, the last outcome per metadata partition, the shared throttle.
pub struct Moves {
    rate: AtomicU64,
    slots: Arc<tokio::sync::Semaphore>,
    active: Mutex<BTreeMap<u32, Arc<Move>>>,
    /// The last finished move of each metadata partition: what happened.
    outcomes: Mutex<BTreeMap<u32, String>>,
    /// The shared byte budget: when the next byte may be copied.
    next_free: Mutex<Option<Instant>>,
}

impl Moves {
    pub fn new(rate: u64, threads: u32) -> Moves {
        Moves {
            rate: AtomicU64::new(rate),
            slots: Arc::new(tokio::sync::Semaphore::new(threads.max(1) as usize)),
            active: Mutex::default(),
            outcomes: Mutex::default(),
            next_free: Mutex::default(),
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    pub fn set_rate(&self, bytes_per_second: u64) {
        self.rate.store(bytes_per_second, Ordering::Relaxed);
        // The new rate applies from now on, not after the old one's backlog.
        *self.next_free.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Accounts `bytes` against the rate; returns how long the caller should wait first.
    fn charge(&self, bytes: u64) -> Duration {
        let rate = self.rate();
        if rate == 0 {
            return Duration::ZERO;
        }
        let mut next = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let start = next.filter(|t| *t > now).unwrap_or(now);
        let end = start + Duration::from_secs_f64(bytes as f64 / rate as f64);
        *next = Some(end);
        start.saturating_duration_since(now)
    }

    fn get(&self, g: u32) -> Option<Arc<Move>> {
        self.active.lock().unwrap_or_else(|e| e.into_inner()).get(&g).cloned()
    }

    pub fn outcome(&self, g: u32) -> Option<String> {
        self.outcomes.lock().unwrap_or_else(|e| e.into_inner()).get(&g).cloned()
    }
}

type AppliedState = (Option<LogId>, StoredMembership);

/// The applied index a directory's copy of metadata partition `g` reflects.
fn applied_in(db: &crate::storage::Db, g: u32) -> u64 {
    let key = crate::state_machine::keys::Keys::new(g).applied();
    let view = db.read();
    match view.get(&key) {
        Ok(Some(v)) => codec::decode::<AppliedState>(&key, &v).ok().and_then(|(l, _)| l).map_or(0, |l| l.index),
        _ => 0,
    }
}

impl Node {
    /// Test hook: directory `name` fails from now on, as on an I/O error (see `raft::home`).
    pub fn fail_dir(&self, name: &str) -> Result<(), MoveError> {
        let d = &self.dirs[self.find_dir(name)?];
        d.set_offline(&"a fault was injected");
        Ok(())
    }

    /// Finds a configured directory by path or id.
    pub(crate) fn find_dir(&self, name: &str) -> Result<usize, MoveError> {
        let canon = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let wanted = canon(std::path::Path::new(name));
        self.dirs
            .iter()
            .position(|d| dir_id_hex(&d.id) == name || canon(&d.path) == wanted || d.path.display().to_string() == name)
            .ok_or_else(|| {
                let all: Vec<String> = self.dirs.iter().map(|d| d.path.display().to_string()).collect();
                MoveError::UnknownDir(name.to_string(), all.join(", "))
            })
    }

    fn dir_index(&self, d: &DataDir) -> usize {
        self.dirs.iter().position(|x| x.id == d.id).unwrap_or(0)
    }

    /// Starts moving this node's replica of `g` to directory `to` (a path or directory id); the
    /// move runs in the background (see the module docs).
    pub fn alter_replica_dir(self: &Arc<Self>, g: u32, to: &str) -> Result<String, MoveError> {
        let mp = self.partitions.get(g as usize).ok_or(MoveError::UnknownPartition(g))?;
        let to = self.find_dir(to)?;
        let dst = self.dirs[to].clone();
        if dst.is_offline() {
            return Err(MoveError::Offline(dst.path.display().to_string()));
        }
        let from = self.dir_index(&mp.home.current());
        if from == to {
            return Err(MoveError::AlreadyThere { partition: g, dir: dst.path.display().to_string() });
        }
        let mv = {
            let mut active = self.moves.active.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(m) = active.get(&g) {
                return Err(MoveError::AlreadyMoving { partition: g, to: self.dirs[m.to].path.display().to_string() });
            }
            let mv = Arc::new(Move {
                partition: g,
                from,
                to,
                phase: AtomicU8::new(Phase::Queued as u8),
                copied_bytes: AtomicU64::new(0),
                cancel: AtomicBool::new(false),
            });
            active.insert(g, mv.clone());
            mv
        };
        let node = self.clone();
        tokio::spawn(async move {
            let home = node.partitions[g as usize].home.clone();
            let r = node.run_move(&home, &mv).await;
            let outcome = match &r {
                Ok(pause) => format!(
                    "moved to {} (writes paused {} ms at the switch)",
                    node.dirs[mv.to].path.display(),
                    pause.as_millis()
                ),
                Err(e) => format!("move to {} stopped: {e:#}", node.dirs[mv.to].path.display()),
            };
            match &r {
                Ok(_) => tracing::info!(metadata_partition = g, "{outcome}"),
                Err(_) => tracing::warn!(metadata_partition = g, "{outcome}"),
            }
            node.moves.outcomes.lock().unwrap_or_else(|e| e.into_inner()).insert(g, outcome);
            node.moves.active.lock().unwrap_or_else(|e| e.into_inner()).remove(&g);
        });
        Ok(format!("metadata partition {g}: moving from {} to {}", self.dirs[from].path.display(), dst.path.display()))
    }

    /// Cancels `g`'s move (before it switches): the future replica is dropped.
    pub fn cancel_replica_move(&self, g: u32) -> Result<String, MoveError> {
        let mv = self.moves.get(g).ok_or(MoveError::NotMoving(g))?;
        if mv.phase() as u8 >= Phase::Switching as u8 {
            return Err(MoveError::TooLate(g));
        }
        mv.cancel.store(true, Ordering::Relaxed);
        Ok(format!("metadata partition {g}: the move is being cancelled"))
    }

    /// Test hook: pauses in each phase so that a test can kill the process there.
    async fn test_pause(&self, mv: &Move) {
        let ms = self.config.test_replica_move_pause_ms;
        if ms > 0 && self.config.allow_fault_injection {
            tracing::info!(
                metadata_partition = mv.partition,
                phase = mv.phase().name(),
                ms,
                "test pause in a replica move"
            );
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }

    /// One move; returns how long the metadata partition's writes were paused at the switch.
    async fn run_move(&self, home: &Arc<Home>, mv: &Arc<Move>) -> anyhow::Result<Duration> {
        let g = mv.partition;
        let _slot = self.moves.slots.clone().acquire_owned().await?;
        let src = self.dirs[mv.from].clone();
        let dst = self.dirs[mv.to].clone();
        let current = placement::read_placement(&src.db, g)?.ok_or_else(|| {
            anyhow::anyhow!("metadata partition {g} has no placement record in {}", src.path.display())
        })?;
        // Phase 1: the future replica's record, then its contents.
        let future = Placement {
            role: Role::Future,
            incarnation: current.incarnation,
            generation: current.generation + 1,
            moved_from: Some(src.id),
        };
        mv.set_phase(Phase::Copying);
        let copied = async {
            // Left-overs of an earlier attempt go first (the start-up cleanup covers crashes).
            let d = dst.clone();
            tokio::task::spawn_blocking(move || d.delete_replica(g)).await??;
            placement::write_placement(&dst.db, g, Some(&future))?;
            // From here on the metadata partition's writers note what they change: each pass takes
            // the notes first, so the switch needs to copy only what changed since the last pass
            // began.
            {
                let _paused = home.pause().await;
                home.record(true);
            }
            self.copy_pass(mv, &src, &dst, None).await?;
            self.test_pause(mv).await;
            mv.set_phase(Phase::CatchingUp);
            self.test_pause(mv).await;
            for _ in 0..CATCH_UP_PASSES {
                let dirty = home.take_dirty();
                let log_from = if dirty.overflow { None } else { Some(dirty.log_from.unwrap_or(u64::MAX)) };
                let stats = self.copy_pass(mv, &src, &dst, log_from).await?;
                if stats.changed() < CATCH_UP_KEYS {
                    break;
                }
            }
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = copied {
            home.record(false);
            let d = dst.clone();
            let cleaned = tokio::task::spawn_blocking(move || {
                d.delete_replica(g)?;
                dirs::remove_snapshots(&d, g)
            })
            .await;
            if let Ok(Err(c)) | Err(c) = cleaned.map_err(anyhow::Error::from) {
                tracing::error!(metadata_partition = g, error = %c, "could not drop the future replica (it is dropped at start)");
            }
            return Err(if mv.cancel.load(Ordering::Relaxed) { anyhow::anyhow!("cancelled") } else { e });
        }
        // Phase 4: the switch.
        mv.set_phase(Phase::Switching);
        let paused = home.pause().await;
        let started = Instant::now();
        let moved = Placement { role: Role::Current, ..future };
        let (s, d) = (src.clone(), dst.clone());
        let dirty = home.take_dirty();
        home.record(false);
        let switched = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            if dirty.overflow {
                copy::sync_ranges(&s.db, &d.db, &placement::partition_ranges(g), &mut |_| true)?;
                seglog::copy_partition(&s.log, &d.log, g, None, &mut |_| true)?;
            } else {
                copy::copy_keys(&s.db, &d.db, Family::Raft, &[], &dirty.raft)?;
                copy::copy_keys(&s.db, &d.db, Family::State, &[], &dirty.state)?;
                seglog::copy_partition(&s.log, &d.log, g, Some(dirty.log_from.unwrap_or(u64::MAX)), &mut |_| true)?;
            }
            snapshot::copy_newest(&s.snapshot_dir(g), &d.snapshot_dir(g))?;
            // The log copied is durable first; then one synced write makes the state copied
            // durable and the replica current here.
            d.log.sync()?;
            placement::write_placement(&d.db, g, Some(&moved))
        })
        .await?;
        if let Err(e) = switched {
            drop(paused);
            let d = dst.clone();
            let _ = tokio::task::spawn_blocking(move || d.delete_replica(g)).await;
            return Err(e.context("switching"));
        }
        self.test_pause(mv).await;
        let old = home.switch(&paused, dst.clone());
        drop(paused);
        let pause = started.elapsed();
        crate::metrics::get().replica_move_pause.observe(pause.as_secs_f64());
        // Phase 5: the old copy goes once nobody reads it.
        mv.set_phase(Phase::Deleting);
        self.test_pause(mv).await;
        if !Home::wait_unused(&old, Duration::from_secs(60)).await {
            tracing::warn!(metadata_partition = g, "readers still hold the old copy after 60 s; deleting it anyway");
        }
        drop(old);
        let s = src.clone();
        tokio::task::spawn_blocking(move || {
            s.delete_replica(g)?;
            dirs::remove_snapshots(&s, g)
        })
        .await??;
        Ok(pause)
    }

    /// One throttled copy pass of `g` from `src` to `dst`: its keys (the difference), and its log
    /// (all of it when `log_from` is `None`, else from that index on).
    async fn copy_pass(
        &self,
        mv: &Arc<Move>,
        src: &Arc<DataDir>,
        dst: &Arc<DataDir>,
        log_from: Option<u64>,
    ) -> anyhow::Result<copy::SyncStats> {
        let g = mv.partition;
        let (s, d, m) = (src.clone(), dst.clone(), mv.clone());
        let moves = self.moves.clone();
        let stats = tokio::task::spawn_blocking(move || -> anyhow::Result<copy::SyncStats> {
            let mut pace = |bytes: u64| {
                m.copied_bytes.fetch_add(bytes, Ordering::Relaxed);
                // In slices, so that a cancel or a new rate is seen soon.
                let until = Instant::now() + moves.charge(bytes);
                while Instant::now() < until && !m.cancel.load(Ordering::Relaxed) && moves.rate() != 0 {
                    std::thread::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(50)));
                }
                !m.cancel.load(Ordering::Relaxed)
            };
            let stats = copy::sync_ranges(&s.db, &d.db, &placement::partition_ranges(g), &mut pace);
            let mut stats = match stats {
                Err(StorageError::Cancelled) => anyhow::bail!("cancelled"),
                other => other?,
            };
            match seglog::copy_partition(&s.log, &d.log, g, log_from, &mut pace) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => anyhow::bail!("cancelled"),
                Err(e) => return Err(e.into()),
                Ok((entries, bytes)) => {
                    stats.puts += entries;
                    stats.bytes += bytes;
                }
            }
            Ok(stats)
        })
        .await??;
        let (s, d) = (src.clone(), dst.clone());
        tokio::task::spawn_blocking(move || snapshot::copy_newest(&s.snapshot_dir(g), &d.snapshot_dir(g))).await??;
        Ok(stats)
    }

    /// The directories with their replicas (KIP-113's DescribeLogDirs). Blocking (scans each
    /// replica's keys for its size): call it off the runtime.
    pub fn describe_dirs(&self) -> Vec<DirDescription> {
        let mut out = vec![];
        for (i, d) in self.dirs.iter().enumerate() {
            let (total, usable) = dirs::space(&d.path).unwrap_or((0, 0));
            let mut replicas = vec![];
            for (g, mp) in self.partitions.iter().enumerate() {
                let g = g as u32;
                let placed = mp.home.current();
                let mv = self.moves.get(g);
                if self.dir_index(&placed) == i {
                    let m = mp.raft.metrics().borrow_watched().clone();
                    let committed = m.local_committed.map_or(0, |l| l.index);
                    let applied = m.last_applied.map_or(0, |l| l.index);
                    replicas.push(ReplicaDescription {
                        metadata_partition: g,
                        size_bytes: copy::range_bytes(&d.db, &placement::partition_ranges(g)).unwrap_or(0),
                        offset_lag: committed.saturating_sub(applied),
                        is_future: false,
                        // A move deleting the old copy has switched: the replica is current here.
                        move_phase: mv
                            .as_ref()
                            .filter(|m| m.to == i && m.phase() == Phase::Deleting)
                            .map_or_else(String::new, |m| m.phase().name().to_string()),
                        copied_bytes: 0,
                        last_move: self.moves.outcome(g).unwrap_or_default(),
                    });
                }
                if let Some(mv) = mv.filter(|m| m.to == i && m.phase() != Phase::Deleting) {
                    let applied = self.applied(g);
                    replicas.push(ReplicaDescription {
                        metadata_partition: g,
                        size_bytes: copy::range_bytes(&d.db, &placement::partition_ranges(g)).unwrap_or(0),
                        offset_lag: applied.saturating_sub(applied_in(&d.db, g)),
                        is_future: true,
                        move_phase: mv.phase().name().to_string(),
                        copied_bytes: mv.copied_bytes.load(Ordering::Relaxed),
                        last_move: String::new(),
                    });
                }
            }
            out.push(DirDescription {
                path: d.path.display().to_string(),
                dir_id: dir_id_hex(&d.id),
                error_code: if d.is_offline() { diskless_proto::ErrorCode::KafkaStorageError.wire() } else { 0 },
                error: if d.is_offline() { "offline".into() } else { String::new() },
                total_bytes: total,
                usable_bytes: usable,
                replicas,
            });
        }
        out
    }
}
