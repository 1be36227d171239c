//! Reads: a strict read served by a metadata partition's leader once it may serve linearizable
//! reads (the leader lease, else ReadIndex), a follower's wait for an applied index, and whether
//! a replica may serve reads from its own state at all (FindBatches, health).
//!
//! Owns the serving checks (a member, running, in touch with a leader, not mid-install), the
//! strict-read metrics, and answering a [`Read`] from one consistent view of the state. It must
//! not decide where a read runs (that is `route`) nor know the wire (that is `server`).

use std::time::{Duration, Instant};

use openraft::{ReadPolicy, ServerState};

use super::route::{Answer, Read};
use super::{Node, RouteError};
use crate::storage::codec;

/// A replica that has heard nothing from a leader for this many maximum election timeouts serves
/// no reads (it may be cut off, removed, or frozen).
const STALE_AFTER_ELECTION_TIMEOUTS: u64 = 3;

impl Node {
    /// Notes that this node's replica of `g` accepted a message of a current leader.
    pub fn heard_from_leader(&self, g: u32) {
        if let Some(slot) = self.heard_from_leader.get(g as usize) {
            let now = self.started.elapsed().as_millis() as u64;
            slot.fetch_max(now.max(1), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether this node's replica of `g` may serve reads from its own state (FindBatches): it
    /// runs, the partition's membership names it, and it is in touch with a leader — as a follower
    /// it accepted a leader's message recently, as the leader a quorum acknowledged it recently. A
    /// replica cut off, removed from the metadata partition or stopped would otherwise serve a
    /// frozen state for ever, pointing readers at objects the cleaner has since deleted.
    pub fn check_serving(&self, g: u32) -> Result<(), RouteError> {
        self.check_in_touch(
            g,
            Duration::from_millis(self.config.raft.election_timeout_max_ms * STALE_AFTER_ELECTION_TIMEOUTS),
        )
    }

    /// [`check_serving`](Self::check_serving) with `bound` as the longest silence of a leader.
    /// A watch stream uses one election timeout: a follower that heard nothing for that long
    /// would stand for election itself, so the changes it streams have stopped.
    pub fn check_in_touch(&self, g: u32, bound: Duration) -> Result<(), RouteError> {
        let m = self.metrics(g)?;
        let unavailable = |reason: String| Err(RouteError::ReplicaUnavailable { partition: g, reason });
        let placed = self.placed(g)?;
        if placed.is_offline() {
            return unavailable(format!("its data directory {} is offline", placed.path.display()));
        }
        if m.running_state.is_err() || m.state == ServerState::Shutdown {
            return unavailable("the replica stopped".into());
        }
        if !self.is_member(g) {
            return unavailable("the metadata partition's membership does not name this replica".into());
        }
        if m.membership_config.membership().voter_ids().eq([self.id]) {
            return Ok(()); // the only voter: nobody to hear from
        }
        let silent = if m.state == ServerState::Leader {
            m.last_quorum_acked.as_ref().map(|t| openraft::Instant::elapsed(&**t))
        } else {
            let heard =
                self.heard_from_leader.get(g as usize).map_or(0, |h| h.load(std::sync::atomic::Ordering::Relaxed));
            (heard > 0).then(|| self.started.elapsed().saturating_sub(Duration::from_millis(heard)))
        };
        match silent {
            Some(d) if d <= bound => Ok(()),
            Some(d) => unavailable(format!("no word from a leader for {} ms", d.as_millis())),
            None => unavailable("no word from a leader since this node started".into()),
        }
    }

    /// [`check_serving`](Self::check_serving), and that `view` of the state did not catch a
    /// snapshot install half-done.
    pub fn check_readable(&self, g: u32, view: &crate::storage::ReadView<'_>) -> Result<(), RouteError> {
        self.check_serving(g)?;
        match self.partition(g)?.sm.installing_in(view) {
            Ok(false) => Ok(()),
            Ok(true) => {
                Err(RouteError::ReplicaUnavailable { partition: g, reason: "a snapshot is being installed".into() })
            }
            Err(e) => Err(RouteError::Failed { partition: g, message: e.to_string() }),
        }
    }

    /// Whether `g`'s membership, as this node knows it, names this node's replica.
    pub fn is_member(&self, g: u32) -> bool {
        let Ok(m) = self.metrics(g) else { return false };
        let mine = self.identity.incarnation(g);
        m.membership_config.membership().get_node(&self.id).is_some_and(|r| Some(r.incarnation) == mine)
    }

    /// Waits until this node, as `g`'s leader, may serve a linearizable read: the state has applied
    /// everything committed before the read, and the leadership is confirmed — by the leader lease
    /// when it is valid (a quorum acknowledged this leader within the lease, during which its
    /// followers refuse to vote for anyone else; this assumes clocks advance at about the same
    /// rate), else by a heartbeat round to a quorum (ReadIndex).
    pub async fn linearizable(&self, g: u32, timeout: Duration) -> Result<(), RouteError> {
        let started = Instant::now();
        let r = self.linearizable_unmetered(g, timeout).await;
        let via = match &r {
            Ok(via) => via,
            Err(_) => "failed",
        };
        crate::metrics::get().strict_read(via, started.elapsed());
        r.map(|_| ())
    }

    /// [`linearizable`](Self::linearizable); says how the read was confirmed.
    async fn linearizable_unmetered(&self, g: u32, timeout: Duration) -> Result<&'static str, RouteError> {
        let raft = self.raft(g)?;
        if raft.ensure_linearizable(ReadPolicy::LeaseRead).await.is_ok() {
            return Ok("lease");
        }
        let r = tokio::time::timeout(timeout, raft.ensure_linearizable(ReadPolicy::ReadIndex))
            .await
            .map_err(|_| RouteError::NoQuorum { partition: g })?;
        match r {
            Ok(_) => Ok("read_index"),
            Err(e) => match e.forward_to_leader() {
                Some(_) => Err(RouteError::NotLeader { partition: g, leader: self.leader(g) }),
                // Not confirmed by a quorum in time (cut off, peers down), or the metadata
                // partition stopped: the read may succeed later or elsewhere, so the answer is
                // retriable.
                None if matches!(e, openraft::errors::RaftError::Fatal(_)) => {
                    Err(RouteError::ReplicaUnavailable { partition: g, reason: e.to_string() })
                }
                None => {
                    tracing::debug!(metadata_partition = g, error = %e, "linearizable read not confirmed");
                    Err(RouteError::NoQuorum { partition: g })
                }
            },
        }
    }

    /// Answers `r` from this node's replica of `g` once it may serve a linearizable read (the
    /// receiving end of a routed [`Read`]).
    pub(super) async fn serve_read(&self, g: u32, r: Read, timeout: Duration) -> Result<Answer, RouteError> {
        self.linearizable(g, timeout).await?;
        let sm = self.state_machine(g)?;
        let placed = self.placed(g)?;
        let view = placed.db.read();
        let failed = |e: crate::storage::StorageError| RouteError::Failed { partition: g, message: e.to_string() };
        Ok(match r {
            Read::ListOffsets(items) => Answer::ListOffsets(
                items
                    .iter()
                    .map(|(tp, ts)| sm.list_offsets(&view, tp, *ts, false))
                    .collect::<Result<_, _>>()
                    .map_err(failed)?,
            ),
            Read::ListOffsetsCommitted(items) => Answer::ListOffsets(
                items
                    .iter()
                    .map(|(tp, ts)| sm.list_offsets(&view, tp, *ts, true))
                    .collect::<Result<_, _>>()
                    .map_err(failed)?,
            ),
            Read::DescribeFiles(keys) => Answer::DescribeFiles(
                keys.iter().map(|k| sm.describe_file(&view, k)).collect::<Result<_, _>>().map_err(failed)?,
            ),
            Read::FilesToDelete { limit } => {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                Answer::FilesToDelete(sm.files_to_delete(&view, limit).map_err(failed)?)
            }
            Read::Topics => Answer::Topics(sm.topics(&view).map_err(failed)?),
            Read::FetchOffsets { group_id, partitions } => {
                let wanted = (!partitions.is_empty()).then_some(partitions.as_slice());
                Answer::FetchOffsets {
                    offsets: sm.fetch_offsets(&view, &group_id, wanted).map_err(failed)?,
                    consumer_group: sm.consumer_group(&view, &group_id).map_err(failed)?,
                }
            }
            Read::ListConsumerGroups => Answer::ListConsumerGroups(sm.list_groups(&view).map_err(failed)?),
            Read::LiveBrokers => {
                let now_ms = self.now_ms();
                let brokers = sm.live_brokers(&view, now_ms).map_err(failed)?;
                Answer::LiveBrokers { brokers, now_ms, generation: sm.registry_generation(&view).map_err(failed)? }
            }
            Read::Acls(filter) => Answer::Acls(sm.describe_acls(&view, &filter).map_err(failed)?),
            Read::Transactions(ids) => Answer::Transactions(
                ids.iter().map(|id| sm.transaction(&view, id)).collect::<Result<_, _>>().map_err(failed)?,
            ),
            Read::ListTransactions => Answer::ListTransactions(sm.list_transactions(&view).map_err(failed)?),
            Read::ShareStates { group_id, only } => {
                Answer::ShareStates(sm.share_states(&view, &group_id, only.as_ref()).map_err(failed)?)
            }
            Read::Producers(tps) => Answer::Producers(
                tps.iter().map(|tp| sm.describe_producers(&view, tp)).collect::<Result<_, _>>().map_err(failed)?,
            ),
        })
    }

    /// The hex SHA-256 of `g`'s state and the applied index it reflects (one consistent view).
    pub fn digest(&self, g: u32) -> anyhow::Result<(String, u64)> {
        let placed = self.placed(g)?;
        let view = placed.db.read();
        let sm = self.state_machine(g)?;
        let applied_key = crate::state_machine::keys::Keys::new(g).applied();
        let applied: Option<(Option<crate::raft::LogId>, crate::raft::StoredMembership)> =
            match crate::storage::KvRead::get(&view, &applied_key)? {
                Some(v) => Some(codec::decode(&applied_key, &v)?),
                None => None,
            };
        let index = applied.and_then(|(l, _)| l).map_or(0, |l| l.index);
        let digest = sm.digest(&view)?;
        Ok((digest.iter().map(|b| format!("{b:02x}")).collect(), index))
    }

    /// The last log index this node's replica of `g` has applied.
    pub fn applied(&self, g: u32) -> u64 {
        self.metrics(g).ok().and_then(|m| m.last_applied.map(|l| l.index)).unwrap_or(0)
    }

    /// Waits until this node's replica of `g` has applied `index`; returns the applied index.
    pub async fn wait_applied(&self, g: u32, index: u64, timeout: Duration) -> Result<u64, RouteError> {
        let raft = self.raft(g)?;
        if self.applied(g) >= index {
            return Ok(self.applied(g));
        }
        raft.wait(Some(timeout))
            .applied_index_at_least(Some(index), "follower read")
            .await
            .map_err(|_| RouteError::Timeout { partition: g })?;
        Ok(self.applied(g))
    }
}
