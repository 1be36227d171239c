//! `ConsumerGroups`: the KIP-848 consumer groups this broker coordinates, on the coordinator
//! [`Runtime`]: each heartbeat is a write on the group (a [`Group`]), its change stored before it
//! is answered (so the cluster fences commits by the stored epoch) by compare-and-set on the
//! version read — while two brokers both coordinate a group (the live-broker view moving), the
//! one that did not read the other's last store reads the group again and runs the heartbeat on
//! it, so no answered change is overwritten. A broker taking a group over continues its members,
//! their assignments and epochs. Owns what the group must not do: the timers ([`Timers`], the
//! in-memory part: a member silent for the session timeout, or still holding partitions it must
//! revoke past its rebalance timeout, is removed) and which stored groups are KIP-848 ones.
//!
//! A group is stored as the classic ones are (`ConsumerGroup` through [`GroupStore`], by
//! `modern::Records`), its protocol marked [`MARK`], each member's state as JSON in its
//! `subscription`. It must not speak the Kafka protocol (`kafka::consumer_groups` does) nor
//! commit offsets.

use crate::incarnation::Incarnation;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::ErrorCode;

use super::assignor::Assignment;
use super::group::{state_name, Answer, Catalog, Group, Heartbeat, Member, Refused};
use super::reconcile::MemberState;
use crate::coordinators::groups::config::GroupConfig;
use crate::coordinators::groups::kinds::{self, GroupKind};
use crate::coordinators::groups::modern::{self, KeptMember, ModernGroup};
use crate::coordinators::groups::store::GroupStore;
use crate::coordinators::runtime::Runtime;
use crate::error::KafkaError;

/// The protocol a stored KIP-848 group is marked with (classic groups store their assignment
/// protocol there, e.g. "range"), its protocol type being Kafka's "consumer".
pub const MARK: &str = diskless_proto::CONSUMER_PROTOCOL_MARK;
const KIND: GroupKind = GroupKind::Consumer;
pub const PROTOCOL_TYPE: &str = "consumer";

/// What is held in memory only for a group: its members' timers.
#[derive(Debug, Clone, Default)]
pub struct Timers {
    /// When each member's session ends unless it heartbeats.
    sessions: HashMap<String, Instant>,
    /// A member that must revoke partitions: its epoch then, and when it is removed if it has not
    /// moved on.
    revoking: HashMap<String, (i32, Instant)>,
}

impl Timers {
    /// After a heartbeat of `answer.member_id` (`before`: what it had to revoke): its session
    /// starts again unless it left; its revocation timer is armed when it is told to revoke
    /// something new (Kafka reschedules it whenever it writes the member in
    /// UNREVOKED_PARTITIONS with a change).
    fn heard(&mut self, g: &Group, answer: &Answer, leaving: bool, before: Option<Assignment>, session: Duration) {
        let now = Instant::now();
        let id = &answer.member_id;
        match g.members.get(id) {
            Some(m) if !leaving || m.current.epoch == -2 => {
                if !leaving {
                    self.sessions.insert(id.clone(), now + session);
                }
                if m.current.state == MemberState::UnrevokedPartitions {
                    let timeout = Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64);
                    if before.as_ref() != Some(&m.current.pending_revocation) || !self.revoking.contains_key(id) {
                        self.revoking.insert(id.clone(), (m.current.epoch, now + timeout));
                    }
                } else {
                    self.revoking.remove(id);
                }
            }
            _ => self.forget(id),
        }
    }

    fn forget(&mut self, member_id: &str) {
        self.sessions.remove(member_id);
        self.revoking.remove(member_id);
    }

    /// The members due for removal at `now`, and why.
    fn due(&self, g: &Group, now: Instant) -> Vec<(String, &'static str)> {
        let mut gone: Vec<(String, &'static str)> = self
            .sessions
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(m, _)| (m.clone(), "its session timed out"))
            .collect();
        for (m, (epoch, until)) in &self.revoking {
            let stuck = g.members.get(m).is_some_and(|x| x.current.epoch == *epoch);
            if *until <= now && stuck && !gone.iter().any(|(g, _)| g == m) {
                gone.push((m.clone(), "it did not revoke its partitions within its rebalance timeout"));
            }
        }
        gone
    }
}

/// The KIP-848 groups this broker coordinates.
pub struct ConsumerGroups {
    runtime: Runtime<String, Group, Timers>,
    store: Arc<dyn GroupStore>,
    config: GroupConfig,
}

/// A group as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct Described {
    pub epoch: i32,
    pub state: &'static str,
    pub assignor: &'static str,
    pub members: Vec<Member>,
}

impl ModernGroup for Group {
    type Member = Member;
    const KIND: GroupKind = KIND;
    fn epoch(&self) -> i32 {
        self.epoch
    }
    fn members(&self) -> &BTreeMap<String, Member> {
        &self.members
    }
    fn loaded(epoch: i32, members: BTreeMap<String, Member>) -> Group {
        Group { epoch, members, ..Group::default() }
    }
}

impl KeptMember for Member {
    fn member_id(&self) -> &str {
        &self.member_id
    }
    fn epoch(&self) -> i32 {
        self.current.epoch
    }
    fn client(&self) -> (&str, &str) {
        (&self.client_id, &self.client_host)
    }
    fn instance_id(&self) -> Option<&str> {
        self.instance_id.as_deref()
    }
    fn rebalance_timeout_ms(&self) -> i32 {
        self.rebalance_timeout_ms
    }
}

impl ConsumerGroups {
    pub fn new(store: Arc<dyn GroupStore>, config: GroupConfig, me: &Incarnation) -> Arc<ConsumerGroups> {
        // A group taken over gives every stored member a fresh session.
        let runtime = modern::runtime(store.clone(), me, config.consumer_session_timeout_ms, |sessions| Timers {
            sessions,
            revoking: HashMap::new(),
        });
        Arc::new(ConsumerGroups { runtime, store, config })
    }

    fn session(&self) -> Duration {
        Duration::from_millis(self.config.consumer_session_timeout_ms)
    }

    /// The heartbeat interval members are told.
    pub fn heartbeat_interval_ms(&self) -> i32 {
        self.config.consumer_heartbeat_interval_ms
    }

    /// A ConsumerGroupHeartbeat (validated by the caller with `group::validate`): the group's
    /// change is stored before the answer.
    pub async fn heartbeat(&self, group_id: &str, hb: &Heartbeat, catalog: Arc<Catalog>) -> Result<Answer, Refused> {
        let (id, hb, session) = (group_id.to_string(), hb.clone(), self.session());
        let op = move |state: &mut Option<Group>, timers: &mut Timers| {
            let group = match state {
                Some(g) => g,
                None if hb.member_epoch == 0 => state.insert(Group::default()),
                None => {
                    return Err(KafkaError::new(ErrorCode::GroupIdNotFound, format!("Consumer group {id} not found.")))
                }
            };
            let before = group
                .members
                .get(&hb.member_id)
                .filter(|m| m.current.state == MemberState::UnrevokedPartitions)
                .map(|m| m.current.pending_revocation.clone());
            let answer = group.heartbeat(&hb, &catalog)?;
            timers.heard(group, &answer, hb.member_epoch < 0, before, session);
            Ok(answer)
        };
        Ok(self.runtime.write(&group_id.to_string(), op).await?)
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
        let key = group_id.to_string();
        let check = |g: Option<&Group>, _: &Timers| g.map(|g| g.check_commit(member_id, member_epoch));
        if let Some(held) = self.runtime.peek(&key, check).await {
            return held;
        }
        // Not held: only a group stored as a KIP-848 one is taken over (were the classic path to
        // read it next, it could find a KIP-848 group and answer INCONSISTENT_GROUP_PROTOCOL).
        match self.store.load(group_id).await {
            Ok(Some(r)) if kinds::kind_of(&r) == KIND => {}
            Ok(_) => return None,
            Err(e) => {
                tracing::info!(group = group_id, error = %e, "loading a consumer group failed");
                return Some(Err(ErrorCode::CoordinatorLoadInProgress));
            }
        }
        match self.runtime.read(&key, check).await {
            Ok(checked) => checked,
            Err(e) => Some(Err(e.code)),
        }
    }

    /// Whether this broker holds `group_id` as a KIP-848 group with members (a classic JoinGroup
    /// is then INCONSISTENT_GROUP_PROTOCOL).
    pub async fn has_members(&self, group_id: &str) -> bool {
        let members = |g: Option<&Group>, _: &Timers| g.is_some_and(|g| !g.members.is_empty());
        self.runtime.peek(&group_id.to_string(), members).await.unwrap_or(false)
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
        let held = self.runtime.peek(&group_id.to_string(), |g, _| g.map(described)).await.flatten();
        if let Some(d) = held {
            return Ok(d);
        }
        let not_found =
            || Refused { code: ErrorCode::GroupIdNotFound, message: format!("Group {group_id} not found.") };
        match self.store.load(group_id).await {
            Ok(Some(r)) if kinds::kind_of(&r) == KIND => Ok(described(&modern::decode_group::<Group>(group_id, &r)?)),
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

    /// The groups held here.
    pub fn held(&self) -> Vec<String> {
        self.runtime.held()
    }

    /// Loads `group_id` now (this broker coordinates it since a moment): its stored members'
    /// sessions start, so members that died while nobody coordinated it are removed when they
    /// lapse. A group held here already is left as it is.
    pub async fn take_over(&self, group_id: &str) -> Result<(), crate::error::KafkaError> {
        self.runtime.read(&group_id.to_string(), |_, _| ()).await
    }

    /// Drops a group from memory (another broker coordinates it now).
    pub fn release(&self, group_id: &str) {
        self.runtime.release(&group_id.to_string());
    }

    /// One pass of the timers: members whose session lapsed, or that did not revoke in time, are
    /// removed (the group epoch bumped, the others' targets recomputed, stored).
    pub async fn tick(&self, catalog: Arc<Catalog>) {
        let now = Instant::now();
        for group_id in self.runtime.held() {
            let catalog = catalog.clone();
            let op = move |state: &mut Option<Group>, timers: &mut Timers| {
                let Some(group) = state.as_mut() else { return Ok(vec![]) };
                let gone = timers.due(group, now);
                if !gone.is_empty() {
                    let ids: Vec<&str> = gone.iter().map(|(m, _)| m.as_str()).collect();
                    group.remove_all(&ids, &catalog);
                    for (m, _) in &gone {
                        timers.forget(m);
                    }
                }
                Ok(gone)
            };
            match self.runtime.write_if_held(&group_id, op).await {
                Some(Ok(gone)) => {
                    for (m, why) in gone {
                        tracing::info!(group = group_id, member = m, why, "member removed");
                    }
                }
                Some(Err(e)) => tracing::info!(group = group_id, error = %e, "removing lapsed members failed"),
                None => {}
            }
        }
    }
}
