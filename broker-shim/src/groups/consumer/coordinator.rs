//! `ConsumerGroups`: the KIP-848 consumer groups this broker coordinates, each a [`Group`] behind
//! its own lock. Owns what the group must not do: loading it from the coordinator cluster on first
//! use (a broker taking a group over continues its members, their assignments and epochs),
//! storing every change before the heartbeat that made it is answered (so the cluster fences
//! commits by the stored epoch) by compare-and-set on the version it read — while two brokers
//! both coordinate a group (the live-broker view moving), the one that did not read the other's
//! last store is refused, answers NOT_COORDINATOR and reloads, so no answered change is
//! overwritten — and the timers: a member silent for the session timeout, or
//! still holding partitions it must revoke past its rebalance timeout, is removed.
//!
//! A group is stored as the classic ones are (`ConsumerGroup` through [`GroupStore`]), its
//! protocol marked [`MARK`], each member's state as JSON in its `subscription`. It must not speak
//! the Kafka protocol (`kafka::consumer_groups` does) nor commit offsets.

use crate::incarnation::Incarnation;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_proto::v1::{consumer_group, ConsumerGroup};
use diskless_proto::ErrorCode;

use super::group::{state_name, Answer, Catalog, Group, Heartbeat, Member, Refused};
use super::reconcile::MemberState;
use crate::groups::config::GroupConfig;
use crate::groups::store::{GroupStore, StoreError};

/// The protocol a stored KIP-848 group is marked with (classic groups store their assignment
/// protocol there, e.g. "range"), its protocol type being Kafka's "consumer".
pub const MARK: &str = diskless_proto::CONSUMER_PROTOCOL_MARK;
pub const PROTOCOL_TYPE: &str = "consumer";

/// Whether a stored group is a KIP-848 consumer group.
pub fn is_consumer_protocol(g: &ConsumerGroup) -> bool {
    g.protocol.as_deref() == Some(MARK)
}

/// A group held here, with its members' timers.
struct Live {
    group: Group,
    /// The stored version `group` was read or stored at (0: none stored).
    version: u64,
    /// When each member's session ends unless it heartbeats.
    sessions: HashMap<String, Instant>,
    /// A member that must revoke partitions: its epoch then, and when it is removed if it has not
    /// moved on.
    revoking: HashMap<String, (i32, Instant)>,
}

/// The KIP-848 groups this broker coordinates.
pub struct ConsumerGroups {
    store: Arc<dyn GroupStore>,
    identity: String,
    config: GroupConfig,
    groups: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Live>>>>>,
}

/// A group as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct Described {
    pub epoch: i32,
    pub state: &'static str,
    pub assignor: &'static str,
    pub members: Vec<Member>,
}

fn to_record(g: &Group, identity: &str, session_ms: u64) -> ConsumerGroup {
    ConsumerGroup {
        generation_id: g.epoch,
        protocol_type: PROTOCOL_TYPE.to_string(),
        protocol: Some(MARK.to_string()),
        leader: None,
        members: g
            .members
            .values()
            .map(|m| consumer_group::Member {
                member_id: m.member_id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: i32::try_from(session_ms).unwrap_or(i32::MAX),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                subscription: serde_json::to_vec(m).unwrap_or_else(|e| {
                    // Cannot happen for these types; were it to, the member would be dropped at load.
                    tracing::error!(member = m.member_id, error = %e, "a consumer group member does not encode");
                    vec![]
                }),
                assignment: vec![],
                member_epoch: m.current.epoch,
            })
            .collect(),
        updated_ms: 0,
        coordinator: identity.to_string(),
        version: 0,
    }
}

/// The group a stored record holds; `Err` when the record is a classic group with members
/// (Kafka's "not a consumer group").
fn from_record(group_id: &str, r: &ConsumerGroup) -> Result<Group, Refused> {
    if !is_consumer_protocol(r) {
        if !r.members.is_empty() {
            return Err(Refused {
                code: ErrorCode::GroupIdNotFound,
                message: format!("Group {group_id} is not a consumer group."),
            });
        }
        // An empty classic group gives way (its committed offsets stay), from the next epoch.
        return Ok(Group { epoch: r.generation_id.max(0), ..Group::default() });
    }
    let mut g = Group { epoch: r.generation_id, ..Group::default() };
    for m in &r.members {
        match serde_json::from_slice::<Member>(&m.subscription) {
            Ok(member) if member.member_id == m.member_id => {
                g.members.insert(member.member_id.clone(), member);
            }
            _ => tracing::warn!(group = group_id, member = m.member_id, "a stored member does not decode; dropped"),
        }
    }
    Ok(g)
}

impl ConsumerGroups {
    pub fn new(store: Arc<dyn GroupStore>, config: GroupConfig, me: &Incarnation) -> Arc<ConsumerGroups> {
        let identity = me.tag();
        Arc::new(ConsumerGroups { store, identity, config, groups: Mutex::new(HashMap::new()) })
    }

    fn slot(&self, group_id: &str) -> Arc<tokio::sync::Mutex<Option<Live>>> {
        let mut all = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(group_id.to_string()).or_default().clone()
    }

    fn session(&self) -> Duration {
        Duration::from_millis(self.config.consumer_session_timeout_ms)
    }

    /// The heartbeat interval members are told.
    pub fn heartbeat_interval_ms(&self) -> i32 {
        self.config.consumer_heartbeat_interval_ms
    }

    /// Loads `group_id` into `slot` unless held; `create`: a join may start a new group.
    async fn ensure(&self, group_id: &str, slot: &mut Option<Live>, create: bool) -> Result<(), Refused> {
        if slot.is_some() {
            return Ok(());
        }
        let stored = self.store.load(group_id).await.map_err(|e| {
            tracing::info!(group = group_id, error = %e, "loading a consumer group failed");
            Refused { code: ErrorCode::CoordinatorLoadInProgress, message: "the group could not be loaded".into() }
        })?;
        self.adopt(group_id, slot, stored, create)
    }

    /// Holds the group `stored` (as loaded) in `slot`.
    fn adopt(
        &self,
        group_id: &str,
        slot: &mut Option<Live>,
        stored: Option<ConsumerGroup>,
        create: bool,
    ) -> Result<(), Refused> {
        let group = match &stored {
            Some(r) => from_record(group_id, r)?,
            None if create => Group::default(),
            None => {
                return Err(Refused {
                    code: ErrorCode::GroupIdNotFound,
                    message: format!("Consumer group {group_id} not found."),
                })
            }
        };
        let now = Instant::now();
        let version = stored.as_ref().map_or(0, |r| r.version);
        let sessions = group.members.keys().map(|m| (m.clone(), now + self.session())).collect();
        *slot = Some(Live { group, version, sessions, revoking: HashMap::new() });
        Ok(())
    }

    /// Stores `g` over version `version` (the one read); the version it was stored at.
    async fn put(&self, group_id: &str, g: &Group, version: u64) -> Result<u64, Refused> {
        let record = to_record(g, &self.identity, self.config.consumer_session_timeout_ms);
        self.store.store(group_id, record, version).await.map_err(|e| match e {
            StoreError::Refused { code: ErrorCode::IllegalGeneration, message } => {
                tracing::info!(group = group_id, message, "another broker stored this group since it was read");
                Refused { code: ErrorCode::NotCoordinator, message: "the group moved to another coordinator".into() }
            }
            e => {
                tracing::info!(group = group_id, error = %e, "storing a consumer group failed");
                Refused { code: ErrorCode::CoordinatorNotAvailable, message: "the group could not be stored".into() }
            }
        })
    }

    /// A ConsumerGroupHeartbeat (validated by the caller with `group::validate`).
    pub async fn heartbeat(&self, group_id: &str, hb: &Heartbeat, catalog: &Catalog) -> Result<Answer, Refused> {
        let slot = self.slot(group_id);
        let mut held = slot.lock().await;
        let leaving = hb.member_epoch < 0;
        self.ensure(group_id, &mut held, hb.member_epoch == 0).await?;
        let live = held.as_mut().expect("ensured");
        let revoking_before = |g: &Group, id: &str| {
            g.members
                .get(id)
                .filter(|m| m.current.state == MemberState::UnrevokedPartitions)
                .map(|m| m.current.pending_revocation.clone())
        };
        let before = revoking_before(&live.group, &hb.member_id);
        let mut next = live.group.clone();
        let answer = next.heartbeat(hb, catalog)?;
        if next != live.group {
            match self.put(group_id, &next, live.version).await {
                Ok(version) => (live.group, live.version) = (next, version),
                Err(e) => {
                    if e.code == ErrorCode::NotCoordinator {
                        *held = None;
                    }
                    return Err(e);
                }
            }
        }
        let now = Instant::now();
        let id = &answer.member_id;
        match live.group.members.get(id) {
            Some(m) if !leaving || m.current.epoch == -2 => {
                if !leaving {
                    live.sessions.insert(id.clone(), now + self.session());
                }
                if m.current.state == MemberState::UnrevokedPartitions {
                    // Armed when the member is told to revoke something new (Kafka reschedules
                    // it whenever it writes the member in UNREVOKED_PARTITIONS with a change).
                    let timeout = Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64);
                    if before.as_ref() != Some(&m.current.pending_revocation) || !live.revoking.contains_key(id) {
                        live.revoking.insert(id.clone(), (m.current.epoch, now + timeout));
                    }
                } else {
                    live.revoking.remove(id);
                }
            }
            _ => {
                live.sessions.remove(id);
                live.revoking.remove(id);
            }
        }
        Ok(answer)
    }

    /// OffsetCommit's check of a member of a KIP-848 group (loaded if it is stored as one), or
    /// `None` when the group is not a KIP-848 one (the classic check runs). The cluster fences the
    /// commit again by the stored member's epoch.
    pub async fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
    ) -> Option<Result<(), ErrorCode>> {
        let slot = self.slot(group_id);
        let mut held = slot.lock().await;
        if held.is_none() {
            let stored = match self.store.load(group_id).await {
                Ok(Some(r)) if is_consumer_protocol(&r) => r,
                // Not readable now: the client retries (were the classic path to read it next, it
                // could find a KIP-848 group and answer INCONSISTENT_GROUP_PROTOCOL).
                Err(e) => {
                    tracing::info!(group = group_id, error = %e, "loading a consumer group failed");
                    drop(held);
                    self.drop_empty_slot(group_id);
                    return Some(Err(ErrorCode::CoordinatorLoadInProgress));
                }
                // Not a KIP-848 group: the classic check runs.
                _ => {
                    drop(held);
                    self.drop_empty_slot(group_id);
                    return None;
                }
            };
            if let Err(e) = self.adopt(group_id, &mut held, Some(stored), false) {
                return Some(Err(e.code));
            }
        }
        let live = held.as_ref()?;
        Some(live.group.check_commit(member_id, member_epoch))
    }

    /// Forgets `group_id`'s slot if nothing is held in it.
    fn drop_empty_slot(&self, group_id: &str) {
        let mut all = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if all.get(group_id).is_some_and(|s| s.try_lock().is_ok_and(|g| g.is_none())) {
            all.remove(group_id);
        }
    }

    /// Whether this broker holds `group_id` as a KIP-848 group with members (a classic JoinGroup
    /// is then INCONSISTENT_GROUP_PROTOCOL).
    pub async fn has_members(&self, group_id: &str) -> bool {
        let slot = {
            let all = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            all.get(group_id).cloned()
        };
        match slot {
            Some(s) => s.lock().await.as_ref().is_some_and(|l| !l.group.members.is_empty()),
            None => false,
        }
    }

    /// ConsumerGroupDescribe of a group: as held here, else as the cluster stores it (a read
    /// changes nothing: the group is not taken over by describing it).
    pub async fn describe(&self, group_id: &str) -> Result<Described, Refused> {
        let described = |g: &Group| Described {
            epoch: g.epoch,
            state: state_name(g),
            assignor: g.assignor(),
            members: g.members.values().cloned().collect(),
        };
        let slot = self.groups.lock().unwrap_or_else(|e| e.into_inner()).get(group_id).cloned();
        if let Some(slot) = slot {
            if let Some(live) = slot.lock().await.as_ref() {
                return Ok(described(&live.group));
            }
        }
        let not_found =
            || Refused { code: ErrorCode::GroupIdNotFound, message: format!("Group {group_id} not found.") };
        match self.store.load(group_id).await {
            Ok(Some(r)) if is_consumer_protocol(&r) => Ok(described(&from_record(group_id, &r)?)),
            Ok(_) => Err(not_found()),
            Err(e) => {
                tracing::info!(group = group_id, error = %e, "loading a consumer group failed");
                Err(Refused {
                    code: ErrorCode::CoordinatorLoadInProgress,
                    message: "the group could not be loaded".into(),
                })
            }
        }
    }

    /// The groups held here: id → state name.
    pub fn held(&self) -> Vec<String> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    /// Drops a group from memory (another broker coordinates it now).
    pub fn release(&self, group_id: &str) {
        self.groups.lock().unwrap_or_else(|e| e.into_inner()).remove(group_id);
    }

    /// One pass of the timers: members whose session lapsed, or that did not revoke in time, are
    /// removed (the group epoch bumped, the others' targets recomputed, stored).
    pub async fn tick(&self, catalog: &Catalog) {
        let now = Instant::now();
        let slots: Vec<(String, Arc<tokio::sync::Mutex<Option<Live>>>)> = {
            let all = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            all.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        for (group_id, slot) in slots {
            let mut held = slot.lock().await;
            let Some(live) = held.as_mut() else { continue };
            let mut gone: Vec<(String, &str)> = live
                .sessions
                .iter()
                .filter(|(_, until)| **until <= now)
                .map(|(m, _)| (m.clone(), "its session timed out"))
                .collect();
            for (m, (epoch, until)) in &live.revoking {
                let stuck = live.group.members.get(m).is_some_and(|x| x.current.epoch == *epoch);
                if *until <= now && stuck {
                    gone.push((m.clone(), "it did not revoke its partitions within its rebalance timeout"));
                }
            }
            if gone.is_empty() {
                continue;
            }
            let mut next = live.group.clone();
            let ids: Vec<&str> = gone.iter().map(|(m, _)| m.as_str()).collect();
            next.remove_all(&ids, catalog);
            for (m, why) in &gone {
                tracing::info!(group = group_id, member = m, why, "member removed");
            }
            match self.put(&group_id, &next, live.version).await {
                Ok(version) => {
                    for (m, _) in &gone {
                        live.sessions.remove(m);
                        live.revoking.remove(m);
                    }
                    (live.group, live.version) = (next, version);
                }
                Err(e) if e.code == ErrorCode::NotCoordinator => *held = None,
                Err(_) => {}
            }
        }
    }
}
