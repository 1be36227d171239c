//! Share-partition states: the compare-and-set on the version, the shape checks, deletion with
//! the topic or the group.

use super::fixture::*;
use super::{ErrorCode, Op, Outcome, ShareRange, ShareStateRecord};

fn record(start: i64, ranges: &[(i64, i64, i8)], owner: &str) -> ShareStateRecord {
    ShareStateRecord {
        state_epoch: 0,
        start_offset: start,
        ranges: ranges
            .iter()
            .map(|&(first, last, state)| ShareRange {
                first,
                last,
                state,
                delivery_count: 1,
                member_id: "m".into(),
                lock_until_ms: 30_000,
            })
            .collect(),
        version: 77,
        updated_ms: 5,
        owner: owner.into(),
    }
}

fn store(
    f: &mut Fixture,
    group: &str,
    p: i32,
    r: ShareStateRecord,
    expected: u64,
) -> Result<ShareStateRecord, super::Failure> {
    let op = Op::StoreShareState { group_id: group.into(), tp: tp(1, p), record: r, expected_version: expected };
    let Outcome::ShareState(r) = f.apply(op) else { panic!("wrong outcome") };
    r
}

#[test]
fn a_share_state_is_stored_only_at_the_version_its_writer_last_saw() {
    let mut f = Fixture::new();
    let first = store(&mut f, "g", 0, record(0, &[(0, 9, 1)], "a"), 0).unwrap();
    assert_eq!(first.updated_ms, f.now);
    // Another broker that read nothing, or an older version, is fenced: no record handed out twice.
    let err = store(&mut f, "g", 0, record(0, &[(0, 9, 1)], "b"), 0).unwrap_err();
    assert_eq!(err.code, ErrorCode::FencedStateEpoch);
    let v = first.version;
    store(&mut f, "g", 0, record(10, &[], "b"), v).unwrap();
    assert_eq!(store(&mut f, "g", 0, record(0, &[], "a"), v).unwrap_err().code, ErrorCode::FencedStateEpoch);
    let states = f.sm.share_states(&f.db.read(), "g", None).unwrap();
    assert_eq!(states.len(), 1);
    assert_eq!((states[0].1.start_offset, states[0].1.owner.as_str()), (10, "b"));
    assert_eq!(states[0].1.version, v + 1);
    assert_eq!(f.sm.share_states(&f.db.read(), "g", Some(&tp(1, 0))).unwrap().len(), 1);
    assert!(f.sm.share_states(&f.db.read(), "g", Some(&tp(1, 1))).unwrap().is_empty());
    // Another group's state of the same partition is its own.
    store(&mut f, "h", 0, record(0, &[], "a"), 0).unwrap();
    assert_eq!(f.sm.share_states(&f.db.read(), "g", None).unwrap().len(), 1);
}

#[test]
fn a_share_state_with_overlapping_or_unknown_ranges_is_refused() {
    let mut f = Fixture::new();
    for bad in [
        record(5, &[(4, 6, 1)], "a"),            // below the start offset
        record(0, &[(0, 5, 1), (5, 6, 0)], "a"), // overlapping
        record(0, &[(3, 2, 1)], "a"),            // empty range
        record(0, &[(0, 1, 3)], "a"),            // no such state
        record(-1, &[], "a"),
    ] {
        assert_eq!(store(&mut f, "g", 0, bad, 0).unwrap_err().code, ErrorCode::InvalidRequest);
    }
    assert!(f.sm.share_states(&f.db.read(), "g", None).unwrap().is_empty());
}

#[test]
fn deleting_a_topics_share_states_or_the_group_removes_them() {
    let mut f = Fixture::new();
    store(&mut f, "g", 0, record(0, &[], "a"), 0).unwrap();
    store(&mut f, "g", 1, record(0, &[], "a"), 0).unwrap();
    let other =
        Op::StoreShareState { group_id: "g".into(), tp: tp(2, 0), record: record(3, &[], "a"), expected_version: 0 };
    f.apply(other);
    let Outcome::ShareStatesDeleted(r) =
        f.apply(Op::DeleteShareStates { group_id: "g".into(), topic_ids: vec![tp(1, 0).topic_id] })
    else {
        panic!("wrong outcome")
    };
    r.unwrap();
    let left = f.sm.share_states(&f.db.read(), "g", None).unwrap();
    assert_eq!(left.len(), 1);
    // Created again later: a broker's copy of the deleted state (its version) is fenced.
    f.now += 1;
    let again = store(&mut f, "g", 0, record(0, &[], "a"), 0).unwrap();
    assert!(again.version > 1);
    assert_eq!(store(&mut f, "g", 0, record(0, &[], "a"), 1).unwrap_err().code, ErrorCode::FencedStateEpoch);
    assert_eq!(left[0].0, tp(2, 0));
    let Outcome::Groups(r) = f.apply(Op::DeleteGroups { group_ids: vec!["g".into()] }) else { panic!("wrong outcome") };
    // A group is deleted with its share states, as Kafka's DeleteGroups deletes its share state.
    r[0].clone().unwrap();
    assert!(f.sm.share_states(&f.db.read(), "g", None).unwrap().is_empty());
}

#[test]
fn a_record_locked_by_one_member_is_not_given_to_another_before_its_lock_expires() {
    let mut f = Fixture::new();
    f.now = 1_000;
    let mut r = record(0, &[(0, 9, 1)], "a");
    r.ranges[0].lock_until_ms = 5_000;
    let v = store(&mut f, "g", 0, r.clone(), 0).unwrap().version;
    // Another broker, its clock ahead, thinks the lock expired and gives [5, 9] to member n.
    let mut stolen = r.clone();
    stolen.ranges = vec![stolen.ranges[0].clone(), stolen.ranges[0].clone()];
    stolen.ranges[0].last = 4;
    stolen.ranges[1].first = 5;
    stolen.ranges[1].member_id = "n".into();
    f.now = 4_999;
    assert_eq!(store(&mut f, "g", 0, stolen.clone(), v).unwrap_err().code, ErrorCode::InvalidRecordState);
    // The same member's changes, and anything once the lock expired, are taken.
    assert!(store(&mut f, "g", 0, r.clone(), v).is_ok());
    f.now = 5_000;
    assert!(store(&mut f, "g", 0, stolen, v + 1).is_ok());
}
