//! The background duties of the metadata partitions this node leads, and snapshots on demand:
//! handing leaderships to their preferred leaders (never during a membership change, only to a
//! replica that can lead now, watched and backed off: `leadership`), asking
//! again for log purges openraft postponed (so each log stays bounded), and retention
//! (`EnforceRetention`, `ExpireOffsets`) stamped with a quorum's clock.
//!
//! Owns when each duty runs and what it proposes. It must not serve requests.

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::{RaftMetrics, ServerState};

use super::leadership::Handover;
use super::{Node, DELETE_BUDGET};
use crate::raft::{NodeId, TypeConfig};
use crate::state_machine::{Op, Outcome};

/// How often postponed log purges are asked for again (see [`Node::finish_purges`]).
const PURGE_CHECK_MS: u64 = 5_000;

impl Node {
    /// Builds a snapshot of every metadata partition now; returns the snapshot indexes reached
    /// (waits up to `timeout` for each).
    pub async fn snapshot_all(&self, timeout: Duration) -> Vec<u64> {
        let mut out = vec![];
        for mp in &self.partitions {
            let applied = mp.raft.metrics().borrow_watched().last_applied.map_or(0, |l| l.index);
            if mp.raft.trigger().snapshot().await.is_ok() {
                let _ = mp
                    .raft
                    .wait(Some(timeout))
                    .metrics(|m| m.snapshot.is_some_and(|s| s.index >= applied), "snapshot")
                    .await;
            }
            out.push(mp.raft.metrics().borrow_watched().snapshot.map_or(0, |s| s.index));
        }
        out
    }

    /// The preferred leader of `g`: voters in id order, `g` modulo their count; spreads leaders
    /// evenly.
    fn preferred_leader(m: &RaftMetrics<TypeConfig>, g: u32) -> Option<NodeId> {
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        if voters.is_empty() {
            return None;
        }
        Some(voters[g as usize % voters.len()])
    }

    /// Hands each metadata partition this node leads to its preferred leader, if that node can lead
    /// now and no transfer to it failed recently (see `leadership`); the partitions at once.
    async fn balance_leaders(&self) {
        let moves = self.partitions.iter().enumerate().map(|(g, mp)| async move {
            let g = g as u32;
            let m = mp.raft.metrics().borrow_watched().clone();
            if m.state != ServerState::Leader {
                return;
            }
            // Not while a membership change runs here: moving the leader would make it start over.
            let Ok(_no_change_under_way) = mp.membership.try_lock() else { return };
            let Some(preferred) = Self::preferred_leader(&m, g) else { return };
            if preferred == self.id {
                return;
            }
            if let Err(why) = self.transfer_fitness(g, preferred, true) {
                tracing::debug!(metadata_partition = g, preferred, %why, "leadership stays here for now");
                return;
            }
            tracing::info!(metadata_partition = g, to = preferred, "moving leadership to the preferred leader");
            match self.hand_over(g, preferred, true).await {
                Ok(Handover::Done) => {}
                Ok(Handover::ElectedInstead { leader }) => {
                    tracing::info!(metadata_partition = g, preferred, ?leader, "another node was elected instead")
                }
                // Logged where the transfer was watched.
                Ok(Handover::Rescued { .. }) => {}
                Err(e) => tracing::debug!(metadata_partition = g, error = %e, "leadership not moved"),
            }
        });
        futures_util::future::join_all(moves).await;
    }

    /// Finishes log purges that openraft postponed and never retried.
    ///
    /// A leader postpones a purge while a replication stream still covers the entries (a follower
    /// that is down keeps its stream open) and retries only when replication progresses; a node
    /// that loses leadership meanwhile keeps the postponed purge until its next snapshot. Asking
    /// again here bounds the log to about one snapshot interval whatever the followers do.
    async fn finish_purges(&self) {
        let keep = self.config.raft.entries_kept_after_snapshot;
        for (g, mp) in self.partitions.iter().enumerate() {
            let m = mp.raft.metrics().borrow_watched().clone();
            let Some(snapshot) = m.snapshot else { continue };
            let Some(upto) = snapshot.index.checked_sub(keep) else { continue };
            if m.purged.is_some_and(|p| p.index >= upto) {
                continue;
            }
            // openraft ignores a request for the index it already scheduled, so ask for one more
            // entry (it clamps to the snapshot): that re-runs the postponed purge.
            if let Err(e) = mp.raft.trigger().purge_log(upto + 1).await {
                tracing::warn!(metadata_partition = g, error = %e, "asking for a log purge failed");
            }
        }
    }

    /// "Now" as a quorum of `g`'s voters sees it: the earliest of the wall clocks of a majority
    /// (this node's included), or `None` when no majority answers. Retention deletes by time and
    /// cannot be undone: with this, one node whose clock runs far ahead cannot expire data early
    /// (the earliest clock of a majority is at or behind some correct node's).
    async fn quorum_now(&self, g: u32) -> Option<i64> {
        let m = self.metrics(g).ok()?;
        let membership = m.membership_config.membership();
        let voters: Vec<(NodeId, String)> =
            membership.voter_ids().filter_map(|id| membership.get_node(&id).map(|r| (id, r.addr.clone()))).collect();
        let majority = voters.len() / 2 + 1;
        let mut clocks = vec![self.now_ms()];
        let others = voters.iter().filter(|(id, _)| *id != self.id);
        let answers = futures_util::future::join_all(others.map(|(_, addr)| self.identify_peer(addr))).await;
        clocks.extend(answers.into_iter().filter_map(|r| r.ok()).map(|r| r.now_ms));
        (clocks.len() >= majority).then(|| clocks.into_iter().min().unwrap_or_default())
    }

    /// Runs retention and pending deletions on the metadata partitions this node leads, with "now"
    /// taken from a quorum's clocks (see [`Node::quorum_now`]).
    async fn enforce_retention(&self) {
        for g in 0..self.num_partitions() {
            if !self.partitions[g as usize].raft.is_leader() {
                continue;
            }
            let Some(now) = self.quorum_now(g).await else {
                tracing::debug!(metadata_partition = g, "retention skipped: no majority told its clock");
                continue;
            };
            for _ in 0..100 {
                let op = Op::EnforceRetention {
                    budget: DELETE_BUDGET,
                    producer_expiration_ms: self.config.producer_id_expiration_ms,
                    fenced_object_retention_ms: self.config.fenced_object_retention_ms,
                };
                match self.propose_at(g, op, Some(now), Duration::from_secs(10)).await {
                    Ok((Outcome::EnforceRetention(r), _)) if r.more => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::debug!(metadata_partition = g, error = %e, "retention pass stopped");
                        break;
                    }
                }
            }
            let retention_ms = self.config.offsets_retention_minutes.saturating_mul(60_000);
            for _ in 0..100 {
                let op = Op::ExpireOffsets { retention_ms, budget: DELETE_BUDGET };
                match self.propose_at(g, op, Some(now), Duration::from_secs(10)).await {
                    Ok((Outcome::ExpireOffsets { more: true, .. }, _)) => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::debug!(metadata_partition = g, error = %e, "offsets expiry stopped");
                        break;
                    }
                }
            }
        }
    }

    pub(super) fn spawn_duties(self: &Arc<Self>) {
        let periodic =
            |every_ms: u64, first: Duration, duty: fn(Arc<Node>) -> futures_util::future::BoxFuture<'static, ()>| {
                if every_ms == 0 {
                    return;
                }
                let me = Arc::downgrade(self);
                let mut stop = self.stop.subscribe();
                tokio::spawn(async move {
                    let mut wait = first;
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = stop.changed() => return,
                        }
                        let Some(node) = me.upgrade() else { return };
                        duty(node).await;
                        wait = Duration::from_millis(every_ms);
                    }
                });
            };
        periodic(self.config.leader_balance_ms, Duration::from_secs(3), |n| {
            Box::pin(async move { n.balance_leaders().await })
        });
        periodic(PURGE_CHECK_MS, Duration::from_millis(PURGE_CHECK_MS), |n| {
            Box::pin(async move { n.finish_purges().await })
        });
        periodic(self.config.retention_check_ms, Duration::from_millis(self.config.retention_check_ms), |n| {
            Box::pin(async move { n.enforce_retention().await })
        });
    }
}
