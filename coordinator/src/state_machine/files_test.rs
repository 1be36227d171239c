use super::command::{ErrorCode, Op, Outcome};
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
