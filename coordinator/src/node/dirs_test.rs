//! A data directory's Raft log at start: moved out of RocksDB (upgrade), refused when missing,
//! cleared of replicas not placed there.

use std::sync::Arc;

use super::dirs;
use super::NodeConfig;
use crate::raft::home::DataDir;
use crate::raft::seglog::SegLog;
use crate::storage::{Db, Family, WriteBatch};

fn config(dir: &std::path::Path) -> NodeConfig {
    let mut c: NodeConfig =
        toml::from_str(&format!("node_id = 1\nlisten = \"127.0.0.1:1\"\ndata_dir = {:?}", dir.display().to_string()))
            .unwrap();
    c.num_metadata_partitions = 2;
    c.raft.log_segment_bytes = 1 << 20;
    c
}

/// A log key as versions before the segmented log wrote it.
fn old_log_key(g: u32, index: u64) -> Vec<u8> {
    let mut k = g.to_be_bytes().to_vec();
    k.push(b'L');
    k.extend_from_slice(&index.to_be_bytes());
    k
}

fn entry(index: u64) -> crate::raft::Entry {
    use openraft::entry::RaftEntry;
    crate::raft::Entry::new_blank(crate::raft::LogId::new(
        openraft::vote::leader_id_adv::LeaderId { term: 3, node_id: 1 },
        index,
    ))
}

#[test]
fn a_log_kept_in_rocksdb_moves_to_the_segmented_log_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path());
    drop(dirs::open(&c, Arc::default()).unwrap());
    // As an earlier version would have left it: entries of metadata partition 1 in RocksDB, no
    // segments.
    {
        let db = Db::open(&tmp.path().join("rocksdb")).unwrap();
        let mut b = WriteBatch::default();
        for i in 5..=9 {
            db.batch_put(&mut b, Family::Raft, &old_log_key(1, i), &crate::storage::codec::encode(&entry(i)).unwrap());
        }
        db.write(b, true).unwrap();
        crate::raft::placement::unmark_log_for_tests(&db);
    }
    std::fs::remove_dir_all(DataDir::log_path(tmp.path())).unwrap();
    let opened = dirs::open(&c, Arc::default()).unwrap();
    let d = &opened.dirs[0];
    assert_eq!(d.log.bounds(1), Some((5, 9)));
    let (_, got) = d.log.read(1, 5, 10).unwrap();
    let decoded: Vec<crate::raft::Entry> =
        got.iter().map(|b| crate::storage::codec::decode(b"e", b).unwrap()).collect();
    assert_eq!(decoded, (5..=9).map(entry).collect::<Vec<_>>());
    let (from, to) = (old_log_key(1, 0), old_log_key(1, u64::MAX));
    assert!(d.db.last_in(Family::Raft, &from, &to).unwrap().is_none(), "the old keys are deleted");
}

#[test]
fn a_missing_raft_log_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path());
    let opened = dirs::open(&c, Arc::default()).unwrap();
    opened.dirs[0].log.append(0, &[(1, vec![1, 2, 3])]).unwrap();
    opened.dirs[0].log.sync().unwrap();
    drop(opened);
    std::fs::remove_dir_all(DataDir::log_path(tmp.path())).unwrap();
    let e = dirs::open(&c, Arc::default()).err().expect("refused");
    assert!(format!("{e:#}").contains("is missing or empty"), "{e:#}");
}

#[test]
fn records_of_replicas_not_placed_in_a_directory_are_dropped_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path());
    drop(dirs::open(&c, Arc::default()).unwrap());
    {
        let log = SegLog::open(&DataDir::log_path(tmp.path()), 1 << 20).unwrap();
        log.append(7, &[(1, vec![1]), (2, vec![2])]).unwrap();
        log.sync().unwrap();
    }
    let opened = dirs::open(&c, Arc::default()).unwrap();
    assert_eq!(opened.dirs[0].log.bounds(7), None);
    assert!(!opened.dirs[0].log.partitions().contains(&7));
}
