use super::command::{ErrorCode, FenceAnswer, Op, Outcome};
use super::fixture::*;

fn confirm(f: &mut Fixture, keys: &[&str]) -> Vec<ErrorCode> {
    let op = Op::ConfirmFilesDeleted { object_keys: keys.iter().map(|k| k.to_string()).collect() };
    let Outcome::ConfirmFilesDeleted(r) = f.apply(op) else { panic!() };
    r.iter().map(|(_, r)| code(r)).collect()
}

#[test]
fn an_unknown_file_is_not_an_error() {
    let f = Fixture::new();
    let d = f.describe("nope");
    assert!(!d.known && !d.has_live_batches);
}

#[test]
fn files_to_delete_come_oldest_first_and_limited() {
    let mut f = Fixture::new();
    let mut keys = vec![];
    for now in [30, 10, 20] {
        f.now = now;
        keys.push(f.commit(vec![]).0);
    }
    let marked = f.to_delete();
    assert_eq!(marked.iter().map(|m| m.marked_for_deletion_at).collect::<Vec<_>>(), [10, 20, 30]);
    assert_eq!(marked[0].object_key, keys[1]);
    let two = f.sm.files_to_delete(&f.db.read(), 2).unwrap();
    assert_eq!(two.len(), 2);
    assert!(f.sm.files_to_delete(&f.db.read(), 0).unwrap().is_empty());
}

#[test]
fn confirming_deletion_forgets_marked_files_refuses_live_ones_and_is_idempotent() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let live = f.commit(vec![batch(tp(1, 0), 1)]).0;
    let dead = f.commit(vec![]).0;
    assert_eq!(
        confirm(&mut f, &[&dead, &live, "never-seen"]),
        [ErrorCode::None, ErrorCode::InvalidRequest, ErrorCode::None]
    );
    assert!(!f.describe(&dead).known);
    assert!(f.describe(&live).has_live_batches);
    assert!(f.to_delete().is_empty());
    assert_eq!(confirm(&mut f, &[&dead]), [ErrorCode::None]);
}

#[test]
fn fencing_answers_live_released_or_fenced_and_records_a_tombstone_for_an_unknown_key() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let live = f.commit(vec![batch(tp(1, 0), 1)]).0;
    f.now = 500;
    let released = f.commit(vec![]).0;
    f.now = 900;
    let r = f.fence(&[&live, &released, "never-seen"]);
    assert_eq!(
        r,
        [
            Ok(FenceAnswer::Live),
            Ok(FenceAnswer::Released { marked_at: 500 }),
            Ok(FenceAnswer::Fenced { fenced_at: 900 })
        ]
    );
    // Fencing again changes nothing: the first fence time stays.
    f.now = 1_000;
    assert_eq!(f.fence(&["never-seen"]), [Ok(FenceAnswer::Fenced { fenced_at: 900 })]);
    // Live and released files are left as they were.
    assert!(f.describe(&live).has_live_batches);
    assert_eq!(f.to_delete().len(), 1);
    assert!(!f.describe("never-seen").known, "a tombstone is not a file");
}

#[test]
fn a_commit_that_reaches_the_log_after_the_fence_is_refused_whole_and_records_nothing() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    f.fence(&["late"]);
    let r = f.commit_as("late", vec![batch(tp(1, 0), 2), batch(tp(1, 0), 3)]);
    assert!(r.iter().all(|r| code(r) == ErrorCode::KafkaStorageError), "{r:?}");
    assert!(r[0].as_ref().unwrap_err().message.contains("produce again"));
    assert!(ErrorCode::KafkaStorageError.retriable());
    assert_eq!(f.offsets(tp(1, 0)), (0, 0), "nothing appended");
    assert!(!f.describe("late").known, "nothing recorded");
    assert!(f.to_delete().is_empty());
    // And the fence still holds for the next attempt.
    assert_eq!(f.fence(&["late"]), [Ok(FenceAnswer::Fenced { fenced_at: f.now })]);
}

#[test]
fn invalid_keys_are_not_fenced() {
    let mut f = Fixture::new();
    let long = "k".repeat(2_000);
    let r = f.fence(&["", &long]);
    assert!(r.iter().all(|r| code(r) == ErrorCode::InvalidRequest));
}

#[test]
fn a_confirmed_deletion_leaves_a_tombstone_that_refuses_a_late_repeat_of_the_commit() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let (key, first) = f.commit(vec![batch(tp(1, 0), 2)]);
    assert_eq!(first[0].as_ref().unwrap().assigned_base_offset, 0);
    f.delete_records(tp(1, 0), -1, 100).unwrap();
    f.now += 10;
    assert_eq!(f.fence(&[&key]), [Ok(FenceAnswer::Released { marked_at: f.now - 10 })]);
    assert_eq!(f.confirm(&[&key]), [ErrorCode::None]);
    let confirmed_at = f.now;
    f.now += 10;
    let again = f.commit_as(&key, vec![batch(tp(1, 0), 2)]);
    assert_eq!(code(&again[0]), ErrorCode::KafkaStorageError);
    assert_eq!(f.offsets(tp(1, 0)), (2, 2), "nothing appended after the deletion");
    assert_eq!(f.fence(&[&key]), [Ok(FenceAnswer::Fenced { fenced_at: confirmed_at })]);
}

#[test]
fn tombstones_are_forgotten_after_their_retention_oldest_first_within_the_budget() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    for (at, key) in [(100, "a"), (200, "b"), (300, "c")] {
        f.now = at;
        f.fence(&[key]);
    }
    f.now = 1_250;
    // Retention 1000: "a" (100) and "b" (200) are old enough, "c" (300) is not; budget 1: one at a time.
    let r = f.retention_full(1, -1, 1_000);
    assert_eq!((r.fenced_forgotten, r.more), (1, true));
    let commit_of = |f: &mut Fixture, key: &str| code(&f.commit_as(key, vec![batch(tp(1, 0), 1)])[0]);
    let r = f.retention_full(1, -1, 1_000);
    assert_eq!(r.fenced_forgotten, 1);
    let r = f.retention_full(10, -1, 1_000);
    assert_eq!((r.fenced_forgotten, r.more), (0, false));
    assert_eq!(commit_of(&mut f, "a"), ErrorCode::None, "forgotten: the key is usable again");
    assert_eq!(commit_of(&mut f, "c"), ErrorCode::KafkaStorageError, "still fenced");
    // Negative retention: never forgotten.
    f.now = i64::MAX / 2;
    assert_eq!(f.retention_full(10, -1, -1).fenced_forgotten, 0);
    assert_eq!(commit_of(&mut f, "c"), ErrorCode::KafkaStorageError);
    assert_eq!(f.retention_full(10, -1, 1_000).fenced_forgotten, 1);
    assert_eq!(commit_of(&mut f, "c"), ErrorCode::None);
}
