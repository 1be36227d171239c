//! The classic group protocol's state machine for one group, as Kafka's `GroupMetadata` and the
//! transitions its group coordinator makes: members, generations, the join phase (every member
//! rejoins, or the rebalance timeout drops those that did not; the initial delay of an empty
//! group), the sync phase (the leader's assignment), session timeouts, static membership
//! (`group.instance.id`: a member coming back under a new member id), and which record of the
//! group must be stored when.
//!
//! Pure: time comes in as `now`, a new member's id from the caller; each transition says whether
//! the group must be stored (its `record()`, by compare-and-set on `version`); members waiting in
//! a join or sync are answered through their oneshot senders. It must not lock, read a clock, draw randomness or do I/O: that is
//! `coordinator`'s, which holds every group behind one lock and stores the records.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::v1::{consumer_group, ConsumerGroup};
use diskless_proto::ErrorCode;
use tokio::sync::oneshot;

use super::api::{Described, JoinOutcome, JoinRequest, SyncOutcome};

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

pub(super) struct Member {
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

pub(super) struct Group {
    /// The version of the stored group this view continues (0: none stored): its next store is
    /// a compare-and-set on it.
    pub(super) version: u64,
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
    pub(super) fn empty() -> Group {
        Group {
            version: 0,
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
    pub(super) fn loaded(g: ConsumerGroup, now: Instant) -> Group {
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
            version: g.version,
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

    pub(super) fn record(&self) -> ConsumerGroup {
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
                    member_epoch: 0,
                })
                .collect(),
            updated_ms: 0,
            coordinator: String::new(),
            version: 0,
        }
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default()
    }

    /// Starts a rebalance (or keeps the one in progress): pending syncs are told to rejoin.
    pub(super) fn prepare_rebalance(&mut self, now: Instant, initial_delay: Duration) {
        if self.state == State::PreparingRebalance {
            return;
        }
        for m in self.members.values_mut() {
            if let Some(tx) = m.sync.take() {
                let _ = tx.send(SyncOutcome { error: ErrorCode::RebalanceInProgress, ..Default::default() });
            }
        }
        if self.state == State::Empty {
            self.not_before = Some(now + initial_delay);
        }
        self.state = State::PreparingRebalance;
        self.rebalance_deadline = Some(now + self.max_rebalance_timeout().max(initial_delay));
    }

    /// Completes the join phase if every member rejoined (after the initial delay) or the
    /// rebalance timeout passed (dropping those that did not). True when the group became empty
    /// (to be stored).
    pub(super) fn maybe_complete_join(&mut self, now: Instant) -> bool {
        if self.state != State::PreparingRebalance {
            return false;
        }
        let all_joined = self.members.values().all(|m| m.join.is_some());
        let timed_out = self.rebalance_deadline.is_some_and(|d| now >= d);
        let delayed = self.not_before.is_some_and(|t| now < t);
        if !(timed_out || (all_joined && !delayed)) {
            return false;
        }
        self.members.retain(|_, m| m.join.is_some());
        self.generation += 1;
        self.rebalance_deadline = None;
        self.not_before = None;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.protocol = None;
            self.leader = None;
            return true;
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
                    error: ErrorCode::None,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol: Some(protocol.clone()),
                    leader: leader.clone(),
                    member_id: m.id.clone(),
                    members: if m.id == leader { all.clone() } else { vec![] },
                });
            }
        }
        false
    }

    /// Members whose session lapsed go (those waiting in a join are bound by the rebalance
    /// timeout instead); the group rebalances without them.
    pub(super) fn expire_members(&mut self, now: Instant, initial_delay: Duration) -> bool {
        let before = self.members.len();
        self.members.retain(|_, m| m.join.is_some() || now.duration_since(m.last_seen) <= m.session_timeout);
        if self.members.len() == before {
            return false;
        }
        self.prepare_rebalance(now, initial_delay);
        true
    }

    /// JoinGroup of a member (`req`) in this group, which the coordinator loaded. `was_pending`:
    /// its member id was handed out with MEMBER_ID_REQUIRED; `fresh_id`: the id a member that has
    /// none is given. The member's wait is registered with `tx`.
    pub(super) fn join(
        &mut self,
        req: &JoinRequest,
        was_pending: bool,
        fresh_id: String,
        tx: oneshot::Sender<JoinOutcome>,
        now: Instant,
        initial_delay: Duration,
    ) -> Joined {
        let fail = |error| Joined::Now(JoinOutcome { error, member_id: req.member_id.clone(), ..Default::default() });
        if self.state != State::Empty
            && self.protocol_type.as_deref().is_some_and(|t| t != req.protocol_type)
            && !self.members.is_empty()
        {
            return fail(ErrorCode::InconsistentGroupProtocol);
        }
        let mut id = req.member_id.clone();
        // Static membership: the instance id names the member; a new member id replaces the old.
        let static_old = req.group_instance_id.as_ref().and_then(|inst| {
            self.members.values().find(|m| m.instance_id.as_ref() == Some(inst)).map(|m| m.id.clone())
        });
        if let Some(old) = &static_old {
            if !id.is_empty() && &id != old {
                return fail(ErrorCode::FencedInstanceId);
            }
            if id.is_empty() {
                id = fresh_id.clone();
                let Some(mut m) = self.members.remove(old) else { return fail(ErrorCode::UnknownMemberId) };
                m.id = id.clone();
                if let Some(tx) = m.join.take() {
                    let _ = tx.send(JoinOutcome { error: ErrorCode::FencedInstanceId, ..Default::default() });
                }
                if let Some(tx) = m.sync.take() {
                    let _ = tx.send(SyncOutcome { error: ErrorCode::FencedInstanceId, ..Default::default() });
                }
                let same = m.protocols == req.protocols;
                self.members.insert(id.clone(), m);
                if self.leader.as_ref() == Some(old) {
                    self.leader = Some(id.clone());
                }
                if self.state == State::Stable && same && self.leader.as_ref() != Some(&id) {
                    // Back with the same subscription: no rebalance; it syncs its assignment.
                    if let Some(m) = self.members.get_mut(&id) {
                        m.last_seen = now;
                    }
                    let out = JoinOutcome {
                        error: ErrorCode::None,
                        generation: self.generation,
                        protocol_type: self.protocol_type.clone(),
                        protocol: self.protocol.clone(),
                        leader: self.leader.clone().unwrap_or_default(),
                        member_id: id,
                        members: vec![],
                    };
                    return Joined::Rejoined(out);
                }
            }
        } else if !id.is_empty() && !self.members.contains_key(&id) && !was_pending {
            return fail(ErrorCode::UnknownMemberId);
        }
        if id.is_empty() {
            id = fresh_id;
        }
        let member = self.members.entry(id.clone()).or_insert_with(|| Member {
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
            let _ = old.send(JoinOutcome { error: ErrorCode::UnknownMemberId, ..Default::default() });
        }
        let wait = member.rebalance_timeout.max(member.session_timeout);
        self.protocol_type = Some(req.protocol_type.clone());
        if self.state != State::PreparingRebalance || changed {
            self.prepare_rebalance(now, initial_delay);
        }
        // Each join pushes the initial delay on, within the rebalance timeout.
        if let (Some(nb), Some(deadline)) = (self.not_before, self.rebalance_deadline) {
            self.not_before = Some((now + initial_delay).min(deadline).max(nb));
        }
        let store = self.maybe_complete_join(now);
        Joined::Waiting { wait, store }
    }

    /// SyncGroup's checks; registers the member's wait with `tx`. `Ok(true)`: the leader's
    /// assignment, to store before anyone learns it; `Ok(false)`: wait; `Err`: the answer now.
    pub(super) fn sync(
        &mut self,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
        tx: oneshot::Sender<SyncOutcome>,
        now: Instant,
    ) -> Result<bool, SyncOutcome> {
        let fail = |error| SyncOutcome { error, ..Default::default() };
        let Some(m) = self.members.get_mut(member_id) else { return Err(fail(ErrorCode::UnknownMemberId)) };
        if generation != self.generation {
            return Err(fail(ErrorCode::IllegalGeneration));
        }
        m.last_seen = now;
        match self.state {
            State::Empty => return Err(fail(ErrorCode::UnknownMemberId)),
            State::PreparingRebalance => return Err(fail(ErrorCode::RebalanceInProgress)),
            State::Stable => {
                return Err(SyncOutcome {
                    error: ErrorCode::None,
                    protocol_type: self.protocol_type.clone(),
                    protocol: self.protocol.clone(),
                    assignment: m.assignment.clone(),
                })
            }
            State::CompletingRebalance => {}
        }
        m.sync = Some(tx);
        if self.leader.as_deref() != Some(member_id) {
            return Ok(false);
        }
        let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
        for m in self.members.values_mut() {
            m.assignment = given.remove(&m.id).unwrap_or_default();
        }
        Ok(true)
    }

    /// After the leader's assignment of `generation` was stored (`Ok`) or refused with a code:
    /// answers the members' SyncGroups.
    pub(super) fn synced(&mut self, generation: i32, stored: Result<(), ErrorCode>, now: Instant) -> Synced {
        if self.generation != generation || self.state != State::CompletingRebalance {
            return Synced::Ignored;
        }
        match stored {
            Ok(()) => {
                self.state = State::Stable;
                for m in self.members.values_mut() {
                    if let Some(tx) = m.sync.take() {
                        let _ = tx.send(SyncOutcome {
                            error: ErrorCode::None,
                            protocol_type: self.protocol_type.clone(),
                            protocol: self.protocol.clone(),
                            assignment: m.assignment.clone(),
                        });
                    }
                }
                Synced::Stable
            }
            Err(code) => {
                for m in self.members.values_mut() {
                    if let Some(tx) = m.sync.take() {
                        let _ = tx.send(SyncOutcome { error: code, ..Default::default() });
                    }
                }
                if code == ErrorCode::IllegalGeneration {
                    // The cluster holds a newer generation: another broker coordinated the group
                    // meanwhile.
                    Synced::Deposed
                } else {
                    self.prepare_rebalance(now, Duration::ZERO);
                    Synced::Rebalancing
                }
            }
        }
    }

    pub(super) fn heartbeat(&mut self, generation: i32, member_id: &str, now: Instant) -> ErrorCode {
        let state = self.state;
        let current = self.generation;
        let Some(m) = self.members.get_mut(member_id) else { return ErrorCode::UnknownMemberId };
        m.last_seen = now;
        if state == State::PreparingRebalance {
            return ErrorCode::RebalanceInProgress;
        }
        if generation != current {
            return ErrorCode::IllegalGeneration;
        }
        ErrorCode::None
    }

    /// LeaveGroup: per member (by member id, or by instance id for static members), a code; and
    /// whether the group emptied (to be stored).
    pub(super) fn leave(&mut self, members: &[(String, Option<String>)], now: Instant) -> (Vec<ErrorCode>, bool) {
        let mut out = vec![];
        for (id, instance) in members {
            let found = match instance {
                Some(inst) => self
                    .members
                    .values()
                    .find(|m| m.instance_id.as_ref() == Some(inst))
                    .map(|m| m.id.clone())
                    .filter(|found| id.is_empty() || found == id)
                    .ok_or(if self.members.values().any(|m| m.instance_id.as_ref() == Some(inst)) {
                        ErrorCode::FencedInstanceId
                    } else {
                        ErrorCode::UnknownMemberId
                    }),
                None => Some(id.clone()).filter(|id| self.members.contains_key(id)).ok_or(ErrorCode::UnknownMemberId),
            };
            match found {
                Ok(id) => {
                    if let Some(mut m) = self.members.remove(&id) {
                        if let Some(tx) = m.join.take() {
                            let _ = tx.send(JoinOutcome { error: ErrorCode::UnknownMemberId, ..Default::default() });
                        }
                    }
                    out.push(ErrorCode::None);
                }
                Err(e) => out.push(e),
            }
        }
        let mut store = false;
        if out.contains(&ErrorCode::None) {
            self.prepare_rebalance(now, Duration::ZERO);
            self.not_before = None;
            store = self.maybe_complete_join(now);
        }
        (out, store)
    }

    /// Kafka's checks of an OffsetCommit against the live group (the cluster checks again against
    /// the stored generation). A member's commit counts as a sign of life.
    pub(super) fn check_commit(&mut self, generation: i32, member_id: &str, now: Instant) -> Result<(), ErrorCode> {
        if generation < 0 && member_id.is_empty() {
            return if self.members.is_empty() { Ok(()) } else { Err(ErrorCode::UnknownMemberId) };
        }
        let (state, current) = (self.state, self.generation);
        let Some(m) = self.members.get_mut(member_id) else { return Err(ErrorCode::UnknownMemberId) };
        m.last_seen = now;
        if state == State::CompletingRebalance {
            return Err(ErrorCode::RebalanceInProgress);
        }
        if generation != current {
            return Err(ErrorCode::IllegalGeneration);
        }
        Ok(())
    }

    /// DescribeGroups' view: assignments only once the group is stable.
    pub(super) fn describe(&self) -> Described {
        let protocol = self.protocol.clone().unwrap_or_default();
        let stable = self.state == State::Stable;
        Described {
            state: self.state.name(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            members: self
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
        }
    }

    /// Protocol type and state name, as ListGroups shows them.
    pub(super) fn summary(&self) -> (String, &'static str) {
        (self.protocol_type.clone().unwrap_or_default(), self.state.name())
    }

    pub(super) fn has_members(&self) -> bool {
        !self.members.is_empty()
    }
}

/// What a JoinGroup did to the group.
pub(super) enum Joined {
    /// Answered at once.
    Now(JoinOutcome),
    /// A static member came back with the same subscription: without a rebalance; the group
    /// (with the member's new id) is to be stored, then the member answered.
    Rejoined(JoinOutcome),
    /// The member waits for the rebalance to complete (its timeouts bound the wait, `wait`);
    /// `store`: the group emptied and is to be stored.
    Waiting { wait: Duration, store: bool },
}

/// What storing the leader's assignment did to the group.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Synced {
    /// Another generation or phase by now: nothing.
    Ignored,
    /// Stored: the group is stable, the members have their assignments.
    Stable,
    /// Not stored: the members were told, the group rebalances.
    Rebalancing,
    /// Refused for a newer generation: this view of the group is stale and must be dropped.
    Deposed,
}
