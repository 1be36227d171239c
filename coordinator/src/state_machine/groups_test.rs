use super::command::*;
use super::fixture::*;
use super::records::{GroupRecord, MemberRecord};

fn member(id: &str) -> MemberRecord {
    MemberRecord {
        member_id: id.into(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        subscription: vec![1],
        assignment: vec![2],
        member_epoch: 0,
    }
}

fn group(generation: i32, members: &[&str]) -> GroupRecord {
    GroupRecord {
        generation,
        protocol_type: "consumer".into(),
        protocol: Some("range".into()),
        leader: members.first().map(|m| m.to_string()),
        members: members.iter().map(|m| member(m)).collect(),
        updated_ms: 0,
        coordinator: "broker-1".into(),
        version: 0,
    }
}

/// A store over whatever is stored (the coordinator read it last).
fn store(f: &mut Fixture, id: &str, g: GroupRecord) -> Result<GroupRecord, Failure> {
    let read = stored(f, id).map_or(0, |s| s.version);
    store_at(f, id, g, read)
}

/// A compare-and-set store naming `expected`.
fn store_at(f: &mut Fixture, id: &str, g: GroupRecord, expected: u64) -> Result<GroupRecord, Failure> {
    let op = Op::StoreGroup { group_id: id.into(), group: g, expected_version: expected };
    let Outcome::Group(r) = f.apply(op) else { panic!("outcome") };
    r
}

fn stored(f: &Fixture, id: &str) -> Option<GroupRecord> {
    f.sm.list_groups(&f.db.read()).unwrap().into_iter().find(|(g, _)| g == id).and_then(|(_, r)| r)
}

fn commit(f: &mut Fixture, id: &str, generation: i32, member: &str, offsets: &[(u8, i32, i64)]) -> Vec<ErrorCode> {
    let op = Op::CommitOffsets(CommitOffsets {
        group_id: id.into(),
        generation,
        member_id: member.into(),
        offsets: offsets
            .iter()
            .map(|&(t, p, offset)| OffsetCommit { tp: tp(t, p), offset, leader_epoch: -1, metadata: None })
            .collect(),
    });
    let Outcome::Offsets(r) = f.apply(op) else { panic!("outcome") };
    r.iter().map(code).collect()
}

fn fetched(f: &Fixture, id: &str) -> Vec<(i32, i64)> {
    let view = f.db.read();
    let rows = f.sm.fetch_offsets(&view, id, None).unwrap();
    rows.into_iter().map(|(tp, o)| (tp.partition, o.map(|o| o.offset).unwrap_or(-1))).collect()
}

#[test]
fn a_member_of_the_current_generation_commits_and_the_offsets_are_fetched() {
    let mut f = Fixture::new();
    f.create(1, 3).unwrap();
    store(&mut f, "g", group(1, &["m1", "m2"])).unwrap();
    assert_eq!(commit(&mut f, "g", 1, "m2", &[(1, 0, 5), (1, 2, 7)]), vec![ErrorCode::None; 2]);
    assert_eq!(fetched(&f, "g"), vec![(0, 5), (2, 7)]);
    let view = f.db.read();
    let some = f.sm.fetch_offsets(&view, "g", Some(&[tp(1, 1), tp(1, 2)])).unwrap();
    assert_eq!(some[0].1, None);
    assert_eq!(some[1].1.as_ref().map(|o| (o.offset, o.commit_ms)), Some((7, f.now)));
}

#[test]
fn a_zombie_of_an_old_generation_or_an_unknown_member_is_refused_whole() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let first = store(&mut f, "g", group(1, &["m1"])).unwrap();
    store(&mut f, "g", group(2, &["m2"])).unwrap();
    assert_eq!(commit(&mut f, "g", 1, "m2", &[(1, 0, 9)]), vec![ErrorCode::IllegalGeneration]);
    assert_eq!(commit(&mut f, "g", 2, "m1", &[(1, 0, 9)]), vec![ErrorCode::UnknownMemberId]);
    // Outside any generation while the group has members.
    assert_eq!(commit(&mut f, "g", -1, "", &[(1, 0, 9)]), vec![ErrorCode::UnknownMemberId]);
    assert!(fetched(&f, "g").is_empty());
    // A deposed coordinator, which read the first store, cannot store over the second.
    assert_eq!(code(&store_at(&mut f, "g", group(1, &["m1"]), first.version)), ErrorCode::IllegalGeneration);
    let other = GroupRecord { coordinator: "broker-2".into(), ..group(2, &["m3"]) };
    assert_eq!(code(&store_at(&mut f, "g", other, first.version)), ErrorCode::IllegalGeneration);
    // The coordinator that read the last store may store its generation again (a static
    // member's new member id).
    store(&mut f, "g", group(2, &["m2", "m4"])).unwrap();
}

#[test]
fn an_empty_group_accepts_commits_from_outside_any_generation() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    assert_eq!(commit(&mut f, "solo", -1, "", &[(1, 0, 3)]), vec![ErrorCode::None]);
    store(&mut f, "g", group(4, &[])).unwrap();
    assert_eq!(commit(&mut f, "g", -1, "", &[(1, 0, 4)]), vec![ErrorCode::None]);
    assert_eq!(commit(&mut f, "solo", 0, "m", &[(1, 0, 3)]), vec![ErrorCode::UnknownMemberId]);
    let view = f.db.read();
    let ids: Vec<String> = f.sm.list_groups(&view).unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, vec!["g".to_string(), "solo".to_string()]);
}

#[test]
fn unknown_partitions_are_refused_one_by_one() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let got = commit(&mut f, "g", -1, "", &[(1, 0, 1), (1, 1, 1), (2, 0, 1)]);
    assert_eq!(got, vec![ErrorCode::None, ErrorCode::UnknownTopicOrPartition, ErrorCode::UnknownTopicOrPartition]);
    assert_eq!(commit(&mut f, "", -1, "", &[(1, 0, 1)]), vec![ErrorCode::InvalidGroupId]);
}

#[test]
fn offsets_of_a_deleted_topic_are_dropped() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    f.create(2, 1).unwrap();
    commit(&mut f, "g", -1, "", &[(1, 0, 1), (1, 1, 2), (2, 0, 3)]);
    commit(&mut f, "h", -1, "", &[(1, 0, 4)]);
    f.delete_topic(1, 100).unwrap();
    assert_eq!(fetched(&f, "g"), vec![(0, 3)]);
    assert!(fetched(&f, "h").is_empty());
    let view = f.db.read();
    let ids: Vec<String> = f.sm.list_groups(&view).unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, vec!["g".to_string()]);
}

#[test]
fn delete_groups_and_offsets_only_when_the_group_has_no_members() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    store(&mut f, "busy", group(1, &["m"])).unwrap();
    commit(&mut f, "busy", 1, "m", &[(1, 0, 1)]);
    commit(&mut f, "idle", -1, "", &[(1, 0, 1), (1, 1, 1)]);
    let Outcome::Groups(r) = f.apply(Op::DeleteGroups { group_ids: vec!["busy".into(), "idle".into(), "none".into()] })
    else {
        panic!("outcome")
    };
    let codes: Vec<ErrorCode> = r.iter().map(code).collect();
    assert_eq!(codes, vec![ErrorCode::NonEmptyGroup, ErrorCode::None, ErrorCode::GroupIdNotFound]);
    assert!(fetched(&f, "idle").is_empty());
    let Outcome::Offsets(r) = f.apply(Op::DeleteOffsets { group_id: "busy".into(), partitions: vec![tp(1, 0)] }) else {
        panic!("outcome")
    };
    assert_eq!(code(&r[0]), ErrorCode::GroupSubscribedToTopic);
    store(&mut f, "busy", group(2, &[])).unwrap();
    let Outcome::Offsets(r) = f.apply(Op::DeleteOffsets { group_id: "busy".into(), partitions: vec![tp(1, 0)] }) else {
        panic!("outcome")
    };
    assert_eq!(code(&r[0]), ErrorCode::None);
    assert!(fetched(&f, "busy").is_empty());
}

#[test]
fn offsets_of_groups_without_members_expire_after_the_retention() {
    let mut f = Fixture::new();
    f.create(1, 4).unwrap();
    store(&mut f, "live", group(1, &["m"])).unwrap();
    commit(&mut f, "live", 1, "m", &[(1, 0, 1)]);
    store(&mut f, "empty", group(3, &[])).unwrap();
    commit(&mut f, "empty", -1, "", &[(1, 0, 1)]);
    commit(&mut f, "solo", -1, "", &[(1, 0, 1), (1, 1, 1), (1, 2, 1)]);
    f.now += 500;
    commit(&mut f, "solo", -1, "", &[(1, 3, 1)]);
    f.now += 600;
    // Budget 2 per command: resumes from the cursor until done.
    let mut total = (0, 0);
    loop {
        let Outcome::ExpireOffsets { offsets_expired, groups_expired, more } =
            f.apply(Op::ExpireOffsets { retention_ms: 1_000, budget: 2 })
        else {
            panic!("outcome")
        };
        total = (total.0 + offsets_expired, total.1 + groups_expired);
        if !more {
            break;
        }
    }
    assert_eq!(total, (4, 1));
    assert_eq!(fetched(&f, "live"), vec![(0, 1)]);
    assert!(fetched(&f, "empty").is_empty());
    assert_eq!(fetched(&f, "solo"), vec![(3, 1)]);
    let view = f.db.read();
    assert!(f.sm.consumer_group(&view, "empty").unwrap().is_none());
    assert!(f.sm.consumer_group(&view, "live").unwrap().is_some());
}

#[test]
fn groups_and_offsets_travel_in_snapshots() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    store(&mut f, "g", group(3, &["m"])).unwrap();
    commit(&mut f, "g", 3, "m", &[(1, 0, 11), (1, 1, 12)]);
    commit(&mut f, "solo", -1, "", &[(1, 1, 5)]);
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = f.sm.keys.metadata_partition_range();
    let meta = Default::default();
    let file = crate::raft::snapshot::write(&f.db.read(), &from, &to, &|_| false, &meta, dir.path()).unwrap();
    let mut g = Fixture::new();
    let mut txn = crate::storage::Txn::new(&g.db);
    crate::raft::snapshot::for_each_pair(&file.path, &mut |k, v| {
        txn.put(k.to_vec(), v.to_vec());
        Ok(())
    })
    .unwrap();
    txn.commit(true).unwrap();
    assert_eq!(g.sm.digest(&g.db.read()).unwrap(), f.sm.digest(&f.db.read()).unwrap());
    assert_eq!(fetched(&g, "g"), vec![(0, 11), (1, 12)]);
    assert_eq!(fetched(&g, "solo"), vec![(1, 5)]);
    // The installed replica keeps fencing: generation 3 is the stored one.
    assert_eq!(commit(&mut g, "g", 2, "m", &[(1, 0, 1)]), vec![ErrorCode::IllegalGeneration]);
}

#[test]
fn a_kip_848_members_commit_is_fenced_by_its_stored_epoch_whatever_the_group_epoch() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let mut g = group(7, &["m1", "m2"]);
    g.protocol = Some(diskless_proto::CONSUMER_PROTOCOL_MARK.into());
    g.members[0].member_epoch = 6;
    g.members[1].member_epoch = 7;
    store(&mut f, "g", g.clone()).unwrap();
    // A member's own epoch, not the group's: m1 is still reconciling at 6.
    assert_eq!(commit(&mut f, "g", 6, "m1", &[(1, 0, 5)]), vec![ErrorCode::None]);
    assert_eq!(commit(&mut f, "g", 7, "m1", &[(1, 0, 6)]), vec![ErrorCode::StaleMemberEpoch]);
    assert_eq!(commit(&mut f, "g", 7, "m2", &[(1, 0, 7)]), vec![ErrorCode::None]);
    assert_eq!(commit(&mut f, "g", 7, "m3", &[(1, 0, 8)]), vec![ErrorCode::UnknownMemberId]);
    assert_eq!(commit(&mut f, "g", -1, "", &[(1, 0, 9)]), vec![ErrorCode::UnknownMemberId], "not while it has members");
    // Empty: an admin's commit is taken.
    g.members.clear();
    g.generation = 8;
    store(&mut f, "g", g).unwrap();
    assert_eq!(commit(&mut f, "g", -1, "", &[(1, 0, 10)]), vec![ErrorCode::None]);
    assert_eq!(fetched(&f, "g"), vec![(0, 10)]);
}

#[test]
fn a_versioned_store_applies_only_at_the_version_its_coordinator_read() {
    let mut f = Fixture::new();
    let a = |g: GroupRecord| GroupRecord { coordinator: "broker-1-a".into(), ..g };
    let b = |g: GroupRecord| GroupRecord { coordinator: "broker-2-b".into(), ..g };
    let first = store_at(&mut f, "g", a(group(1, &["m1"])), 0).unwrap();
    assert!(first.version > 0);
    assert_eq!((first.updated_ms, stored(&f, "g").unwrap().version), (f.now, first.version));
    // Broker B read version v; A stored since (its answered change: member m2). B's store, made
    // from what it read, is refused whatever its generation, and names what is stored.
    let v = first.version;
    let second = store_at(&mut f, "g", a(group(1, &["m1", "m2"])), v).unwrap();
    assert_eq!(second.version, v + 1);
    let late = store_at(&mut f, "g", b(group(7, &["m1", "m3"])), v).unwrap_err();
    assert_eq!(late.code, ErrorCode::IllegalGeneration);
    assert!(late.message.contains(&format!("version {}", v + 1)) && late.message.contains("broker-1-a"), "{late:?}");
    // Nothing stored is version 0: a store naming 0 over a stored group is refused too.
    assert_eq!(store_at(&mut f, "g", b(group(1, &["m3"])), 0).unwrap_err().code, ErrorCode::IllegalGeneration);
    // B reloads and stores over what it read: A's member is kept, and A, deposed, moves nothing.
    let now = stored(&f, "g").unwrap();
    let mut next = b(now.clone());
    next.members.push(member("m3"));
    let third = store_at(&mut f, "g", next, now.version).unwrap();
    assert_eq!(
        store_at(&mut f, "g", a(group(2, &["m1"])), now.version).unwrap_err().code,
        ErrorCode::IllegalGeneration
    );
    let last = stored(&f, "g").unwrap();
    assert_eq!(last, third);
    let ids: Vec<&str> = last.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!((ids, last.coordinator.as_str()), (vec!["m1", "m2", "m3"], "broker-2-b"));
}

#[test]
fn a_resent_versioned_store_that_applied_answers_what_is_stored() {
    let mut f = Fixture::new();
    let g = group(1, &["m1"]);
    let first = store_at(&mut f, "g", g.clone(), 0).unwrap();
    // The answer was lost and the client sent it again: the same group from the same coordinator.
    f.now += 5;
    let again = store_at(&mut f, "g", g.clone(), 0).unwrap();
    assert_eq!(again, first, "nothing is stored twice");
    // The same content from another coordinator is not a resend.
    let other = GroupRecord { coordinator: "broker-2".into(), ..g.clone() };
    assert_eq!(store_at(&mut f, "g", other, 0).unwrap_err().code, ErrorCode::IllegalGeneration);
}

#[test]
fn a_group_changing_kind_is_stored_by_compare_and_set_and_a_recreated_one_is_numbered_anew() {
    let mut f = Fixture::new();
    // A classic coordinator empties the group; a KIP-848 coordinator taking the empty group over
    // stores over the version it read, and the classic one, which read before, is fenced.
    let classic = store(&mut f, "g", group(3, &[])).unwrap();
    assert!(classic.version > 0);
    let modern = store_at(&mut f, "g", group(3, &["m1"]), classic.version).unwrap();
    assert_eq!(modern.version, classic.version + 1);
    assert_eq!(store_at(&mut f, "g", group(4, &[]), classic.version).unwrap_err().code, ErrorCode::IllegalGeneration);
    let classic2 = store(&mut f, "g", group(4, &[])).unwrap();
    assert_eq!(classic2.version, modern.version + 1);
    // A group created anew after its deletion is numbered from the command's time, above any
    // version a copy of the deleted one holds.
    let Outcome::Groups(r) = f.apply(Op::DeleteGroups { group_ids: vec!["g".into()] }) else { panic!("outcome") };
    assert_eq!(r, vec![Ok(())]);
    f.now += 1;
    assert_eq!(
        store_at(&mut f, "g", group(1, &["m9"]), classic2.version).unwrap_err().code,
        ErrorCode::IllegalGeneration
    );
    let fresh = store_at(&mut f, "g", group(1, &["m9"]), 0).unwrap();
    assert!(fresh.version > classic2.version, "{} after {}", fresh.version, classic2.version);
}
