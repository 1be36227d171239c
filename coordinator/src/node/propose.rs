//! Proposing one command on this node's replica of a metadata partition, which must lead it:
//! stamped with "now" just before it is proposed, waited for until applied.
//!
//! Owns the clock commands are stamped with ([`Node::now_ms`], with the test clock offset), the
//! proposal metrics, and what a failed proposal means: a proposal that may have been appended has
//! an unknown outcome (`RouteError::Timeout`), never "not applied"; a leader whose lease is not
//! established yet is asked again until the timeout. It must not decide where a command runs (that
//! is `route`) nor gather commits (that is `commit`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openraft::errors::ForwardReason;

use super::{Node, RouteError};
use crate::state_machine::{Command, Op, Outcome};

impl Node {
    /// The wall clock in milliseconds, as this node stamps commands (plus a test clock offset).
    pub fn now_ms(&self) -> i64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        now + self.peers.faults.clock_offset_ms()
    }

    /// Proposes `op` on this node's replica of `g`, which must be the leader; waits until it is
    /// applied. Returns the outcome and the log index it was applied at. A leader whose lease is
    /// not established yet (just elected) is retried until `timeout`.
    pub async fn propose(&self, g: u32, op: Op, timeout: Duration) -> Result<(Outcome, u64), RouteError> {
        self.propose_at(g, op, None, timeout).await
    }

    /// [`propose`](Self::propose), stamped with `now_ms` instead of this node's clock when given.
    pub(super) async fn propose_at(
        &self,
        g: u32,
        op: Op,
        now_ms: Option<i64>,
        timeout: Duration,
    ) -> Result<(Outcome, u64), RouteError> {
        let _pending = crate::metrics::get().proposal_started(g);
        let r = self.propose_unmetered(g, op, now_ms, timeout).await;
        crate::metrics::get().proposal_done(g, r.is_ok());
        r
    }

    async fn propose_unmetered(
        &self,
        g: u32,
        op: Op,
        now_ms: Option<i64>,
        timeout: Duration,
    ) -> Result<(Outcome, u64), RouteError> {
        let raft = self.raft(g)?;
        let deadline = Instant::now() + timeout;
        loop {
            let cmd = Command { now_ms: now_ms.unwrap_or_else(|| self.now_ms()), op: op.clone() };
            let left = deadline.saturating_duration_since(Instant::now());
            let started = Instant::now();
            let r = tokio::time::timeout(left, raft.client_write(cmd))
                .await
                .map_err(|_| RouteError::Timeout { partition: g })?;
            match r {
                Ok(resp) => {
                    self.stages.proposed(started);
                    let us = started.elapsed().as_micros() as u64;
                    tracing::trace!(metadata_partition = g, index = resp.log_id.index, us, "proposal applied");
                    return Ok((resp.data, resp.log_id.index));
                }
                // Appended, then discarded when another leader took over: it may still commit.
                Err(openraft::errors::RaftError::APIError(openraft::errors::ClientWriteError::LogEntryDiscarded(
                    _,
                ))) => {
                    return Err(RouteError::Timeout { partition: g });
                }
                Err(e) => {
                    let Some(f) = e.forward_to_leader() else {
                        // The metadata partition stopped (a fatal error, a shutdown) with the entry
                        // perhaps appended: it may still commit under another leader.
                        tracing::warn!(metadata_partition = g, error = %e, "proposal outcome unknown");
                        return Err(RouteError::Timeout { partition: g });
                    };
                    let retry = matches!(f.reason, ForwardReason::LeaseExpired | ForwardReason::LeadershipTransfer)
                        && f.leader_id.is_none_or(|l| l == self.id);
                    if retry && Instant::now() + Duration::from_millis(20) < deadline {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    // A transfer's target is named before it leads, and may never lead (it may
                    // have stopped answering): no leader is named then, so that nobody forwards to
                    // it on the strength of this answer (see `leadership`).
                    if matches!(f.reason, ForwardReason::LeadershipTransfer) {
                        return Err(RouteError::NotLeader { partition: g, leader: None });
                    }
                    let leader = f.leader_id.zip(f.leader_node.as_ref().map(|n| n.addr.clone()));
                    return Err(RouteError::NotLeader { partition: g, leader: leader.or_else(|| self.leader(g)) });
                }
            }
        }
    }
}
