//! Who this node's replicas are, and which Raft messages they may accept.
//!
//! Owns: this node's identity as its data directories record it (node id, one random
//! *incarnation* per replica — kept in the replica's placement record, see `raft::placement` —
//! and the cluster id once known, recorded in every directory), and the check every incoming Raft
//! message passes ([`Identity::admit`]).
//!
//! Why: Raft's safety assumes a voter never forgets its log or its vote. A node whose data
//! directory was replaced or wiped restarts with nothing; if it still voted and acknowledged
//! entries under its old name, it could elect a leader that lacks committed entries (the lost
//! acknowledged writes KIP-853 warns of). Metadata partitions therefore know each member as (node
//! id, replica incarnation) — see [`Replica`](super::Replica) — and every message names the
//! incarnation it is for. A fresh directory draws new incarnations, so the node refuses everything
//! meant for the replicas it lost, as if it were down, until an operator adds it again (`coordctl
//! add-node`: remove the old replica, add the new one as a learner, let it catch up, make it a
//! voter).
//!
//! It must not decide bootstrapping or membership (that is `node`); it only records and checks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use diskless_proto::internal::Addressee;

use super::NodeId;
use crate::storage::{codec, Db};

pub use super::placement::{cluster_id_hex, ClusterId};

/// This node's identity, loaded from its data directories.
pub struct Identity {
    node_id: NodeId,
    incarnations: Vec<u64>,
    /// Every directory's database: the cluster id is recorded in each.
    dbs: Vec<Arc<Db>>,
    cluster_id: RwLock<Option<ClusterId>>,
    /// When a refusal was last logged (ms since the epoch), so a stale peer does not flood the log.
    last_refusal_logged: AtomicU64,
}

/// Why a Raft message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the message is for node {to}, but this is node {me}")]
    WrongNode { to: NodeId, me: NodeId },
    #[error(
        "metadata partition {partition}: its membership knows this node's replica as incarnation {expected:016x}, \
         but this node's replica is incarnation {actual:016x} (its data directory is new or was replaced); \
         it takes no part until it is added again: coordctl add-node --id {node} --address <this node's address>"
    )]
    OtherIncarnation { partition: u32, node: NodeId, expected: u64, actual: u64 },
    #[error("the message comes from cluster {theirs}, but this node belongs to cluster {mine}")]
    OtherCluster { theirs: String, mine: String },
    #[error("the message names no addressee")]
    NoAddressee,
    #[error("there is no metadata partition {0}")]
    UnknownPartition(u32),
}

impl Identity {
    /// The identity of a node whose directories (`dbs`) hold replicas of these incarnations (one
    /// per metadata partition) and belong to `cluster_id`, if known.
    pub fn new(node_id: NodeId, incarnations: Vec<u64>, cluster_id: Option<ClusterId>, dbs: Vec<Arc<Db>>) -> Identity {
        Identity {
            node_id,
            incarnations,
            dbs,
            cluster_id: RwLock::new(cluster_id),
            last_refusal_logged: AtomicU64::new(0),
        }
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// This node's replica incarnation of metadata partition `g`.
    pub fn incarnation(&self, g: u32) -> Option<u64> {
        self.incarnations.get(g as usize).copied()
    }

    pub fn incarnations(&self) -> &[u64] {
        &self.incarnations
    }

    pub fn cluster_id(&self) -> Option<ClusterId> {
        *self.cluster_id.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the cluster this node belongs to (synced, in every directory). Joining another
    /// cluster is refused.
    pub fn join_cluster(&self, id: ClusterId) -> anyhow::Result<()> {
        let mut slot = self.cluster_id.write().unwrap_or_else(|e| e.into_inner());
        match *slot {
            Some(mine) if mine == id => return Ok(()),
            Some(mine) => {
                anyhow::bail!("this node belongs to cluster {}, not {}", cluster_id_hex(&mine), cluster_id_hex(&id))
            }
            None => {}
        }
        for db in &self.dbs {
            super::placement::set_cluster(db, id)?;
        }
        *slot = Some(id);
        tracing::info!(cluster = %cluster_id_hex(&id), "this node joined the cluster");
        Ok(())
    }

    /// The addressee a message to `node`'s replica `incarnation` carries.
    pub fn addressee(&self, node: NodeId, incarnation: u64) -> Addressee {
        Addressee { node_id: node, incarnation, cluster_id: self.cluster_id().map(|c| c.to_vec()).unwrap_or_default() }
    }

    /// Checks that a message for `partition` addressed to `to` is for this node's replica and comes
    /// from this node's cluster; adopts the sender's cluster id when this node has none yet (a node
    /// being added: the sender addressed this very replica, so it was added under this
    /// incarnation).
    pub fn admit(&self, partition: u32, to: Option<&Addressee>) -> Result<(), Refusal> {
        let r = self.check(partition, to);
        match &r {
            Ok(Some(theirs)) => {
                if let Err(e) = self.join_cluster(*theirs) {
                    tracing::error!(error = %e, "could not record the cluster id");
                }
            }
            Ok(None) => {}
            Err(e) => self.log_refusal(e),
        }
        r.map(|_| ())
    }

    /// Checks that a request another node forwarded (`Execute`) is for this node's replica of
    /// `partition` and comes from this node's cluster, as [`admit`](Self::admit) does for Raft
    /// messages; never adopts the sender's cluster id (only Raft messages add a node to a cluster).
    pub fn admit_forwarded(&self, partition: u32, to: &Addressee) -> Result<(), Refusal> {
        let r = self.check(partition, Some(to));
        if let Err(e) = &r {
            self.log_refusal(e);
        }
        r.map(|_| ())
    }

    /// [`admit`](Self::admit) without side effects: returns a cluster id to adopt, if any.
    fn check(&self, partition: u32, to: Option<&Addressee>) -> Result<Option<ClusterId>, Refusal> {
        let to = to.ok_or(Refusal::NoAddressee)?;
        if to.node_id != self.node_id {
            return Err(Refusal::WrongNode { to: to.node_id, me: self.node_id });
        }
        let actual = self.incarnation(partition).ok_or(Refusal::UnknownPartition(partition))?;
        if to.incarnation != actual {
            return Err(Refusal::OtherIncarnation { partition, node: self.node_id, expected: to.incarnation, actual });
        }
        let theirs: Option<ClusterId> = to.cluster_id.as_slice().try_into().ok();
        match (self.cluster_id(), theirs) {
            (Some(mine), Some(theirs)) if mine != theirs => {
                Err(Refusal::OtherCluster { theirs: cluster_id_hex(&theirs), mine: cluster_id_hex(&mine) })
            }
            (None, Some(theirs)) => Ok(Some(theirs)),
            _ => Ok(None),
        }
    }

    fn log_refusal(&self, e: &Refusal) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let last = self.last_refusal_logged.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 10_000
            && self.last_refusal_logged.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::warn!("refusing Raft messages or forwarded requests: {e}");
        }
    }
}

/// A new replica incarnation: random, never 0.
pub fn new_incarnation() -> u64 {
    // Never 0, so an unset field never matches a real replica.
    loop {
        let (hi, _) = uuid::Uuid::new_v4().as_u64_pair();
        if hi != 0 {
            return hi;
        }
    }
}

/// The id of a cluster bootstrapped with `members` (every bootstrapping node computes the same).
pub fn derive_cluster_id(members: &std::collections::BTreeMap<NodeId, super::Replica>) -> anyhow::Result<ClusterId> {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(codec::encode(members)?);
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path) -> Arc<Db> {
        Arc::new(Db::open(&dir.join("rocksdb")).unwrap())
    }

    #[test]
    fn new_incarnations_are_never_zero_nor_repeated() {
        let a: Vec<u64> = (0..64).map(|_| new_incarnation()).collect();
        assert!(a.iter().all(|i| *i != 0));
        let mut b = a.clone();
        b.sort();
        b.dedup();
        assert_eq!(a.len(), b.len());
    }

    #[test]
    fn messages_for_another_node_or_incarnation_or_cluster_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        crate::raft::placement::open_dir(&db, dir.path(), 1, 2, None).unwrap();
        let id = Identity::new(1, vec![new_incarnation(), new_incarnation()], None, vec![db.clone()]);
        let inc = id.incarnation(1).unwrap();
        let to =
            |node, incarnation, cluster: &[u8]| Addressee { node_id: node, incarnation, cluster_id: cluster.to_vec() };
        assert_eq!(id.admit(1, None), Err(Refusal::NoAddressee));
        assert!(matches!(id.admit(1, Some(&to(2, inc, &[]))), Err(Refusal::WrongNode { .. })));
        assert!(matches!(id.admit(1, Some(&to(1, inc ^ 1, &[]))), Err(Refusal::OtherIncarnation { .. })));
        assert!(matches!(id.admit(0, Some(&to(1, inc, &[]))), Err(Refusal::OtherIncarnation { .. })));
        assert_eq!(id.admit(9, Some(&to(1, inc, &[]))), Err(Refusal::UnknownPartition(9)));
        // A node with no cluster adopts the sender's, durably; then refuses other clusters.
        assert_eq!(id.admit(1, Some(&to(1, inc, &[7; 16]))), Ok(()));
        assert_eq!(id.cluster_id(), Some([7; 16]));
        assert!(matches!(id.admit(1, Some(&to(1, inc, &[8; 16]))), Err(Refusal::OtherCluster { .. })));
        assert_eq!(id.admit(1, Some(&to(1, inc, &[]))), Ok(()));
        drop(id);
        let again = crate::raft::placement::open_dir(&db, dir.path(), 1, 2, None).unwrap();
        assert_eq!(again.record.cluster_id, Some([7; 16]));
    }
}
