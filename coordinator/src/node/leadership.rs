//! Moving a metadata partition's leadership to another voter, for the leader balancer and for an
//! operator's `TransferLeader`, without ever leaving the partition leaderless.
//!
//! openraft's `transfer_leader` is not free to get wrong: from the moment it is called, the leader
//! refuses every write (`ForwardToLeader`, reason `LeadershipTransfer`), stops its heartbeats and
//! gives up its lease, and it stays so until a higher vote reaches it. Nothing times the transfer
//! out. A target that cannot take over — down, paused, cut off, or a replica whose disk was wiped
//! and which refuses every message for the incarnation it lost — leaves the partition with a
//! leader that serves nothing until some other voter wins an election, which it may not do soon
//! (the fault suite saw a partition take no write for minutes while its leader handed leadership every 2 s
//! to a wiped node).
//!
//! So a transfer here is one guarded step:
//! 1. **Only to a replica that can lead now** ([`fitness`]): a voter whose replication answered
//!    this leader within an election timeout and whose log is within [`CAUGHT_UP_LAG`] entries of
//!    the leader's, and which, asked who it is just before (`Identify`), answers as the replica
//!    the membership knows. A wiped replica answers no Raft message (its refusal is
//!    "unreachable" to openraft) and names a new incarnation, so it is never chosen, however
//!    caught up the leader remembers it.
//! 2. **Watched**: the leader waits up to [`Node::transfer_wait`] (a maximum election timeout)
//!    for another node to take over. If none did, the target is backed off (the balancer skips it for
//!    [`BACKOFF_FIRST`], doubling at each failure up to [`BACKOFF_MAX`]; a success clears it) and
//!    the leadership is handed instead to the best other voter that could lead when the transfer
//!    began (a transfer election needs no lease to expire), so the partition has a serving leader
//!    again within a few election timeouts of the failed transfer, whatever the target does (a
//!    target that campaigned but could not reach the others holds the highest vote of that term
//!    and can cost the hand-over one more round).
//!
//! Owns the target rule, the watch, the rescue and the backoffs. It must not decide *which* node
//! should lead (that is the balancer's preferred leader in `duties`, or the operator's choice) nor
//! change memberships (`membership`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use openraft::type_config::TypeConfigExt;
use openraft::Instant as _;
use openraft::{RaftMetrics, ServerState};

use super::{Node, RouteError};
use crate::raft::{NodeId, TypeConfig};

/// How many entries behind the leader's log a target may be: it flushes them before it campaigns
/// (openraft waits up to an election timeout for that).
pub const CAUGHT_UP_LAG: u64 = 16;
/// How long the balancer leaves a target alone after its first failed transfer.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(10);
/// The longest it leaves a target alone after repeated failures.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

type Instant = openraft::type_config::alias::InstantOf<TypeConfig>;

/// Why a voter cannot take leadership of a metadata partition now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// This node is not the partition's leader (only the leader hands leadership over).
    NotLeader,
    /// It is this node.
    Itself,
    /// It is not a voter of the partition.
    NotVoter,
    /// Its replica has not answered this leader for this long (`None`: never since this node
    /// leads): down, cut off, or a replica that lost its disk and refuses every message.
    Silent(Option<Duration>),
    /// Its log is behind: matched up to `matched` (none), the leader's ends at `last`.
    Behind { matched: Option<u64>, last: u64 },
    /// A transfer to it failed recently; tried again after this long.
    BackedOff(Duration),
    /// Asked just before the transfer, it did not answer as the replica the membership knows
    /// (down, cut off, or its data directory was replaced and it must be added again).
    Unanswered(String),
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NotLeader => write!(f, "this node is not the leader"),
            Unfit::Itself => write!(f, "it is the leader already"),
            Unfit::NotVoter => write!(f, "it is not a voter"),
            Unfit::Silent(None) => write!(f, "its replica has not answered this leader"),
            Unfit::Silent(Some(d)) => write!(f, "its replica has not answered this leader for {} ms", d.as_millis()),
            Unfit::Behind { matched: None, last } => {
                write!(f, "its log matches nothing of the leader's yet (the leader's ends at {last})")
            }
            Unfit::Behind { matched: Some(m), last } => {
                write!(f, "its log is {} entries behind (within {CAUGHT_UP_LAG} counts)", last.saturating_sub(*m))
            }
            Unfit::BackedOff(d) => write!(f, "a transfer to it failed recently; next try in {} ms", d.as_millis()),
            Unfit::Unanswered(why) => write!(f, "asked who it is, {why}"),
        }
    }
}

/// Whether `to` could take leadership from this leader (metrics `m`) at `now`: a voter whose
/// replica answered within `answered_within` and whose log is caught up (see the module's
/// documentation).
pub fn fitness(m: &RaftMetrics<TypeConfig>, to: NodeId, now: Instant, answered_within: Duration) -> Result<(), Unfit> {
    if m.state != ServerState::Leader {
        return Err(Unfit::NotLeader);
    }
    if to == m.id {
        return Err(Unfit::Itself);
    }
    if !m.membership_config.membership().voter_ids().any(|v| v == to) {
        return Err(Unfit::NotVoter);
    }
    let acked = m.heartbeat.as_ref().and_then(|h| h.get(&to).cloned().flatten()).map(|t| *t);
    match acked {
        None => return Err(Unfit::Silent(None)),
        Some(t) => {
            let silent = now.saturating_duration_since(t);
            if silent > answered_within {
                return Err(Unfit::Silent(Some(silent)));
            }
        }
    }
    let last = m.last_log_index.unwrap_or(0);
    let matched = m.replication.as_ref().and_then(|r| r.get(&to).cloned().flatten()).map(|l| l.index);
    if matched.is_none_or(|i| i.saturating_add(CAUGHT_UP_LAG) < last) {
        return Err(Unfit::Behind { matched, last });
    }
    Ok(())
}

/// Failed transfers per (metadata partition, target): when the balancer may try that target again.
#[derive(Default)]
pub struct Backoffs {
    inner: Mutex<HashMap<(u32, NodeId), (u32, Instant)>>,
}

impl Backoffs {
    /// How long `to` is still left alone for `g` at `now` (`None`: not backed off).
    pub fn remaining(&self, g: u32, to: NodeId, now: Instant) -> Option<Duration> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.get(&(g, to)).map(|(_, until)| until.saturating_duration_since(now)).filter(|d| !d.is_zero())
    }

    /// A transfer of `g` to `to` failed at `now`: doubles its backoff (bounded); returns it.
    pub fn failed(&self, g: u32, to: NodeId, now: Instant) -> Duration {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let failures = inner.get(&(g, to)).map_or(0, |(n, _)| *n).saturating_add(1);
        let wait = backoff_after(failures);
        inner.insert((g, to), (failures, now + wait));
        wait
    }

    /// A transfer of `g` to `to` succeeded: forgets its failures.
    pub fn succeeded(&self, g: u32, to: NodeId) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).remove(&(g, to));
    }
}

/// The backoff after `failures` consecutive failed transfers to one target.
fn backoff_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_FIRST.saturating_mul(1 << doublings).min(BACKOFF_MAX)
}

/// How a transfer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handover {
    /// The target leads now.
    Done,
    /// The target did not take over: this node stepped down and `leader` was elected instead (a
    /// follower's own election timeout ran out first), or no leader is known yet (`None`: an
    /// election is under way).
    ElectedInstead { leader: Option<NodeId> },
    /// The target did not take over in time and this node still led: leadership was handed to
    /// `rescuer` (`leader`: who leads after it, if known), or, when `rescuer` is `None`, no other
    /// voter could lead: the partition elects a leader as Raft does once its followers' election
    /// timeouts run out.
    Rescued { rescuer: Option<NodeId>, leader: Option<NodeId> },
}

impl Node {
    /// How long a transfer may take before it counts as failed: one maximum election timeout (a
    /// target that can lead takes over within one round trip of votes).
    pub(super) fn transfer_wait(&self) -> Duration {
        Duration::from_millis(self.config.raft.election_timeout_max_ms)
    }

    /// How recently a replica must have answered to count as answering: one minimum election
    /// timeout (a follower answers every heartbeat, `heartbeat_ms`).
    fn answered_within(&self) -> Duration {
        Duration::from_millis(self.config.raft.election_timeout_min_ms)
    }

    /// Whether `to` could take leadership of `g` from this node now (see [`fitness`]), backoffs
    /// included when `balancing`.
    pub(super) fn transfer_fitness(&self, g: u32, to: NodeId, balancing: bool) -> Result<(), Unfit> {
        let m = self.metrics(g).map_err(|_| Unfit::NotLeader)?;
        let now = TypeConfig::now();
        fitness(&m, to, now, self.answered_within())?;
        match balancing.then(|| self.transfers.remaining(g, to, now)).flatten() {
            Some(left) => Err(Unfit::BackedOff(left)),
            None => Ok(()),
        }
    }

    /// Hands leadership of `g` (this node must lead it) to `to`, which must be fit to lead (see the
    /// module's documentation), and watches the transfer: if no other node took over within
    /// [`Node::transfer_wait`], backs `to` off and hands leadership to the best other voter that
    /// could lead when the transfer began. The caller holds `g`'s membership lock.
    pub(super) async fn hand_over(&self, g: u32, to: NodeId, balancing: bool) -> Result<Handover, RouteError> {
        let raft = self.raft(g)?;
        let unfit = |why: Unfit| match why {
            Unfit::NotLeader => RouteError::NotLeader { partition: g, leader: self.leader(g) },
            why => RouteError::Failed {
                partition: g,
                message: format!("node {to} cannot take leadership of metadata partition {g} now: {why}"),
            },
        };
        self.transfer_fitness(g, to, balancing).map_err(unfit)?;
        self.probe(g, to).await.map_err(unfit)?;
        // The rescuer is chosen now: once the transfer starts, the leader sends no heartbeats and
        // no follower answers it any more.
        let before = self.metrics(g)?;
        let began = TypeConfig::now();
        let rescuer = before
            .membership_config
            .membership()
            .voter_ids()
            .filter(|v| *v != to && *v != self.id)
            .filter(|v| fitness(&before, *v, began, self.answered_within()).is_ok())
            .max_by_key(|v| before.replication.as_ref().and_then(|r| r.get(v).cloned().flatten()).map(|l| l.index));
        raft.trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| RouteError::Failed { partition: g, message: e.to_string() })?;
        if let Some(leader) = self.wait_for_another_leader(g).await? {
            // This node stepped down: the target, or a voter whose own election came first.
            let leader = match leader {
                Some(l) => Some(l),
                None => self.wait_for_another_leader(g).await?.flatten(),
            };
            if leader == Some(to) {
                self.transfers.succeeded(g, to);
                return Ok(Handover::Done);
            }
            self.transfers.failed(g, to, TypeConfig::now());
            return Ok(Handover::ElectedInstead { leader });
        }
        let backoff = self.transfers.failed(g, to, TypeConfig::now());
        tracing::warn!(
            metadata_partition = g,
            to,
            ?rescuer,
            backoff_ms = backoff.as_millis() as u64,
            "node {to} did not take leadership over within {:?}; handing it to another voter",
            self.transfer_wait()
        );
        let Some(other) = rescuer else { return Ok(Handover::Rescued { rescuer: None, leader: None }) };
        raft.trigger()
            .transfer_leader(other)
            .await
            .map_err(|e| RouteError::Failed { partition: g, message: e.to_string() })?;
        let leader = self.wait_for_another_leader(g).await?.flatten();
        if leader.is_none() {
            tracing::warn!(metadata_partition = g, to = other, "the rescue transfer did not complete in time either");
        }
        Ok(Handover::Rescued { rescuer: Some(other), leader })
    }

    /// Asks `to` who it is, right before a transfer: it must answer within an election timeout
    /// and name, for `g`, the replica incarnation `g`'s membership knows. The leader's memory of a
    /// replica's answers is up to an election timeout old; a node killed, or wiped and restarted,
    /// within that time is caught here.
    async fn probe(&self, g: u32, to: NodeId) -> Result<(), Unfit> {
        let known = self.replica_of(g, to).ok_or(Unfit::NotVoter)?;
        if self.peers.faults.is_blocked(to) {
            return Err(Unfit::Unanswered("this node is cut off from it".into()));
        }
        let answer = tokio::time::timeout(self.answered_within(), self.identify_peer(&known.addr)).await;
        let who = match answer {
            Err(_) => return Err(Unfit::Unanswered(format!("it did not answer within {:?}", self.answered_within()))),
            Ok(Err(e)) => return Err(Unfit::Unanswered(format!("it did not answer: {e:#}"))),
            Ok(Ok(who)) => who,
        };
        if who.node_id != to {
            return Err(Unfit::Unanswered(format!("node {} answered at {}", who.node_id, known.addr)));
        }
        match who.incarnations.get(g as usize) {
            Some(i) if *i == known.incarnation => Ok(()),
            _ => Err(Unfit::Unanswered(
                "its replica is not the one the membership knows (its data directory was replaced: add the node \
                 again)"
                    .into(),
            )),
        }
    }

    /// Waits up to [`Node::transfer_wait`] for another node to lead `g`: `Some(leader)` when this
    /// node no longer leads (`leader`: the new one, `None` while an election is still on), `None`
    /// when it still does.
    async fn wait_for_another_leader(&self, g: u32) -> Result<Option<Option<NodeId>>, RouteError> {
        let me = self.id;
        let waited = self
            .raft(g)?
            .wait(Some(self.transfer_wait()))
            .metrics(|m| m.current_leader.is_some_and(|l| l != me), "another leader")
            .await;
        if let Ok(m) = waited {
            return Ok(Some(m.current_leader));
        }
        let m = self.metrics(g)?;
        if m.state == ServerState::Leader && m.current_leader == Some(me) {
            return Ok(None);
        }
        Ok(Some(m.current_leader.filter(|l| *l != me)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use openraft::metrics::SerdeInstant;
    use openraft::{Membership, StoredMembership};

    use super::*;
    use crate::raft::Replica;

    /// Leader 1 of voters 1, 2, 3 whose log ends at 100, with each follower's answer age and
    /// matched index.
    fn leader(now: Instant, followers: &[(NodeId, Option<u64>, Option<u64>)]) -> RaftMetrics<TypeConfig> {
        let mut m = RaftMetrics::<TypeConfig>::new_initial(1);
        m.state = ServerState::Leader;
        m.current_leader = Some(1);
        m.last_log_index = Some(100);
        let nodes: BTreeMap<NodeId, Replica> = (1..=3).map(|id| (id, Replica::new(format!("n{id}"), id))).collect();
        let membership = Membership::new(vec![(1..=3).collect()], nodes).expect("a valid membership");
        m.membership_config = Arc::new(StoredMembership::new(None, membership));
        let mut heartbeat = BTreeMap::new();
        let mut replication = BTreeMap::new();
        for (id, answered_ms_ago, matched) in followers {
            heartbeat.insert(*id, answered_ms_ago.map(|ms| SerdeInstant::new(now - Duration::from_millis(ms))));
            replication.insert(
                *id,
                matched.map(|i| {
                    crate::raft::LogId::new(openraft::vote::leader_id_adv::LeaderId { term: 1, node_id: 1 }, i)
                }),
            );
        }
        m.heartbeat = Some(heartbeat);
        m.replication = Some(replication);
        m
    }

    const WITHIN: Duration = Duration::from_millis(800);

    #[test]
    fn a_caught_up_answering_voter_can_lead() {
        let now = TypeConfig::now() + Duration::from_secs(10);
        let m = leader(now, &[(2, Some(50), Some(100)), (3, Some(700), Some(90))]);
        assert_eq!(fitness(&m, 2, now, WITHIN), Ok(()));
        assert_eq!(fitness(&m, 3, now, WITHIN), Ok(()), "within the lag and the answer window");
    }

    #[test]
    fn a_replica_that_stopped_answering_cannot_lead_however_caught_up_it_was() {
        // A wiped replica: the leader remembers it matched everything, but it has answered
        // nothing since it came back.
        let now = TypeConfig::now() + Duration::from_secs(10);
        let m = leader(now, &[(2, Some(5_000), Some(100)), (3, None, None)]);
        assert_eq!(fitness(&m, 2, now, WITHIN), Err(Unfit::Silent(Some(Duration::from_millis(5_000)))));
        assert_eq!(fitness(&m, 3, now, WITHIN), Err(Unfit::Silent(None)));
    }

    #[test]
    fn a_lagging_or_unknown_replica_cannot_lead() {
        let now = TypeConfig::now() + Duration::from_secs(10);
        let m = leader(now, &[(2, Some(10), Some(100 - CAUGHT_UP_LAG - 1)), (3, Some(10), None)]);
        assert_eq!(fitness(&m, 2, now, WITHIN), Err(Unfit::Behind { matched: Some(83), last: 100 }));
        assert_eq!(fitness(&m, 3, now, WITHIN), Err(Unfit::Behind { matched: None, last: 100 }));
        assert_eq!(fitness(&m, 4, now, WITHIN), Err(Unfit::NotVoter));
        assert_eq!(fitness(&m, 1, now, WITHIN), Err(Unfit::Itself));
        let mut follower = m.clone();
        follower.state = ServerState::Follower;
        assert_eq!(fitness(&follower, 2, now, WITHIN), Err(Unfit::NotLeader));
    }

    #[test]
    fn failed_transfers_back_off_doubling_up_to_a_bound_and_a_success_clears_them() {
        let b = Backoffs::default();
        let now = TypeConfig::now();
        assert_eq!(b.remaining(0, 2, now), None);
        let waits: Vec<Duration> = (0..8).map(|_| b.failed(0, 2, now)).collect();
        assert_eq!(waits[0], BACKOFF_FIRST);
        assert_eq!(waits[1], BACKOFF_FIRST * 2);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]), "{waits:?}");
        assert_eq!(*waits.last().unwrap(), BACKOFF_MAX);
        assert_eq!(b.remaining(0, 2, now), Some(BACKOFF_MAX));
        assert_eq!(b.remaining(1, 2, now), None, "per metadata partition");
        assert_eq!(b.remaining(0, 2, now + BACKOFF_MAX), None, "over once the time has passed");
        b.succeeded(0, 2);
        assert_eq!(b.remaining(0, 2, now), None);
        assert_eq!(b.failed(0, 2, now), BACKOFF_FIRST, "counted from the start again");
    }
}
