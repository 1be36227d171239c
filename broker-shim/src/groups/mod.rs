//! The classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for the groups
//! this broker coordinates, with member state in memory as in Kafka.
//!
//! Owns: members, generations, rebalances (rebalance and session timeouts, Kafka's initial
//! rebalance delay), static membership (`group.instance.id`), and deciding when a group's
//! generation must be stored in the coordinator cluster (after the leader's SyncGroup, when the
//! group empties, when a static member comes back with a new member id). What must survive this
//! broker — the last completed generation and the committed offsets — is the cluster's (a
//! [`GroupStore`]): a group is loaded from it on first use, so a broker taking a group over
//! continues its generation and members. It must not commit offsets itself (the Kafka handlers
//! send them to the cluster, which fences them by generation) nor do I/O besides the store.

pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::v1::{consumer_group, ConsumerGroup};
use tokio::sync::oneshot;

pub use store::GroupStore;

/// Kafka error codes this module answers with.
pub mod codes {
    pub const NONE: i16 = 0;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub const INVALID_GROUP_ID: i16 = 24;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    pub const FENCED_INSTANCE_ID: i16 = 82;
}
use codes::*;

/// Settings of the group coordinator (`[groups]` in the broker's configuration).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupConfig {
    /// Kafka's `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members (extended by each join, up to the rebalance timeout).
    pub initial_rebalance_delay_ms: u64,
    /// Kafka's `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    /// Kafka's name, as DescribeGroups and ListGroups show it.
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

/// A JoinGroup as the handler decoded it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+ (KIP-394): a member without an id is given one with MEMBER_ID_REQUIRED and
    /// joins again with it.
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, Default)]
pub struct JoinOutcome {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

#[derive(Debug, Clone, Default)]
pub struct SyncOutcome {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct Described {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// member id, instance id, client id, client host, metadata, assignment.
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    last_seen: Instant,
    join: Option<oneshot::Sender<JoinOutcome>>,
    sync: Option<oneshot::Sender<SyncOutcome>>,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }
}

struct Group {
    state: State,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// A rebalance in progress completes by then, without the members that did not rejoin.
    rebalance_deadline: Option<Instant>,
    /// The first rebalance of an empty group waits until then for more members.
    not_before: Option<Instant>,
}

impl Group {
    fn empty() -> Group {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            rebalance_deadline: None,
            not_before: None,
        }
    }

    /// A group as the cluster holds it: its members resume in the generation they had (they keep
    /// heartbeating, or rejoin).
    fn loaded(g: ConsumerGroup, now: Instant) -> Group {
        let members: BTreeMap<String, Member> = g
            .members
            .into_iter()
            .map(|m| {
                let protocol = g.protocol.clone().unwrap_or_default();
                let member = Member {
                    id: m.member_id.clone(),
                    instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout: Duration::from_millis(m.session_timeout_ms.max(0) as u64),
                    rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                    protocol_type: g.protocol_type.clone(),
                    protocols: vec![(protocol, Bytes::from(m.subscription))],
                    assignment: Bytes::from(m.assignment),
                    last_seen: now,
                    join: None,
                    sync: None,
                };
                (m.member_id, member)
            })
            .collect();
        Group {
            state: if members.is_empty() { State::Empty } else { State::Stable },
            generation: g.generation_id,
            protocol_type: Some(g.protocol_type).filter(|p| !p.is_empty()),
            protocol: g.protocol,
            leader: g.leader,
            members,
            rebalance_deadline: None,
            not_before: None,
        }
    }

    fn record(&self) -> ConsumerGroup {
        let protocol = self.protocol.clone().unwrap_or_default();
        ConsumerGroup {
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .values()
                .map(|m| consumer_group::Member {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout.as_millis() as i32,
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                    subscription: m.metadata(&protocol).to_vec(),
                    assignment: m.assignment.to_vec(),
                })
                .collect(),
            updated_ms: 0,
            coordinator: String::new(),
        }
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default()
    }

    /// Starts a rebalance (or keeps the one in progress): pending syncs are told to rejoin.
    fn prepare_rebalance(&mut self, now: Instant, initial_delay: Duration) {
        if self.state == State::PreparingRebalance {
            return;
        }
        for m in self.members.values_mut() {
            if let Some(tx) = m.sync.take() {
                let _ = tx.send(SyncOutcome { error: REBALANCE_IN_PROGRESS, ..Default::default() });
            }
        }
        if self.state == State::Empty {
            self.not_before = Some(now + initial_delay);
        }
        self.state = State::PreparingRebalance;
        self.rebalance_deadline = Some(now + self.max_rebalance_timeout().max(initial_delay));
    }

    /// Completes the join phase if every member rejoined (after the initial delay) or the
    /// rebalance timeout passed (dropping those that did not). Returns a record to store when the
    /// group became empty.
    fn maybe_complete_join(&mut self, now: Instant) -> Option<ConsumerGroup> {
        if self.state != State::PreparingRebalance {
            return None;
        }
        let all_joined = self.members.values().all(|m| m.join.is_some());
        let timed_out = self.rebalance_deadline.is_some_and(|d| now >= d);
        let delayed = self.not_before.is_some_and(|t| now < t);
        if !(timed_out || (all_joined && !delayed)) {
            return None;
        }
        self.members.retain(|_, m| m.join.is_some());
        self.generation += 1;
        self.rebalance_deadline = None;
        self.not_before = None;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.protocol = None;
            self.leader = None;
            return Some(self.record());
        }
        // The first protocol of the leader's that every member supports.
        let leader = self
            .leader
            .clone()
            .filter(|l| self.members.contains_key(l))
            .or_else(|| self.members.keys().next().cloned())
            .unwrap_or_default();
        let candidates = &self.members[&leader].protocols;
        let chosen = candidates
            .iter()
            .map(|(n, _)| n.clone())
            .find(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == n)));
        self.leader = Some(leader.clone());
        self.protocol = chosen.clone();
        self.state = State::CompletingRebalance;
        let protocol = chosen.unwrap_or_default();
        let all: Vec<(String, Option<String>, Bytes)> =
            self.members.values().map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol))).collect();
        for m in self.members.values_mut() {
            m.last_seen = now;
            m.assignment = Bytes::new();
            if let Some(tx) = m.join.take() {
                let _ = tx.send(JoinOutcome {
                    error: NONE,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol: Some(protocol.clone()),
                    leader: leader.clone(),
                    member_id: m.id.clone(),
                    members: if m.id == leader { all.clone() } else { vec![] },
                });
            }
        }
        None
    }

    /// Members whose session lapsed go (those waiting in a join are bound by the rebalance
    /// timeout instead); the group rebalances without them.
    fn expire_members(&mut self, now: Instant, initial_delay: Duration) -> bool {
        let before = self.members.len();
        self.members.retain(|_, m| m.join.is_some() || now.duration_since(m.last_seen) <= m.session_timeout);
        if self.members.len() == before {
            return false;
        }
        self.prepare_rebalance(now, initial_delay);
        true
    }
}

/// The groups this broker coordinates.
pub struct GroupCoordinator {
    store: Arc<dyn GroupStore>,
    /// This broker's id and process incarnation, stamped on what it stores: the cluster refuses
    /// another coordinator's store of a generation already stored.
    identity: String,
    config: GroupConfig,
    groups: Mutex<HashMap<String, Group>>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, by (group, member), until they expire (the
    /// session timeout asked for).
    pending: Mutex<HashMap<(String, String), Instant>>,
}

fn member_id(client_id: &str) -> String {
    format!("{client_id}-{}", uuid::Uuid::new_v4())
}

impl GroupCoordinator {
    /// The coordinator of broker `broker_id` (a fresh incarnation per process).
    pub fn new(store: Arc<dyn GroupStore>, config: GroupConfig, broker_id: i32) -> Arc<GroupCoordinator> {
        let identity = format!("broker-{broker_id}-{}", uuid::Uuid::new_v4());
        Arc::new(GroupCoordinator {
            store,
            identity,
            config,
            groups: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn initial_delay(&self) -> Duration {
        Duration::from_millis(self.config.initial_rebalance_delay_ms)
    }

    /// Loads the group from the cluster unless this broker holds it already.
    async fn ensure_loaded(&self, group_id: &str) -> Result<(), i16> {
        if group_id.is_empty() {
            return Err(INVALID_GROUP_ID);
        }
        if self.lock().contains_key(group_id) {
            return Ok(());
        }
        let loaded = match self.store.load(group_id).await {
            Ok(g) => g,
            Err(e) => {
                tracing::info!(group = group_id, error = %e, "loading a group failed");
                return Err(COORDINATOR_LOAD_IN_PROGRESS);
            }
        };
        let now = Instant::now();
        self.lock()
            .entry(group_id.to_string())
            .or_insert_with(|| loaded.map(|g| Group::loaded(g, now)).unwrap_or_else(Group::empty));
        Ok(())
    }

    fn spawn_store(&self, group_id: String, mut record: ConsumerGroup) {
        record.coordinator = self.identity.clone();
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.store(&group_id, record).await {
                tracing::warn!(group = group_id, error = %e, "storing a group failed");
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
            return fail(INVALID_SESSION_TIMEOUT);
        }
        let now = Instant::now();
        let session = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
        let was_pending = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if req.member_id.is_empty() && req.group_instance_id.is_none() && req.require_known_member_id {
                let id = member_id(&req.client_id);
                pending.insert((req.group_id.clone(), id.clone()), now + session);
                return JoinOutcome { error: MEMBER_ID_REQUIRED, member_id: id, ..Default::default() };
            }
            pending.remove(&(req.group_id.clone(), req.member_id.clone())).is_some_and(|until| until > now)
        };
        let (tx, rx) = oneshot::channel();
        let mut store_now = None;
        let wait;
        {
            let mut groups = self.lock();
            let Some(g) = groups.get_mut(&req.group_id) else { return fail(COORDINATOR_NOT_AVAILABLE) };
            if g.state != State::Empty
                && g.protocol_type.as_deref().is_some_and(|t| t != req.protocol_type)
                && !g.members.is_empty()
            {
                return fail(INCONSISTENT_GROUP_PROTOCOL);
            }
            let mut id = req.member_id.clone();
            // Static membership: the instance id names the member; a new member id replaces the old.
            let static_old = req.group_instance_id.as_ref().and_then(|inst| {
                g.members.values().find(|m| m.instance_id.as_ref() == Some(inst)).map(|m| m.id.clone())
            });
            if let Some(old) = &static_old {
                if !id.is_empty() && &id != old {
                    return fail(FENCED_INSTANCE_ID);
                }
                if id.is_empty() {
                    id = member_id(&req.client_id);
                    let Some(mut m) = g.members.remove(old) else { return fail(UNKNOWN_MEMBER_ID) };
                    m.id = id.clone();
                    if let Some(tx) = m.join.take() {
                        let _ = tx.send(JoinOutcome { error: FENCED_INSTANCE_ID, ..Default::default() });
                    }
                    if let Some(tx) = m.sync.take() {
                        let _ = tx.send(SyncOutcome { error: FENCED_INSTANCE_ID, ..Default::default() });
                    }
                    let same = m.protocols == req.protocols;
                    g.members.insert(id.clone(), m);
                    if g.leader.as_ref() == Some(old) {
                        g.leader = Some(id.clone());
                    }
                    if g.state == State::Stable && same && g.leader.as_ref() != Some(&id) {
                        // Back with the same subscription: no rebalance; it syncs its assignment.
                        if let Some(m) = g.members.get_mut(&id) {
                            m.last_seen = now;
                        }
                        self.spawn_store(req.group_id.clone(), g.record());
                        return JoinOutcome {
                            error: NONE,
                            generation: g.generation,
                            protocol_type: g.protocol_type.clone(),
                            protocol: g.protocol.clone(),
                            leader: g.leader.clone().unwrap_or_default(),
                            member_id: id,
                            members: vec![],
                        };
                    }
                }
            } else if !id.is_empty() && !g.members.contains_key(&id) && !was_pending {
                return fail(UNKNOWN_MEMBER_ID);
            }
            if id.is_empty() {
                id = member_id(&req.client_id);
            }
            let member = g.members.entry(id.clone()).or_insert_with(|| Member {
                id: id.clone(),
                instance_id: req.group_instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                session_timeout: Duration::ZERO,
                rebalance_timeout: Duration::ZERO,
                protocol_type: req.protocol_type.clone(),
                protocols: vec![],
                assignment: Bytes::new(),
                last_seen: now,
                join: None,
                sync: None,
            });
            let changed = member.protocols != req.protocols;
            member.session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
            member.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64);
            member.protocol_type = req.protocol_type.clone();
            member.protocols = req.protocols.clone();
            member.last_seen = now;
            if let Some(old) = member.join.replace(tx) {
                let _ = old.send(JoinOutcome { error: UNKNOWN_MEMBER_ID, ..Default::default() });
            }
            wait = member.rebalance_timeout.max(member.session_timeout);
            g.protocol_type = Some(req.protocol_type.clone());
            if g.state != State::PreparingRebalance || changed {
                g.prepare_rebalance(now, self.initial_delay());
            }
            // Each join pushes the initial delay on, within the rebalance timeout.
            if let (Some(nb), Some(deadline)) = (g.not_before, g.rebalance_deadline) {
                g.not_before = Some((now + self.initial_delay()).min(deadline).max(nb));
            }
            if let Some(r) = g.maybe_complete_join(now) {
                store_now = Some(r);
            }
        }
        if let Some(r) = store_now {
            self.spawn_store(req.group_id.clone(), r);
        }
        // The tick completes the rebalance at the latest by its deadline.
        match tokio::time::timeout(wait + self.initial_delay() + Duration::from_secs(5), rx).await {
            Ok(Ok(out)) => out,
            _ => fail(REBALANCE_IN_PROGRESS),
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
        let record = match self.sync_locked(group_id, generation, member_id, assignments, tx) {
            Ok(Some(record)) => record,
            Ok(None) => return rx.await.unwrap_or_else(|_| fail(REBALANCE_IN_PROGRESS)),
            Err(out) => return out,
        };
        // The generation is stored before anyone learns its assignment: from then on, the cluster
        // fences commits of older generations.
        let record = ConsumerGroup { coordinator: self.identity.clone(), ..record };
        let stored = self.store.store(group_id, record).await;
        self.synced(group_id, generation, stored);
        rx.await.unwrap_or_else(|_| fail(REBALANCE_IN_PROGRESS))
    }

    /// SyncGroup's checks; registers the member's wait. `Ok(Some)`: the leader's assignment, to
    /// store; `Ok(None)`: wait; `Err`: the answer now.
    fn sync_locked(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
        tx: oneshot::Sender<SyncOutcome>,
    ) -> Result<Option<ConsumerGroup>, SyncOutcome> {
        let fail = |error| SyncOutcome { error, ..Default::default() };
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else { return Err(fail(COORDINATOR_NOT_AVAILABLE)) };
        let Some(m) = g.members.get_mut(member_id) else { return Err(fail(UNKNOWN_MEMBER_ID)) };
        if generation != g.generation {
            return Err(fail(ILLEGAL_GENERATION));
        }
        m.last_seen = Instant::now();
        match g.state {
            State::Empty => return Err(fail(UNKNOWN_MEMBER_ID)),
            State::PreparingRebalance => return Err(fail(REBALANCE_IN_PROGRESS)),
            State::Stable => {
                return Err(SyncOutcome {
                    error: NONE,
                    protocol_type: g.protocol_type.clone(),
                    protocol: g.protocol.clone(),
                    assignment: m.assignment.clone(),
                })
            }
            State::CompletingRebalance => {}
        }
        m.sync = Some(tx);
        if g.leader.as_deref() != Some(member_id) {
            return Ok(None);
        }
        let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
        for m in g.members.values_mut() {
            m.assignment = given.remove(&m.id).unwrap_or_default();
        }
        Ok(Some(g.record()))
    }

    /// After the leader's assignment was stored (or not): answers the members' SyncGroups.
    fn synced(&self, group_id: &str, generation: i32, stored: Result<(), store::StoreError>) {
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else { return };
        if g.generation != generation || g.state != State::CompletingRebalance {
            return;
        }
        match &stored {
            Ok(()) => {
                g.state = State::Stable;
                for m in g.members.values_mut() {
                    if let Some(tx) = m.sync.take() {
                        let _ = tx.send(SyncOutcome {
                            error: NONE,
                            protocol_type: g.protocol_type.clone(),
                            protocol: g.protocol.clone(),
                            assignment: m.assignment.clone(),
                        });
                    }
                }
            }
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "storing the generation failed; rebalancing");
                let code = e.code().unwrap_or(COORDINATOR_NOT_AVAILABLE);
                for m in g.members.values_mut() {
                    if let Some(tx) = m.sync.take() {
                        let _ = tx.send(SyncOutcome { error: code, ..Default::default() });
                    }
                }
                if code == ILLEGAL_GENERATION {
                    // The cluster holds a newer generation: another broker coordinated the group
                    // meanwhile. Forget this view; the next request loads the group afresh.
                    groups.remove(group_id);
                } else {
                    g.prepare_rebalance(Instant::now(), Duration::ZERO);
                }
            }
        }
    }

    pub async fn heartbeat(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        if let Err(e) = self.ensure_loaded(group_id).await {
            return e;
        }
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else { return COORDINATOR_NOT_AVAILABLE };
        let state = g.state;
        let current = g.generation;
        let Some(m) = g.members.get_mut(member_id) else { return UNKNOWN_MEMBER_ID };
        m.last_seen = Instant::now();
        if state == State::PreparingRebalance {
            return REBALANCE_IN_PROGRESS;
        }
        if generation != current {
            return ILLEGAL_GENERATION;
        }
        NONE
    }

    /// LeaveGroup: per member (by member id, or by instance id for static members), an error code.
    pub async fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Result<Vec<i16>, i16> {
        self.ensure_loaded(group_id).await?;
        let now = Instant::now();
        let mut store_now = None;
        let out = {
            let mut groups = self.lock();
            let Some(g) = groups.get_mut(group_id) else { return Err(COORDINATOR_NOT_AVAILABLE) };
            let mut out = vec![];
            for (id, instance) in members {
                let found = match instance {
                    Some(inst) => g
                        .members
                        .values()
                        .find(|m| m.instance_id.as_ref() == Some(inst))
                        .map(|m| m.id.clone())
                        .filter(|found| id.is_empty() || found == id)
                        .ok_or(if g.members.values().any(|m| m.instance_id.as_ref() == Some(inst)) {
                            FENCED_INSTANCE_ID
                        } else {
                            UNKNOWN_MEMBER_ID
                        }),
                    None => Some(id.clone()).filter(|id| g.members.contains_key(id)).ok_or(UNKNOWN_MEMBER_ID),
                };
                match found {
                    Ok(id) => {
                        if let Some(mut m) = g.members.remove(&id) {
                            if let Some(tx) = m.join.take() {
                                let _ = tx.send(JoinOutcome { error: UNKNOWN_MEMBER_ID, ..Default::default() });
                            }
                        }
                        out.push(NONE);
                    }
                    Err(e) => out.push(e),
                }
            }
            if out.contains(&NONE) {
                g.prepare_rebalance(now, Duration::ZERO);
                g.not_before = None;
                store_now = g.maybe_complete_join(now);
            }
            out
        };
        if let Some(r) = store_now {
            self.spawn_store(group_id.to_string(), r);
        }
        Ok(out)
    }

    /// Before an OffsetCommit goes to the cluster: Kafka's checks against the live group (the
    /// cluster checks again against the stored generation). A member's commit counts as a sign of
    /// life.
    pub async fn check_commit(&self, group_id: &str, generation: i32, member_id: &str) -> Result<(), i16> {
        self.ensure_loaded(group_id).await?;
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else { return Err(COORDINATOR_NOT_AVAILABLE) };
        if generation < 0 && member_id.is_empty() {
            return if g.members.is_empty() { Ok(()) } else { Err(UNKNOWN_MEMBER_ID) };
        }
        let (state, current) = (g.state, g.generation);
        let Some(m) = g.members.get_mut(member_id) else { return Err(UNKNOWN_MEMBER_ID) };
        m.last_seen = Instant::now();
        if state == State::CompletingRebalance {
            return Err(REBALANCE_IN_PROGRESS);
        }
        if generation != current {
            return Err(ILLEGAL_GENERATION);
        }
        Ok(())
    }

    /// DescribeGroups for a group this broker holds in memory (after loading it).
    pub async fn describe(&self, group_id: &str) -> Result<Described, i16> {
        self.ensure_loaded(group_id).await?;
        let groups = self.lock();
        let Some(g) = groups.get(group_id) else { return Err(COORDINATOR_NOT_AVAILABLE) };
        let protocol = g.protocol.clone().unwrap_or_default();
        let stable = g.state == State::Stable;
        Ok(Described {
            state: g.state.name(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            members: g
                .members
                .values()
                .map(|m| {
                    let assignment = if stable { m.assignment.clone() } else { Bytes::new() };
                    (
                        m.id.clone(),
                        m.instance_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                        m.metadata(&protocol),
                        assignment,
                    )
                })
                .collect(),
        })
    }

    /// The state of the groups held in memory: id, protocol type, state.
    pub fn states(&self) -> HashMap<String, (String, &'static str)> {
        self.lock()
            .iter()
            .map(|(id, g)| (id.clone(), (g.protocol_type.clone().unwrap_or_default(), g.state.name())))
            .collect()
    }

    /// Whether a group held here has members (DeleteGroups refuses those).
    pub fn has_members(&self, group_id: &str) -> bool {
        self.lock().get(group_id).is_some_and(|g| !g.members.is_empty())
    }

    /// Forgets a group (after the cluster deleted it); it loads afresh on next use.
    pub fn forget(&self, group_id: &str) {
        let mut groups = self.lock();
        if groups.get(group_id).is_some_and(|g| g.members.is_empty()) {
            groups.remove(group_id);
        }
    }

    /// Drops a group from memory whatever its state (another broker coordinates it now): waiting
    /// joins and syncs are answered REBALANCE_IN_PROGRESS, and the members find the new
    /// coordinator, which loads the group from the cluster.
    pub fn release(&self, group_id: &str) {
        self.lock().remove(group_id);
    }

    /// One pass of the timers: lapsed sessions, rebalances due.
    pub fn tick(&self) {
        let now = Instant::now();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, until| *until > now);
        let delay = self.initial_delay();
        let mut to_store = vec![];
        {
            let mut groups = self.lock();
            for (id, g) in groups.iter_mut() {
                g.expire_members(now, delay);
                if let Some(r) = g.maybe_complete_join(now) {
                    to_store.push((id.clone(), r));
                }
            }
        }
        for (id, r) in to_store {
            self.spawn_store(id, r);
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

#[cfg(test)]
mod tests;
