//! `GroupCoordinator`: the classic consumer groups this broker coordinates, each a [`Group`]
//! state machine (`rebalance`) behind one lock. Owns what the state machine must not do: loading a
//! group from the coordinator cluster on first use (so a broker taking a group over continues its
//! generation and members), storing the group when the state machine says so (the leader's
//! assignment, a static member's new id, an emptied group) before answering, the member ids
//! handed out with MEMBER_ID_REQUIRED, the session-timeout check of `[groups]`, the waits of
//! members in a join or sync, and the 100 ms timer. It must not commit offsets (the Kafka handlers
//! send them to the cluster, which fences them by generation) nor do I/O besides the
//! [`GroupStore`].
//!
//! Stores are compare-and-set on the version this broker's view read, as every group kind's are:
//! while two brokers briefly both coordinate a group, the one that did not read the other's last
//! store is refused (ILLEGAL_GENERATION), drops its view and reloads, so no answered change is
//! overwritten. A group's loads and stores take turns (its lane): a store's version is the one the
//! view holds when it goes out, and a reload waits for the store in flight. Kafka's model is
//! `GroupMetadataManager`'s classic-group path, where a response waits for its records' append.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::v1::ConsumerGroup;
use diskless_proto::ErrorCode;
use tokio::sync::oneshot;

use super::api::{Described, JoinOutcome, JoinRequest, SyncOutcome};
use super::rebalance::{Group, Joined, Synced};
use crate::coordinators::groups::config::GroupConfig;
use crate::coordinators::groups::kinds::{self, GroupKind};
use crate::coordinators::groups::store::{GroupStore, StoreError};
use crate::incarnation::Incarnation;

/// The groups this broker coordinates.
pub struct GroupCoordinator {
    store: Arc<dyn GroupStore>,
    /// This broker's id and process incarnation, stamped on what it stores (the cluster tells a
    /// resend of this process's store from another broker's by it).
    identity: String,
    config: GroupConfig,
    groups: Mutex<HashMap<String, Group>>,
    /// Per group, the turn of its loads and stores.
    lanes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, by (group, member), until they expire (the
    /// session timeout asked for).
    pending: Mutex<HashMap<(String, String), Instant>>,
}

fn member_id(client_id: &str) -> String {
    format!("{client_id}-{}", uuid::Uuid::new_v4())
}

impl GroupCoordinator {
    /// The coordinator of this broker process (`me`).
    pub fn new(store: Arc<dyn GroupStore>, config: GroupConfig, me: &Incarnation) -> Arc<GroupCoordinator> {
        let identity = me.tag();
        Arc::new(GroupCoordinator {
            store,
            identity,
            config,
            groups: Mutex::new(HashMap::new()),
            lanes: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn initial_delay(&self) -> Duration {
        Duration::from_millis(self.config.initial_rebalance_delay_ms)
    }

    fn lane(&self, group_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes.entry(group_id.to_string()).or_default().clone()
    }

    /// Loads the group from the cluster unless this broker holds it already.
    async fn ensure_loaded(&self, group_id: &str) -> Result<(), ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        if self.lock().contains_key(group_id) {
            return Ok(());
        }
        let lane = self.lane(group_id);
        let _turn = lane.lock().await;
        if self.lock().contains_key(group_id) {
            return Ok(());
        }
        let mut loaded = match self.store.load(group_id).await {
            Ok(g) => g,
            Err(e) => {
                tracing::info!(group = group_id, error = %e, "loading a group failed");
                return Err(ErrorCode::CoordinatorLoadInProgress);
            }
        };
        // A KIP-848 or share group with members takes no classic member; an empty one gives
        // way, its generation continued.
        kinds::admit_stored(group_id, loaded.as_ref(), GroupKind::Classic).map_err(|e| e.code)?;
        if let Some(g) = loaded.as_mut().filter(|g| kinds::kind_of(g) != GroupKind::Classic) {
            g.protocol = None;
        }
        let now = Instant::now();
        self.lock()
            .entry(group_id.to_string())
            .or_insert_with(|| loaded.map(|g| Group::loaded(g, now)).unwrap_or_else(Group::empty));
        Ok(())
    }

    /// Stores the group as this broker holds it now, by compare-and-set on the version its view
    /// read; the view then holds the stored version. A failed store leaves the view as it was:
    /// the caller decides (drop it, or rebalance).
    async fn store_group(&self, group_id: &str) -> Result<(), StoreError> {
        let lane = self.lane(group_id);
        let _turn = lane.lock().await;
        let (record, read) = {
            let groups = self.lock();
            let Some(g) = groups.get(group_id) else {
                return Err(StoreError::Unavailable("this broker no longer holds the group".into()));
            };
            (ConsumerGroup { coordinator: self.identity.clone(), ..g.record() }, g.version)
        };
        let version = self.store.store(group_id, record, read).await?;
        if let Some(g) = self.lock().get_mut(group_id).filter(|g| g.version == read) {
            g.version = version;
        }
        Ok(())
    }

    /// After a store that failed: the view is dropped (the next request reloads the group as the
    /// cluster holds it; members waiting in a join or sync are told to rejoin), and the code to
    /// answer: NOT_COORDINATOR when another coordinator stored since this view was read.
    fn store_failed(&self, group_id: &str, e: &StoreError) -> ErrorCode {
        tracing::info!(group = group_id, error = %e, "storing a group failed; its view is dropped");
        self.lock().remove(group_id);
        if e.is(ErrorCode::IllegalGeneration) {
            ErrorCode::NotCoordinator
        } else {
            ErrorCode::CoordinatorNotAvailable
        }
    }

    /// Stores a group the timer emptied, off the timer's task.
    fn spawn_store(self: &Arc<Self>, group_id: String) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.store_group(&group_id).await {
                this.store_failed(&group_id, &e);
            }
        });
    }

    pub async fn join(&self, req: JoinRequest) -> JoinOutcome {
        let fail = |error| JoinOutcome { error, member_id: req.member_id.clone(), ..Default::default() };
        if let Err(e) = self.ensure_loaded(&req.group_id).await {
            return fail(e);
        }
        let timeout_ok =
            (self.config.min_session_timeout_ms..=self.config.max_session_timeout_ms).contains(&req.session_timeout_ms);
        if !timeout_ok {
            return fail(ErrorCode::InvalidSessionTimeout);
        }
        let now = Instant::now();
        let session = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
        let was_pending = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if req.member_id.is_empty() && req.group_instance_id.is_none() && req.require_known_member_id {
                let id = member_id(&req.client_id);
                pending.insert((req.group_id.clone(), id.clone()), now + session);
                return JoinOutcome { error: ErrorCode::MemberIdRequired, member_id: id, ..Default::default() };
            }
            pending.remove(&(req.group_id.clone(), req.member_id.clone())).is_some_and(|until| until > now)
        };
        let (tx, rx) = oneshot::channel();
        let joined = {
            let mut groups = self.lock();
            let Some(g) = groups.get_mut(&req.group_id) else { return fail(ErrorCode::CoordinatorNotAvailable) };
            g.join(&req, was_pending, member_id(&req.client_id), tx, now, self.initial_delay())
        };
        let wait = match joined {
            Joined::Now(out) => return out,
            Joined::Rejoined(out) => {
                return match self.store_group(&req.group_id).await {
                    Ok(()) => out,
                    Err(e) => fail(self.store_failed(&req.group_id, &e)),
                };
            }
            Joined::Waiting { wait, store } => {
                if store {
                    if let Err(e) = self.store_group(&req.group_id).await {
                        return fail(self.store_failed(&req.group_id, &e));
                    }
                }
                wait
            }
        };
        // The tick completes the rebalance at the latest by its deadline.
        match tokio::time::timeout(wait + self.initial_delay() + Duration::from_secs(5), rx).await {
            Ok(Ok(out)) => out,
            _ => fail(ErrorCode::RebalanceInProgress),
        }
    }

    pub async fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncOutcome {
        let fail = |error| SyncOutcome { error, ..Default::default() };
        if let Err(e) = self.ensure_loaded(group_id).await {
            return fail(e);
        }
        let (tx, rx) = oneshot::channel();
        let synced = {
            let mut groups = self.lock();
            let Some(g) = groups.get_mut(group_id) else { return fail(ErrorCode::CoordinatorNotAvailable) };
            g.sync(generation, member_id, assignments, tx, Instant::now())
        };
        match synced {
            Ok(true) => {}
            Ok(false) => return rx.await.unwrap_or_else(|_| fail(ErrorCode::RebalanceInProgress)),
            Err(out) => return out,
        }
        // The generation is stored before anyone learns its assignment: from then on, the cluster
        // fences commits of older generations.
        let stored = self.store_group(group_id).await;
        self.synced(group_id, generation, stored);
        rx.await.unwrap_or_else(|_| fail(ErrorCode::RebalanceInProgress))
    }

    /// After the leader's assignment was stored (or not): answers the members' SyncGroups.
    fn synced(&self, group_id: &str, generation: i32, stored: Result<(), StoreError>) {
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else { return };
        let code = stored.as_ref().map(|_| ()).map_err(|e| {
            if e.is(ErrorCode::IllegalGeneration) {
                ErrorCode::IllegalGeneration
            } else {
                ErrorCode::CoordinatorNotAvailable
            }
        });
        let outcome = g.synced(generation, code, Instant::now());
        if let (Err(e), Synced::Rebalancing | Synced::Deposed) = (&stored, &outcome) {
            tracing::warn!(group = group_id, error = %e, "storing the generation failed; rebalancing");
        }
        if outcome == Synced::Deposed {
            // Another coordinator stored since this view was read: forget it; the next request
            // loads the group afresh.
            groups.remove(group_id);
        }
    }

    pub async fn heartbeat(&self, group_id: &str, generation: i32, member_id: &str) -> ErrorCode {
        if let Err(e) = self.ensure_loaded(group_id).await {
            return e;
        }
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else { return ErrorCode::CoordinatorNotAvailable };
        g.heartbeat(generation, member_id, Instant::now())
    }

    /// LeaveGroup: per member (by member id, or by instance id for static members), an error code.
    pub async fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        self.ensure_loaded(group_id).await?;
        let (out, store_now) = {
            let mut groups = self.lock();
            let Some(g) = groups.get_mut(group_id) else { return Err(ErrorCode::CoordinatorNotAvailable) };
            g.leave(members, Instant::now())
        };
        if store_now {
            if let Err(e) = self.store_group(group_id).await {
                return Err(self.store_failed(group_id, &e));
            }
        }
        Ok(out)
    }

    /// Before an OffsetCommit goes to the cluster: Kafka's checks against the live group (the
    /// cluster checks again against the stored generation). A member's commit counts as a sign of
    /// life.
    pub async fn check_commit(&self, group_id: &str, generation: i32, member_id: &str) -> Result<(), ErrorCode> {
        self.ensure_loaded(group_id).await?;
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else { return Err(ErrorCode::CoordinatorNotAvailable) };
        g.check_commit(generation, member_id, Instant::now())
    }

    /// DescribeGroups for a group this broker holds in memory (after loading it).
    pub async fn describe(&self, group_id: &str) -> Result<Described, ErrorCode> {
        self.ensure_loaded(group_id).await?;
        let groups = self.lock();
        let Some(g) = groups.get(group_id) else { return Err(ErrorCode::CoordinatorNotAvailable) };
        Ok(g.describe())
    }

    /// The state of the groups held in memory: id, protocol type, state.
    pub fn states(&self) -> HashMap<String, (String, &'static str)> {
        self.lock().iter().map(|(id, g)| (id.clone(), g.summary())).collect()
    }

    /// Whether a group held here has members (DeleteGroups refuses those).
    pub fn has_members(&self, group_id: &str) -> bool {
        self.lock().get(group_id).is_some_and(Group::has_members)
    }

    /// Forgets a group (after the cluster deleted it); it loads afresh on next use.
    pub fn forget(&self, group_id: &str) {
        let mut groups = self.lock();
        if groups.get(group_id).is_some_and(|g| !g.has_members()) {
            groups.remove(group_id);
        }
    }

    /// Loads `group_id` now (this broker coordinates it since a moment): its members' sessions
    /// start, so members that died while nobody coordinated it are removed when they lapse.
    pub async fn take_over(&self, group_id: &str) -> Result<(), ErrorCode> {
        self.ensure_loaded(group_id).await
    }

    /// Drops a group from memory whatever its state (another broker coordinates it now): waiting
    /// joins and syncs are answered REBALANCE_IN_PROGRESS, and the members find the new
    /// coordinator, which loads the group from the cluster.
    pub fn release(&self, group_id: &str) {
        self.lock().remove(group_id);
    }

    /// One pass of the timers: lapsed sessions, rebalances due; lanes of groups no longer held
    /// and not in use go.
    pub fn tick(self: &Arc<Self>) {
        let now = Instant::now();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, until| *until > now);
        let delay = self.initial_delay();
        let mut to_store = vec![];
        {
            let mut groups = self.lock();
            for (id, g) in groups.iter_mut() {
                g.expire_members(now, delay);
                if g.maybe_complete_join(now) {
                    to_store.push(id.clone());
                }
            }
            let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
            lanes.retain(|id, lane| groups.contains_key(id) || Arc::strong_count(lane) > 1);
        }
        for id in to_store {
            self.spawn_store(id);
        }
    }

    /// Runs [`GroupCoordinator::tick`] every 100 ms until `stop`.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = every.tick() => self.tick(),
                _ = stop.changed() => return,
            }
        }
    }
}
