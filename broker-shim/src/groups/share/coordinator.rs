//! `ShareGroups`: the KIP-932 share groups this broker coordinates, each a [`Group`] behind its
//! own lock. Owns loading a group from the coordinator cluster on first use (a broker taking a
//! group over continues its members), storing every change before the heartbeat that made it is
//! answered, by compare-and-set on the version it read (a broker that did not read another's last
//! store is refused, answers NOT_COORDINATOR and reloads: no answered change is overwritten),
//! and the session timers (a member silent for the session timeout is removed).
//!
//! A group is stored as the classic ones are (`ConsumerGroup` through [`GroupStore`]), its
//! protocol type "share" and its protocol marked [`MARK`], each member as JSON in its
//! `subscription`. It must not speak the Kafka protocol (`kafka::share_groups` does) nor touch
//! share-partition states (`states`).

use crate::incarnation::Incarnation;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_proto::v1::{consumer_group, ConsumerGroup};
use diskless_proto::ErrorCode;

use super::group::{Answer, Catalog, Group, Heartbeat, Member, Refused};
use crate::groups::config::GroupConfig;
use crate::groups::store::{GroupStore, StoreError};

pub const MARK: &str = diskless_proto::SHARE_PROTOCOL_MARK;
pub const PROTOCOL_TYPE: &str = "share";

/// Whether a stored group is a share group.
pub fn is_share_group(g: &ConsumerGroup) -> bool {
    g.protocol.as_deref() == Some(MARK)
}

struct Live {
    group: Group,
    /// The stored version `group` was read or stored at (0: none stored).
    version: u64,
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
    store: Arc<dyn GroupStore>,
    identity: String,
    config: GroupConfig,
    groups: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Live>>>>>,
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
                group_instance_id: None,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: i32::try_from(session_ms).unwrap_or(i32::MAX),
                rebalance_timeout_ms: 0,
                subscription: serde_json::to_vec(m).unwrap_or_else(|e| {
                    // Cannot happen for these types; were it to, the member would be dropped at load.
                    tracing::error!(member = m.member_id, error = %e, "a share group member does not encode");
                    vec![]
                }),
                assignment: vec![],
                member_epoch: m.epoch,
            })
            .collect(),
        updated_ms: 0,
        coordinator: identity.to_string(),
        version: 0,
    }
}

/// The group a stored record holds; `Err` when it is another kind of group with members.
fn from_record(group_id: &str, r: &ConsumerGroup, catalog: &Catalog) -> Result<Group, Refused> {
    if !is_share_group(r) {
        if !r.members.is_empty() || r.protocol.as_deref() == Some(diskless_proto::CONSUMER_PROTOCOL_MARK) {
            return Err(Refused {
                code: ErrorCode::GroupIdNotFound,
                message: format!("Group {group_id} is not a share group."),
            });
        }
        return Ok(Group { epoch: r.generation_id.max(0), ..Group::default() });
    }
    let mut g = Group { epoch: r.generation_id, ..Group::default() };
    for m in &r.members {
        match serde_json::from_slice::<Member>(&m.subscription) {
            Ok(member) if member.member_id == m.member_id => {
                g.members.insert(member.member_id.clone(), member);
            }
            _ => {
                tracing::warn!(group = group_id, member = m.member_id, "a stored share member does not decode; dropped")
            }
        }
    }
    // The targets are recomputed from the members (the same members give the same targets).
    g.epoch -= 1;
    g.bump(catalog);
    g.epoch = r.generation_id;
    Ok(g)
}

impl ShareGroups {
    pub fn new(store: Arc<dyn GroupStore>, config: GroupConfig, me: &Incarnation) -> Arc<ShareGroups> {
        let identity = me.tag();
        Arc::new(ShareGroups { store, identity, config, groups: Mutex::new(HashMap::new()) })
    }

    fn slot(&self, group_id: &str) -> Arc<tokio::sync::Mutex<Option<Live>>> {
        let mut all = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(group_id.to_string()).or_default().clone()
    }

    fn session(&self) -> Duration {
        Duration::from_millis(self.config.share_session_timeout_ms)
    }

    pub fn heartbeat_interval_ms(&self) -> i32 {
        self.config.share_heartbeat_interval_ms
    }

    /// Stores `g` over version `version` (the one read); the version it was stored at.
    async fn put(&self, group_id: &str, g: &Group, version: u64) -> Result<u64, Refused> {
        let record = to_record(g, &self.identity, self.config.share_session_timeout_ms);
        self.store.store(group_id, record, version).await.map_err(|e| match e {
            StoreError::Refused { code: ErrorCode::IllegalGeneration, message } => {
                tracing::info!(group = group_id, message, "another broker stored this share group since it was read");
                Refused { code: ErrorCode::NotCoordinator, message: "the group moved to another coordinator".into() }
            }
            e => {
                tracing::info!(group = group_id, error = %e, "storing a share group failed");
                Refused { code: ErrorCode::CoordinatorNotAvailable, message: "the group could not be stored".into() }
            }
        })
    }

    async fn ensure(
        &self,
        group_id: &str,
        slot: &mut Option<Live>,
        create: bool,
        catalog: &Catalog,
    ) -> Result<(), Refused> {
        if slot.is_some() {
            return Ok(());
        }
        let stored = self.store.load(group_id).await.map_err(|e| {
            tracing::info!(group = group_id, error = %e, "loading a share group failed");
            Refused { code: ErrorCode::CoordinatorLoadInProgress, message: "the group could not be loaded".into() }
        })?;
        let group = match &stored {
            Some(r) => from_record(group_id, r, catalog)?,
            None if create => Group::default(),
            None => {
                return Err(Refused {
                    code: ErrorCode::GroupIdNotFound,
                    message: format!("Group {group_id} not found."),
                })
            }
        };
        let version = stored.as_ref().map_or(0, |r| r.version);
        let now = Instant::now();
        let sessions = group.members.keys().map(|m| (m.clone(), now + self.session())).collect();
        *slot = Some(Live { group, version, sessions });
        Ok(())
    }

    /// A ShareGroupHeartbeat (validated by the caller with `group::validate`).
    pub async fn heartbeat(&self, group_id: &str, hb: &Heartbeat, catalog: &Catalog) -> Result<Answer, Refused> {
        let slot = self.slot(group_id);
        let mut held = slot.lock().await;
        if let Err(e) = self.ensure(group_id, &mut held, hb.member_epoch == 0, catalog).await {
            // Nothing held: the slot goes (unknown group ids leave nothing behind).
            drop(held);
            self.drop_empty_slot(group_id);
            return Err(e);
        }
        let live = held.as_mut().expect("ensured");
        let mut next = live.group.clone();
        let answer = next.heartbeat(hb, catalog, self.config.share_max_size)?;
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
        if answer.member_epoch < 0 {
            live.sessions.remove(&answer.member_id);
        } else {
            live.sessions.insert(answer.member_id.clone(), Instant::now() + self.session());
        }
        Ok(answer)
    }

    /// Whether `member_id` is a member of `group_id` as held here (`None`: the group is not held).
    pub async fn is_member(&self, group_id: &str, member_id: &str) -> Option<bool> {
        let slot = self.groups.lock().unwrap_or_else(|e| e.into_inner()).get(group_id).cloned()?;
        let held = slot.lock().await;
        held.as_ref().map(|l| l.group.members.contains_key(member_id))
    }

    /// Whether this broker holds `group_id` with members.
    pub async fn has_members(&self, group_id: &str) -> bool {
        let slot = self.groups.lock().unwrap_or_else(|e| e.into_inner()).get(group_id).cloned();
        match slot {
            Some(s) => s.lock().await.as_ref().is_some_and(|l| !l.group.members.is_empty()),
            None => false,
        }
    }

    /// ShareGroupDescribe: as held here, else as stored (describing takes nothing over).
    pub async fn describe(&self, group_id: &str, catalog: &Catalog) -> Result<Described, Refused> {
        let described = |g: &Group| Described {
            epoch: g.epoch,
            state: g.state_name(),
            members: g.members.values().cloned().collect(),
        };
        let slot = self.groups.lock().unwrap_or_else(|e| e.into_inner()).get(group_id).cloned();
        if let Some(slot) = slot {
            if let Some(live) = slot.lock().await.as_ref() {
                return Ok(described(&live.group));
            }
        }
        match self.store.load(group_id).await {
            Ok(Some(r)) if is_share_group(&r) => Ok(described(&from_record(group_id, &r, catalog)?)),
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

    fn drop_empty_slot(&self, group_id: &str) {
        let mut all = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if all.get(group_id).is_some_and(|s| s.try_lock().is_ok_and(|g| g.is_none())) {
            all.remove(group_id);
        }
    }

    /// Drops a group from memory (deleted, or another broker coordinates it now).
    pub fn release(&self, group_id: &str) {
        self.groups.lock().unwrap_or_else(|e| e.into_inner()).remove(group_id);
    }

    /// The groups held here.
    pub fn held(&self) -> Vec<String> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    /// One pass of the session timers: silent members are removed (one epoch bump per group),
    /// and returned by group so what they hold can be given back.
    pub async fn tick(&self, catalog: &Catalog) -> Vec<(String, Vec<Member>)> {
        let now = Instant::now();
        let slots: Vec<(String, Arc<tokio::sync::Mutex<Option<Live>>>)> = {
            let all = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            all.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut removed = vec![];
        for (group_id, slot) in slots {
            let mut held = slot.lock().await;
            let Some(live) = held.as_mut() else { continue };
            let gone: Vec<String> =
                live.sessions.iter().filter(|(_, until)| **until <= now).map(|(m, _)| m.clone()).collect();
            if gone.is_empty() {
                continue;
            }
            let mut next = live.group.clone();
            let ids: Vec<&str> = gone.iter().map(String::as_str).collect();
            next.remove_all(&ids, catalog);
            match self.put(&group_id, &next, live.version).await {
                Ok(version) => {
                    for m in &gone {
                        tracing::info!(
                            group = group_id,
                            member = m,
                            "share group member removed: its session timed out"
                        );
                        live.sessions.remove(m);
                    }
                    let members = gone.iter().filter_map(|m| live.group.members.get(m).cloned()).collect();
                    (live.group, live.version) = (next, version);
                    removed.push((group_id.clone(), members));
                }
                Err(e) if e.code == ErrorCode::NotCoordinator => *held = None,
                Err(_) => {}
            }
        }
        removed
    }
}
