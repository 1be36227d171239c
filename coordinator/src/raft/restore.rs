//! Building one metadata partition's stored state offline, for a new cluster restored from a
//! backup.
//!
//! Owns: writing a snapshot's pairs into an empty data directory as the metadata partition's state,
//! with the snapshot's applied log id and the *new* cluster's membership, a vote at the applied
//! entry's term (so the new cluster's first leader is elected in a later term and its entries
//! follow the restored log id in log order), and a snapshot file of that state — what a node that
//! snapshotted and purged its log behind the applied entry would hold. openraft then starts the
//! metadata partition from it like any restarted replica. It must not run next to a live node on
//! the same directory, nor decide identities (the caller passes the membership, with new
//! incarnations). A damaged stream is an error naming its offset, never a panic (the snapshot
//! reader is total on hostile bytes); pairs are written in batches before the stream's checksum is
//! known, so callers check the stream whole first (`Backup::verify`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};
use std::path::Path;

use super::{io_err, keys, snapshot, LogId, NodeId, Replica, SnapshotMeta, StoredMembership, Vote};
use crate::state_machine::StateMachine;
use crate::storage::{codec, Db, Family, WriteBatch};

/// Bytes of pairs per write batch.
const BATCH_BYTES: usize = 4 << 20;

/// What a restored metadata partition holds.
#[derive(Debug, Clone)]
pub struct RestoredPartition {
    pub applied: Option<LogId>,
    /// The restored state's digest (`StateMachine::digest`), to compare with the backup's.
    pub digest: [u8; 32],
    pub keys: u64,
}

/// Reads one snapshot (the format of [`snapshot`]) from `r` and makes it the state of metadata
/// partition `sm.metadata_partition()` in `db` for node `node_id`, with `members` (all voters) as
/// the membership; writes the metadata partition's snapshot file under `data_dir`. The metadata
/// partition must have nothing in `db` yet. Synced. `offset` is where the stream starts in its file
/// (errors name offsets of the file).
pub fn restore_partition(
    db: &Db,
    data_dir: &Path,
    sm: &StateMachine,
    node_id: NodeId,
    members: &BTreeMap<NodeId, Replica>,
    r: &mut impl Read,
    offset: u64,
) -> io::Result<RestoredPartition> {
    let g = sm.metadata_partition();
    let k = crate::state_machine::keys::Keys::new(g);
    let (from, to) = k.metadata_partition_range();
    let applied_key = k.applied();
    let mut nothing_yet = true;
    crate::storage::KvRead::scan(&db.read(), &from, &to, &mut |_, _| {
        nothing_yet = false;
        Ok(false)
    })
    .map_err(io_err)?;
    if !nothing_yet {
        return Err(io::Error::other(format!("metadata partition {g} has state in this data directory already")));
    }

    let mut batch = WriteBatch::default();
    let (mut bytes, mut count) = (0, 0u64);
    let meta = snapshot::read_from_at(r, offset, &mut |key, value| {
        if !(key >= from.as_slice() && key < to.as_slice()) || key == applied_key.as_slice() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a key of the copy of metadata partition {g} is not one of its state keys"),
            ));
        }
        db.batch_put(&mut batch, Family::State, key, value);
        bytes += key.len() + value.len();
        count += 1;
        if bytes >= BATCH_BYTES {
            db.write(std::mem::take(&mut batch), false).map_err(io_err)?;
            bytes = 0;
        }
        Ok(())
    })?;
    let applied = meta.last_log_id;
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let membership = openraft::Membership::new(vec![voters], members.clone()).map_err(io_err)?;
    let stored = StoredMembership::new(applied, membership);
    db.batch_put(&mut batch, Family::State, &applied_key, &codec::encode(&(applied, stored.clone())).map_err(io_err)?);
    if let Some(l) = applied {
        // Not a vote for anyone of the new cluster at a term it will use: its elections start at
        // the next term, above every restored entry's.
        let vote = Vote::new(l.leader_id.term, node_id);
        db.batch_put(&mut batch, Family::Raft, &keys::vote(g), &codec::encode(&vote).map_err(io_err)?);
    }
    db.write(batch, true).map_err(io_err)?;

    let view = db.read();
    let digest = sm.digest(&view).map_err(io_err)?;
    let new_meta = SnapshotMeta { last_log_id: applied, last_membership: stored };
    if applied.is_some() {
        snapshot::write(
            &view,
            &from,
            &to,
            &|key| key == applied_key.as_slice(),
            &new_meta,
            &snapshot::partition_dir(data_dir, g),
        )?;
    }
    Ok(RestoredPartition { applied, digest, keys: count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::LogId;
    use crate::storage::{KvRead, Txn};

    #[test]
    fn a_restored_group_has_the_copy_s_state_the_new_members_and_a_vote_at_its_term() {
        let dir = tempfile::tempdir().unwrap();
        let source = Db::open(&dir.path().join("source")).unwrap();
        let sm = StateMachine::new(2, 4);
        let (from, to) = crate::state_machine::keys::Keys::new(2).metadata_partition_range();
        let mut t = Txn::new(&source);
        for i in 0..300u32 {
            let mut k = from.clone();
            k.push(b'T');
            k.extend_from_slice(&i.to_be_bytes());
            t.put(k, vec![7; 30]);
        }
        t.commit(false).unwrap();
        let applied = LogId::new(openraft::vote::leader_id_adv::LeaderId { term: 5, node_id: 2 }, 77);
        let meta = SnapshotMeta { last_log_id: Some(applied), last_membership: StoredMembership::default() };
        let copy = snapshot::write_to(&source.read(), &from, &to, &|_| false, &meta, Vec::new()).unwrap();

        let target_dir = dir.path().join("target");
        let target = Db::open(&target_dir.join("rocksdb")).unwrap();
        let members: BTreeMap<NodeId, Replica> =
            (1..=3).map(|n| (n, Replica::new(format!("h{n}:1"), 100 + n))).collect();
        let got = restore_partition(&target, &target_dir, &sm, 3, &members, &mut copy.as_slice(), 0).unwrap();
        assert_eq!((got.applied, got.keys), (Some(applied), 300));
        assert_eq!(got.digest, sm.digest(&source.read()).unwrap());

        let applied_key = crate::state_machine::keys::Keys::new(2).applied();
        let (l, m): (Option<LogId>, StoredMembership) =
            codec::decode(&applied_key, &target.read().get(&applied_key).unwrap().unwrap()).unwrap();
        assert_eq!(l, Some(applied));
        assert_eq!(m.membership().voter_ids().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(m.membership().get_node(&2), Some(&Replica::new("h2:1", 102)));
        let vote: Vote = codec::decode(b"v", &target.get(Family::Raft, &keys::vote(2)).unwrap().unwrap()).unwrap();
        assert_eq!(vote, Vote::new(5, 3));
        let file = snapshot::newest(&snapshot::partition_dir(&target_dir, 2)).unwrap().expect("a snapshot file");
        assert_eq!(snapshot::verify(&file.path).unwrap().last_log_id, Some(applied));

        // A metadata partition that has state is not restored over.
        let e = restore_partition(&target, &target_dir, &sm, 3, &members, &mut copy.as_slice(), 0).unwrap_err();
        assert!(e.to_string().contains("has state"), "{e}");
        // Keys of another metadata partition are refused.
        let other = StateMachine::new(1, 4);
        let e = restore_partition(&target, &target_dir, &other, 3, &members, &mut copy.as_slice(), 0).unwrap_err();
        assert!(e.to_string().contains("not one of its state keys"), "{e}");
    }

    #[test]
    fn a_damaged_copy_is_an_error_naming_its_offset_and_restores_nothing() {
        use crate::raft::snapshot::tests::{damage, flip, offset_named};
        let dir = tempfile::tempdir().unwrap();
        let source = Db::open(&dir.path().join("source")).unwrap();
        let sm = StateMachine::new(2, 4);
        let (from, to) = crate::state_machine::keys::Keys::new(2).metadata_partition_range();
        let mut t = Txn::new(&source);
        for i in 0..10u32 {
            let mut k = from.clone();
            k.push(b'T');
            k.extend_from_slice(&i.to_be_bytes());
            t.put(k, vec![7; 5]);
        }
        t.commit(false).unwrap();
        let applied = LogId::new(openraft::vote::leader_id_adv::LeaderId { term: 5, node_id: 2 }, 77);
        let meta = SnapshotMeta { last_log_id: Some(applied), last_membership: StoredMembership::default() };
        let copy = snapshot::write_to(&source.read(), &from, &to, &|_| false, &meta, Vec::new()).unwrap();
        let target_dir = dir.path().join("target");
        let target = Db::open(&target_dir.join("rocksdb")).unwrap();
        let members: BTreeMap<NodeId, Replica> = (1..=3).map(|n| (n, Replica::new(format!("h{n}:1"), n))).collect();
        let mut rng = damage(0x5851_f42d_4c95_7f2d);
        let cuts = (0..copy.len()).map(|cut| (copy[..cut].to_vec(), format!("cut at {cut}")));
        let flips: Vec<(Vec<u8>, String)> = (0..300)
            .map(|_| {
                let (at, mask) = flip(&mut rng, copy.len());
                let mut bad = copy.clone();
                bad[at] ^= mask;
                (bad, format!("byte {at} ^ {mask:#04x}"))
            })
            .collect();
        for (bytes, what) in cuts.chain(flips) {
            let e = restore_partition(&target, &target_dir, &sm, 3, &members, &mut bytes.as_slice(), 500)
                .err()
                .unwrap_or_else(|| panic!("{what}: restored"));
            let at = offset_named(&e);
            assert!((500..=500 + bytes.len() as u64).contains(&at), "{what}: {e}");
        }
        // Nothing of the damaged copies was kept: the good one restores.
        let got = restore_partition(&target, &target_dir, &sm, 3, &members, &mut copy.as_slice(), 0).unwrap();
        assert_eq!(got.keys, 10);
    }
}
