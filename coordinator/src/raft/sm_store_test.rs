//! `SmStore` applying entries through its hot-key cache, across apply calls and snapshot installs.

use openraft::entry::RaftEntry;
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};

use super::SmStore;
use crate::raft::{Entry, TypeConfig};
use crate::state_machine::command::OBJECT_FORMAT_WAL_MULTI_SEGMENT;
use crate::state_machine::fixture::{batch, topic_id, tp};
use crate::state_machine::*;

fn open(dir: &std::path::Path) -> SmStore {
    SmStore::open(crate::raft::home::test_home(dir, 0), StateMachine::new(0, 1)).expect("open state machine")
}

fn entry(index: u64, op: Op) -> Entry {
    let log_id = openraft::testing::log_id::<TypeConfig>(1, 1, index);
    Entry::new_normal(log_id, Command { now_ms: 1_000_000 + index as i64, op })
}

fn create(index: u64) -> Entry {
    let topic = CreateTopic {
        topic_id: topic_id(1),
        name: "t".to_string(),
        num_partitions: 1,
        retention_ms: None,
        retention_bytes: None,
    };
    entry(index, Op::CreatePartitions(vec![topic.into()]))
}

/// A file of one batch of 10 records on partition `t`-0.
fn commit(index: u64) -> Entry {
    let file = CommitFile {
        deadline_ms: None,
        object_key: format!("wal/{index}"),
        object_format: OBJECT_FORMAT_WAL_MULTI_SEGMENT,
        file_size: 100,
        uploader_broker_id: 1,
        owner_ids: vec![0],
        batches: vec![batch(tp(1, 0), 10)],
    };
    entry(index, Op::CommitFile(file))
}

/// One apply call.
async fn apply(sm: &mut SmStore, entries: Vec<Entry>) {
    let items = entries.into_iter().map(|e| Ok((e, None)));
    sm.apply(futures_util::stream::iter(items)).await.expect("apply");
}

fn high_watermark(sm: &SmStore) -> i64 {
    sm.state_machine()
        .list_offsets(&sm.home().current().db.read(), &tp(1, 0), -1, false)
        .expect("read")
        .expect("listed")
        .offset
}

fn digest(sm: &SmStore) -> [u8; 32] {
    sm.state_machine().digest(&sm.home().current().db.read()).expect("digest")
}

#[tokio::test]
async fn installing_a_snapshot_empties_the_hot_key_cache() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut a, mut b) = (open(dir_a.path()), open(dir_b.path()));
    // A stops at offset 10 and snapshots there; B goes on to 20, its cache holding that.
    apply(&mut a, vec![create(1), commit(2)]).await;
    let snap = a.get_snapshot_builder().await.build_snapshot().await.expect("build snapshot");
    apply(&mut b, vec![create(1), commit(2)]).await;
    apply(&mut b, vec![commit(3)]).await;
    assert_eq!(high_watermark(&b), 20);

    b.install_snapshot(&snap.meta, snap.snapshot).await.expect("install");
    assert_eq!(high_watermark(&b), 10);
    // The next commit appends after the snapshot's state, not the cached one.
    apply(&mut a, vec![commit(3)]).await;
    apply(&mut b, vec![commit(3)]).await;
    assert_eq!(high_watermark(&b), 20);
    assert_eq!(digest(&a), digest(&b));
}

#[tokio::test]
async fn entries_applied_in_one_call_or_one_by_one_end_in_the_same_state() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut a, mut b) = (open(dir_a.path()), open(dir_b.path()));
    apply(&mut a, vec![create(1), commit(2), commit(3), commit(4)]).await;
    for e in [create(1), commit(2), commit(3), commit(4)] {
        apply(&mut b, vec![e]).await;
    }
    assert_eq!(high_watermark(&a), 30);
    assert_eq!(digest(&a), digest(&b));
    let applied = |sm: &mut SmStore| futures_util::FutureExt::now_or_never(sm.applied_state()).unwrap().unwrap();
    assert_eq!(applied(&mut a), applied(&mut b));
    assert_eq!(applied(&mut a).0.map(|l| l.index), Some(4));
}
