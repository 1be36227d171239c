//! What one data directory says about itself and about the replicas it holds.
//!
//! Owns: the directory's identity record (KIP-858's `meta.properties` in spirit: directory id, node
//! id, number of metadata partitions, cluster id once known), written synced in the directory's own
//! RocksDB, and one *placement record* per replica the directory holds: whether the replica is the
//! metadata partition's **current** one on this node or a **future** one being filled by a move
//! (KIP-113's temporary replica), its incarnation (see `raft::identity`), and a generation that a
//! completed move increments, naming the directory it came from. A crash at any point of a move
//! leaves records from which exactly one current replica follows (`node::dirs` decides).
//!
//! It also writes a restored directory's records (`backup`), and holds the ids both kinds of record
//! name (directory, cluster). A directory of an earlier format is refused, never converted.
//!
//! It must not decide where replicas go (`node::dirs`) nor check Raft messages (`raft::identity`).

use std::collections::BTreeMap;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::NodeId;
use crate::storage::{codec, Db, Family, WriteBatch};

/// A data directory's id: 16 random bytes drawn when it is created.
pub type DirId = [u8; 16];

pub fn dir_id_hex(id: &DirId) -> String {
    uuid::Uuid::from_bytes(*id).to_string()
}

/// A cluster id: 16 bytes, derived from the bootstrap membership.
pub type ClusterId = [u8; 16];

pub fn cluster_id_hex(id: &ClusterId) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the identity record of format 1 (an earlier release) was: a directory holding it is
/// refused.
const FIRST_FORMAT_KEY: &[u8] = b"\xff\xff\xff\xffidentity";
/// Set once the directory's Raft log (`seglog`) exists: a log found missing later is damage.
const LOG_KEY: &[u8] = b"\xff\xff\xff\xffraft-log";
/// This format's directory record.
const DIR_KEY: &[u8] = b"\xff\xff\xff\xffdirectory";
/// Placement records: this prefix, then the metadata partition (4 bytes, big-endian). Outside every
/// metadata partition's key range, so copying a metadata partition's keys never copies them.
const PLACEMENT_PREFIX: &[u8] = b"\xff\xff\xff\xfeplace";
/// 4: the records and Raft entries of this release (a consumer group's version among them; one
/// operation per kind of change, the earlier forms gone). A directory of an earlier format was
/// written by an earlier build, whose entries this one does not read (docs/operations.md,
/// "Upgrades").
const FORMAT: u32 = 4;

/// The directory record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirRecord {
    pub format: u32,
    pub dir_id: DirId,
    pub node_id: NodeId,
    pub num_metadata_partitions: u32,
    pub cluster_id: Option<ClusterId>,
}

/// A replica's role in this directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// The replica Raft runs on.
    Current,
    /// Being filled by a move; never run, dropped at start if the move did not finish.
    Future,
}

/// One replica's placement record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub role: Role,
    pub incarnation: u64,
    /// 1 for a replica created here; the source's + 1 for a moved one.
    pub generation: u64,
    /// The directory a moved replica came from.
    pub moved_from: Option<DirId>,
}

fn placement_key(g: u32) -> Vec<u8> {
    let mut k = PLACEMENT_PREFIX.to_vec();
    k.extend_from_slice(&g.to_be_bytes());
    k
}

/// A directory as opened: its record and its replicas.
#[derive(Debug, Clone)]
pub struct DirState {
    pub record: DirRecord,
    pub placements: BTreeMap<u32, Placement>,
}

/// Reads a directory's record and placements, creating the record in a new directory and
/// converting a first-format one (synced). Refuses a directory of another node, another number of
/// metadata partitions or another cluster than `cluster` (when both are known).
pub fn open_dir(
    db: &Db,
    path: &std::path::Path,
    node_id: NodeId,
    num_partitions: u32,
    cluster: Option<ClusterId>,
) -> anyhow::Result<DirState> {
    let record = match db.get(Family::Raft, DIR_KEY)? {
        Some(v) => {
            let r: DirRecord =
                codec::decode(DIR_KEY, &v).with_context(|| format!("read the identity of {}", path.display()))?;
            anyhow::ensure!(
                r.format == FORMAT,
                "data directory {} has format {}, this release reads format {FORMAT} (a directory of an earlier \
                 release is not read: see \"Upgrades\" in docs/operations.md)",
                path.display(),
                r.format
            );
            r
        }
        None => {
            anyhow::ensure!(
                db.get(Family::Raft, FIRST_FORMAT_KEY)?.is_none(),
                "data directory {} has format 1, this release reads format {FORMAT} (a directory of an earlier \
                 release is not read: see \"Upgrades\" in docs/operations.md)",
                path.display()
            );
            let r = DirRecord {
                format: FORMAT,
                dir_id: *uuid::Uuid::new_v4().as_bytes(),
                node_id,
                num_metadata_partitions: num_partitions,
                cluster_id: cluster,
            };
            write_record(db, &r)?;
            tracing::info!(dir = %path.display(), id = %dir_id_hex(&r.dir_id), "new data directory");
            r
        }
    };
    anyhow::ensure!(
        record.node_id == node_id && record.num_metadata_partitions == num_partitions,
        "data directory {} belongs to node {} with {} metadata partitions; the configuration says node {} with {}",
        path.display(),
        record.node_id,
        record.num_metadata_partitions,
        node_id,
        num_partitions
    );
    if let (Some(mine), Some(theirs)) = (cluster, record.cluster_id) {
        anyhow::ensure!(
            mine == theirs,
            "data directory {} belongs to cluster {}, but this node's other directories to cluster {}",
            path.display(),
            cluster_id_hex(&theirs),
            cluster_id_hex(&mine)
        );
    }
    let mut placements = BTreeMap::new();
    for g in 0..num_partitions {
        let key = placement_key(g);
        if let Some(v) = db.get(Family::Raft, &key)? {
            placements.insert(g, codec::decode(&key, &v)?);
        }
    }
    Ok(DirState { record, placements })
}

/// Writes the identity of a data directory built offline for a new cluster (a restore from a
/// backup): its record and every replica as current with the incarnation the restore derived,
/// in one synced write. Refuses a directory that already has an identity. The incarnations must
/// be new (never those of another directory): see `raft::identity`.
pub fn create_restored(db: &Db, node_id: NodeId, incarnations: &[u64], cluster_id: ClusterId) -> anyhow::Result<()> {
    anyhow::ensure!(db.get(Family::Raft, DIR_KEY)?.is_none(), "the data directory has an identity already");
    anyhow::ensure!(incarnations.iter().all(|i| *i != 0), "a replica incarnation is never 0");
    let r = DirRecord {
        format: FORMAT,
        dir_id: *uuid::Uuid::new_v4().as_bytes(),
        node_id,
        num_metadata_partitions: incarnations.len() as u32,
        cluster_id: Some(cluster_id),
    };
    let mut b = WriteBatch::default();
    db.batch_put(&mut b, Family::Raft, DIR_KEY, &codec::encode(&r)?);
    for (g, inc) in incarnations.iter().enumerate() {
        let p = Placement { role: Role::Current, incarnation: *inc, generation: 1, moved_from: None };
        db.batch_put(&mut b, Family::Raft, &placement_key(g as u32), &codec::encode(&p)?);
    }
    db.write(b, true).context("write the restored data directory's identity")
}

/// A data directory's identity as it is stored (for inspection): the incarnations of the
/// replicas it holds as current (0 for the others).
#[derive(Debug, Clone, Serialize)]
pub struct IdentityRecord {
    pub format: u32,
    pub node_id: NodeId,
    pub num_metadata_partitions: u32,
    pub incarnations: Vec<u64>,
    pub cluster_id: Option<String>,
}

/// Reads the identity of a data directory, if it has one (offline tools).
pub fn read_identity(db: &Db) -> anyhow::Result<Option<IdentityRecord>> {
    let Some(r) = read_dir_record(db)? else { return Ok(None) };
    let mut incarnations = vec![];
    for g in 0..r.num_metadata_partitions {
        incarnations.push(match read_placement(db, g)? {
            Some(p) if p.role == Role::Current => p.incarnation,
            _ => 0,
        });
    }
    Ok(Some(IdentityRecord {
        format: r.format,
        node_id: r.node_id,
        num_metadata_partitions: r.num_metadata_partitions,
        incarnations,
        cluster_id: r.cluster_id.as_ref().map(cluster_id_hex),
    }))
}

fn write_record(db: &Db, r: &DirRecord) -> anyhow::Result<()> {
    let mut b = WriteBatch::default();
    db.batch_put(&mut b, Family::Raft, DIR_KEY, &codec::encode(r)?);
    db.write(b, true).context("write the data directory's identity")
}

/// Records the cluster id in the directory (synced).
pub fn set_cluster(db: &Db, id: ClusterId) -> anyhow::Result<()> {
    let v = db.get(Family::Raft, DIR_KEY)?.context("the data directory has no identity record")?;
    let mut r: DirRecord = codec::decode(DIR_KEY, &v)?;
    r.cluster_id = Some(id);
    write_record(db, &r)
}

/// Puts (or with `None` deletes) metadata partition `g`'s placement record in `batch`.
pub fn batch_placement(db: &Db, batch: &mut WriteBatch, g: u32, p: Option<&Placement>) -> anyhow::Result<()> {
    match p {
        Some(p) => db.batch_put(batch, Family::Raft, &placement_key(g), &codec::encode(p)?),
        None => db.batch_delete(batch, Family::Raft, &placement_key(g)),
    }
    Ok(())
}

/// Writes metadata partition `g`'s placement record alone, synced.
pub fn write_placement(db: &Db, g: u32, p: Option<&Placement>) -> anyhow::Result<()> {
    let mut b = WriteBatch::default();
    batch_placement(db, &mut b, g, p)?;
    db.write(b, true).context("write a replica's placement record")
}

/// The key ranges that hold metadata partition `g`'s replica: its state and its Raft bookkeeping.
pub fn partition_ranges(g: u32) -> Vec<crate::storage::copy::Range> {
    let (from, to) = crate::state_machine::keys::Keys::new(g).metadata_partition_range();
    let raft_from = g.to_be_bytes().to_vec();
    let raft_to = (g as u64 + 1).to_be_bytes()[4..].to_vec();
    let raft_to = if g == u32::MAX { vec![0xff; 5] } else { raft_to };
    vec![
        crate::storage::copy::Range { family: Family::State, from, to },
        crate::storage::copy::Range { family: Family::Raft, from: raft_from, to: raft_to },
    ]
}

/// Deletes metadata partition `g`'s replica from `db` — its keys and its placement record — in one
/// synced write.
pub fn delete_replica(db: &Db, g: u32) -> anyhow::Result<()> {
    let mut b = WriteBatch::default();
    for r in partition_ranges(g) {
        db.batch_delete_range(&mut b, r.family, &r.from, &r.to);
    }
    batch_placement(db, &mut b, g, None)?;
    db.write(b, true).context("delete a replica")
}

/// Whether this directory's Raft log was created (see [`mark_log`]).
pub fn log_marked(db: &Db) -> anyhow::Result<bool> {
    Ok(db.get(Family::Raft, LOG_KEY)?.is_some())
}

/// Records, synced, that this directory's Raft log exists.
pub fn mark_log(db: &Db) -> anyhow::Result<()> {
    let mut b = WriteBatch::default();
    db.batch_put(&mut b, Family::Raft, LOG_KEY, b"1");
    db.write(b, true).context("record that the Raft log exists")
}

/// Removes the mark (tests of a directory left by an earlier version).
#[cfg(test)]
pub fn unmark_log_for_tests(db: &Db) {
    let mut b = WriteBatch::default();
    db.batch_delete(&mut b, Family::Raft, LOG_KEY);
    db.write(b, true).unwrap();
}

/// Reads the directory record of `db`, if any (offline tools).
pub fn read_dir_record(db: &Db) -> anyhow::Result<Option<DirRecord>> {
    match db.get(Family::Raft, DIR_KEY)? {
        Some(v) => Ok(Some(codec::decode(DIR_KEY, &v)?)),
        None => Ok(None),
    }
}

/// Reads metadata partition `g`'s placement record in `db`, if any.
pub fn read_placement(db: &Db, g: u32) -> anyhow::Result<Option<Placement>> {
    let key = placement_key(g);
    match db.get(Family::Raft, &key)? {
        Some(v) => Ok(Some(codec::decode(&key, &v)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_another_node_shape_or_cluster_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("rocksdb")).unwrap();
        let first = open_dir(&db, dir.path(), 1, 4, None).unwrap();
        assert_eq!(open_dir(&db, dir.path(), 1, 4, None).unwrap().record.dir_id, first.record.dir_id);
        let e = open_dir(&db, dir.path(), 2, 4, None).unwrap_err();
        assert!(e.to_string().contains("belongs to node 1"), "{e}");
        let e = open_dir(&db, dir.path(), 1, 8, None).unwrap_err();
        assert!(e.to_string().contains("4 metadata partitions"), "{e}");
        set_cluster(&db, [7; 16]).unwrap();
        let e = open_dir(&db, dir.path(), 1, 4, Some([8; 16])).unwrap_err();
        assert!(e.to_string().contains("belongs to cluster 0707"), "{e}");
        open_dir(&db, dir.path(), 1, 4, Some([7; 16])).unwrap();
    }

    #[test]
    fn a_first_format_directory_is_refused_and_a_restored_one_holds_its_replicas_as_current() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("rocksdb")).unwrap();
        let mut b = WriteBatch::default();
        db.batch_put(&mut b, Family::Raft, FIRST_FORMAT_KEY, b"an earlier release's record");
        db.write(b, true).unwrap();
        let e = open_dir(&db, dir.path(), 3, 2, None).unwrap_err();
        assert!(e.to_string().contains("has format 1"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("rocksdb")).unwrap();
        create_restored(&db, 3, &[11, 12], [5; 16]).unwrap();
        assert!(create_restored(&db, 3, &[13, 14], [5; 16]).is_err(), "an identity is never overwritten");
        let s = open_dir(&db, dir.path(), 3, 2, Some([5; 16])).unwrap();
        assert_eq!(s.placements[&1].incarnation, 12);
        assert!(s.placements.values().all(|p| p.role == Role::Current));
        let id = read_identity(&db).unwrap().unwrap();
        assert_eq!((id.node_id, id.incarnations, id.format), (3, vec![11, 12], FORMAT));
    }
}
