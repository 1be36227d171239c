//! A consistent copy of one metadata partition's state, for backups
//! (`AdminService.StreamSnapshot`).
//!
//! Owns: reading the partition's keys, its applied log id and its digest from one RocksDB snapshot
//! and writing them in the snapshot file format to any writer. It must not touch the partition's
//! own snapshot directory (openraft's snapshots stay as they are) nor change anything.

use std::io::Write;

use super::Node;
use crate::raft::{snapshot, LogId, SnapshotMeta, StoredMembership};
use crate::storage::{codec, KvRead};

/// What a copy reflects.
#[derive(Debug, Clone)]
pub struct StateCopy {
    pub applied: Option<LogId>,
    /// SHA-256 of the state, as `StateMachine::digest` (and `Status` with digests) computes it.
    pub digest: [u8; 32],
}

impl Node {
    /// Writes metadata partition `g`'s state as one snapshot file (format of `raft::snapshot`) to
    /// `out`, all read from one RocksDB snapshot: the keys, the applied log id and membership in
    /// the header, and the digest of exactly those keys. Blocking (a full scan, twice): call it off
    /// the runtime.
    pub fn copy_state<W: Write>(&self, g: u32, out: W) -> anyhow::Result<(W, StateCopy)> {
        let mp = self.partition(g)?;
        let placed = self.placed(g)?;
        let view = placed.db.read();
        anyhow::ensure!(
            !mp.sm.installing_in(&view)?,
            "this node's replica of metadata partition {g} is installing a snapshot; try again"
        );
        let keys = crate::state_machine::keys::Keys::new(g);
        let applied_key = keys.applied();
        let (last_log_id, last_membership): (Option<LogId>, StoredMembership) = match view.get(&applied_key)? {
            Some(v) => codec::decode(&applied_key, &v)?,
            None => (None, StoredMembership::default()),
        };
        let digest = mp.sm.state_machine().digest(&view)?;
        let meta = SnapshotMeta { last_log_id, last_membership };
        let (from, to) = keys.metadata_partition_range();
        let out = snapshot::write_to(&view, &from, &to, &|k| k == applied_key.as_slice(), &meta, out)?;
        Ok((out, StateCopy { applied: last_log_id, digest }))
    }
}
