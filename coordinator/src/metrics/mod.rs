//! Prometheus metrics of a coordinator node: the instruments and the gRPC layer that counts every
//! request (the `/metrics` listener is `server::metrics_listener`).
//!
//! Owns every metric name of the crate (all `diskless_*`, units in the name, `_total` counters)
//! and the process's one set of instruments ([`get`]): a process runs one node, so the hot paths
//! (log fsync thread, apply, snapshots, proposals, strict reads, forwarding) bump them without
//! being handed a handle. Those paths only increment counters and observe histograms — a short
//! lock inside prometheus-client, never held across an await, no allocation but a label set's
//! first use. Figures the Raft groups already keep (leader, term, commit and applied indexes) are
//! not pushed: `server::metrics_listener` samples openraft's metrics when Prometheus asks. This
//! module imports nothing of the crate, so any layer may bump it. It must not change what a request, an entry or a fsync does.

pub mod grpc;

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A metadata partition, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Partition {
    pub metadata_partition: u32,
}

/// A gRPC method and its status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodCode {
    pub method: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Method {
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionResult {
    pub metadata_partition: u32,
    pub result: &'static str,
}

/// How a strict read was confirmed: `lease`, `read_index`, or `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Via {
    pub via: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// Latency buckets from 100 µs to ~26 s (×2).
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

fn lat<S: Clone + std::hash::Hash + Eq>() -> HistogramFamily<S> {
    HistogramFamily::new_with_constructor(latency as fn() -> Histogram)
}

/// Every instrument of a node. Per-partition gauges are set by `server::metrics_listener` just before encoding.
pub struct Metrics {
    registry: Registry,
    // Raft groups, sampled at scrape time.
    pub has_leader: Family<Partition, Gauge>,
    pub is_leader: Family<Partition, Gauge>,
    pub member: Family<Partition, Gauge>,
    pub term: Family<Partition, Gauge>,
    pub commit_index: Family<Partition, Gauge>,
    pub applied_index: Family<Partition, Gauge>,
    pub last_log_index: Family<Partition, Gauge>,
    pub snapshot_index: Family<Partition, Gauge>,
    // Raft groups, counted as they happen.
    pub leader_changes: Family<Partition, Counter>,
    pub proposals_committed: Family<Partition, Counter>,
    pub proposals_failed: Family<Partition, Counter>,
    pub proposals_pending: Family<Partition, Gauge>,
    pub apply_duration: Histogram,
    pub applied_entries: Counter,
    // log group commit.
    pub fsync_duration: Histogram,
    pub appends_per_fsync: Histogram,
    // Snapshots.
    pub snapshot_builds: Counter,
    pub snapshot_build_bytes: Counter,
    pub snapshot_build_duration: Histogram,
    pub snapshot_installs: Counter,
    pub snapshot_install_bytes: Counter,
    pub snapshot_install_duration: Histogram,
    /// How long a replica move between data directories paused the metadata partition's writes.
    pub replica_move_pause: Histogram,
    // Requests.
    pub grpc_requests: Family<MethodCode, Counter>,
    pub grpc_duration: HistogramFamily<Method>,
    pub forwarded: Family<PartitionResult, Counter>,
    pub strict_read_duration: HistogramFamily<Via>,
    /// Open WatchPartitions streams, and the resets they sent (`server::coordinator::watch`).
    pub watch_streams: Gauge,
    pub watch_resets: Counter,
    // Disk.
    pub rocksdb_bytes: Gauge,
    pub raft_log_bytes: Gauge,
    pub data_dir_bytes: Gauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's instruments.
pub fn get() -> &'static Metrics {
    &METRICS
}

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registry::default();
        macro_rules! reg {
            ($name:literal, $help:literal, $metric:expr) => {{
                let m = $metric;
                r.register($name, $help, m.clone());
                m
            }};
        }
        Metrics {
            has_leader: reg!(
                "diskless_raft_has_leader",
                "1 when this node knows a leader of the metadata partition",
                Family::default()
            ),
            is_leader: reg!(
                "diskless_raft_is_leader",
                "1 when this node leads the metadata partition",
                Family::default()
            ),
            member: reg!(
                "diskless_raft_replica_member",
                "1 when the metadata partition's membership names this node's replica (0: wiped or not added yet)",
                Family::default()
            ),
            term: reg!("diskless_raft_term", "The current Raft term of the metadata partition", Family::default()),
            commit_index: reg!(
                "diskless_raft_commit_index",
                "The last log index this replica knows committed",
                Family::default()
            ),
            applied_index: reg!(
                "diskless_raft_applied_index",
                "The last log index this replica applied",
                Family::default()
            ),
            last_log_index: reg!(
                "diskless_raft_last_log_index",
                "The last index in this replica's log",
                Family::default()
            ),
            snapshot_index: reg!(
                "diskless_raft_snapshot_index",
                "The last log index this replica's newest snapshot covers",
                Family::default()
            ),
            leader_changes: reg!(
                "diskless_raft_leader_changes",
                "Leaders this node has seen take over the metadata partition (a new leader or a new term)",
                Family::default()
            ),
            proposals_committed: reg!(
                "diskless_raft_proposals_committed",
                "Commands this node proposed as leader that were committed and applied",
                Family::default()
            ),
            proposals_failed: reg!(
                "diskless_raft_proposals_failed",
                "Commands this node proposed that failed (not leader, timed out, metadata partition stopped)",
                Family::default()
            ),
            proposals_pending: reg!(
                "diskless_raft_proposals_pending",
                "Commands proposed on this node and not yet applied or failed",
                Family::default()
            ),
            apply_duration: reg!(
                "diskless_raft_apply_duration_seconds",
                "Time to apply one transaction of committed entries to the state machine",
                latency()
            ),
            applied_entries: reg!(
                "diskless_raft_applied_entries",
                "Log entries applied on this node",
                Counter::default()
            ),
            fsync_duration: reg!(
                "diskless_wal_fsync_duration_seconds",
                "Time of one log fsync (group commit: it covers every log append queued before it)",
                latency()
            ),
            appends_per_fsync: reg!(
                "diskless_wal_appends_per_fsync",
                "Log appends (of all metadata partitions) one log fsync made durable",
                Histogram::new(exponential_buckets(1.0, 2.0, 12))
            ),
            snapshot_builds: reg!("diskless_snapshot_builds", "Snapshots built on this node", Counter::default()),
            snapshot_build_bytes: reg!(
                "diskless_snapshot_build_bytes",
                "Bytes of the snapshot files built on this node",
                Counter::default()
            ),
            snapshot_build_duration: reg!(
                "diskless_snapshot_build_duration_seconds",
                "Time to build one snapshot file",
                latency()
            ),
            snapshot_installs: reg!(
                "diskless_snapshot_installs",
                "Snapshots received from a leader and installed on this node",
                Counter::default()
            ),
            snapshot_install_bytes: reg!(
                "diskless_snapshot_install_bytes",
                "Bytes of the snapshot files installed on this node",
                Counter::default()
            ),
            snapshot_install_duration: reg!(
                "diskless_snapshot_install_duration_seconds",
                "Time to install one received snapshot",
                latency()
            ),
            replica_move_pause: reg!(
                "diskless_replica_move_pause_seconds",
                "How long a replica move between data directories paused its metadata partition's writes at the switch",
                latency()
            ),
            grpc_requests: reg!(
                "diskless_grpc_requests",
                "gRPC requests served, by method and status code",
                Family::default()
            ),
            grpc_duration: reg!(
                "diskless_grpc_request_duration_seconds",
                "Time from a gRPC request's arrival to its response headers, by method",
                lat()
            ),
            forwarded: reg!(
                "diskless_forwarded_requests",
                "Parts of requests forwarded to another node leading their metadata partition, by outcome",
                Family::default()
            ),
            strict_read_duration: reg!(
                "diskless_strict_read_duration_seconds",
                "Time to confirm a linearizable read (leader lease, ReadIndex round, or failed)",
                lat()
            ),
            watch_streams: reg!(
                "diskless_watch_streams",
                "Open WatchPartitions streams (brokers watching a metadata partition's changes through this node)",
                Gauge::default()
            ),
            watch_resets: reg!(
                "diskless_watch_resets",
                "WatchPartitions streams told to reset: their cursor was older than the changes this replica holds",
                Counter::default()
            ),
            rocksdb_bytes: reg!(
                "diskless_rocksdb_size_bytes",
                "Bytes of the RocksDB files in the data directory (state, votes and purge points of every metadata partition)",
                Gauge::default()
            ),
            raft_log_bytes: reg!(
                "diskless_raft_log_size_bytes",
                "Bytes of the Raft log's segment files in the data directory (every metadata partition's log; preallocated)",
                Gauge::default()
            ),
            data_dir_bytes: reg!(
                "diskless_data_dir_size_bytes",
                "Bytes of everything in the data directory (RocksDB, Raft log and snapshot files)",
                Gauge::default()
            ),
            registry: r,
        }
    }

    /// Every metric in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 << 10);
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry) {
            // Only a formatter error: cannot happen when writing into a String.
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }

    /// A proposal on `g` starts: pending until the guard is dropped (also when its caller gives
    /// up).
    pub fn proposal_started(&self, g: u32) -> PendingProposal {
        let gauge = self.proposals_pending.get_or_create_owned(&Partition { metadata_partition: g });
        gauge.inc();
        PendingProposal(gauge)
    }

    /// Counts one proposal's outcome.
    pub fn proposal_done(&self, g: u32, ok: bool) {
        let p = Partition { metadata_partition: g };
        if ok {
            self.proposals_committed.get_or_create(&p).inc();
        } else {
            self.proposals_failed.get_or_create(&p).inc();
        }
    }
}

/// A proposal counted in `diskless_raft_proposals_pending` until dropped.
pub struct PendingProposal(Gauge);

impl Drop for PendingProposal {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// Times one strict read's confirmation (`via`: `lease`, `read_index` or `failed`).
    pub fn strict_read(&self, via: &'static str, took: Duration) {
        self.strict_read_duration.get_or_create(&Via { via }).observe(took.as_secs_f64());
    }
}

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let m = get();
        drop(m.proposal_started(0));
        m.proposal_done(0, true);
        m.fsync_duration.observe(0.001);
        let text = m.encode();
        assert!(text.contains("diskless_raft_proposals_committed_total{metadata_partition=\"0\"} 1"), "{text}");
        assert!(text.contains("diskless_wal_fsync_duration_seconds_count 1"), "{text}");
        assert!(text.contains("# TYPE diskless_wal_appends_per_fsync histogram"), "{text}");
        for line in text.lines().filter(|l| l.starts_with("# TYPE ") && l.ends_with(" counter")) {
            assert!(line.split(' ').nth(2).is_some_and(|n| n.ends_with("_total")), "{line}");
        }
    }
}
