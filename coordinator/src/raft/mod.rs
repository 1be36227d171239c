//! Raft glue: each metadata partition is an openraft group whose log lives in its data
//! directory's segmented log ([`seglog`]) and whose state lives in the directory's RocksDB.
//!
//! Owns: the openraft type configuration ([`TypeConfig`]), the log store ([`LogStore`]: entries in
//! the segmented log, vote and purge point in the `raft` column family, appends acknowledged only
//! after a log fsync shared by every metadata partition of the directory — see [`LogSyncer`]), the
//! state machine adapter ([`SmStore`]: applies entries with `state_machine::StateMachine`,
//! last-applied and membership in the same write), snapshots (streamed files, installed
//! crash-safely) and the network ([`network`]: every metadata partition's messages over one gRPC
//! connection per peer). It must not interpret commands: that is the state machine's job.

pub mod faults;
pub mod home;
pub mod identity;
pub mod inspect;
mod keys;
mod log_store;
mod log_sync;
pub mod network;
pub mod placement;
pub mod progress;
pub mod restore;
pub mod seglog;
mod sm_store;
pub mod snapshot;
pub mod stages;
pub mod watch;

#[cfg(test)]
mod conformance_test;

pub use log_store::{move_log_out_of_rocksdb, purged_index, LogStore};
pub use log_sync::{LogSyncStats, LogSyncer};
pub use sm_store::SmStore;

use crate::state_machine::{Command, Outcome};

openraft::declare_raft_types!(
    /// The openraft types of a metadata partition.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = Replica,
);

/// A member of a metadata partition as its membership records it: where the node is, and which
/// incarnation of its replica the metadata partition knows. The incarnation is drawn at random when
/// the replica's storage is created (see `node::identity`); every Raft message names the
/// incarnation it is for, and a replica refuses messages for another one. So a node whose data
/// directory was replaced or wiped cannot vote or acknowledge entries with a log it no longer has
/// (Raft amnesia): it takes no part until an operator adds it again, with its new incarnation.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replica {
    pub addr: String,
    pub incarnation: u64,
}

impl Replica {
    pub fn new(addr: impl Into<String>, incarnation: u64) -> Replica {
        Replica { addr: addr.into(), incarnation }
    }
}

impl std::fmt::Display for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (incarnation {:016x})", self.addr, self.incarnation)
    }
}

/// One metadata partition's Raft instance.
pub type Raft = openraft::Raft<TypeConfig, SmStore>;

/// Node ids are u64; 0 is reserved for "none" on the wire.
pub type NodeId = u64;

pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = <TypeConfig as openraft::RaftTypeConfig>::Entry;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot: its metadata and its file.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, snapshot::SnapshotFile>;

pub(crate) fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}
