//! A node's data directories at start: opening each, checking they belong together, and finding
//! the one directory each metadata partition's replica lives in.
//!
//! Owns: [`open`] — every configured directory opened (its RocksDB, its Raft log, its fsync thread,
//! its identity record; a directory of another node or cluster is refused), what crashed moves left
//! behind settled (an unfinished future replica dropped; a finished move's old copy deleted), each
//! metadata partition placed (a replica that exists nowhere is created in the directory with the
//! most free space, ties to the fewest replicas), and a metadata partition current in two
//! directories otherwise refused. Also the figures of a directory (total and usable bytes).
//!
//! It must not move replicas while the node runs (that is `node::mover`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use super::NodeConfig;
use crate::raft::faults::Faults;
use crate::raft::home::{dir_id_hex, DataDir, DirId};
use crate::raft::identity::{self, Identity};
use crate::raft::placement::{self, DirState, Placement, Role};
use crate::raft::seglog::SegLog;
use crate::raft::LogSyncer;
use crate::storage::Db;

/// What [`open`] found.
pub struct Opened {
    pub dirs: Vec<Arc<DataDir>>,
    /// Per metadata partition: the index in `dirs` of its directory.
    pub homes: Vec<usize>,
    pub identity: Identity,
}

/// Opens the configured directories and places every metadata partition (see the module docs).
pub fn open(config: &NodeConfig, faults: Arc<Faults>) -> anyhow::Result<Opened> {
    let n = config.num_metadata_partitions;
    let mut dirs = vec![];
    let mut states: Vec<DirState> = vec![];
    let mut cluster = None;
    for path in config.dirs() {
        std::fs::create_dir_all(&path).with_context(|| format!("create data directory {}", path.display()))?;
        let db =
            Arc::new(Db::open(&path.join("rocksdb")).with_context(|| format!("open RocksDB in {}", path.display()))?);
        let log = Arc::new(
            SegLog::open(&DataDir::log_path(&path), config.raft.log_segment_bytes)
                .with_context(|| format!("open the Raft log in {}", path.display()))?,
        );
        // Marked whenever unmarked (a crash may come between the log's creation and the mark).
        let marked = placement::log_marked(&db)?;
        anyhow::ensure!(
            !(log.was_fresh() && marked),
            "data directory {}: its Raft log ({}) is missing or empty, but the directory had one: the \
             entries this node acknowledged are gone. Remove the whole data directory and add the node \
             again (coordctl add-node), or restore it from a backup",
            path.display(),
            DataDir::log_path(&path).display()
        );
        if !marked {
            placement::mark_log(&db)?;
        }
        let state = placement::open_dir(&db, &path, config.node_id, n, cluster)?;
        cluster = cluster.or(state.record.cluster_id);
        if let Some(i) = states.iter().position(|s| s.record.dir_id == state.record.dir_id) {
            anyhow::bail!(
                "data directories {} and {} have the same directory id {} (one is a copy of the other); \
                 remove the copy",
                dirs.get(i).map_or_else(String::new, |d: &Arc<DataDir>| d.path.display().to_string()),
                path.display(),
                dir_id_hex(&state.record.dir_id)
            );
        }
        // With several directories a failed fsync takes only its directory offline; with one, it
        // stops the node as before (see `raft::log_sync`).
        let offline = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let isolate = (config.dirs().len() > 1).then(|| offline.clone());
        let syncer = LogSyncer::start(log.clone(), faults.clone(), isolate);
        dirs.push(Arc::new(DataDir::new(state.record.dir_id, path, db, log, syncer, offline)));
        states.push(state);
    }
    // Directories opened before the one that named the cluster: check them against it too.
    if let Some(c) = cluster {
        for (d, s) in dirs.iter().zip(&states) {
            if let Some(theirs) = s.record.cluster_id {
                anyhow::ensure!(
                    theirs == c,
                    "data directory {} belongs to cluster {}, but this node's other directories to cluster {}",
                    d.path.display(),
                    identity::cluster_id_hex(&theirs),
                    identity::cluster_id_hex(&c)
                );
            }
        }
    }
    let mut homes = vec![];
    let mut incarnations = vec![];
    for g in 0..n {
        let (home, p) = place(g, &dirs, &mut states)?;
        homes.push(home);
        incarnations.push(p.incarnation);
    }
    for (i, d) in dirs.iter().enumerate() {
        let here: Vec<u32> = (0..n).filter(|&g| homes[g as usize] == i).collect();
        settle_log(d, &here)?;
    }
    // A directory that learnt no cluster id yet (new) gets the node's.
    if let Some(c) = cluster {
        for (d, s) in dirs.iter().zip(&states) {
            if s.record.cluster_id.is_none() {
                placement::set_cluster(&d.db, c)?;
            }
        }
    }
    let identity = Identity::new(config.node_id, incarnations, cluster, dirs.iter().map(|d| d.db.clone()).collect());
    Ok(Opened { dirs, homes, identity })
}

/// Finds (settling crashed moves) or creates metadata partition `g`'s replica; returns its
/// directory's index.
fn place(g: u32, dirs: &[Arc<DataDir>], states: &mut [DirState]) -> anyhow::Result<(usize, Placement)> {
    // Future replicas are moves that did not finish: dropped (the current one is intact).
    for (d, s) in dirs.iter().zip(states.iter_mut()) {
        if s.placements.get(&g).is_some_and(|p| p.role == Role::Future) {
            tracing::warn!(metadata_partition = g, dir = %d.path.display(), "dropping an unfinished move's future replica");
            d.delete_replica(g)?;
            remove_snapshots(d, g)?;
            s.placements.remove(&g);
        }
    }
    let current: Vec<usize> = (0..dirs.len()).filter(|&i| states[i].placements.contains_key(&g)).collect();
    match current.as_slice() {
        [] => {
            let i = emptiest(dirs, states)?;
            let p = Placement {
                role: Role::Current,
                incarnation: identity::new_incarnation(),
                generation: 1,
                moved_from: None,
            };
            // Nothing of an earlier replica's log may come back under the new one.
            dirs[i].log.drop_partition(g)?;
            placement::write_placement(&dirs[i].db, g, Some(&p))?;
            states[i].placements.insert(g, p.clone());
            tracing::info!(metadata_partition = g, dir = %dirs[i].path.display(), "new replica");
            Ok((i, p))
        }
        [i] => Ok((*i, states[*i].placements[&g].clone())),
        [a, b] => {
            // A move that switched but crashed before deleting its old copy: the moved replica
            // names the old directory and has the next generation.
            let (pa, pb) = (&states[*a].placements[&g], &states[*b].placements[&g]);
            let newer_of = |new: &Placement, old: &Placement, old_dir: &DirId| {
                new.moved_from.as_ref() == Some(old_dir) && new.generation == old.generation + 1
            };
            let (keep, drop) = if newer_of(pa, pb, &dirs[*b].id) {
                (*a, *b)
            } else if newer_of(pb, pa, &dirs[*a].id) {
                (*b, *a)
            } else {
                return Err(two_current(g, dirs, &current));
            };
            tracing::warn!(
                metadata_partition = g,
                old = %dirs[drop].path.display(),
                new = %dirs[keep].path.display(),
                "finishing a move: deleting the old copy"
            );
            dirs[drop].delete_replica(g)?;
            remove_snapshots(&dirs[drop], g)?;
            states[drop].placements.remove(&g);
            Ok((keep, states[keep].placements[&g].clone()))
        }
        _ => Err(two_current(g, dirs, &current)),
    }
}

fn two_current(g: u32, dirs: &[Arc<DataDir>], which: &[usize]) -> anyhow::Error {
    let names: Vec<String> = which.iter().map(|&i| dirs[i].path.display().to_string()).collect();
    anyhow::anyhow!(
        "metadata partition {g} has a current replica in each of {}: refusing to start (which one is right is \
         not recorded; keep one and remove the metadata partition from the others, or restore the node)",
        names.join(", ")
    )
}

/// Brings directory `d`'s Raft log in line with the replicas placed there (`here`): entries an
/// earlier version kept in RocksDB moved into it, every other metadata partition's records dropped
/// (a replica that left, or a move that did not finish), and each metadata partition's purge point
/// (kept in RocksDB) told to it.
fn settle_log(d: &DataDir, here: &[u32]) -> anyhow::Result<()> {
    let moved = crate::raft::move_log_out_of_rocksdb(&d.db, &d.log, here)
        .with_context(|| format!("move the Raft log of {} out of RocksDB", d.path.display()))?;
    if moved > 0 {
        tracing::info!(dir = %d.path.display(), entries = moved, "moved the Raft log out of RocksDB into log segments");
    }
    for g in d.log.partitions() {
        if !here.contains(&g) {
            tracing::info!(metadata_partition = g, dir = %d.path.display(), "dropping the Raft log of a replica not placed here");
            d.log.drop_partition(g)?;
        }
    }
    for &g in here {
        if let Some(purged) = crate::raft::purged_index(&d.db, g)? {
            d.log.purge(g, purged)?;
        }
    }
    Ok(())
}

/// Removes a metadata partition's snapshot files from a directory.
pub fn remove_snapshots(d: &DataDir, g: u32) -> anyhow::Result<()> {
    let dir = d.snapshot_dir(g);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove {}", dir.display())),
    }
}

/// The directory with the most usable bytes; ties: the fewest replicas, then the first.
fn emptiest(dirs: &[Arc<DataDir>], states: &[DirState]) -> anyhow::Result<usize> {
    let mut best: Option<(usize, u64, usize)> = None;
    for (i, d) in dirs.iter().enumerate() {
        let (_, usable) = space(&d.path)?;
        let replicas = states[i].placements.len();
        let better = match best {
            None => true,
            Some((_, u, r)) => usable > u || (usable == u && replicas < r),
        };
        if better {
            best = Some((i, usable, replicas));
        }
    }
    best.map(|(i, _, _)| i).context("no data directory")
}

/// Total and usable bytes of the filesystem holding `path`. Usable is rounded down to 64 MiB so
/// that the placement of new replicas does not flip on the bytes each write takes.
pub fn space(path: &Path) -> anyhow::Result<(u64, u64)> {
    let s = nix::sys::statvfs::statvfs(path).with_context(|| format!("statvfs {}", path.display()))?;
    let unit = s.fragment_size() as u64;
    let total = s.blocks() as u64 * unit;
    let usable = s.blocks_available() as u64 * unit;
    Ok((total, usable / (64 << 20) * (64 << 20)))
}
