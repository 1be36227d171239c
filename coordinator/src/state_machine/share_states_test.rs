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
    assert_eq!((first.version, first.updated_ms), (1, f.now));
    // Another broker that read nothing, or an older version, is fenced: no record handed out twice.
    let err = store(&mut f, "g", 0, record(0, &[(0, 9, 1)], "b"), 0).unwrap_err();
    assert_eq!(err.code, ErrorCode::FencedStateEpoch);
    store(&mut f, "g", 0, record(10, &[], "b"), 1).unwrap();
    assert_eq!(store(&mut f, "g", 0, record(0, &[], "a"), 1).unwrap_err().code, ErrorCode::FencedStateEpoch);
    let states = f.sm.share_states(&f.db.read(), "g").unwrap();
    assert_eq!(states.len(), 1);
    assert_eq!((states[0].1.start_offset, states[0].1.version, states[0].1.owner.as_str()), (10, 2, "b"));
    // Another group's state of the same partition is its own.
    store(&mut f, "h", 0, record(0, &[], "a"), 0).unwrap();
    assert_eq!(f.sm.share_states(&f.db.read(), "g").unwrap().len(), 1);
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
    assert!(f.sm.share_states(&f.db.read(), "g").unwrap().is_empty());
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
    let left = f.sm.share_states(&f.db.read(), "g").unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, tp(2, 0));
    let Outcome::Groups(r) = f.apply(Op::DeleteGroups { group_ids: vec!["g".into()] }) else { panic!("wrong outcome") };
    // A group is deleted with its share states, as Kafka's DeleteGroups deletes its share state.
    r[0].clone().unwrap();
    assert!(f.sm.share_states(&f.db.read(), "g").unwrap().is_empty());
}
