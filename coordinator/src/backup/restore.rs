//! `coordctl snapshot restore`: a node's data directory for a new cluster, built offline from a
//! backup file, as `etcdutl snapshot restore` does.
//!
//! Every node of the new cluster is restored from the same file with the same `--members` and
//! `--cluster-token`; each restore derives the same new cluster id and the same new replica
//! incarnations for every member (a hash of the token, the backup's checksum and the members), so
//! the metadata partitions' memberships agree without the nodes talking. Nothing of the source's
//! identity is kept: its nodes refuse the new cluster's messages and the other way round. The
//! backup is checked whole before anything is written, the directory is built under a temporary
//! name and renamed into place at the end, and each partition's restored state must hash to the
//! digest the backup recorded. It must not touch a directory that holds anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::file::Backup;
use crate::node::Member;
use crate::raft::identity::{self, ClusterId};
use crate::raft::{NodeId, Replica};
use crate::state_machine::StateMachine;
use crate::storage::Db;

/// What `restore` is asked to build.
#[derive(Debug, Clone)]
pub struct RestoreRequest {
    pub backup: PathBuf,
    pub data_dir: PathBuf,
    pub node_id: NodeId,
    pub members: Vec<Member>,
    /// The same on every node of one restore, a new one for every restore.
    pub cluster_token: String,
}

/// What it built.
#[derive(Debug, Clone, Serialize)]
pub struct Restored {
    pub data_dir: PathBuf,
    pub node_id: NodeId,
    pub cluster_id: String,
    pub source_cluster_id: String,
    pub num_metadata_partitions: u32,
    pub partitions: Vec<RestoredPartition>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RestoredPartition {
    pub metadata_partition: u32,
    pub applied_index: u64,
    pub keys: u64,
    pub digest: String,
}

/// The new cluster's id and its replicas' incarnations, the same on every node restored from the
/// same backup with the same members and token.
struct NewIdentity {
    seed: [u8; 32],
}

impl NewIdentity {
    fn new(token: &str, backup_checksum: u32, members: &[Member]) -> NewIdentity {
        let mut h = Sha256::new();
        h.update(b"diskless restore v1\0");
        h.update((token.len() as u64).to_be_bytes());
        h.update(token.as_bytes());
        h.update(backup_checksum.to_be_bytes());
        let sorted: BTreeMap<NodeId, &str> = members.iter().map(|m| (m.id, m.addr.as_str())).collect();
        for (id, addr) in sorted {
            h.update(id.to_be_bytes());
            h.update((addr.len() as u64).to_be_bytes());
            h.update(addr.as_bytes());
        }
        NewIdentity { seed: h.finalize().into() }
    }

    fn cluster_id(&self) -> ClusterId {
        let d = Sha256::new().chain_update(self.seed).chain_update(b"cluster").finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&d[..16]);
        id
    }

    fn incarnation(&self, node: NodeId, partition: u32) -> u64 {
        let d = Sha256::new()
            .chain_update(self.seed)
            .chain_update(b"replica")
            .chain_update(node.to_be_bytes())
            .chain_update(partition.to_be_bytes())
            .finalize();
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        u64::from_be_bytes(b).max(1)
    }
}

/// Builds `req.data_dir` from the backup (see the module docs).
pub fn restore(req: &RestoreRequest) -> anyhow::Result<Restored> {
    anyhow::ensure!(!req.cluster_token.trim().is_empty(), "--cluster-token must not be empty");
    let ids: BTreeSet<NodeId> = req.members.iter().map(|m| m.id).collect();
    anyhow::ensure!(ids.len() == req.members.len(), "--members lists a node id twice");
    anyhow::ensure!(!ids.contains(&0), "node id 0 is reserved");
    anyhow::ensure!(ids.contains(&req.node_id), "--members does not list node {} (--node-id)", req.node_id);
    anyhow::ensure!(req.members.iter().all(|m| !m.addr.is_empty()), "every member needs an address");
    if let Ok(mut entries) = std::fs::read_dir(&req.data_dir) {
        anyhow::ensure!(
            entries.next().is_none(),
            "data directory {} is not empty; restore builds a new one (remove it or pick another)",
            req.data_dir.display()
        );
    }

    let backup = Backup::open(&req.backup)?;
    backup.verify()?;
    let header = &backup.header;
    let n = header.num_metadata_partitions;
    let new = NewIdentity::new(&req.cluster_token, backup.checksum, &req.members);
    let cluster_id = new.cluster_id();
    anyhow::ensure!(
        identity::cluster_id_hex(&cluster_id) != header.cluster_id,
        "the new cluster id equals the source's"
    );

    let tmp = temp_dir(&req.data_dir)?;
    let built = build(req, &backup, &new, &tmp);
    let restored = match built {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    if req.data_dir.exists() {
        std::fs::remove_dir(&req.data_dir).with_context(|| format!("replace {}", req.data_dir.display()))?;
    }
    std::fs::rename(&tmp, &req.data_dir)
        .with_context(|| format!("rename {} to {}", tmp.display(), req.data_dir.display()))?;
    if let Some(parent) = req.data_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(Restored {
        data_dir: req.data_dir.clone(),
        node_id: req.node_id,
        cluster_id: identity::cluster_id_hex(&cluster_id),
        source_cluster_id: header.cluster_id.clone(),
        num_metadata_partitions: n,
        partitions: restored,
    })
}

/// The temporary directory a restore builds in, beside the target (left-overs of an interrupted
/// restore of the same target are removed).
fn temp_dir(data_dir: &Path) -> anyhow::Result<PathBuf> {
    let name = data_dir.file_name().context("the data directory needs a name")?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(".restoring");
    let tmp = data_dir.with_file_name(tmp_name);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("remove the left-over {}", tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    Ok(tmp)
}

fn build(
    req: &RestoreRequest,
    backup: &Backup,
    new: &NewIdentity,
    dir: &Path,
) -> anyhow::Result<Vec<RestoredPartition>> {
    let n = backup.header.num_metadata_partitions;
    let db = Db::open(&dir.join("rocksdb")).with_context(|| format!("create RocksDB in {}", dir.display()))?;
    let incarnations: Vec<u64> = (0..n).map(|g| new.incarnation(req.node_id, g)).collect();
    crate::raft::placement::create_restored(&db, req.node_id, &incarnations, new.cluster_id())?;
    let mut out = vec![];
    backup.for_each_section(&mut |p, at, r| {
        let g = p.metadata_partition;
        let members: BTreeMap<NodeId, Replica> =
            req.members.iter().map(|m| (m.id, Replica::new(&m.addr, new.incarnation(m.id, g)))).collect();
        let sm = StateMachine::new(g, n);
        let got = crate::raft::restore::restore_partition(&db, dir, &sm, req.node_id, &members, &mut &mut *r, at)?;
        let digest: String = got.digest.iter().map(|b| format!("{b:02x}")).collect();
        anyhow::ensure!(
            digest == p.digest,
            "the restored state of metadata partition {g} does not hash to the backup's digest ({digest} != {})",
            p.digest
        );
        out.push(RestoredPartition {
            metadata_partition: g,
            applied_index: got.applied.map_or(0, |l| l.index),
            keys: got.keys,
            digest,
        });
        Ok(())
    })?;
    db.sync_wal()?;
    drop(db);
    std::fs::File::open(dir)?.sync_all()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> Vec<Member> {
        vec![Member { id: 1, addr: "a:1".into() }, Member { id: 2, addr: "b:1".into() }]
    }

    #[test]
    fn identities_are_shared_by_one_restore_and_new_for_another() {
        let a = NewIdentity::new("t1", 7, &members());
        let mut reversed = members();
        reversed.reverse();
        let same = NewIdentity::new("t1", 7, &reversed);
        assert_eq!(a.cluster_id(), same.cluster_id());
        assert_eq!(a.incarnation(2, 3), same.incarnation(2, 3));
        assert_ne!(a.incarnation(1, 3), a.incarnation(2, 3));
        assert_ne!(a.incarnation(1, 3), a.incarnation(1, 4));
        for other in [NewIdentity::new("t2", 7, &members()), NewIdentity::new("t1", 8, &members())] {
            assert_ne!(a.cluster_id(), other.cluster_id());
            assert_ne!(a.incarnation(1, 0), other.incarnation(1, 0));
        }
    }
}
