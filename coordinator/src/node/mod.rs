//! A coordinator node: the data directory, one Raft group per metadata partition, and the
//! background duties of the groups it leads.
//!
//! Owns: starting and bootstrapping the groups, proposing commands on a local leader (stamping
//! "now" just before proposing), linearizable and follower reads' waiting, membership changes and
//! leadership moves, periodic retention and leader balancing. It must not speak gRPC to clients
//! (that is `server`) nor interpret commands (that is `state_machine`).

mod addresses;
mod backup;
pub mod config;
pub mod dirs;
#[cfg(test)]
mod dirs_test;
pub mod mover;
pub mod route;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use diskless_proto::internal::{Addressee, IdentifyReply, IdentifyRequest};
use openraft::async_runtime::WatchReceiver;
use openraft::errors::ForwardReason;
use openraft::{ChangeMembers, RaftMetrics, ReadPolicy, ServerState};

pub use backup::GroupCopy;
pub use config::{Member, NodeConfig};
pub use route::{Answer, Hop, Read, Write};

use crate::raft::home::{DataDir, Home, Placed};
use crate::raft::identity::{self, Identity, Refusal};
use crate::raft::network::{NetworkFactory, Peers};
use crate::raft::{LogStore, NodeId, Raft, Replica, SmStore, TypeConfig};
use crate::state_machine::{Command, CommitFile, CommittedBatch, Failure, Op, Outcome, StateMachine};
use crate::storage::codec;

/// Work units of one retention or deletion command (see `state_machine::purge`).
pub const DELETE_BUDGET: u32 = 10_000;

/// Why a request could not be served by this node for a metadata partition. Travels back from a
/// leader that served a forwarded request (`route`); `server::convert::route_codes` is the one
/// table of what each kind becomes on the wire.
#[derive(Debug, Clone, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum RouteError {
    /// Nothing was applied: the request never reached a leader.
    #[error("this node is not the leader of metadata partition {group} (leader: {leader:?})")]
    NotLeader { group: u32, leader: Option<(NodeId, String)> },
    /// The outcome is unknown: the request may or may not have been applied.
    #[error("metadata partition {group} did not confirm in time; the outcome is unknown")]
    Timeout { group: u32 },
    #[error("there is no metadata partition {0}")]
    UnknownGroup(u32),
    #[error("metadata partition {group} failed: {message}")]
    Failed { group: u32, message: String },
    /// A read could not be confirmed by a quorum in time (peers down or cut off); nothing changed.
    #[error("metadata partition {group}: no quorum confirmed the read in time")]
    NoQuorum { group: u32 },
    /// This node's replica cannot serve reads now (stale, not a member, stopped); another node's
    /// may.
    #[error("this node's replica of metadata partition {group} cannot serve reads: {reason}")]
    ReplicaUnavailable { group: u32, reason: String },
}

struct Group {
    raft: Raft,
    sm: SmStore,
    /// The data directory the replica lives in (switched by a move, see `mover`).
    home: Arc<Home>,
    /// Serializes membership changes of this group made through this node.
    membership: tokio::sync::Mutex<()>,
    /// Commits waiting to be proposed together (see [`Node::commit`]).
    commits: tokio::sync::mpsc::Sender<PendingCommit>,
}

/// The result of one file's commit: per batch, and the log index it was applied at.
pub type CommitResult = Result<(Vec<Result<CommittedBatch, Failure>>, u64), RouteError>;

struct PendingCommit {
    file: CommitFile,
    reply: tokio::sync::oneshot::Sender<CommitResult>,
}

/// Files one log entry gathers at most.
const MAX_FILES_PER_ENTRY: usize = 256;
/// Log entries of gathered commits in flight per group at once.
const COMMIT_ENTRIES_IN_FLIGHT: usize = 4;
/// How often postponed log purges are asked for again (see [`Node::finish_purges`]).
const PURGE_CHECK_MS: u64 = 5_000;

/// A running coordinator node.
pub struct Node {
    pub id: NodeId,
    pub config: NodeConfig,
    /// The data directories, in the configured order.
    dirs: Vec<Arc<DataDir>>,
    groups: Vec<Group>,
    /// Replica moves between directories (`mover`).
    moves: Arc<mover::Moves>,
    pub peers: Arc<Peers>,
    identity: Arc<Identity>,
    /// Per group: when this replica last accepted a message of a leader (ms since `started`).
    heard_from_leader: Vec<std::sync::atomic::AtomicU64>,
    started: Instant,
    /// Where entries' time goes on this node (see `raft::stages`).
    stages: Arc<crate::raft::stages::Stages>,
    stop: tokio::sync::watch::Sender<bool>,
    /// Member identities and client addresses (see `addresses`).
    addresses: addresses::Addresses,
}

/// A replica that has heard nothing from a leader for this many maximum election timeouts serves
/// no reads (it may be cut off, removed, or frozen).
const STALE_AFTER_ELECTION_TIMEOUTS: u64 = 3;

/// The longest one step of a membership change (add a learner, let it catch up, promote, remove)
/// may take before the change answers a retriable error and releases the group's membership lock.
const MEMBERSHIP_STEP: Duration = Duration::from_secs(20);

impl Node {
    /// Opens the data directory, starts every group and the background duties, and starts
    /// bootstrapping (see [`Node::bootstrap`]) if this node is a listed member.
    pub async fn start(config: NodeConfig) -> anyhow::Result<Arc<Node>> {
        config.validate()?;
        let n = config.num_metadata_partitions;
        let faults = Arc::new(crate::raft::faults::Faults::default());
        let opened = dirs::open(&config, faults.clone())?;
        let identity = Arc::new(opened.identity);
        let peer_tls = match config.peer_client_tls() {
            Some(files) => Some(diskless_tls::ClientTls::new(files).context("TLS settings of the peer connections")?),
            None => None,
        };
        let peers = Arc::new(Peers::new(identity.clone(), faults, peer_tls));
        let raft_config = Arc::new(raft_config(&config)?);
        let stages = Arc::new(crate::raft::stages::Stages::default());
        let mut groups = Vec::with_capacity(n as usize);
        let mut queues = Vec::with_capacity(n as usize);
        for g in 0..n {
            let home = Home::new(g, opened.dirs[opened.homes[g as usize]].clone());
            let sm = SmStore::open(home.clone(), StateMachine::new(g, n))
                .with_context(|| format!("open the state of metadata partition {g}"))?
                .with_install_pause(Duration::from_millis(config.test_snapshot_install_pause_ms))
                .with_stages(stages.clone());
            let log = LogStore::new(home.clone()).with_stages(stages.clone());
            let net = NetworkFactory { group: g, peers: peers.clone() };
            let raft = Raft::new(config.node_id, raft_config.clone(), net, log, sm.clone())
                .await
                .with_context(|| format!("start Raft for metadata partition {g}"))?;
            let (commits, rx) = tokio::sync::mpsc::channel(4096);
            queues.push(rx);
            groups.push(Group { raft, sm, home, membership: tokio::sync::Mutex::new(()), commits });
        }
        let (stop, _) = tokio::sync::watch::channel(false);
        let heard_from_leader = (0..n).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
        let node = Arc::new(Node {
            id: config.node_id,
            moves: Arc::new(mover::Moves::new(config.intra_dir_throttled_rate, config.num_replica_move_threads)),
            config,
            dirs: opened.dirs,
            groups,
            peers,
            identity,
            heard_from_leader,
            started: Instant::now(),
            stages,
            stop,
            addresses: Default::default(),
        });
        for (g, rx) in queues.into_iter().enumerate() {
            tokio::spawn(gather_commits(Arc::downgrade(&node), g as u32, rx));
        }
        if node.config.members.iter().any(|m| m.id == node.id) {
            let me = Arc::downgrade(&node);
            tokio::spawn(async move { Node::bootstrap(me).await });
        }
        node.spawn_duties();
        Ok(node)
    }

    /// Bootstraps the metadata partitions of a new cluster, safely.
    ///
    /// A listed member initializes a group only when **every** other listed member has answered
    /// `Identify` and none has that group initialized: then the cluster is new, and each member's
    /// replica enters the membership under the incarnation it reported (all members that
    /// initialize compute the same membership and the same cluster id). As soon as any member
    /// reports the group initialized, this node initializes nothing: its replica joins through
    /// replication if the group knows its incarnation, and is refused (see `raft::identity`) until
    /// an operator adds it again if it does not — the case of a wiped or replaced data directory,
    /// which must never vote with the log it lost. Members that do not answer are waited for.
    async fn bootstrap(me: std::sync::Weak<Node>) {
        let mut last_note: Option<Instant> = None;
        loop {
            let Some(node) = me.upgrade() else { return };
            if *node.stop.borrow() {
                return;
            }
            match node.try_bootstrap().await {
                Ok(None) => return,
                Ok(Some(missing)) => {
                    if last_note.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        last_note = Some(Instant::now());
                        tracing::info!(
                            ?missing,
                            "waiting for every member to answer before bootstrapping a new cluster"
                        );
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "bootstrap stopped");
                    return;
                }
            }
            drop(node);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// One bootstrap attempt: `Ok(None)` when there is nothing left to do, else the members that
    /// did not answer.
    async fn try_bootstrap(&self) -> anyhow::Result<Option<Vec<NodeId>>> {
        let mut todo = vec![];
        for (g, group) in self.groups.iter().enumerate() {
            if !group.raft.is_initialized().await? {
                todo.push(g as u32);
            }
        }
        if todo.is_empty() {
            return Ok(None);
        }
        let mut replies: BTreeMap<NodeId, IdentifyReply> = BTreeMap::new();
        let mut missing = vec![];
        for m in self.config.members.iter().filter(|m| m.id != self.id) {
            match self.identify_peer(&m.addr).await {
                Ok(r) if r.node_id != m.id || r.num_metadata_partitions != self.num_groups() => {
                    tracing::error!(
                        addr = %m.addr,
                        "member {} at {} answers as node {} with {} metadata partitions; fix the members list",
                        m.id,
                        m.addr,
                        r.node_id,
                        r.num_metadata_partitions
                    );
                    missing.push(m.id);
                }
                Ok(r) => {
                    replies.insert(m.id, r);
                }
                Err(e) => {
                    tracing::debug!(member = m.id, error = %e, "member did not answer");
                    missing.push(m.id);
                }
            }
        }
        let exists = |g: u32| replies.values().any(|r| r.initialized.get(g as usize) == Some(&true));
        if todo.iter().any(|&g| exists(g)) {
            tracing::info!(
                "the cluster exists: this node's replicas take part once their groups know them (a node whose data                  directory is new is added with `coordctl add-node`)"
            );
            return Ok(None);
        }
        if !missing.is_empty() {
            return Ok(Some(missing));
        }
        let membership = |g: u32| -> BTreeMap<NodeId, Replica> {
            self.config
                .members
                .iter()
                .map(|m| {
                    let incarnation = if m.id == self.id {
                        self.identity.incarnation(g).unwrap_or_default()
                    } else {
                        replies.get(&m.id).and_then(|r| r.incarnations.get(g as usize).copied()).unwrap_or_default()
                    };
                    (m.id, Replica::new(&m.addr, incarnation))
                })
                .collect()
        };
        self.identity.join_cluster(identity::derive_cluster_id(&membership(0))?)?;
        for g in todo {
            let members = membership(g);
            match self.groups[g as usize].raft.initialize(members.clone()).await {
                Ok(()) => tracing::info!(group = g, ?members, "bootstrapped metadata partition"),
                // Another member's replication got here first: fine.
                Err(e) => tracing::debug!(group = g, error = %e, "initialize skipped"),
            }
        }
        Ok(None)
    }

    /// Asks the node at `addr` who it is.
    pub async fn identify_peer(&self, addr: &str) -> anyhow::Result<IdentifyReply> {
        let mut client = self.peers.client(addr).map_err(anyhow::Error::msg)?;
        let r = tokio::time::timeout(Duration::from_secs(2), client.identify(IdentifyRequest {}))
            .await
            .map_err(|_| anyhow::anyhow!("no answer from {addr}"))??;
        Ok(r.into_inner())
    }

    /// Who this node is (the answer to `Identify`).
    pub fn identify(&self) -> IdentifyReply {
        IdentifyReply {
            node_id: self.id,
            incarnations: self.identity.incarnations().to_vec(),
            initialized: (0..self.num_groups())
                .map(|g| self.metrics(g).is_ok_and(|m| m.membership_config.membership().nodes().next().is_some()))
                .collect(),
            cluster_id: self.identity.cluster_id().map(|c| c.to_vec()).unwrap_or_default(),
            num_metadata_partitions: self.num_groups(),
            now_ms: self.now_ms(),
            client_address: self.config.advertised().to_string(),
        }
    }

    /// Whether a Raft message for `g` addressed to `to` is for this node's replica (see
    /// `raft::identity`).
    pub fn admit(&self, g: u32, to: Option<&Addressee>) -> Result<(), Refusal> {
        self.identity.admit(g, to)
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Notes that this node's replica of `g` accepted a message of a current leader.
    pub fn heard_from_leader(&self, g: u32) {
        if let Some(slot) = self.heard_from_leader.get(g as usize) {
            let now = self.started.elapsed().as_millis() as u64;
            slot.fetch_max(now.max(1), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether this node's replica of `g` may serve reads from its own state (FindBatches): it runs,
    /// the group's membership names it, and it is in touch with a leader — as a follower it accepted
    /// a leader's message recently, as the leader a quorum acknowledged it recently. A replica cut
    /// off, removed from the group or stopped would otherwise serve a frozen state for ever, pointing
    /// readers at objects the cleaner has since deleted.
    pub fn check_serving(&self, g: u32) -> Result<(), RouteError> {
        let m = self.metrics(g)?;
        let unavailable = |reason: String| Err(RouteError::ReplicaUnavailable { group: g, reason });
        let placed = self.placed(g)?;
        if placed.is_offline() {
            return unavailable(format!("its data directory {} is offline", placed.path.display()));
        }
        if m.running_state.is_err() || m.state == ServerState::Shutdown {
            return unavailable("the replica stopped".into());
        }
        if !self.is_member(g) {
            return unavailable("the group's membership does not name this replica".into());
        }
        if m.membership_config.membership().voter_ids().eq([self.id]) {
            return Ok(()); // the only voter: nobody to hear from
        }
        let bound = Duration::from_millis(self.config.raft.election_timeout_max_ms * STALE_AFTER_ELECTION_TIMEOUTS);
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

    /// [`check_serving`](Self::check_serving), and that `view` of the state did not catch a snapshot
    /// install half-done.
    pub fn check_readable(&self, g: u32, view: &crate::storage::ReadView<'_>) -> Result<(), RouteError> {
        self.check_serving(g)?;
        match self.group(g)?.sm.installing_in(view) {
            Ok(false) => Ok(()),
            Ok(true) => {
                Err(RouteError::ReplicaUnavailable { group: g, reason: "a snapshot is being installed".into() })
            }
            Err(e) => Err(RouteError::Failed { group: g, message: e.to_string() }),
        }
    }

    /// Whether `g`'s membership, as this node knows it, names this node's replica.
    pub fn is_member(&self, g: u32) -> bool {
        let Ok(m) = self.metrics(g) else { return false };
        let mine = self.identity.incarnation(g);
        m.membership_config.membership().get_node(&self.id).is_some_and(|r| Some(r.incarnation) == mine)
    }

    /// Fires when the node starts shutting down.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub fn num_groups(&self) -> u32 {
        self.groups.len() as u32
    }

    fn group(&self, g: u32) -> Result<&Group, RouteError> {
        self.groups.get(g as usize).ok_or(RouteError::UnknownGroup(g))
    }

    pub fn raft(&self, g: u32) -> Result<&Raft, RouteError> {
        Ok(&self.group(g)?.raft)
    }

    pub fn state_machine(&self, g: u32) -> Result<&StateMachine, RouteError> {
        Ok(self.group(g)?.sm.state_machine())
    }

    /// Where group `g`'s replica is now; hold it while reading (a move deletes the old copy only
    /// once nobody holds its placement).
    pub fn placed(&self, g: u32) -> Result<Arc<Placed>, RouteError> {
        Ok(self.group(g)?.home.current())
    }

    /// The data directories, in the configured order.
    pub fn dirs(&self) -> &[Arc<DataDir>] {
        &self.dirs
    }

    /// Replica moves between this node's directories.
    pub fn moves(&self) -> &mover::Moves {
        &self.moves
    }

    /// Where entries' time goes on this node (see `raft::stages`).
    pub fn stages(&self) -> &crate::raft::stages::Stages {
        &self.stages
    }

    /// The fsync counters of the first data directory.
    pub fn wal_stats(&self) -> &crate::raft::WalSyncStats {
        self.dirs[0].syncer.stats()
    }

    /// The group's current metrics (cloned out: holding the watch blocks the group).
    pub fn metrics(&self, g: u32) -> Result<RaftMetrics<TypeConfig>, RouteError> {
        Ok(self.raft(g)?.metrics().borrow_watched().clone())
    }

    /// The leader of `g` as this node knows it, with its address.
    pub fn leader(&self, g: u32) -> Option<(NodeId, String)> {
        self.leader_replica(g).map(|(id, r)| (id, r.addr))
    }

    /// The leader of `g` as this node knows it, with its address and replica incarnation.
    pub fn leader_replica(&self, g: u32) -> Option<(NodeId, Replica)> {
        let m = self.metrics(g).ok()?;
        let id = m.current_leader?;
        let replica = m.membership_config.membership().get_node(&id)?.clone();
        Some((id, replica))
    }

    /// Every node of `g`'s membership with its address.
    pub fn members(&self, g: u32) -> Result<BTreeMap<NodeId, String>, RouteError> {
        let m = self.metrics(g)?;
        Ok(m.membership_config.membership().nodes().map(|(id, n)| (*id, n.addr.clone())).collect())
    }

    /// The wall clock in milliseconds, as this node stamps commands (plus a test clock offset).
    pub fn now_ms(&self) -> i64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        now + self.peers.faults.clock_offset_ms()
    }

    /// Proposes `op` on this node's replica of `g`, which must be the leader; waits until it is
    /// applied. Returns the outcome and the log index it was applied at. A leader whose lease is not
    /// established yet (just elected) is retried until `timeout`.
    pub async fn propose(&self, g: u32, op: Op, timeout: Duration) -> Result<(Outcome, u64), RouteError> {
        self.propose_at(g, op, None, timeout).await
    }

    /// [`propose`](Self::propose), stamped with `now_ms` instead of this node's clock when given.
    async fn propose_at(
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
                .map_err(|_| RouteError::Timeout { group: g })?;
            match r {
                Ok(resp) => {
                    self.stages.proposed(started);
                    let us = started.elapsed().as_micros() as u64;
                    tracing::trace!(group = g, index = resp.log_id.index, us, "proposal applied");
                    return Ok((resp.data, resp.log_id.index));
                }
                // Appended, then discarded when another leader took over: it may still commit.
                Err(openraft::errors::RaftError::APIError(openraft::errors::ClientWriteError::LogEntryDiscarded(
                    _,
                ))) => {
                    return Err(RouteError::Timeout { group: g });
                }
                Err(e) => {
                    let Some(f) = e.forward_to_leader() else {
                        // The group stopped (a fatal error, a shutdown) with the entry perhaps
                        // appended: it may still commit under another leader.
                        tracing::warn!(group = g, error = %e, "proposal outcome unknown");
                        return Err(RouteError::Timeout { group: g });
                    };
                    let retry = matches!(f.reason, ForwardReason::LeaseExpired | ForwardReason::LeadershipTransfer)
                        && f.leader_id.is_none_or(|l| l == self.id);
                    if retry && Instant::now() + Duration::from_millis(20) < deadline {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    let leader = f.leader_id.zip(f.leader_node.as_ref().map(|n| n.addr.clone()));
                    return Err(RouteError::NotLeader { group: g, leader: leader.or_else(|| self.leader(g)) });
                }
            }
        }
    }

    /// Commits one file on `g` (this node must lead it). Concurrent commits of a group are gathered
    /// into one log entry (group commit at the state machine level): at most
    /// `COMMIT_ENTRIES_IN_FLIGHT` entries are in flight per group, and whatever arrives meanwhile
    /// rides in the next one, so the per-entry costs (replication, fsync acknowledgements, apply
    /// bookkeeping) are shared under load while a lone commit is proposed at once.
    pub async fn commit(&self, g: u32, mut file: CommitFile, timeout: Duration) -> CommitResult {
        let group = self.group(g)?;
        // Past this the state machine refuses the commit: once the caller has been told "timed
        // out", the commit cannot apply later (the broker's cleaners rely on it).
        file.deadline_ms = Some(self.now_ms() + timeout.as_millis() as i64);
        let (reply, rx) = tokio::sync::oneshot::channel();
        group
            .commits
            .send(PendingCommit { file, reply })
            .await
            .map_err(|_| RouteError::Failed { group: g, message: "the node is shutting down".into() })?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            // The gathering task went away with the commit perhaps proposed: unknown.
            Ok(Err(_)) => Err(RouteError::Timeout { group: g }),
            Err(_) => Err(RouteError::Timeout { group: g }),
        }
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
            .map_err(|_| RouteError::NoQuorum { group: g })?;
        match r {
            Ok(_) => Ok("read_index"),
            Err(e) => match e.forward_to_leader() {
                Some(_) => Err(RouteError::NotLeader { group: g, leader: self.leader(g) }),
                // Not confirmed by a quorum in time (cut off, peers down), or the group stopped:
                // the read may succeed later or elsewhere, so the answer is retriable.
                None if matches!(e, openraft::errors::RaftError::Fatal(_)) => {
                    Err(RouteError::ReplicaUnavailable { group: g, reason: e.to_string() })
                }
                None => {
                    tracing::debug!(group = g, error = %e, "linearizable read not confirmed");
                    Err(RouteError::NoQuorum { group: g })
                }
            },
        }
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
            .map_err(|_| RouteError::Timeout { group: g })?;
        Ok(self.applied(g))
    }

    /// Adds a node to `g` (this node must lead it): as a learner until caught up, then a voter.
    /// The node is asked for its replica's incarnation first; a node the group knows under another
    /// incarnation (its data directory was replaced) is removed, then added back as new.
    pub async fn add_to_group(&self, g: u32, id: NodeId, addr: &str) -> Result<String, RouteError> {
        let group = self.group(g)?;
        let _one_at_a_time = group.membership.lock().await;
        let failed = |e: &dyn std::fmt::Display| RouteError::Failed { group: g, message: e.to_string() };
        let not_leader = |leader| RouteError::NotLeader { group: g, leader };
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
                // A replaced replica: the group must forget the old one (whose log is gone) before
                // the new one takes part.
                let change = if voters.remove(&id) {
                    ChangeMembers::ReplaceAllVoters(voters.clone())
                } else {
                    ChangeMembers::RemoveNodes(BTreeSet::from([id]))
                };
                if voters.is_empty() {
                    return Err(failed(&"cannot replace the last voter"));
                }
                match tokio::time::timeout(MEMBERSHIP_STEP, group.raft.change_membership(change, false)).await {
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
        // group's membership lock, and a leader change at the wrong moment leaves it waiting for
        // ever. Every step here is bounded; a step that runs out answers a retriable error.
        let added = match tokio::time::timeout(MEMBERSHIP_STEP, group.raft.add_learner(id, replica, false)).await {
            Ok(Ok(r)) => r.log_id,
            Ok(Err(e)) if e.forward_to_leader().is_some() => return Err(not_leader(self.leader(g))),
            Ok(Err(e)) => return Err(failed(&e)),
            Err(_) => return Err(failed(&format!("adding node {id} as a learner took over {MEMBERSHIP_STEP:?}"))),
        };
        tracing::info!(group = g, node = id, index = added.index, "learner added; waiting for it to catch up");
        // Caught up: it holds the entry that added it, and is within openraft's lag threshold of
        // the leader's log (what openraft's blocking add waits for), so that promoting it does not
        // make a quorum wait for a voter far behind.
        let threshold = group.raft.config().replication_lag_threshold;
        let caught_up = group
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
        match tokio::time::timeout(MEMBERSHIP_STEP, group.raft.change_membership(voters.clone(), false)).await {
            Ok(Ok(_)) => {
                tracing::info!(group = g, node = id, ?voters, "node promoted to voter");
                Ok(format!("metadata partition {g}: {note}voters now {voters:?}"))
            }
            Ok(Err(e)) if e.forward_to_leader().is_some() => Err(not_leader(self.leader(g))),
            Ok(Err(e)) => Err(failed(&e)),
            Err(_) => Err(failed(&format!("promoting node {id} to voter took over {MEMBERSHIP_STEP:?}"))),
        }
    }

    /// Removes a node from `g` (this node must lead it).
    pub async fn remove_from_group(&self, g: u32, id: NodeId) -> Result<String, RouteError> {
        let group = self.group(g)?;
        let _one_at_a_time = group.membership.lock().await;
        let mut voters: BTreeSet<NodeId> = self.metrics(g)?.membership_config.membership().voter_ids().collect();
        let learners: BTreeSet<NodeId> = self.metrics(g)?.membership_config.membership().learner_ids().collect();
        if !voters.remove(&id) && !learners.contains(&id) {
            return Ok(format!("metadata partition {g}: node {id} is not a member"));
        }
        if voters.is_empty() {
            return Err(RouteError::Failed { group: g, message: "cannot remove the last voter".into() });
        }
        match tokio::time::timeout(MEMBERSHIP_STEP, group.raft.change_membership(voters.clone(), false)).await {
            Ok(Ok(_)) => {
                tracing::info!(group = g, node = id, ?voters, "node removed");
                Ok(format!("metadata partition {g}: voters now {voters:?}"))
            }
            Ok(Err(e)) if e.forward_to_leader().is_some() => {
                Err(RouteError::NotLeader { group: g, leader: self.leader(g) })
            }
            Ok(Err(e)) => Err(RouteError::Failed { group: g, message: e.to_string() }),
            Err(_) => Err(RouteError::Failed {
                group: g,
                message: format!("removing node {id} took over {MEMBERSHIP_STEP:?}"),
            }),
        }
    }

    /// Asks `g`'s leader (this node) to hand leadership to `to`.
    pub async fn transfer_leader(&self, g: u32, to: NodeId) -> Result<(), RouteError> {
        let raft = self.raft(g)?;
        if !raft.is_leader() {
            return Err(RouteError::NotLeader { group: g, leader: self.leader(g) });
        }
        raft.trigger().transfer_leader(to).await.map_err(|e| RouteError::Failed { group: g, message: e.to_string() })
    }

    /// Builds a snapshot of every group now; returns the snapshot indexes reached (waits up to
    /// `timeout` for each).
    pub async fn snapshot_all(&self, timeout: Duration) -> Vec<u64> {
        let mut out = vec![];
        for group in &self.groups {
            let applied = group.raft.metrics().borrow_watched().last_applied.map_or(0, |l| l.index);
            if group.raft.trigger().snapshot().await.is_ok() {
                let _ = group
                    .raft
                    .wait(Some(timeout))
                    .metrics(|m| m.snapshot.is_some_and(|s| s.index >= applied), "snapshot")
                    .await;
            }
            out.push(group.raft.metrics().borrow_watched().snapshot.map_or(0, |s| s.index));
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

    /// Hands each group this node leads to its preferred leader if that node is caught up.
    async fn balance_leaders(&self) {
        for (g, group) in self.groups.iter().enumerate() {
            let m = group.raft.metrics().borrow_watched().clone();
            if m.state != ServerState::Leader {
                continue;
            }
            // Not while a membership change runs here: moving the leader would make it start over.
            let Ok(_no_change_under_way) = group.membership.try_lock() else { continue };
            let Some(preferred) = Self::preferred_leader(&m, g as u32) else { continue };
            if preferred == self.id {
                continue;
            }
            let last = m.last_log_index.unwrap_or(0);
            let caught_up = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&preferred).cloned().flatten())
                .is_some_and(|matched| matched.index + 16 >= last);
            if caught_up {
                tracing::info!(group = g, to = preferred, "moving leadership to the preferred leader");
                let _ = group.raft.trigger().transfer_leader(preferred).await;
            }
        }
    }

    /// Finishes log purges that openraft postponed and never retried.
    ///
    /// A leader postpones a purge while a replication stream still covers the entries (a follower
    /// that is down keeps its stream open) and retries only when replication progresses; a node
    /// that loses leadership meanwhile keeps the postponed purge until its next snapshot. Asking
    /// again here bounds the log to about one snapshot interval whatever the followers do.
    async fn finish_purges(&self) {
        let keep = self.config.raft.entries_kept_after_snapshot;
        for (g, group) in self.groups.iter().enumerate() {
            let m = group.raft.metrics().borrow_watched().clone();
            let Some(snapshot) = m.snapshot else { continue };
            let Some(upto) = snapshot.index.checked_sub(keep) else { continue };
            if m.purged.is_some_and(|p| p.index >= upto) {
                continue;
            }
            // openraft ignores a request for the index it already scheduled, so ask for one more
            // entry (it clamps to the snapshot): that re-runs the postponed purge.
            if let Err(e) = group.raft.trigger().purge_log(upto + 1).await {
                tracing::warn!(group = g, error = %e, "asking for a log purge failed");
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

    /// Runs retention and pending deletions on the groups this node leads, with "now" taken from
    /// a quorum's clocks (see [`Node::quorum_now`]).
    async fn enforce_retention(&self) {
        for g in 0..self.num_groups() {
            if !self.groups[g as usize].raft.is_leader() {
                continue;
            }
            let Some(now) = self.quorum_now(g).await else {
                tracing::debug!(group = g, "retention skipped: no majority told its clock");
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
                        tracing::debug!(group = g, error = %e, "retention pass stopped");
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
                        tracing::debug!(group = g, error = %e, "offsets expiry stopped");
                        break;
                    }
                }
            }
        }
    }

    fn spawn_duties(self: &Arc<Self>) {
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

    /// Stops the background duties and every group.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        for (g, group) in self.groups.iter().enumerate() {
            if let Err(e) = group.raft.shutdown().await {
                tracing::warn!(group = g, error = %e, "group did not shut down cleanly");
            }
        }
        for d in &self.dirs {
            if let Err(e) = d.log.sync().map_err(anyhow::Error::from).and_then(|()| Ok(d.db.sync_wal()?)) {
                tracing::error!(dir = %d.path.display(), error = %e, "final fsync failed");
            }
        }
    }
}

/// Proposes the commits queued for group `g`, gathering those that arrive while earlier entries
/// are in flight (see [`Node::commit`]).
async fn gather_commits(node: std::sync::Weak<Node>, g: u32, mut rx: tokio::sync::mpsc::Receiver<PendingCommit>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(COMMIT_ENTRIES_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        // Wait for a free slot first: while every slot is busy, commits pile up for this entry.
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_FILES_PER_ENTRY {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        // Callers that gave up (timed out) are not proposed for.
        batch.retain(|p| !p.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let Some(node) = node.upgrade() else { return };
        tokio::spawn(async move {
            let files: Vec<CommitFile> = batch.iter().map(|p| p.file.clone()).collect();
            let r = node.propose(g, Op::CommitFiles(files), Duration::from_secs(30)).await;
            drop(permit);
            match r {
                Ok((Outcome::CommitFiles(outs), index)) if outs.len() == batch.len() => {
                    for (p, out) in batch.into_iter().zip(outs) {
                        let _ = p.reply.send(Ok((out, index)));
                    }
                }
                Ok((other, _)) => {
                    let e = RouteError::Failed { group: g, message: format!("unexpected outcome {other:?}") };
                    batch.into_iter().for_each(|p| drop(p.reply.send(Err(e.clone()))));
                }
                Err(e) => batch.into_iter().for_each(|p| drop(p.reply.send(Err(e.clone())))),
            }
        });
    }
}

fn raft_config(c: &NodeConfig) -> anyhow::Result<openraft::Config> {
    let r = &c.raft;
    let config = openraft::Config {
        cluster_name: "diskless-coordinator".into(),
        heartbeat_interval: r.heartbeat_ms,
        election_timeout_min: r.election_timeout_min_ms,
        election_timeout_max: r.election_timeout_max_ms,
        // Snapshot transfers are bounded by the network's own limits (see raft::network).
        install_snapshot_timeout: 600_000,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(r.snapshot_after_entries),
        max_in_snapshot_log_to_keep: r.entries_kept_after_snapshot,
        // Replicate an entry as soon as it is written, not after the leader's own fsync: the
        // leader's fsync and the followers' overlap (the entry still commits only once a quorum,
        // leader included, has it on disk).
        broadcast_submitted_on_append: Some(true),
        // Under load, replication traffic already proves liveness: skip redundant heartbeats.
        heartbeat_min_interval: Some(r.heartbeat_ms),
        ..Default::default()
    };
    config.validate().context("invalid Raft settings")
}
