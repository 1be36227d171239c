use super::command::ErrorCode;
use super::fixture::*;

fn setup() -> (Fixture, Vec<String>) {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    // Three files; each holds a 10-record batch of partition 0 and a 1-record one of partition 1.
    let keys = (0..3).map(|_| f.commit(vec![batch(tp(1, 0), 10), batch(tp(1, 1), 1)]).0).collect();
    (f, keys)
}

#[test]
fn minus_one_means_the_high_watermark() {
    let (mut f, _) = setup();
    assert_eq!(f.delete_records(tp(1, 0), -1, 100), Ok(30));
    assert_eq!(f.offsets(tp(1, 0)), (30, 30));
    assert!(f.find(tp(1, 0), 30, i32::MAX).batches.is_empty());
}

#[test]
fn offsets_beyond_the_high_watermark_or_negative_are_out_of_range() {
    let (mut f, _) = setup();
    for off in [31, -2, i64::MIN] {
        let r = f.delete_records(tp(1, 0), off, 100);
        assert_eq!(code(&r), ErrorCode::OffsetOutOfRange, "{off}");
    }
    assert_eq!(code(&f.delete_records(tp(7, 0), 0, 100)), ErrorCode::UnknownTopicOrPartition);
    assert_eq!(f.offsets(tp(1, 0)), (0, 30));
}

#[test]
fn an_offset_at_or_below_the_log_start_changes_nothing() {
    let (mut f, _) = setup();
    assert_eq!(f.delete_records(tp(1, 0), 15, 100), Ok(15));
    assert_eq!(f.delete_records(tp(1, 0), 5, 100), Ok(15));
    assert_eq!(f.offsets(tp(1, 0)), (15, 30));
}

#[test]
fn batches_wholly_below_go_and_release_their_files() {
    let (mut f, keys) = setup();
    f.now = 9_999;
    // 15 cuts the second batch [10, 19]: the first goes, the second stays.
    assert_eq!(f.delete_records(tp(1, 0), 15, 100), Ok(15));
    let left = f.find(tp(1, 0), 15, i32::MAX).batches;
    assert_eq!(left.iter().map(|b| b.base_offset).collect::<Vec<_>>(), [10, 20]);
    assert_eq!(code(&Err::<(), _>(f.find(tp(1, 0), 14, i32::MAX).error.unwrap())), ErrorCode::OffsetOutOfRange);
    // The first file still holds partition 1's batch.
    assert!(f.describe(&keys[0]).has_live_batches);
    assert_eq!(f.delete_records(tp(1, 1), 1, 100), Ok(1));
    let d = f.describe(&keys[0]);
    assert!(d.known && !d.has_live_batches);
    let marked = f.to_delete();
    assert_eq!(marked.len(), 1);
    assert_eq!((marked[0].object_key.as_str(), marked[0].marked_for_deletion_at), (keys[0].as_str(), 9_999));
    assert!(f.describe(&keys[1]).has_live_batches);
}

#[test]
fn a_small_budget_leaves_the_rest_for_later_commands() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let keys: Vec<String> = (0..10).map(|_| f.commit(vec![batch(tp(1, 0), 1)]).0).collect();
    assert_eq!(f.delete_records(tp(1, 0), 10, 3), Ok(10));
    // Visible at once...
    assert_eq!(f.offsets(tp(1, 0)), (10, 10));
    // ...but only 3 batches were removed so far.
    assert_eq!(f.to_delete().len(), 3);
    let r = f.retention(4);
    assert!(r.more);
    assert_eq!(r.batches_deleted, 4);
    while f.retention(4).more {}
    assert_eq!(f.to_delete().len(), 10);
    assert!(keys.iter().all(|k| !f.describe(k).has_live_batches));
}
