//! A coordinator node: its data directories, one Raft group per metadata partition, and the
//! background duties of the metadata partitions it leads.
//!
//! `mod.rs` owns the [`Node`] itself: starting it (directories opened, one openraft `Raft` per
//! metadata partition, the commit queues, the duties), stopping it, and the accessors every other
//! file uses. Each operation on a node lives in a file of its own, as `impl Node` blocks:
//! `bootstrap` (a new cluster's first membership, `Identify`), `propose` (commands stamped and
//! proposed on a local leader), `commit` (commits gathered into shared log entries), `reads`
//! (linearizable reads, follower waits, whether a replica may serve from its own state),
//! `route` (running a request on its metadata partition's leader, here or forwarded once),
//! `membership` (adding and removing nodes), `leadership` (moving leadership only to a replica
//! that can lead, watched, rescued), `duties` (leader balance, log purges, snapshots, retention), `addresses` (who the other nodes are), `dirs` and `mover` (data
//! directories and replica moves), `backup` (a consistent copy of a state), `roles` and `config`
//! (the configuration). The vocabulary of what can go wrong is `error`.
//!
//! It must not speak gRPC to clients (that is `server`) nor interpret commands (that is
//! `state_machine`).

mod addresses;
mod backup;
mod bootstrap;
mod commit;
pub mod config;
pub mod dirs;
#[cfg(test)]
mod dirs_test;
mod duties;
mod error;
mod leadership;
mod membership;
pub mod mover;
mod propose;
mod reads;
pub mod roles;
pub mod route;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use diskless_proto::internal::Addressee;
use openraft::async_runtime::WatchReceiver;
use openraft::RaftMetrics;

pub use backup::StateCopy;
pub use commit::CommitResult;
pub use config::{Member, NodeConfig};
pub use error::RouteError;
pub use membership::CHANGE_TIMEOUT;
pub use route::{Answer, Change, Hop, Read, Write};

use crate::raft::home::{DataDir, Home, Placed};
use crate::raft::identity::{Identity, Refusal};
use crate::raft::network::{NetworkFactory, Peers};
use crate::raft::{LogStore, NodeId, Raft, Replica, SmStore, TypeConfig};
use crate::state_machine::StateMachine;

/// Work units of one retention or deletion command (see `state_machine::purge`).
pub const DELETE_BUDGET: u32 = 10_000;

/// This node's replica of one metadata partition.
struct Partition {
    raft: Raft,
    sm: SmStore,
    /// The data directory the replica lives in (switched by a move, see `mover`).
    home: Arc<Home>,
    /// Serializes membership changes of this metadata partition made through this node.
    membership: tokio::sync::Mutex<()>,
    /// Commits waiting to be proposed together (see `commit`).
    commits: tokio::sync::mpsc::Sender<commit::PendingCommit>,
    /// The replica's recent partition changes, for watchers (`raft::watch`).
    watch: Arc<crate::raft::watch::WatchHub>,
}

/// A running coordinator node.
pub struct Node {
    pub id: NodeId,
    pub config: NodeConfig,
    /// The data directories, in the configured order.
    dirs: Vec<Arc<DataDir>>,
    /// This node's replica of each metadata partition, by partition id.
    partitions: Vec<Partition>,
    /// Replica moves between directories (`mover`).
    moves: Arc<mover::Moves>,
    pub peers: Arc<Peers>,
    identity: Arc<Identity>,
    /// Per metadata partition: when this replica last accepted a message of a leader (ms since
    /// `started`; see `reads`).
    heard_from_leader: Vec<std::sync::atomic::AtomicU64>,
    started: Instant,
    /// Where entries' time goes on this node (see `raft::stages`).
    stages: Arc<crate::raft::stages::Stages>,
    stop: tokio::sync::watch::Sender<bool>,
    /// Member identities and client addresses (see `addresses`).
    addresses: addresses::Addresses,
    /// Leadership transfers that failed, per metadata partition and target (see `leadership`).
    transfers: leadership::Backoffs,
}

impl Node {
    /// Opens the data directories, starts every metadata partition's Raft group, its commit queue
    /// and the background duties, and starts bootstrapping (see `bootstrap`) if this node is a
    /// listed member.
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
        let mut partitions = Vec::with_capacity(n as usize);
        let mut queues = Vec::with_capacity(n as usize);
        for g in 0..n {
            let home = Home::new(g, opened.dirs[opened.homes[g as usize]].clone());
            let watch = Arc::new(crate::raft::watch::WatchHub::default());
            let sm = SmStore::open(home.clone(), StateMachine::new(g, n))
                .with_context(|| format!("open the state of metadata partition {g}"))?
                .with_install_pause(Duration::from_millis(config.test_snapshot_install_pause_ms))
                .with_stages(stages.clone())
                .with_watch(watch.clone())
                .with_context(|| format!("read the applied index of metadata partition {g}"))?;
            let log = LogStore::new(home.clone()).with_stages(stages.clone());
            let net = NetworkFactory { partition: g, peers: peers.clone() };
            let raft = Raft::new(config.node_id, raft_config.clone(), net, log, sm.clone())
                .await
                .with_context(|| format!("start Raft for metadata partition {g}"))?;
            let (commits, rx) = tokio::sync::mpsc::channel(4096);
            queues.push(rx);
            partitions.push(Partition { raft, sm, home, membership: tokio::sync::Mutex::new(()), commits, watch });
        }
        let (stop, _) = tokio::sync::watch::channel(false);
        let heard_from_leader = (0..n).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
        let node = Arc::new(Node {
            id: config.node_id,
            moves: Arc::new(mover::Moves::new(config.intra_dir_throttled_rate, config.num_replica_move_threads)),
            config,
            dirs: opened.dirs,
            partitions,
            peers,
            identity,
            heard_from_leader,
            started: Instant::now(),
            stages,
            stop,
            addresses: Default::default(),
            transfers: Default::default(),
        });
        for (g, rx) in queues.into_iter().enumerate() {
            tokio::spawn(commit::gather_commits(Arc::downgrade(&node), g as u32, rx));
        }
        if node.config.members.iter().any(|m| m.id == node.id) {
            let me = Arc::downgrade(&node);
            tokio::spawn(async move { Node::bootstrap(me).await });
        }
        node.spawn_duties();
        Ok(node)
    }

    /// Stops the background duties and every metadata partition's Raft group.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        for (g, mp) in self.partitions.iter().enumerate() {
            if let Err(e) = mp.raft.shutdown().await {
                tracing::warn!(metadata_partition = g, error = %e, "metadata partition did not shut down cleanly");
            }
        }
        for d in &self.dirs {
            if let Err(e) = d.log.sync().map_err(anyhow::Error::from).and_then(|()| Ok(d.db.sync_wal()?)) {
                tracing::error!(dir = %d.path.display(), error = %e, "final fsync failed");
            }
        }
    }

    /// Fires when the node starts shutting down.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// The number of metadata partitions (fixed when the cluster was created).
    pub fn num_partitions(&self) -> u32 {
        self.partitions.len() as u32
    }

    fn partition(&self, g: u32) -> Result<&Partition, RouteError> {
        self.partitions.get(g as usize).ok_or(RouteError::UnknownPartition(g))
    }

    pub fn raft(&self, g: u32) -> Result<&Raft, RouteError> {
        Ok(&self.partition(g)?.raft)
    }

    /// `g`'s recent partition changes on this replica (`WatchPartitions`).
    pub fn watch_hub(&self, g: u32) -> Result<&Arc<crate::raft::watch::WatchHub>, RouteError> {
        Ok(&self.partition(g)?.watch)
    }

    pub fn state_machine(&self, g: u32) -> Result<&StateMachine, RouteError> {
        Ok(self.partition(g)?.sm.state_machine())
    }

    /// Where metadata partition `g`'s replica is now; hold it while reading (a move deletes the old
    /// copy only once nobody holds its placement).
    pub fn placed(&self, g: u32) -> Result<Arc<Placed>, RouteError> {
        Ok(self.partition(g)?.home.current())
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

    /// The Raft log fsync counters of the first data directory.
    pub fn log_sync_stats(&self) -> &crate::raft::LogSyncStats {
        self.dirs[0].syncer.stats()
    }

    /// `g`'s current Raft metrics (cloned out: holding the watch blocks the Raft group).
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

    /// Node `id`'s replica of `g` as this node's membership of `g` knows it.
    pub fn replica_of(&self, g: u32, id: NodeId) -> Option<Replica> {
        self.metrics(g).ok()?.membership_config.membership().get_node(&id).cloned()
    }

    /// Every node of `g`'s membership with its address.
    pub fn members(&self, g: u32) -> Result<BTreeMap<NodeId, String>, RouteError> {
        let m = self.metrics(g)?;
        Ok(m.membership_config.membership().nodes().map(|(id, n)| (*id, n.addr.clone())).collect())
    }

    /// Whether a Raft message for `g` addressed to `to` is for this node's replica (see
    /// `raft::identity`).
    pub fn admit(&self, g: u32, to: Option<&Addressee>) -> Result<(), Refusal> {
        self.identity.admit(g, to)
    }

    /// Who this node's replicas are (see `raft::identity`).
    pub fn identity(&self) -> &Identity {
        &self.identity
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
        // Raft's Pre-Vote (Ongaro's thesis, 9.6): a replica whose election timeout ran out first
        // asks whether a quorum would vote for it, and only then raises its term. A replica that
        // cannot reach a quorum (cut off, or able to receive but not to send) so never inflates
        // its term, which would make every candidate that asks it step down, round after round,
        // and keep its partition without a leader (t23's rescue under a one-way cut saw 8 s).
        enable_pre_vote: Some(true),
        ..Default::default()
    };
    config.validate().context("invalid Raft settings")
}
