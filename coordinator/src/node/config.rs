//! A coordinator node's configuration: a TOML file, overridden by environment variables and flags
//! (see the server binary).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `diskless.metadata.topic.num.partitions`'s default: one per node of a 3-node quorum. A commit
/// usually touches every metadata partition, and its cost is per Raft entry (one per partition
/// touched), so more partitions make each commit dearer; with leaders balanced, 3 partitions make a
/// commit one entry per node. More pay only where the nodes have the cores to apply that many
/// metadata partitions in parallel (`bench/HISTORY.md`, "What a commit costs"). Fixed when the cluster is
/// created.
pub const DEFAULT_METADATA_PARTITIONS: u32 = 3;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id: unique in the cluster, never 0, never reused for another machine's data.
    pub node_id: u64,
    /// Where the client listener (CoordinatorService, AdminService, health) listens, `host:port`;
    /// without `peer_listen` it serves the peers' traffic (RaftService, forwarded requests) too.
    pub listen: String,
    /// The address clients (brokers, operators) use to reach this node; defaults to `listen`.
    #[serde(default)]
    pub advertise: Option<String>,
    /// Where the peer listener (Raft messages, snapshots, requests forwarded by other nodes)
    /// listens, `host:port`; unset: peers use the client listener. Every node of a cluster has one
    /// or none.
    #[serde(default)]
    pub peer_listen: Option<String>,
    /// The address other nodes reach this node's peer listener at (the address in `[[members]]`
    /// and `coordctl add-node --address`); defaults to `peer_listen`, else to `advertise`.
    #[serde(default)]
    pub peer_advertise: Option<String>,
    /// TLS on the client listener (and, without `peer_listen`, on the peers' connections too).
    #[serde(default)]
    pub tls: Option<diskless_tls::TlsFiles>,
    /// TLS on the peer listener and on this node's connections to peers: the node's certificate,
    /// presented both ways, and the CA of the cluster. A client certificate is always required,
    /// and must name (in its alternative names or common name) the host of a member's address.
    #[serde(default)]
    pub peer_tls: Option<diskless_tls::TlsFiles>,
    /// Which certificate identities hold which role on the client listener (`node::roles`; what
    /// each role may call is `server::authz`'s); unset: every client the listener admits may do
    /// everything.
    #[serde(default)]
    pub roles: Option<super::roles::Roles>,
    /// The largest snapshot a peer may stream to this node, in bytes; a larger stream is refused.
    #[serde(default = "default_max_snapshot_bytes")]
    pub max_snapshot_bytes: u64,
    /// The data directory (RocksDB and snapshots): the one-directory form of `data_dirs`.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The data directories (KIP-113's `log.dirs`): each has its own RocksDB, fsync thread and
    /// identity record; each metadata partition's replica lives in one of them. Give either this
    /// or `data_dir`.
    #[serde(default)]
    pub data_dirs: Vec<PathBuf>,
    /// At most this many replica moves between directories run at once (KIP-113's
    /// `num.replica.alter.log.dirs.threads`).
    #[serde(default = "default_replica_move_threads")]
    pub num_replica_move_threads: u32,
    /// The copy rate of replica moves between directories, bytes per second, all moves together
    /// (KIP-113's `intra.broker.throttled.rate`); 0 = unthrottled. Changeable at run time
    /// (`coordctl dirs throttle`).
    #[serde(default)]
    pub intra_dir_throttled_rate: u64,
    /// The number of metadata partitions (Raft groups); fixed when the cluster is created.
    #[serde(default = "default_metadata_partitions")]
    pub num_metadata_partitions: u32,
    /// The voters every metadata partition starts with. The nodes listed here bootstrap a new
    /// cluster once every one of them answers and none has an initialized metadata partition; a
    /// listed node whose data directory is new while the cluster exists (a replaced disk)
    /// initializes nothing and takes no part until it is added again (`coordctl add-node`). Keeping
    /// the list after the first start is safe. Empty on a node that will be added to a running
    /// cluster.
    #[serde(default)]
    pub members: Vec<Member>,
    #[serde(default)]
    pub raft: RaftTuning,
    /// How often each metadata partition's leader enforces retention and finishes pending
    /// deletions.
    #[serde(default = "default_retention_check_ms")]
    pub retention_check_ms: u64,
    /// Kafka's `producer.id.expiration.ms`: an idempotent producer's state (its last 5 batches
    /// per partition, for duplicate detection) is forgotten once it has appended nothing for
    /// this long, checked with retention. Negative: never.
    #[serde(default = "default_producer_id_expiration_ms")]
    pub producer_id_expiration_ms: i64,
    /// How often the leader of each metadata partition compares its topics with the catalog
    /// (metadata partition 0) and completes creations and deletions that failed part-way (0 =
    /// never).
    #[serde(default = "default_topic_reconcile_ms")]
    pub topic_reconcile_ms: u64,
    /// How long an object key stays fenced (a tombstone that refuses any commit of it) after a
    /// broker's cleaner fenced it before deleting the object, or confirmed the deletion; forgotten
    /// by retention afterwards. It must outlast every way a commit of the key can still reach the
    /// log: the brokers' `cleanup.orphan_grace_ms` (their commit deadline), plus the coordinator's
    /// commit timeout (at most 120 s), plus the clock differences between brokers and nodes.
    /// Negative: never forgotten.
    #[serde(default = "default_fenced_object_retention_ms")]
    pub fenced_object_retention_ms: i64,
    /// Kafka's `offsets.retention.minutes`: the committed offsets of a consumer group without
    /// members are forgotten once neither they nor the group changed for this long, checked with
    /// retention (Kafka's default, 7 days). Negative: never.
    #[serde(default = "default_offsets_retention_minutes")]
    pub offsets_retention_minutes: i64,
    /// How often a node hands leaderships back to each metadata partition's preferred leader (0 =
    /// never).
    #[serde(default = "default_leader_balance_ms")]
    pub leader_balance_ms: u64,
    /// Where to serve Prometheus metrics over HTTP (`GET /metrics`), `host:port`; none when unset.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The largest request a client may send, in bytes.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    /// Accept the `InjectFault` admin call and the `test_*` settings (tests only).
    #[serde(default)]
    pub allow_fault_injection: bool,
    /// Tests only (needs `allow_fault_injection`): every snapshot install pauses this long before
    /// adopting the received file and again halfway through replacing the state.
    #[serde(default)]
    pub test_snapshot_install_pause_ms: u64,
    /// Tests only (needs `allow_fault_injection`): a replica move between directories pauses this
    /// long in each phase (so that a test can kill the process there).
    #[serde(default)]
    pub test_replica_move_pause_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub id: u64,
    pub addr: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTuning {
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many log entries since the last one.
    pub snapshot_after_entries: u64,
    /// Log entries kept behind a snapshot (for followers slightly behind).
    pub entries_kept_after_snapshot: u64,
    /// The size of a Raft log segment file (each data directory's log is a sequence of them,
    /// zero-filled before use; at least 1 MiB).
    pub log_segment_bytes: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_ms: 100,
            election_timeout_min_ms: 800,
            election_timeout_max_ms: 1600,
            snapshot_after_entries: 20_000,
            entries_kept_after_snapshot: 1_000,
            log_segment_bytes: crate::raft::seglog::DEFAULT_SEGMENT_BYTES,
        }
    }
}

fn default_replica_move_threads() -> u32 {
    1
}

fn default_metadata_partitions() -> u32 {
    DEFAULT_METADATA_PARTITIONS
}

fn default_producer_id_expiration_ms() -> i64 {
    24 * 60 * 60 * 1000
}

fn default_offsets_retention_minutes() -> i64 {
    7 * 24 * 60
}

fn default_fenced_object_retention_ms() -> i64 {
    60 * 60 * 1000
}

/// Below this, `fenced_object_retention_ms` cannot outlast the default orphan grace period plus
/// the longest commit timeout.
pub const MIN_FENCED_OBJECT_RETENTION_MS: i64 = 15 * 60 * 1000;

fn default_retention_check_ms() -> u64 {
    30_000
}

fn default_topic_reconcile_ms() -> u64 {
    5_000
}

fn default_leader_balance_ms() -> u64 {
    10_000
}

fn default_max_snapshot_bytes() -> u64 {
    64 << 30
}

fn default_max_request_bytes() -> usize {
    4 << 20
}

impl NodeConfig {
    /// The data directories, in the configured order (`data_dir` alone is a list of one).
    pub fn dirs(&self) -> Vec<PathBuf> {
        match &self.data_dir {
            Some(d) if self.data_dirs.is_empty() => vec![d.clone()],
            _ => self.data_dirs.clone(),
        }
    }

    /// The first data directory (where tools and received files without a metadata partition go).
    pub fn first_dir(&self) -> PathBuf {
        self.dirs().into_iter().next().unwrap_or_default()
    }

    /// The address this node is reached at.
    pub fn advertised(&self) -> &str {
        self.advertise.as_deref().unwrap_or(&self.listen)
    }

    /// The address peers reach this node at: its address in the metadata partitions' membership.
    pub fn peer_advertised(&self) -> &str {
        self.peer_advertise.as_deref().or(self.peer_listen.as_deref()).unwrap_or_else(|| self.advertised())
    }

    /// The TLS settings of this node's connections to peers.
    pub fn peer_client_tls(&self) -> Option<&diskless_tls::TlsFiles> {
        if self.peer_listen.is_some() {
            self.peer_tls.as_ref()
        } else {
            self.tls.as_ref()
        }
    }

    /// Checks the values that have rules, with messages an operator can act on.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.node_id != 0, "node_id must not be 0");
        anyhow::ensure!(
            self.data_dir.is_none() || self.data_dirs.is_empty(),
            "give either data_dir or data_dirs, not both"
        );
        let dirs = self.dirs();
        anyhow::ensure!(!dirs.is_empty(), "data_dir or data_dirs is required");
        let mut unique = dirs.clone();
        unique.sort();
        unique.dedup();
        anyhow::ensure!(unique.len() == dirs.len(), "data_dirs lists a directory twice");
        anyhow::ensure!(self.num_replica_move_threads >= 1, "num_replica_move_threads must be at least 1");
        anyhow::ensure!(
            (1..=1024).contains(&self.num_metadata_partitions),
            "num_metadata_partitions must be 1 to 1024, not {}",
            self.num_metadata_partitions
        );
        let mut ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
        ids.sort();
        ids.dedup();
        anyhow::ensure!(ids.len() == self.members.len(), "members lists a node id twice");
        anyhow::ensure!(!ids.contains(&0), "member ids must not be 0");
        if let Some(me) = self.members.iter().find(|m| m.id == self.node_id) {
            anyhow::ensure!(
                me.addr == self.peer_advertised(),
                "members gives node {} the address {}, but it advertises {} to peers",
                self.node_id,
                me.addr,
                self.peer_advertised()
            );
        }
        if self.peer_listen.is_none() {
            anyhow::ensure!(
                self.peer_tls.is_none() && self.peer_advertise.is_none(),
                "peer_tls and peer_advertise need a separate peer listener (peer_listen)"
            );
            anyhow::ensure!(
                self.roles.is_none(),
                "roles need a separate peer listener (peer_listen): peers' traffic must not pass the client roles"
            );
        }
        if let Some(roles) = &self.roles {
            anyhow::ensure!(
                self.tls.as_ref().is_some_and(|t| t.require_client_cert),
                "roles name certificate identities: they need tls with require_client_cert on the client listener"
            );
            roles.validate()?;
        }
        anyhow::ensure!(self.max_snapshot_bytes >= 1 << 20, "max_snapshot_bytes must be at least 1 MiB");
        let r = &self.raft;
        anyhow::ensure!(r.heartbeat_ms > 0, "raft.heartbeat_ms must be positive");
        anyhow::ensure!(
            r.heartbeat_ms < r.election_timeout_min_ms && r.election_timeout_min_ms < r.election_timeout_max_ms,
            "raft timeouts must satisfy heartbeat_ms < election_timeout_min_ms < election_timeout_max_ms"
        );
        anyhow::ensure!(self.max_request_bytes >= 1024, "max_request_bytes must be at least 1024");
        anyhow::ensure!(
            self.test_replica_move_pause_ms == 0 || self.allow_fault_injection,
            "test_replica_move_pause_ms is a test setting: it needs allow_fault_injection = true"
        );
        anyhow::ensure!(
            self.test_snapshot_install_pause_ms == 0 || self.allow_fault_injection,
            "test_snapshot_install_pause_ms is a test setting: it needs allow_fault_injection = true"
        );
        if (0..MIN_FENCED_OBJECT_RETENTION_MS).contains(&self.fenced_object_retention_ms) {
            tracing::warn!(
                retention_ms = self.fenced_object_retention_ms,
                "fenced_object_retention_ms is under {MIN_FENCED_OBJECT_RETENTION_MS} ms: a commit that reaches the \
                 log after a fenced key is forgotten could record batches in a deleted object; keep it above the \
                 brokers' orphan_grace_ms + 120 s + clock skew"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_file_gets_defaults_and_unknown_keys_are_refused() {
        let c: NodeConfig = toml::from_str("node_id = 1\nlisten = \"127.0.0.1:7001\"\ndata_dir = \"d\"").unwrap();
        assert_eq!(c.num_metadata_partitions, DEFAULT_METADATA_PARTITIONS);
        assert_eq!(c.advertised(), "127.0.0.1:7001");
        c.validate().unwrap();
        assert_eq!(c.dirs(), vec![PathBuf::from("d")]);
        let bad = toml::from_str::<NodeConfig>("node_id = 1\nlisten = \"x\"\ndata_dir = \"d\"\nlisen = 3");
        assert!(bad.unwrap_err().to_string().contains("lisen"));
    }

    #[test]
    fn bad_values_are_explained() {
        let mut c: NodeConfig = toml::from_str("node_id = 0\nlisten = \"a:1\"\ndata_dir = \"d\"").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("node_id"));
        c.node_id = 1;
        c.members = vec![Member { id: 1, addr: "b:1".into() }];
        assert!(c.validate().unwrap_err().to_string().contains("advertises"));
        c.members.clear();
        c.data_dirs = vec!["e".into()];
        assert!(c.validate().unwrap_err().to_string().contains("not both"));
        c.data_dir = None;
        c.data_dirs = vec!["e".into(), "e".into()];
        assert!(c.validate().unwrap_err().to_string().contains("twice"));
        c.data_dirs.clear();
        assert!(c.validate().unwrap_err().to_string().contains("required"));
    }
}
