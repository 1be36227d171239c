//! One KIP-848 consumer group, as Kafka's `GroupMetadataManager.consumerGroupHeartbeat` and
//! `consumerGroupLeave` drive it: members join, heartbeat and leave; a change of the members or
//! their subscriptions (or of the subscribed topics' partitions) bumps the group epoch and
//! recomputes every member's target assignment (`assignor`); each heartbeat moves its member one
//! step towards its target (`reconcile`). Pure: no lock, clock or I/O; the coordinator
//! (`coordinator`) stores what changed before it answers, and runs the timers.
//!
//! Targets are computed when the epoch is bumped (Kafka computes them on the next heartbeat), so
//! the assignment epoch is always the group epoch.

use crate::error::KafkaError;
use std::collections::{BTreeMap, BTreeSet};

use diskless_proto::ErrorCode;
use serde::{Deserialize, Serialize};

use super::assignor::{self, Assignment, MemberSpec, TopicId};
use super::reconcile::{self, Current, MemberState};

/// The topics a group may subscribe to: name → (id, partition count).
pub type Catalog = BTreeMap<String, (TopicId, i32)>;

/// A refused heartbeat: Kafka's code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: ErrorCode,
    pub message: String,
}

impl From<Refused> for KafkaError {
    fn from(r: Refused) -> KafkaError {
        KafkaError::new(r.code, r.message)
    }
}

impl From<KafkaError> for Refused {
    fn from(e: KafkaError) -> Refused {
        Refused { code: e.code, message: e.message }
    }
}

fn refused(code: ErrorCode, message: impl Into<String>) -> Refused {
    Refused { code, message: message.into() }
}

/// A ConsumerGroupHeartbeat as the handler decoded it (None: not sent, unchanged).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub version: i16,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_names: Option<Vec<String>>,
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// What a heartbeat is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub member_id: String,
    pub member_epoch: i32,
    /// The member's assignment, when it must learn it (None: unchanged).
    pub assignment: Option<Assignment>,
}

/// One member, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub subscribed_names: BTreeSet<String>,
    /// "" for none.
    pub subscribed_regex: String,
    pub server_assignor: Option<String>,
    pub current: Current,
    #[serde(with = "super::assignor::as_pairs")]
    pub target: Assignment,
}

impl Member {
    fn new(member_id: &str) -> Member {
        Member {
            member_id: member_id.to_string(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: -1,
            subscribed_names: BTreeSet::new(),
            subscribed_regex: String::new(),
            server_assignor: None,
            current: Current { epoch: 0, previous_epoch: -1, ..Current::default() },
            target: Assignment::new(),
        }
    }

    /// The topics it subscribes to that exist, by name and by its expression.
    fn topics(&self, catalog: &Catalog) -> BTreeSet<TopicId> {
        let regex = if self.subscribed_regex.is_empty() { None } else { compile(&self.subscribed_regex).ok() };
        catalog
            .iter()
            .filter(|(name, _)| {
                self.subscribed_names.contains(*name) || regex.as_ref().is_some_and(|r| r.is_match(name))
            })
            .map(|(_, (id, _))| *id)
            .collect()
    }
}

/// A subscription's regular expression, matched against whole topic names (Kafka's RE2J
/// `matches`).
pub fn compile(expression: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{expression})$")).size_limit(1 << 20).build()
}

/// Kafka's `ConsumerGroup` state names.
pub fn state_name(g: &Group) -> &'static str {
    if g.members.is_empty() {
        "Empty"
    } else if g.members.values().all(|m| m.current.state == MemberState::Stable && m.current.epoch == g.epoch) {
        "Stable"
    } else {
        "Reconciling"
    }
}

/// The group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Group {
    /// The group epoch (and the target assignment's).
    pub epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// The subscribed topics' ids and partition counts the targets were computed for (None: not
    /// known, as after loading: the next heartbeat recomputes them).
    pub metadata: Option<BTreeMap<TopicId, i32>>,
}

/// The most topic names one member may subscribe to by name.
pub const MAX_SUBSCRIBED_NAMES: usize = 10_000;
/// The longest subscription expression, in bytes.
pub const MAX_REGEX_BYTES: usize = 4_096;

/// Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`.
pub fn validate(hb: &Heartbeat) -> Result<(), Refused> {
    let blank = |s: &Option<String>| s.as_ref().is_some_and(|s| s.trim().is_empty());
    let invalid = |m: &str| Err(refused(ErrorCode::InvalidRequest, m));
    if (hb.version >= 1 || hb.member_epoch > 0 || hb.member_epoch == -1) && hb.member_id.trim().is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if blank(&hb.instance_id) {
        return invalid("InstanceId can't be empty.");
    }
    if blank(&hb.rack_id) {
        return invalid("RackId can't be empty.");
    }
    match hb.member_epoch {
        0 => {
            if hb.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if hb.owned.as_ref().is_none_or(|o| o.values().any(|ps| !ps.is_empty())) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if hb.subscribed_names.is_none() && hb.subscribed_regex.is_none() {
                return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.");
            }
        }
        -2 if hb.instance_id.is_none() => return invalid("InstanceId can't be null."),
        e if e < -2 => return invalid("MemberEpoch is invalid."),
        _ => {}
    }
    // Bounds of ours (the whole group is one stored record, and every heartbeat matches the
    // subscriptions against the catalog): far above what a consumer sends.
    if hb.subscribed_names.as_ref().is_some_and(|n| n.len() > MAX_SUBSCRIBED_NAMES) {
        return invalid("SubscribedTopicNames lists too many topics.");
    }
    if hb.subscribed_regex.as_ref().is_some_and(|r| r.len() > MAX_REGEX_BYTES) {
        return Err(refused(ErrorCode::InvalidRegularExpression, "SubscribedTopicRegex is too long."));
    }
    if let Some(a) = hb.server_assignor.as_ref().filter(|a| !assignor::ASSIGNORS.contains(&a.as_str())) {
        return Err(refused(ErrorCode::UnsupportedAssignor, format!("ServerAssignor {a} is not supported.")));
    }
    if let Some(r) = hb.subscribed_regex.as_ref().filter(|r| !r.is_empty()) {
        if let Err(e) = compile(r) {
            return Err(refused(ErrorCode::InvalidRegularExpression, format!("SubscribedTopicRegex {r}: {e}")));
        }
    }
    Ok(())
}

fn subset(a: &Assignment, of: &Assignment) -> bool {
    a.iter().all(|(t, ps)| ps.is_empty() || of.get(t).is_some_and(|o| ps.is_subset(o)))
}

impl Group {
    /// The member with static instance id `instance`.
    fn static_member(&self, instance: &str) -> Option<&Member> {
        self.members.values().find(|m| m.instance_id.as_deref() == Some(instance))
    }

    /// A heartbeat (joins, leaves included), validated. The caller stores the group when it changed.
    pub fn heartbeat(&mut self, hb: &Heartbeat, catalog: &Catalog) -> Result<Answer, Refused> {
        if hb.member_epoch == -1 || hb.member_epoch == -2 {
            return self.leave(hb, catalog);
        }
        let (mut member, replaced) = self.member_for(hb)?;
        let before = member.clone();
        if let Some(i) = &hb.instance_id {
            member.instance_id = Some(i.clone());
        }
        if let Some(r) = &hb.rack_id {
            member.rack_id = Some(r.clone());
        }
        if hb.rebalance_timeout_ms != -1 {
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(a) = &hb.server_assignor {
            member.server_assignor = Some(a.clone());
        }
        if let Some(names) = &hb.subscribed_names {
            member.subscribed_names = names.iter().cloned().collect();
        }
        if let Some(r) = &hb.subscribed_regex {
            member.subscribed_regex = r.clone();
        }
        member.client_id = hb.client_id.clone();
        member.client_host = hb.client_host.clone();
        let subscription_changed = before.subscribed_names != member.subscribed_names
            || before.subscribed_regex != member.subscribed_regex
            || before.server_assignor != member.server_assignor;
        if let Some(old) = &replaced {
            self.members.remove(old);
        }
        self.members.insert(member.member_id.clone(), member);
        let metadata = self.metadata_of(catalog);
        if self.epoch == 0 || subscription_changed || self.metadata.as_ref() != Some(&metadata) {
            self.bump(catalog);
        }
        let id = hb.member_id.clone();
        let current = self.members[&id].current.clone();
        let target = self.members[&id].target.clone();
        let next = {
            let held = |t: &TopicId, p: i32| {
                self.members.values().any(|m| {
                    m.member_id != id
                        && (m.current.assigned.get(t).is_some_and(|ps| ps.contains(&p))
                            || m.current.pending_revocation.get(t).is_some_and(|ps| ps.contains(&p)))
                })
            };
            reconcile::reconcile(&current, self.epoch, &target, &held, hb.owned.as_ref())
                .map_err(|_| refused(ErrorCode::FencedMemberEpoch, "The member must rejoin: its epoch is fenced."))?
        };
        let m = self.members.get_mut(&id).expect("inserted above");
        m.current = next;
        let full = hb.rebalance_timeout_ms != -1
            && (hb.subscribed_names.is_some() || hb.subscribed_regex.is_some())
            && hb.owned.is_some();
        let tell = hb.member_epoch == 0 || full || before.current.assigned != m.current.assigned;
        Ok(Answer {
            member_id: id,
            member_epoch: m.current.epoch,
            assignment: tell.then(|| m.current.assigned.clone()),
        })
    }

    /// The member a (non-leaving) heartbeat speaks for, created when it joins; and the id of a
    /// static member it replaces.
    fn member_for(&self, hb: &Heartbeat) -> Result<(Member, Option<String>), Refused> {
        let epoch = hb.member_epoch;
        let Some(instance) = &hb.instance_id else {
            let member = match self.members.get(&hb.member_id) {
                Some(m) => m.clone(),
                None if epoch == 0 => Member::new(&hb.member_id),
                None => {
                    return Err(refused(
                        ErrorCode::UnknownMemberId,
                        format!("Member {} is not a member of the group.", hb.member_id),
                    ))
                }
            };
            check_epoch(&member, hb)?;
            return Ok((member, None));
        };
        match (self.static_member(instance), epoch) {
            (None, 0) => Ok((Member::new(&hb.member_id), None)),
            (Some(old), 0) => {
                if old.current.epoch != -2 {
                    return Err(refused(
                        ErrorCode::UnreleasedInstanceId,
                        format!("Static member {} with instance id {instance} is still in the group.", old.member_id),
                    ));
                }
                // The same instance back: it takes the leaving member's place and assignment.
                let mut m = old.clone();
                m.member_id = hb.member_id.clone();
                m.current.epoch = 0;
                m.current.previous_epoch = 0;
                let replaced = (old.member_id != hb.member_id).then(|| old.member_id.clone());
                Ok((m, replaced))
            }
            (None, _) => Err(refused(ErrorCode::UnknownMemberId, format!("Instance id {instance} is unknown."))),
            (Some(m), _) if m.member_id != hb.member_id => Err(refused(
                ErrorCode::FencedInstanceId,
                format!("Static member {} with instance id {instance} was replaced.", hb.member_id),
            )),
            (Some(m), _) => {
                check_epoch(m, hb)?;
                Ok((m.clone(), None))
            }
        }
    }

    fn leave(&mut self, hb: &Heartbeat, catalog: &Catalog) -> Result<Answer, Refused> {
        let id = match &hb.instance_id {
            None => self.members.get(&hb.member_id).map(|m| m.member_id.clone()).ok_or_else(|| {
                refused(ErrorCode::UnknownMemberId, format!("Member {} is not a member of the group.", hb.member_id))
            })?,
            Some(instance) => {
                let m = self.static_member(instance).ok_or_else(|| {
                    refused(ErrorCode::UnknownMemberId, format!("Instance id {instance} is unknown."))
                })?;
                if m.member_id != hb.member_id {
                    return Err(refused(
                        ErrorCode::FencedInstanceId,
                        format!("Static member {} with instance id {instance} was replaced.", hb.member_id),
                    ));
                }
                m.member_id.clone()
            }
        };
        if hb.member_epoch == -2 {
            // A static member leaving for a while keeps its partitions until its session ends.
            let m = self.members.get_mut(&id).expect("found above");
            m.current.epoch = -2;
            m.current.pending_revocation.clear();
            return Ok(Answer { member_id: id, member_epoch: -2, assignment: None });
        }
        self.remove(&id, catalog);
        Ok(Answer { member_id: id, member_epoch: -1, assignment: None })
    }

    /// Removes a member (it left, or its session or rebalance timed out): the epoch is bumped and
    /// the others' targets recomputed. Whether it was a member.
    pub fn remove(&mut self, member_id: &str, catalog: &Catalog) -> bool {
        self.remove_all(&[member_id], catalog) == 1
    }

    /// Removes members (the timers': one epoch bump for all of them); how many were members.
    pub fn remove_all(&mut self, member_ids: &[&str], catalog: &Catalog) -> usize {
        let removed = member_ids.iter().filter(|m| self.members.remove(**m).is_some()).count();
        if removed > 0 {
            self.bump(catalog);
        }
        removed
    }

    /// Every subscribed topic's id and partition count.
    fn metadata_of(&self, catalog: &Catalog) -> BTreeMap<TopicId, i32> {
        let ids: BTreeSet<TopicId> = self.members.values().flat_map(|m| m.topics(catalog)).collect();
        catalog.values().filter(|(id, _)| ids.contains(id)).map(|(id, n)| (*id, *n)).collect()
    }

    /// A new group epoch and every member's target for it.
    pub fn bump(&mut self, catalog: &Catalog) {
        self.epoch += 1;
        let metadata = self.metadata_of(catalog);
        let specs: Vec<MemberSpec> = self
            .members
            .values()
            .map(|m| MemberSpec {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                topics: m.topics(catalog),
                previous: m.target.clone(),
            })
            .collect();
        let name = self.assignor();
        let targets = assignor::assign(name, &specs, &metadata);
        for (id, target) in targets {
            if let Some(m) = self.members.get_mut(&id) {
                m.target = target;
            }
        }
        self.metadata = Some(metadata);
    }

    /// The assignor the members prefer most (ties: the first of Kafka's list), else the default.
    pub fn assignor(&self) -> &'static str {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.server_assignor.as_deref() {
                *counts.entry(a).or_default() += 1;
            }
        }
        assignor::ASSIGNORS
            .iter()
            .copied()
            .max_by_key(|a| (counts.get(a).copied().unwrap_or(0), std::cmp::Reverse(*a == "range")))
            .unwrap_or(assignor::ASSIGNORS[0])
    }

    /// OffsetCommit's check of a consumer-protocol member (Kafka's `ConsumerGroup
    /// .validateOffsetCommit`); the cluster checks again against the stored members' epochs.
    pub fn check_commit(&self, member_id: &str, member_epoch: i32) -> Result<(), ErrorCode> {
        if member_epoch < 0 && member_id.is_empty() && self.members.is_empty() {
            return Ok(());
        }
        let m = self.members.get(member_id).ok_or(ErrorCode::UnknownMemberId)?;
        if m.current.epoch != member_epoch {
            return Err(ErrorCode::StaleMemberEpoch);
        }
        Ok(())
    }
}

/// Kafka's `throwIfConsumerGroupMemberEpochIsInvalid` (4.2's: an existing member may rejoin with
/// epoch 0, keeping what it was given).
fn check_epoch(m: &Member, hb: &Heartbeat) -> Result<(), Refused> {
    let (got, have) = (hb.member_epoch, m.current.epoch);
    let fenced = || {
        Err(refused(
            ErrorCode::FencedMemberEpoch,
            format!("The consumer group member has a greater member epoch ({have}) than the one received ({got})."),
        ))
    };
    if got == 0 || got == have {
        return Ok(());
    }
    if got > have {
        return Err(refused(
            ErrorCode::FencedMemberEpoch,
            format!("The consumer group member has a smaller member epoch ({have}) than the one received ({got})."),
        ));
    }
    // An answer lost: the previous epoch is taken if what it owns is within its assignment.
    if got != m.current.previous_epoch || !hb.owned.as_ref().is_some_and(|o| subset(o, &m.current.assigned)) {
        return fenced();
    }
    Ok(())
}
