use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use bytes::Bytes;
use diskless_proto::v1::ConsumerGroup;
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::Notify;

use super::store::StoreError;
use super::*;
use crate::incarnation::Incarnation;

/// The cluster's StoreGroup rule: compare-and-set on the version. A gate can hold the first store of one broker (its coordinator tag's prefix) until
/// released, to reproduce two brokers briefly coordinating one group.
#[derive(Default)]
struct FakeStore {
    stored: StdMutex<HashMap<String, ConsumerGroup>>,
    loads: AtomicUsize,
    gate: StdMutex<Option<(String, Arc<Notify>)>>,
    gated: AtomicBool,
}

impl FakeStore {
    /// Holds the next store by a coordinator whose tag starts with `prefix` until `open`.
    fn hold(&self, prefix: &str) -> Arc<Notify> {
        let open = Arc::new(Notify::new());
        *self.gate.lock().unwrap() = Some((prefix.to_string(), open.clone()));
        open
    }
}

impl GroupStore for FakeStore {
    fn store<'a>(
        &'a self,
        group_id: &'a str,
        group: ConsumerGroup,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let held = {
                let mut gate = self.gate.lock().unwrap();
                match gate.as_ref() {
                    Some((prefix, _)) if group.coordinator.starts_with(prefix.as_str()) => gate.take(),
                    _ => None,
                }
            };
            if let Some((_, open)) = held {
                self.gated.store(true, Ordering::SeqCst);
                open.notified().await;
            }
            let mut s = self.stored.lock().unwrap();
            let old = s.get(group_id);
            if old.map_or(0, |o| o.version) != expected_version {
                return Err(StoreError::Refused { code: ErrorCode::IllegalGeneration, message: "fenced".into() });
            }
            let version = old.map_or(1, |o| o.version + 1);
            s.insert(group_id.to_string(), ConsumerGroup { version, ..group });
            Ok(version)
        })
    }

    fn load<'a>(&'a self, group_id: &'a str) -> BoxFuture<'a, Result<Option<ConsumerGroup>, StoreError>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(self.stored.lock().unwrap().get(group_id).cloned()) })
    }

    fn list_with_members(&self) -> BoxFuture<'_, Result<Vec<(String, ConsumerGroup)>, StoreError>> {
        let stored = self.stored.lock().unwrap();
        let all = stored.iter().filter(|(_, g)| !g.members.is_empty()).map(|(id, g)| (id.clone(), g.clone())).collect();
        Box::pin(async move { Ok(all) })
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
    let c = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
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
    let c = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
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
    let c = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
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
    let first = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
    let _stop = ticker(&first);
    let m = first.join(join("", None, 10_000)).await;
    let _ = first.sync("g", 1, &m.member_id, vec![(m.member_id.clone(), Bytes::from_static(b"x"))]).await;
    let second = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
    assert_eq!(second.heartbeat("g", 1, &m.member_id).await, ErrorCode::None);
    assert_eq!(second.check_commit("g", 1, &m.member_id).await, Ok(()));
    let d = second.describe("g").await.unwrap();
    assert_eq!(d.state, "Stable");
    assert_eq!(d.members.len(), 1);
}

#[tokio::test]
async fn a_deposed_coordinator_whose_generation_is_refused_reloads_the_group_from_the_cluster() {
    let store = Arc::new(FakeStore::default());
    let c = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
    let _stop = ticker(&c);
    let m = c.join(join("", None, 10_000)).await;
    assert_eq!(m.generation, 1);
    // Meanwhile another broker completed generation 5 of the same group.
    let newer = ConsumerGroup { generation_id: 5, protocol_type: "consumer".into(), version: 9, ..Default::default() };
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
    let c = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
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

/// Runs `task` until it finished or is held at the store's gate.
async fn until_done_or_gated<T: Send + 'static>(store: &FakeStore, task: &tokio::task::JoinHandle<T>) {
    for _ in 0..5_000 {
        if task.is_finished() || store.gated.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the second broker neither answered nor reached its store");
}

/// The epoch a stored group holds for `member` (its member epoch).
fn stored_member_epoch(store: &FakeStore, member: &str) -> Option<i32> {
    let s = store.stored.lock().unwrap();
    s.get("g")?.members.iter().find(|m| m.member_id == member).map(|m| m.member_epoch)
}

mod two_owners {
    //! Two brokers coordinating one group at once (the live-broker view moving): broker 2 reads
    //! the group, broker 1 answers a change, then broker 2 acts on what it read. With the epoch
    //! order the cluster used before, broker 2's store (a newer generation, or the epoch bump a
    //! new coordinator made) overwrote broker 1's answered change; by compare-and-set it is
    //! refused and broker 2 reloads.

    use super::*;
    use crate::coordinators::groups::consumer::assignor::Assignment;
    use crate::coordinators::groups::consumer::coordinator::ConsumerGroups;
    use crate::coordinators::groups::consumer::group::{Catalog, Heartbeat};
    use crate::coordinators::groups::share::coordinator::ShareGroups;
    use crate::coordinators::groups::share::group::Heartbeat as ShareHeartbeat;

    pub(super) fn catalog() -> Catalog {
        [("foo".to_string(), ([3; 16], 4))].into()
    }

    pub(super) fn beat(id: &str, epoch: i32, owned: Option<Assignment>) -> Heartbeat {
        Heartbeat {
            version: 1,
            member_id: id.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if epoch == 0 { 300_000 } else { -1 },
            subscribed_names: (epoch == 0).then(|| vec!["foo".into()]),
            subscribed_regex: (epoch == 0).then(String::new),
            owned: if epoch == 0 { Some(Assignment::new()) } else { owned },
            ..Heartbeat::default()
        }
    }

    #[tokio::test]
    async fn a_kip_848_change_answered_by_the_old_owner_is_not_lost_to_the_new_one() {
        let (store, c) = (Arc::new(FakeStore::default()), Arc::new(catalog()));
        let one = ConsumerGroups::new(store.clone(), config(), &Incarnation::new(1));
        let two = ConsumerGroups::new(store.clone(), config(), &Incarnation::new(2));
        one.heartbeat("g", &beat("m1", 0, None), c.clone()).await.unwrap();
        one.heartbeat("g", &beat("m2", 0, None), c.clone()).await.unwrap();
        // m1 must give two partitions to m2: it keeps `kept`, still at epoch 1.
        let told = one.heartbeat("g", &beat("m1", 1, None), c.clone()).await.unwrap();
        let kept = told.assignment.expect("m1 is told what to keep");
        assert_eq!(told.member_epoch, 1);

        // Broker 2 reads the group (m2's heartbeat reaches it).
        let open = store.hold("broker-2-");
        let two_task = {
            let (two, c) = (two.clone(), c.clone());
            tokio::spawn(async move { two.heartbeat("g", &beat("m2", 2, None), c.clone()).await })
        };
        until_done_or_gated(&store, &two_task).await;
        // Broker 1, not yet told, answers m1's revocation: m1 moves to epoch 2.
        let acked = one.heartbeat("g", &beat("m1", 1, Some(kept)), c.clone()).await.unwrap();
        assert_eq!(acked.member_epoch, 2);
        open.notify_one();
        let _ = two_task.await.unwrap();

        // Broker 2 goes on: a new member joins through it (retried once it reloaded).
        let joined = match two.heartbeat("g", &beat("m3", 0, None), c.clone()).await {
            Err(e) => {
                assert_eq!(e.code, ErrorCode::NotCoordinator, "{e:?}");
                two.heartbeat("g", &beat("m3", 0, None), c.clone()).await.unwrap()
            }
            Ok(a) => a,
        };
        assert!(joined.member_epoch > 2);
        // What broker 1 answered m1 is what the cluster holds (so m1's commits at epoch 2 pass).
        assert_eq!(stored_member_epoch(&store, "m1"), Some(2), "m1's answered epoch was overwritten");
        assert!(stored_member_epoch(&store, "m3").is_some());
    }

    #[tokio::test]
    async fn a_classic_change_answered_by_the_old_owner_is_not_lost_to_the_new_one() {
        let store = Arc::new(FakeStore::default());
        let one = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(1));
        let two = GroupCoordinator::new(store.clone(), config(), &Incarnation::new(2));
        let (_t1, _t2) = (ticker(&one), ticker(&two));
        // Two static members, i-1 leading, stable at generation 2 on broker 1.
        let lead = one.join(join("", Some("i-1"), 10_000)).await;
        let _ = one.sync("g", 1, &lead.member_id, vec![]).await;
        let other = {
            let one = one.clone();
            tokio::spawn(async move { one.join(join("", Some("i-2"), 10_000)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let lead = one.join(join(&lead.member_id, Some("i-1"), 10_000)).await;
        let other = other.await.unwrap();
        let follower = {
            let (one, id) = (one.clone(), other.member_id.clone());
            tokio::spawn(async move { one.sync("g", 2, &id, vec![]).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let given = vec![(other.member_id.clone(), Bytes::from_static(b"b"))];
        assert_eq!(one.sync("g", 2, &lead.member_id, given).await.error, ErrorCode::None);
        assert_eq!(follower.await.unwrap().error, ErrorCode::None);

        // Broker 2 reads the group (a heartbeat reaches it).
        assert_eq!(two.heartbeat("g", 2, &lead.member_id).await, ErrorCode::None);
        // Broker 1 answers i-2's restart: a new member id, stored before the answer.
        let back = one.join(join("", Some("i-2"), 10_000)).await;
        assert_eq!((back.error, back.generation), (ErrorCode::None, 2));
        assert_ne!(back.member_id, other.member_id);
        // Broker 2 acts on what it read: both member ids it knows leave, emptying its view. Its
        // store did not read broker 1's: refused, and the leave answered NOT_COORDINATOR.
        let gone = [(lead.member_id.clone(), None), (other.member_id.clone(), None)];
        assert_eq!(two.leave("g", &gone).await, Err(ErrorCode::NotCoordinator));
        // What broker 1 answered i-2 is what the cluster holds, and broker 2 reloads it.
        let stored = store.stored.lock().unwrap().get("g").cloned().unwrap();
        let ids: Vec<&str> = stored.members.iter().map(|m| m.member_id.as_str()).collect();
        assert!(ids.contains(&back.member_id.as_str()), "i-2's answered member id was overwritten: {ids:?}");
        assert_eq!(two.heartbeat("g", 2, &back.member_id).await, ErrorCode::None);
    }

    pub(super) fn share_beat(id: &str, epoch: i32) -> ShareHeartbeat {
        ShareHeartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            rack_id: None,
            subscribed_names: (epoch == 0).then(|| vec!["foo".into()]),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        }
    }

    #[tokio::test]
    async fn a_share_group_change_answered_by_the_old_owner_is_not_lost_to_the_new_one() {
        let (store, c) = (Arc::new(FakeStore::default()), Arc::new(catalog()));
        let one = ShareGroups::new(store.clone(), config(), &Incarnation::new(1));
        let two = ShareGroups::new(store.clone(), config(), &Incarnation::new(2));
        assert_eq!(one.heartbeat("g", &share_beat("s1", 0), c.clone()).await.unwrap().member_epoch, 1);
        assert_eq!(one.heartbeat("g", &share_beat("s2", 0), c.clone()).await.unwrap().member_epoch, 2);

        let open = store.hold("broker-2-");
        let two_task = {
            let (two, c) = (two.clone(), c.clone());
            tokio::spawn(async move { two.heartbeat("g", &share_beat("s2", 2), c.clone()).await })
        };
        until_done_or_gated(&store, &two_task).await;
        // Broker 1 answers s1: the group is at epoch 2, so s1 moves to it.
        assert_eq!(one.heartbeat("g", &share_beat("s1", 1), c.clone()).await.unwrap().member_epoch, 2);
        open.notify_one();
        let _ = two_task.await.unwrap();

        let joined = match two.heartbeat("g", &share_beat("s3", 0), c.clone()).await {
            Err(e) => {
                assert_eq!(e.code, ErrorCode::NotCoordinator, "{e:?}");
                two.heartbeat("g", &share_beat("s3", 0), c.clone()).await.unwrap()
            }
            Ok(a) => a,
        };
        assert!(joined.member_epoch > 2);
        assert_eq!(stored_member_epoch(&store, "s1"), Some(2), "s1's answered epoch was overwritten");
        assert!(stored_member_epoch(&store, "s3").is_some());
    }
}

mod kip_848 {
    //! The KIP-848 coordinator on the runtime: its session timers and the kinds it does not take
    //! over.

    use super::two_owners::{beat, catalog};
    use super::*;
    use crate::coordinators::groups::consumer::coordinator::ConsumerGroups;

    #[tokio::test]
    async fn silent_members_are_removed_by_the_timer_and_a_released_group_is_not_taken_over_by_it() {
        let store = Arc::new(FakeStore::default());
        let config = GroupConfig { consumer_session_timeout_ms: 50, ..config() };
        let groups = ConsumerGroups::new(store.clone(), config, &Incarnation::new(1));
        let c = Arc::new(catalog());
        groups.heartbeat("g", &beat("m1", 0, None), c.clone()).await.unwrap();
        groups.heartbeat("g", &beat("m2", 0, None), c.clone()).await.unwrap();
        let before = store.stored.lock().unwrap().get("g").cloned().unwrap();
        assert_eq!(before.members.len(), 2);
        groups.tick(c.clone()).await;
        assert_eq!(store.stored.lock().unwrap().get("g").unwrap().members.len(), 2, "sessions still running");
        tokio::time::sleep(Duration::from_millis(80)).await;
        groups.tick(c.clone()).await;
        let after = store.stored.lock().unwrap().get("g").cloned().unwrap();
        assert!(after.members.is_empty(), "{after:?}");
        assert!(after.generation_id > before.generation_id, "the removal bumps the group epoch");
        // Released (another broker coordinates it): the timer neither loads nor stores it.
        groups.release("g");
        let loads = store.loads.load(Ordering::SeqCst);
        groups.tick(c).await;
        assert_eq!(store.loads.load(Ordering::SeqCst), loads);
        assert!(groups.held().is_empty());
    }

    #[tokio::test]
    async fn a_classic_group_with_members_is_not_a_consumer_group_and_leaves_nothing_held() {
        let store = Arc::new(FakeStore::default());
        let member = diskless_proto::v1::consumer_group::Member { member_id: "c1".into(), ..Default::default() };
        let classic = ConsumerGroup {
            generation_id: 3,
            protocol_type: "consumer".into(),
            protocol: Some("range".into()),
            members: vec![member],
            version: 5,
            ..Default::default()
        };
        store.stored.lock().unwrap().insert("g".into(), classic.clone());
        let groups = ConsumerGroups::new(store.clone(), config(), &Incarnation::new(1));
        let e = groups.heartbeat("g", &beat("m1", 0, None), Arc::new(catalog())).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::GroupIdNotFound, "{e:?}");
        assert!(groups.held().is_empty());
        assert_eq!(groups.check_commit("g", "c1", 3).await, None, "the classic check runs");
        assert_eq!(store.stored.lock().unwrap().get("g"), Some(&classic), "nothing stored over it");
        // An unknown group id with a member epoch is GROUP_ID_NOT_FOUND too, and not kept.
        let e = groups.heartbeat("nope", &beat("m1", 3, None), Arc::new(catalog())).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::GroupIdNotFound);
        assert!(groups.held().is_empty());
    }
}

mod offsets {
    //! The committing member's check by its group's kind (`offsets.rs`), for OffsetCommit and
    //! TxnOffsetCommit.

    use super::two_owners::{beat, catalog};
    use super::*;
    use crate::coordinators::groups::consumer::coordinator::ConsumerGroups;
    use crate::coordinators::groups::offsets::Committer;
    use crate::coordinators::groups::share::coordinator::ShareGroups;
    use crate::coordinators::groups::HeldGroups;

    fn held(store: &Arc<FakeStore>) -> HeldGroups {
        let me = Incarnation::new(1);
        HeldGroups {
            classic: GroupCoordinator::new(store.clone(), config(), &me),
            consumer: ConsumerGroups::new(store.clone(), config(), &me),
            share: ShareGroups::new(store.clone(), config(), &me),
        }
    }

    #[tokio::test]
    async fn each_kinds_member_is_checked_by_its_kinds_rules_for_both_commits() {
        let store = Arc::new(FakeStore::default());
        let h = held(&store);
        let _stop = ticker(&h.classic);
        let (v8, v9, txn) =
            (Committer::Member { version: 8 }, Committer::Member { version: 9 }, Committer::Transactional);
        // A classic group: its generation.
        let m = h.classic.join(JoinRequest { group_id: "c".into(), ..join("", None, 10_000) }).await;
        let _ = h.classic.sync("c", 1, &m.member_id, vec![]).await;
        assert_eq!(h.check_commit("c", &m.member_id, 1, v8).await, Ok(()));
        assert_eq!(h.check_commit("c", &m.member_id, 0, v8).await, Err(ErrorCode::IllegalGeneration));
        assert_eq!(h.check_commit("c", "stranger", 1, txn).await, Err(ErrorCode::UnknownMemberId));
        // A KIP-848 group: its member's epoch, OffsetCommit v9+ only, a stale epoch of a
        // transactional commit read as ILLEGAL_GENERATION.
        let a = h.consumer.heartbeat("k", &beat("m1", 0, None), Arc::new(catalog())).await.unwrap();
        assert_eq!(h.check_commit("k", "m1", a.member_epoch, v9).await, Ok(()));
        assert_eq!(h.check_commit("k", "m1", a.member_epoch, v8).await, Err(ErrorCode::UnsupportedVersion));
        assert_eq!(h.check_commit("k", "m1", a.member_epoch - 1, v9).await, Err(ErrorCode::StaleMemberEpoch));
        assert_eq!(h.check_commit("k", "m1", a.member_epoch - 1, txn).await, Err(ErrorCode::IllegalGeneration));
        // A transactional commit naming no member is taken whatever the group's state.
        assert_eq!(h.check_commit("k", "", -1, txn).await, Ok(()));
        assert_eq!(h.check_commit("k", "", -1, v9).await, Err(ErrorCode::UnknownMemberId));
    }
}

mod takeover {
    //! A broker that becomes a groups' coordinator loads them (`HeldGroups::take_over`), each by
    //! its kind, so their dead members' sessions run though nobody uses the groups.

    use super::two_owners::{beat, catalog, share_beat};
    use super::*;
    use crate::coordinators::groups::consumer::coordinator::ConsumerGroups;
    use crate::coordinators::groups::share::coordinator::ShareGroups;
    use crate::coordinators::groups::HeldGroups;

    fn held(store: &Arc<FakeStore>, config: &GroupConfig, broker: i32) -> HeldGroups {
        let me = Incarnation::new(broker);
        HeldGroups {
            classic: GroupCoordinator::new(store.clone(), config.clone(), &me),
            consumer: ConsumerGroups::new(store.clone(), config.clone(), &me),
            share: ShareGroups::new(store.clone(), config.clone(), &me),
        }
    }

    #[tokio::test]
    async fn owned_groups_with_members_are_loaded_by_kind_and_their_silent_members_expire() {
        let store = Arc::new(FakeStore::default());
        let config = GroupConfig { consumer_session_timeout_ms: 50, share_session_timeout_ms: 50, ..config() };
        let c = Arc::new(catalog());
        // The broker that coordinated them, then died with its members.
        let before = held(&store, &config, 1);
        let _stop = ticker(&before.classic);
        for id in ["c", "other"] {
            let m = before.classic.join(JoinRequest { group_id: id.into(), ..join("", None, 10_000) }).await;
            assert_eq!(before.classic.sync(id, 1, &m.member_id, vec![]).await.error, ErrorCode::None);
        }
        before.consumer.heartbeat("k", &beat("m1", 0, None), c.clone()).await.unwrap();
        before.share.heartbeat("s", &share_beat("s1", 0), c.clone()).await.unwrap();
        drop(before);

        let after = held(&store, &config, 2);
        let n = after.take_over(store.as_ref(), &|id: &str| id != "other").await.unwrap();
        assert_eq!(n, 3);
        assert_eq!(after.classic.states().into_keys().collect::<Vec<_>>(), vec!["c".to_string()]);
        assert_eq!(after.consumer.held(), vec!["k".to_string()]);
        assert_eq!(after.share.held(), vec!["s".to_string()]);
        // Nobody heartbeats: the timers remove the members once their sessions lapse.
        tokio::time::sleep(Duration::from_millis(80)).await;
        after.consumer.tick(c.clone()).await;
        after.share.tick(c.clone()).await;
        let stored = store.stored.lock().unwrap();
        assert!(stored["k"].members.is_empty(), "{:?}", stored["k"]);
        assert!(stored["s"].members.is_empty(), "{:?}", stored["s"]);
        assert_eq!(stored["other"].members.len(), 1, "a group another broker coordinates is left alone");
    }
}
