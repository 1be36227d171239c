use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use bytes::Bytes;
use diskless_proto::v1::ConsumerGroup;
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use super::store::StoreError;
use super::*;

#[derive(Default)]
struct FakeStore {
    stored: StdMutex<HashMap<String, ConsumerGroup>>,
}

impl GroupStore for FakeStore {
    fn store<'a>(&'a self, group_id: &'a str, group: ConsumerGroup) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut s = self.stored.lock().unwrap();
            let refused = |old: &ConsumerGroup| {
                old.generation_id > group.generation_id
                    || (old.generation_id == group.generation_id && old.coordinator != group.coordinator)
            };
            if s.get(group_id).is_some_and(refused) {
                return Err(StoreError::Refused { code: ErrorCode::IllegalGeneration, message: "older".into() });
            }
            s.insert(group_id.to_string(), group);
            Ok(())
        })
    }

    fn load<'a>(&'a self, group_id: &'a str) -> BoxFuture<'a, Result<Option<ConsumerGroup>, StoreError>> {
        Box::pin(async move { Ok(self.stored.lock().unwrap().get(group_id).cloned()) })
    }
}

fn config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 0,
        min_session_timeout_ms: 10,
        max_session_timeout_ms: 60_000,
        ..GroupConfig::default()
    }
}

fn join(member_id: &str, instance: Option<&str>, session_ms: i32) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member_id.into(),
        group_instance_id: instance.map(str::to_string),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: session_ms,
        rebalance_timeout_ms: 2_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
        require_known_member_id: false,
    }
}

fn ticker(c: &Arc<GroupCoordinator>) -> tokio::sync::watch::Sender<bool> {
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(c.clone().run(rx));
    stop
}

/// Two members join; the leader assigns; both sync; the generation is stored before they learn it.
async fn two_members(c: &Arc<GroupCoordinator>) -> (JoinOutcome, JoinOutcome) {
    let first = c.join(join("", None, 10_000)).await;
    assert_eq!(first.error, ErrorCode::None);
    assert_eq!(first.generation, 1);
    assert_eq!(first.leader, first.member_id);
    let _ = c.sync("g", 1, &first.member_id, vec![(first.member_id.clone(), Bytes::from_static(b"all"))]).await;
    // The second joins: the first learns of the rebalance from its heartbeat and rejoins.
    let c2 = c.clone();
    let second = tokio::spawn(async move { c2.join(join("", None, 10_000)).await });
    let mut hb = ErrorCode::None;
    for _ in 0..100 {
        hb = c.heartbeat("g", 1, &first.member_id).await;
        if hb == ErrorCode::RebalanceInProgress {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(hb, ErrorCode::RebalanceInProgress);
    let again = c.join(join(&first.member_id, None, 10_000)).await;
    let second = second.await.unwrap();
    assert_eq!((again.generation, second.generation), (2, 2));
    let leader = if again.leader == again.member_id { &again } else { &second };
    assert_eq!(leader.members.len(), 2);
    (again, second)
}

#[tokio::test]
async fn members_join_sync_and_the_generation_is_stored_before_they_learn_their_assignment() {
    let store = Arc::new(FakeStore::default());
    let c = GroupCoordinator::new(store.clone(), config(), 1);
    let _stop = ticker(&c);
    let (a, b) = two_members(&c).await;
    let assignments =
        vec![(a.member_id.clone(), Bytes::from_static(b"for-a")), (b.member_id.clone(), Bytes::from_static(b"for-b"))];
    let (leader, follower) = if a.leader == a.member_id { (a, b) } else { (b, a) };
    let c2 = c.clone();
    let fid = follower.member_id.clone();
    let waiting = tokio::spawn(async move { c2.sync("g", 2, &fid, vec![]).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mine = c.sync("g", 2, &leader.member_id, assignments).await;
    let theirs = waiting.await.unwrap();
    assert_eq!(mine.error, ErrorCode::None);
    assert_eq!(theirs.error, ErrorCode::None);
    assert_ne!(mine.assignment, theirs.assignment);
    let stored = store.stored.lock().unwrap().get("g").cloned().unwrap();
    assert_eq!(stored.generation_id, 2);
    assert_eq!(stored.members.len(), 2);
    // A member of the old generation is told so.
    assert_eq!(c.heartbeat("g", 1, &leader.member_id).await, ErrorCode::IllegalGeneration);
    assert_eq!(c.check_commit("g", 1, &leader.member_id).await, Err(ErrorCode::IllegalGeneration));
    assert_eq!(c.check_commit("g", 2, "stranger").await, Err(ErrorCode::UnknownMemberId));
    assert_eq!(c.check_commit("g", 2, &follower.member_id).await, Ok(()));
}

#[tokio::test]
async fn a_member_whose_session_lapses_is_removed_and_the_group_empties() {
    let store = Arc::new(FakeStore::default());
    let c = GroupCoordinator::new(store.clone(), config(), 1);
    let _stop = ticker(&c);
    let m = c.join(join("", None, 200)).await;
    let s = c.sync("g", m.generation, &m.member_id, vec![(m.member_id.clone(), Bytes::from_static(b"x"))]).await;
    assert_eq!(s.error, ErrorCode::None);
    // No heartbeats: after the session timeout it is gone and the empty group is stored.
    for _ in 0..100 {
        if store.stored.lock().unwrap().get("g").is_some_and(|g| g.members.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored = store.stored.lock().unwrap().get("g").cloned().unwrap();
    assert!(stored.members.is_empty());
    assert_eq!(stored.generation_id, 2);
    assert_eq!(c.heartbeat("g", 1, &m.member_id).await, ErrorCode::UnknownMemberId);
    assert_eq!(c.check_commit("g", -1, "").await, Ok(()));
}

#[tokio::test]
async fn a_static_member_that_comes_back_keeps_its_assignment_without_a_rebalance() {
    let store = Arc::new(FakeStore::default());
    let c = GroupCoordinator::new(store.clone(), config(), 1);
    let _stop = ticker(&c);
    let lead = c.join(join("", Some("i-1"), 10_000)).await;
    let _ = c.sync("g", 1, &lead.member_id, vec![(lead.member_id.clone(), Bytes::from_static(b"a"))]).await;
    let c2 = c.clone();
    let other = tokio::spawn(async move { c2.join(join("", Some("i-2"), 10_000)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = c.join(join(&lead.member_id, Some("i-1"), 10_000)).await;
    let other = other.await.unwrap();
    assert_eq!(again.generation, 2);
    let assignments =
        vec![(again.member_id.clone(), Bytes::from_static(b"a")), (other.member_id.clone(), Bytes::from_static(b"b"))];
    let c3 = c.clone();
    let oid = other.member_id.clone();
    let waiting = tokio::spawn(async move { c3.sync("g", 2, &oid, vec![]).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(c.sync("g", 2, &again.member_id, assignments).await.error, ErrorCode::None);
    assert_eq!(waiting.await.unwrap().assignment, Bytes::from_static(b"b"));
    // i-2 restarts (a new member id, same instance id): same generation, same assignment.
    let back = c.join(join("", Some("i-2"), 10_000)).await;
    assert_eq!(back.error, ErrorCode::None);
    assert_eq!(back.generation, 2);
    assert_ne!(back.member_id, other.member_id);
    let s = c.sync("g", 2, &back.member_id, vec![]).await;
    assert_eq!((s.error, s.assignment), (ErrorCode::None, Bytes::from_static(b"b")));
    // The old member id is fenced.
    assert_eq!(c.heartbeat("g", 2, &other.member_id).await, ErrorCode::UnknownMemberId);
}

#[tokio::test]
async fn a_broker_taking_a_group_over_continues_its_generation_and_members() {
    let store = Arc::new(FakeStore::default());
    let first = GroupCoordinator::new(store.clone(), config(), 1);
    let _stop = ticker(&first);
    let m = first.join(join("", None, 10_000)).await;
    let _ = first.sync("g", 1, &m.member_id, vec![(m.member_id.clone(), Bytes::from_static(b"x"))]).await;
    let second = GroupCoordinator::new(store.clone(), config(), 1);
    assert_eq!(second.heartbeat("g", 1, &m.member_id).await, ErrorCode::None);
    assert_eq!(second.check_commit("g", 1, &m.member_id).await, Ok(()));
    let d = second.describe("g").await.unwrap();
    assert_eq!(d.state, "Stable");
    assert_eq!(d.members.len(), 1);
}

#[tokio::test]
async fn a_deposed_coordinator_whose_generation_is_refused_reloads_the_group_from_the_cluster() {
    let store = Arc::new(FakeStore::default());
    let c = GroupCoordinator::new(store.clone(), config(), 1);
    let _stop = ticker(&c);
    let m = c.join(join("", None, 10_000)).await;
    assert_eq!(m.generation, 1);
    // Meanwhile another broker completed generation 5 of the same group.
    let newer = ConsumerGroup { generation_id: 5, protocol_type: "consumer".into(), ..Default::default() };
    store.stored.lock().unwrap().insert("g".into(), newer);
    let s = c.sync("g", 1, &m.member_id, vec![(m.member_id.clone(), Bytes::from_static(b"x"))]).await;
    assert_eq!(s.error, ErrorCode::IllegalGeneration);
    // The stale view is gone: the group as the cluster holds it answers (no such member there).
    assert_eq!(c.heartbeat("g", 1, &m.member_id).await, ErrorCode::UnknownMemberId);
    let again = c.join(join("", None, 10_000)).await;
    assert_eq!(again.generation, 6);
}

#[tokio::test]
async fn a_v4_join_without_a_member_id_is_given_one_and_joins_with_it() {
    let store = Arc::new(FakeStore::default());
    let c = GroupCoordinator::new(store.clone(), config(), 1);
    let _stop = ticker(&c);
    let first = c.join(JoinRequest { require_known_member_id: true, ..join("", None, 10_000) }).await;
    assert_eq!(first.error, ErrorCode::MemberIdRequired);
    assert!(!first.member_id.is_empty());
    // An id nobody handed out is still unknown; the one handed out joins.
    assert_eq!(c.join(join("made-up", None, 10_000)).await.error, ErrorCode::UnknownMemberId);
    let joined = c.join(JoinRequest { require_known_member_id: true, ..join(&first.member_id, None, 10_000) }).await;
    assert_eq!((joined.error, joined.generation), (ErrorCode::None, 1));
    assert_eq!(joined.member_id, first.member_id);
    // A static member needs no round trip.
    let st = c
        .join(JoinRequest { require_known_member_id: true, group_id: "g2".into(), ..join("", Some("i1"), 10_000) })
        .await;
    assert_ne!(st.error, ErrorCode::MemberIdRequired);
}
