//! Membership and leadership changes of a metadata partition, made by its leader: adding a node
//! (as a learner until caught up, then a voter; a replaced replica removed first), removing one,
//! and handing leadership to another node (the guarded step of `leadership`).
//!
//! Owns the one-at-a-time rule (each metadata partition's membership lock) and the bound of every
//! step ([`MEMBERSHIP_STEP`]: a step that runs out answers a retriable error and releases the
//! lock). It must not find the leader itself: an operator's change reaches the leader through
//! `route` (`Change`).

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::ChangeMembers;

use super::leadership::Handover;
use super::route::Change;
use super::{Node, RouteError};
use crate::raft::identity;
use crate::raft::{NodeId, Replica};

/// The longest one step of a membership change (add a learner, let it catch up, promote, remove)
/// may take before the change answers a retriable error and releases the membership lock.
const MEMBERSHIP_STEP: Duration = Duration::from_secs(20);

/// How long a whole change may take on its leader, as the caller waits for it: asking the node
/// who it is (up to 40 tries, 2.5 s each at most), then removing its old replica, adding it as a
/// learner, letting it catch up and promoting it (each bounded by [`MEMBERSHIP_STEP`]).
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(300);

impl Node {
    /// Makes change `c` of `g` (this node must lead it; the receiving end of a routed [`Change`]).
    pub(super) async fn change_here(&self, g: u32, c: Change) -> Result<String, RouteError> {
        match c {
            Change::AddNode { id, addr } => self.add_node(g, id, &addr).await,
            Change::RemoveNode { id } => self.remove_node(g, id).await,
            Change::TransferLeader { to } => self.transfer_leader(g, to).await,
        }
    }

    /// Adds a node to `g` (this node must lead it): as a learner until caught up, then a voter. The
    /// node is asked for its replica's incarnation first; a node the partition knows under another
    /// incarnation (its data directory was replaced) is removed, then added back as new.
    async fn add_node(&self, g: u32, id: NodeId, addr: &str) -> Result<String, RouteError> {
        let mp = self.partition(g)?;
        let _one_at_a_time = mp.membership.lock().await;
        let failed = |e: &dyn std::fmt::Display| RouteError::Failed { partition: g, message: e.to_string() };
        let not_leader = |leader| RouteError::NotLeader { partition: g, leader };
        // The node may still be starting: give it a moment to listen.
        let mut attempts = 0;
        let who = loop {
            attempts += 1;
            match self.identify_peer(addr).await {
                Ok(who) => break who,
                Err(e) if attempts >= 40 => return Err(failed(&format!("asking {addr} who it is: {e}"))),
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        };
        if who.node_id != id {
            return Err(failed(&format!("the node at {addr} is node {}, not {id}", who.node_id)));
        }
        let theirs: Option<identity::ClusterId> = who.cluster_id.as_slice().try_into().ok();
        if let (Some(theirs), Some(mine)) = (theirs, self.identity.cluster_id()) {
            if theirs != mine {
                return Err(failed(&format!(
                    "the node at {addr} belongs to cluster {}, this one is {}",
                    identity::cluster_id_hex(&theirs),
                    identity::cluster_id_hex(&mine)
                )));
            }
        }
        let Some(&incarnation) = who.incarnations.get(g as usize) else {
            return Err(failed(&format!("the node at {addr} has no replica of metadata partition {g}")));
        };
        let replica = Replica::new(addr, incarnation);
        let membership = self.metrics(g)?.membership_config.membership().clone();
        let mut voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let mut note = String::new();
        if let Some(known) = membership.get_node(&id) {
            if known.incarnation != incarnation {
                // A replaced replica: the partition must forget the old one (whose log is gone)
                // before the new one takes part.
                let change = if voters.remove(&id) {
                    ChangeMembers::ReplaceAllVoters(voters.clone())
                } else {
                    ChangeMembers::RemoveNodes(BTreeSet::from([id]))
                };
                if voters.is_empty() {
                    return Err(failed(&"cannot replace the last voter"));
                }
                match tokio::time::timeout(MEMBERSHIP_STEP, mp.raft.change_membership(change, false)).await {
                    Ok(Ok(_)) => note = format!("removed node {id}'s old replica {known}; "),
                    Ok(Err(e)) if e.forward_to_leader().is_some() => return Err(not_leader(self.leader(g))),
                    Ok(Err(e)) => return Err(failed(&e)),
                    Err(_) => {
                        return Err(failed(&format!("removing node {id}'s old replica took over {MEMBERSHIP_STEP:?}")))
                    }
                }
            } else if known.addr != addr {
                return Err(failed(&format!("node {id} is a member at {}, not {addr}", known.addr)));
            }
        }
        // Not openraft's blocking add: it waits for the learner without a bound, holding this
        // partition's membership lock, and a leader change at the wrong moment leaves it waiting
        // for ever. Every step here is bounded; a step that runs out answers a retriable error.
        let added = match tokio::time::timeout(MEMBERSHIP_STEP, mp.raft.add_learner(id, replica, false)).await {
            Ok(Ok(r)) => r.log_id,
            Ok(Err(e)) if e.forward_to_leader().is_some() => return Err(not_leader(self.leader(g))),
            Ok(Err(e)) => return Err(failed(&e)),
            Err(_) => return Err(failed(&format!("adding node {id} as a learner took over {MEMBERSHIP_STEP:?}"))),
        };
        tracing::info!(
            metadata_partition = g,
            node = id,
            index = added.index,
            "learner added; waiting for it to catch up"
        );
        // Caught up: it holds the entry that added it, and is within openraft's lag threshold of
        // the leader's log (what openraft's blocking add waits for), so that promoting it does not
        // make a quorum wait for a voter far behind.
        let threshold = mp.raft.config().replication_lag_threshold;
        let caught_up = mp
            .raft
            .wait(Some(MEMBERSHIP_STEP))
            .metrics(
                |m| match &m.replication {
                    // No longer the leader: the next step says so.
                    None => true,
                    Some(r) => r.get(&id).is_some_and(|matched| {
                        matched.is_some_and(|l| {
                            l.index >= added.index && l.index.saturating_add(threshold) >= m.last_log_index.unwrap_or(0)
                        })
                    }),
                },
                "learner caught up",
            )
            .await;
        match caught_up {
            Ok(m) if m.replication.is_none() => return Err(not_leader(self.leader(g))),
            Ok(_) => {}
            Err(_) => {
                let matched = self
                    .metrics(g)?
                    .replication
                    .and_then(|r| r.get(&id).cloned().flatten())
                    .map_or_else(|| "nothing".to_string(), |l| l.index.to_string());
                return Err(failed(&format!(
                    "node {id}'s replica has not caught up within {MEMBERSHIP_STEP:?} (it has {matched}, the learner \
                     entry is {}, the leader's log ends at {}; within {threshold} counts)",
                    added.index,
                    self.metrics(g)?.last_log_index.unwrap_or(0)
                )));
            }
        }
        if !voters.insert(id) {
            return Ok(format!("metadata partition {g}: {note}node {id} already a voter"));
        }
        match tokio::time::timeout(MEMBERSHIP_STEP, mp.raft.change_membership(voters.clone(), false)).await {
            Ok(Ok(_)) => {
                tracing::info!(metadata_partition = g, node = id, ?voters, "node promoted to voter");
                Ok(format!("metadata partition {g}: {note}voters now {voters:?}"))
            }
            Ok(Err(e)) if e.forward_to_leader().is_some() => Err(not_leader(self.leader(g))),
            Ok(Err(e)) => Err(failed(&e)),
            Err(_) => Err(failed(&format!("promoting node {id} to voter took over {MEMBERSHIP_STEP:?}"))),
        }
    }

    /// Removes a node from `g` (this node must lead it).
    async fn remove_node(&self, g: u32, id: NodeId) -> Result<String, RouteError> {
        let mp = self.partition(g)?;
        let _one_at_a_time = mp.membership.lock().await;
        let mut voters: BTreeSet<NodeId> = self.metrics(g)?.membership_config.membership().voter_ids().collect();
        let learners: BTreeSet<NodeId> = self.metrics(g)?.membership_config.membership().learner_ids().collect();
        if !voters.remove(&id) && !learners.contains(&id) {
            return Ok(format!("metadata partition {g}: node {id} is not a member"));
        }
        if voters.is_empty() {
            return Err(RouteError::Failed { partition: g, message: "cannot remove the last voter".into() });
        }
        match tokio::time::timeout(MEMBERSHIP_STEP, mp.raft.change_membership(voters.clone(), false)).await {
            Ok(Ok(_)) => {
                tracing::info!(metadata_partition = g, node = id, ?voters, "node removed");
                Ok(format!("metadata partition {g}: voters now {voters:?}"))
            }
            Ok(Err(e)) if e.forward_to_leader().is_some() => {
                Err(RouteError::NotLeader { partition: g, leader: self.leader(g) })
            }
            Ok(Err(e)) => Err(RouteError::Failed { partition: g, message: e.to_string() }),
            Err(_) => Err(RouteError::Failed {
                partition: g,
                message: format!("removing node {id} took over {MEMBERSHIP_STEP:?}"),
            }),
        }
    }

    /// Hands `g`'s leadership (this node leads it) to `to`, if `to` can lead now; waits for the
    /// outcome (see `leadership`). One change at a time: the membership lock is held.
    async fn transfer_leader(&self, g: u32, to: NodeId) -> Result<String, RouteError> {
        let mp = self.partition(g)?;
        let _one_at_a_time = mp.membership.lock().await;
        if !mp.raft.is_leader() {
            return Err(RouteError::NotLeader { partition: g, leader: self.leader(g) });
        }
        if to == self.id {
            return Ok(format!("metadata partition {g}: node {to} leads already"));
        }
        // A target that is a moment behind (it answers every heartbeat) is waited for, an
        // election timeout at most; one that cannot lead is refused with the reason.
        let patience = tokio::time::Instant::now() + Duration::from_millis(self.config.raft.election_timeout_max_ms);
        while self.transfer_fitness(g, to, false).is_err_and(|why| {
            matches!(why, super::leadership::Unfit::Silent(_) | super::leadership::Unfit::Behind { .. })
        }) && tokio::time::Instant::now() < patience
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let wait = self.transfer_wait();
        let failed = |message: String| Err(RouteError::Failed { partition: g, message });
        match self.hand_over(g, to, false).await? {
            Handover::Done => Ok(format!("metadata partition {g}: leadership handed to node {to}")),
            // A follower's own election timeout ran out first.
            Handover::ElectedInstead { leader: Some(l) } => {
                failed(format!("node {to} did not take leadership over; node {l} was elected instead"))
            }
            Handover::ElectedInstead { leader: None } => failed(format!(
                "node {to} did not take leadership over; this node stepped down and an election is under way"
            )),
            Handover::Rescued { rescuer: Some(r), leader } if leader == Some(r) => {
                failed(format!("node {to} did not take leadership over within {wait:?}; handed to node {r} instead"))
            }
            Handover::Rescued { rescuer: Some(r), leader } => failed(format!(
                "node {to} did not take leadership over within {wait:?}; handing it to node {r} instead did not \
                 complete in time either (leader now: {})",
                leader.map_or_else(|| "none known".to_string(), |l| format!("node {l}"))
            )),
            Handover::Rescued { rescuer: None, .. } => failed(format!(
                "node {to} did not take leadership over within {wait:?}, and no other voter could lead: the \
                 partition elects a leader once its election timeouts run out"
            )),
        }
    }
}
