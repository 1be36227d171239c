//! A KIP-848 group through heartbeats as librdkafka sends them: joins, revocation before
//! assignment, leaves, static members, fencing and commits.

use diskless_proto::ErrorCode;

use super::assignor::{count, Assignment, TopicId};
use super::group::{validate, Catalog, Group, Heartbeat};

const FOO: TopicId = [3; 16];

fn catalog() -> Catalog {
    [("foo".to_string(), (FOO, 4))].into()
}

fn join(id: &str) -> Heartbeat {
    Heartbeat {
        version: 1,
        member_id: id.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 300_000,
        subscribed_names: Some(vec!["foo".into()]),
        subscribed_regex: Some(String::new()),
        owned: Some(Assignment::new()),
        ..Heartbeat::default()
    }
}

fn beat(id: &str, epoch: i32, owned: Option<Assignment>) -> Heartbeat {
    Heartbeat {
        version: 1,
        member_id: id.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned,
        ..Heartbeat::default()
    }
}

#[test]
fn a_second_member_gets_partitions_only_after_the_first_revoked_them() {
    let c = catalog();
    let mut g = Group::default();
    let a = g.heartbeat(&join("a"), &c).unwrap();
    assert_eq!((a.member_epoch, a.assignment.as_ref().map(count)), (1, Some(4)));
    let b = g.heartbeat(&join("b"), &c).unwrap();
    assert_eq!(b.member_epoch, 2);
    assert_eq!(b.assignment.as_ref().map(count), Some(0), "b waits: a still owns its target");
    // a's plain heartbeat: keep two, revoke two, still epoch 1.
    let a2 = g.heartbeat(&beat("a", 1, None), &c).unwrap();
    let kept = a2.assignment.clone().unwrap();
    assert_eq!((a2.member_epoch, count(&kept)), (1, 2));
    // b still waits; a acknowledges with what it owns now, and moves to epoch 2.
    assert_eq!(g.heartbeat(&beat("b", 2, None), &c).unwrap().assignment, None);
    let a3 = g.heartbeat(&beat("a", 1, Some(kept.clone())), &c).unwrap();
    assert_eq!(a3.member_epoch, 2);
    let b2 = g.heartbeat(&beat("b", 2, None), &c).unwrap();
    let theirs = b2.assignment.unwrap();
    assert_eq!(count(&theirs), 2);
    assert!(theirs[&FOO].is_disjoint(&kept[&FOO]), "no partition is owned twice");
    assert_eq!(super::group::state_name(&g), "Stable");
    // Commits: the member's epoch, else STALE_MEMBER_EPOCH; strangers UNKNOWN_MEMBER_ID.
    assert_eq!(g.check_commit("a", 2), Ok(()));
    assert_eq!(Group::default().check_commit("", -1), Ok(()), "an admin commit to an empty group");
    assert_eq!(g.check_commit("a", 1), Err(ErrorCode::StaleMemberEpoch));
    assert_eq!(g.check_commit("z", 2), Err(ErrorCode::UnknownMemberId));
    // b leaves: epoch 3, a gets everything back.
    assert_eq!(g.heartbeat(&beat("b", -1, None), &c).unwrap().member_epoch, -1);
    let a4 = g.heartbeat(&beat("a", 2, None), &c).unwrap();
    assert_eq!((a4.member_epoch, a4.assignment.as_ref().map(count)), (3, Some(4)));
}

#[test]
fn epochs_ahead_or_unknown_are_fenced_and_a_lost_answer_is_tolerated() {
    let c = catalog();
    let mut g = Group::default();
    g.heartbeat(&join("a"), &c).unwrap();
    assert_eq!(g.heartbeat(&beat("a", 5, None), &c).unwrap_err().code, ErrorCode::FencedMemberEpoch);
    assert_eq!(g.heartbeat(&beat("x", 1, None), &c).unwrap_err().code, ErrorCode::UnknownMemberId);
    g.heartbeat(&join("b"), &c).unwrap();
    let a = g.heartbeat(&beat("a", 1, None), &c).unwrap();
    let kept = a.assignment.unwrap();
    g.heartbeat(&beat("a", 1, Some(kept.clone())), &c).unwrap();
    // The answer moving a to epoch 2 was lost: epoch 1 with what it owns is taken.
    assert_eq!(g.heartbeat(&beat("a", 1, Some(kept)), &c).unwrap().member_epoch, 2);
    // A rejoin with epoch 0 is taken (Kafka 4.2's rule): it keeps its place.
    assert_eq!(g.heartbeat(&join("a"), &c).unwrap().member_epoch, 2);
}

#[test]
fn a_static_member_leaving_for_a_while_keeps_its_partitions_for_its_next_incarnation() {
    let c = catalog();
    let mut g = Group::default();
    let s = Heartbeat { instance_id: Some("i-1".into()), ..join("s1") };
    let first = g.heartbeat(&s, &c).unwrap().assignment.unwrap();
    let leave = Heartbeat { instance_id: Some("i-1".into()), ..beat("s1", -2, None) };
    assert_eq!(g.heartbeat(&leave, &c).unwrap().member_epoch, -2);
    // Another process with the same instance id takes its place and its partitions.
    let again = Heartbeat { instance_id: Some("i-1".into()), ..join("s2") };
    let answer = g.heartbeat(&again, &c).unwrap();
    assert_eq!(answer.assignment, Some(first));
    assert!(!g.members.contains_key("s1"));
    // While it is in the group, the instance id is taken.
    let third = Heartbeat { instance_id: Some("i-1".into()), ..join("s3") };
    assert_eq!(g.heartbeat(&third, &c).unwrap_err().code, ErrorCode::UnreleasedInstanceId);
}

#[test]
fn requests_are_validated_as_kafka_validates_them() {
    assert_eq!(validate(&join("a")), Ok(()));
    let code = |hb: Heartbeat| validate(&hb).unwrap_err().code;
    assert_eq!(code(Heartbeat { member_id: String::new(), ..join("a") }), ErrorCode::InvalidRequest);
    assert_eq!(code(Heartbeat { rebalance_timeout_ms: -1, ..join("a") }), ErrorCode::InvalidRequest);
    assert_eq!(code(Heartbeat { owned: None, ..join("a") }), ErrorCode::InvalidRequest);
    assert_eq!(
        code(Heartbeat { subscribed_names: None, subscribed_regex: None, ..join("a") }),
        ErrorCode::InvalidRequest
    );
    assert_eq!(code(Heartbeat { server_assignor: Some("sticky".into()), ..join("a") }), ErrorCode::UnsupportedAssignor);
    assert_eq!(
        code(Heartbeat { subscribed_regex: Some("(".into()), ..join("a") }),
        ErrorCode::InvalidRegularExpression
    );
    assert_eq!(code(beat("a", -3, None)), ErrorCode::InvalidRequest);
    // v0 may join without a member id.
    assert_eq!(validate(&Heartbeat { version: 0, member_id: String::new(), ..join("a") }), Ok(()));
}

#[test]
fn a_regular_expression_subscribes_to_every_topic_it_matches_whole() {
    let c: Catalog = [("foo".to_string(), (FOO, 2)), ("foobar".to_string(), ([4; 16], 2))].into();
    let mut g = Group::default();
    let hb = Heartbeat { subscribed_names: Some(vec![]), subscribed_regex: Some("fo+".into()), ..join("a") };
    let a = g.heartbeat(&hb, &c).unwrap().assignment.unwrap();
    assert_eq!(a.keys().copied().collect::<Vec<_>>(), vec![FOO], "foobar does not match whole");
}
