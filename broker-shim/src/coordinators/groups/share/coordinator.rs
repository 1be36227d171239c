//! `ShareGroups`: the KIP-932 share groups this broker coordinates, on the coordinator
//! [`Runtime`], as `consumer::coordinator` holds KIP-848 groups: each heartbeat a write on the
//! group, its change stored before the answer by compare-and-set on the version read (a broker
//! that did not read another's last store reads again and runs the heartbeat on that: no answered
//! change is overwritten); a broker taking a group over continues its members. Owns the session
//! timers (the in-memory part: a member silent for the session timeout is removed) and the
//! targets of a loaded group (computed from the catalog at its first write).
//!
//! A group is stored as the classic ones are (`ConsumerGroup` through [`GroupStore`]), its
//! protocol type "share" and its protocol marked [`MARK`], each member as JSON in its
//! `subscription`. It must not speak the Kafka protocol (`kafka::share_groups` does) nor touch
//! share-partition states (`states`).

use crate::incarnation::Incarnation;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::ErrorCode;

use super::group::{Answer, Catalog, Group, Heartbeat, Member, Refused};
use crate::coordinators::groups::config::GroupConfig;
use crate::coordinators::groups::kinds::{self, GroupKind};
use crate::coordinators::groups::modern::{self, KeptMember, ModernGroup};
use crate::coordinators::groups::store::GroupStore;
use crate::coordinators::runtime::Runtime;
use crate::error::KafkaError;

pub const MARK: &str = diskless_proto::SHARE_PROTOCOL_MARK;
const KIND: GroupKind = GroupKind::Share;
pub const PROTOCOL_TYPE: &str = "share";

/// What is held in memory only for a group.
#[derive(Debug, Clone, Default)]
pub struct Timers {
    /// When each member's session ends unless it heartbeats.
    sessions: HashMap<String, Instant>,
}

/// A group as ShareGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct Described {
    pub epoch: i32,
    pub state: &'static str,
    pub members: Vec<Member>,
}

/// The share groups this broker coordinates.
pub struct ShareGroups {
    runtime: Runtime<String, Group, Timers>,
    store: Arc<dyn GroupStore>,
    config: GroupConfig,
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
        self.epoch
    }
    fn client(&self) -> (&str, &str) {
        (&self.client_id, &self.client_host)
    }
}

/// A loaded group's targets (a record keeps only the epoch and the members), computed from its
/// members as the catalog has them now, at its epoch: the same members give the same targets.
/// Every bump computes them for every member, so a group with members and no targets is one just
/// loaded. Its first write after a load stores it once, unchanged but for the version.
fn derive(g: &mut Group, catalog: &Catalog) {
    if g.members.is_empty() || !g.targets.is_empty() {
        return;
    }
    let epoch = g.epoch;
    g.epoch -= 1;
    g.bump(catalog);
    g.epoch = epoch;
}

impl ShareGroups {
    pub fn new(store: Arc<dyn GroupStore>, config: GroupConfig, me: &Incarnation) -> Arc<ShareGroups> {
        // A group taken over gives every stored member a fresh session.
        let runtime =
            modern::runtime(store.clone(), me, config.share_session_timeout_ms, |sessions| Timers { sessions });
        Arc::new(ShareGroups { runtime, store, config })
    }

    fn session(&self) -> Duration {
        Duration::from_millis(self.config.share_session_timeout_ms)
    }

    pub fn heartbeat_interval_ms(&self) -> i32 {
        self.config.share_heartbeat_interval_ms
    }

    /// A ShareGroupHeartbeat (validated by the caller with `group::validate`): the group's change
    /// is stored before the answer.
    pub async fn heartbeat(&self, group_id: &str, hb: &Heartbeat, catalog: Arc<Catalog>) -> Result<Answer, Refused> {
        let (id, hb, session, max_size) =
            (group_id.to_string(), hb.clone(), self.session(), self.config.share_max_size);
        let op = move |state: &mut Option<Group>, timers: &mut Timers| {
            let group = match state {
                Some(g) => g,
                None if hb.member_epoch == 0 => state.insert(Group::default()),
                None => return Err(KafkaError::new(ErrorCode::GroupIdNotFound, format!("Group {id} not found."))),
            };
            derive(group, &catalog);
            let answer = group.heartbeat(&hb, &catalog, max_size)?;
            if answer.member_epoch < 0 {
                timers.sessions.remove(&answer.member_id);
            } else {
                timers.sessions.insert(answer.member_id.clone(), Instant::now() + session);
            }
            Ok(answer)
        };
        Ok(self.runtime.write(&group_id.to_string(), op).await?)
    }

    /// Whether this broker holds `group_id` with members.
    pub async fn has_members(&self, group_id: &str) -> bool {
        let members = |g: Option<&Group>, _: &Timers| g.is_some_and(|g| !g.members.is_empty());
        self.runtime.peek(&group_id.to_string(), members).await.unwrap_or(false)
    }

    /// ShareGroupDescribe: as held here, else as stored (describing takes nothing over).
    pub async fn describe(&self, group_id: &str, catalog: &Catalog) -> Result<Described, Refused> {
        let described = |g: &Group| Described {
            epoch: g.epoch,
            state: g.state_name(),
            members: g.members.values().cloned().collect(),
        };
        let held = self.runtime.peek(&group_id.to_string(), |g, _| g.map(described)).await.flatten();
        if let Some(d) = held {
            return Ok(d);
        }
        match self.store.load(group_id).await {
            Ok(Some(r)) if kinds::kind_of(&r) == KIND => {
                let mut g: Group = modern::decode_group(group_id, &r)?;
                derive(&mut g, catalog);
                Ok(described(&g))
            }
            Ok(_) => Err(Refused { code: ErrorCode::GroupIdNotFound, message: format!("Group {group_id} not found.") }),
            Err(e) => {
                tracing::info!(group = group_id, error = %e, "loading a share group failed");
                Err(Refused {
                    code: ErrorCode::CoordinatorLoadInProgress,
                    message: "the group could not be loaded".into(),
                })
            }
        }
    }

    /// Whether `group_id` is a share group with members (held here, else as stored), or `Err` when
    /// it cannot be read. `None`: no such share group.
    pub async fn stored_members(&self, group_id: &str, catalog: &Catalog) -> Result<Option<usize>, Refused> {
        match self.describe(group_id, catalog).await {
            Ok(d) => Ok(Some(d.members.len())),
            Err(e) if e.code == ErrorCode::GroupIdNotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Loads `group_id` now (this broker coordinates it since a moment): its stored members'
    /// sessions start, so members that died while nobody coordinated it are removed when they
    /// lapse. A group held here already is left as it is.
    pub async fn take_over(&self, group_id: &str) -> Result<(), crate::error::KafkaError> {
        self.runtime.read(&group_id.to_string(), |_, _| ()).await
    }

    /// Drops a group from memory (deleted, or another broker coordinates it now).
    pub fn release(&self, group_id: &str) {
        self.runtime.release(&group_id.to_string());
    }

    /// The groups held here.
    pub fn held(&self) -> Vec<String> {
        self.runtime.held()
    }

    /// One pass of the session timers: silent members are removed (one epoch bump per group),
    /// and returned by group so what they hold can be given back.
    pub async fn tick(&self, catalog: Arc<Catalog>) -> Vec<(String, Vec<Member>)> {
        let now = Instant::now();
        let mut removed = vec![];
        for group_id in self.runtime.held() {
            let catalog = catalog.clone();
            let op = move |state: &mut Option<Group>, timers: &mut Timers| {
                let Some(group) = state.as_mut() else { return Ok(vec![]) };
                let gone: Vec<String> =
                    timers.sessions.iter().filter(|(_, until)| **until <= now).map(|(m, _)| m.clone()).collect();
                if gone.is_empty() {
                    return Ok(vec![]);
                }
                derive(group, &catalog);
                let members: Vec<Member> = gone.iter().filter_map(|m| group.members.get(m).cloned()).collect();
                let ids: Vec<&str> = gone.iter().map(String::as_str).collect();
                group.remove_all(&ids, &catalog);
                for m in &gone {
                    timers.sessions.remove(m);
                }
                Ok(members)
            };
            match self.runtime.write_if_held(&group_id, op).await {
                Some(Ok(members)) if !members.is_empty() => {
                    for m in &members {
                        tracing::info!(
                            group = group_id,
                            member = m.member_id,
                            "share group member removed: its session timed out"
                        );
                    }
                    removed.push((group_id, members));
                }
                Some(Err(e)) => tracing::info!(group = group_id, error = %e, "removing lapsed share members failed"),
                _ => {}
            }
        }
        removed
    }
}
