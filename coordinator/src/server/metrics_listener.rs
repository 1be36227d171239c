//! What the metrics read from a running node: the `/metrics` HTTP listener (`metrics_addr`), which
//! samples every metadata partition's openraft metrics and the data directory's size when
//! Prometheus scrapes, and one task per metadata partition that counts leader changes as openraft
//! reports them.
//!
//! It sits with the other listeners, above `node`; the instruments it sets are `metrics`'s,
//! which imports nothing of the crate. It must not act on the node: it only reads its figures.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Weak};

use anyhow::Context;
use openraft::async_runtime::WatchReceiver;
use openraft::vote::RaftLeaderId as _;
use openraft::ServerState;

use crate::metrics::{get, Partition, PartitionResult, Via};
use crate::node::Node;

/// Binds `addr` and serves `GET /metrics` until the node stops; returns the bound address.
pub async fn serve(node: &Arc<Node>, addr: &str) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("metrics listener on {addr}"))?;
    let bound = listener.local_addr()?;
    let weak = Arc::downgrade(node);
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let weak = weak.clone();
            async move {
                let body = render(weak).await;
                ([(http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body)
            }
        }),
    );
    let mut stop = node.stopping();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::warn!(error = %e, "metrics listener stopped");
        }
    });
    tracing::info!(%bound, "metrics served at /metrics");
    Ok(bound)
}

/// Samples the node, then encodes everything.
async fn render(node: Weak<Node>) -> String {
    if let Some(node) = node.upgrade() {
        sample(&node);
        let dirs = node.config.dirs();
        drop(node);
        // Summed over the data directories.
        let sizes = tokio::task::spawn_blocking(move || {
            dirs.iter().map(|d| dir_sizes(d)).fold((0, 0, 0), |(a, r, l), (x, y, z)| (a + x, r + y, l + z))
        });
        if let Ok((all, rocksdb, log)) = sizes.await {
            get().data_dir_bytes.set(all as i64);
            get().rocksdb_bytes.set(rocksdb as i64);
            get().raft_log_bytes.set(log as i64);
        }
    }
    get().encode()
}

/// Sets the per-partition gauges from each metadata partition's openraft metrics.
fn sample(node: &Node) {
    let m = get();
    for via in ["lease", "read_index", "failed"] {
        let _ = m.strict_read_duration.get_or_create(&Via { via });
    }
    for g in 0..node.num_partitions() {
        let Ok(r) = node.metrics(g) else { continue };
        let p = Partition { metadata_partition: g };
        // Series that count events exist from the start, at 0, so rates and alerts see them.
        let _ = m.leader_changes.get_or_create(&p);
        let _ = m.proposals_committed.get_or_create(&p);
        let _ = m.proposals_failed.get_or_create(&p);
        let _ = m.proposals_pending.get_or_create(&p);
        for result in ["ok", "failed"] {
            let _ = m.forwarded.get_or_create(&PartitionResult { metadata_partition: g, result });
        }
        let idx = |l: Option<u64>| l.map_or(0, |i| i as i64);
        m.has_leader.get_or_create(&p).set(i64::from(r.current_leader.is_some()));
        m.is_leader.get_or_create(&p).set(i64::from(r.state == ServerState::Leader));
        m.member.get_or_create(&p).set(i64::from(node.is_member(g)));
        m.term.get_or_create(&p).set(r.current_term as i64);
        m.commit_index.get_or_create(&p).set(idx(r.local_committed.map(|l| l.index)));
        m.applied_index.get_or_create(&p).set(idx(r.last_applied.map(|l| l.index)));
        m.last_log_index.get_or_create(&p).set(idx(r.last_log_index));
        m.snapshot_index.get_or_create(&p).set(idx(r.snapshot.map(|l| l.index)));
    }
}

/// Bytes under `dir`, under `dir/rocksdb` and under the Raft log's directory (files that vanish
/// while walking are skipped).
fn dir_sizes(dir: &Path) -> (u64, u64, u64) {
    fn walk(p: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(p) else { return 0 };
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }
    (walk(dir), walk(&dir.join("rocksdb")), walk(&crate::raft::home::DataDir::log_path(dir)))
}

/// Starts one task per metadata partition counting leader changes: a leader this node had not seen
/// for the metadata partition, or the same leader in a new term. Ends when the node stops.
pub fn watch_leaders(node: &Arc<Node>) {
    for g in 0..node.num_partitions() {
        let Ok(raft) = node.raft(g) else { continue };
        let mut rx = raft.server_metrics();
        let mut stop = node.stopping();
        tokio::spawn(async move {
            let counter = get().leader_changes.get_or_create_owned(&Partition { metadata_partition: g });
            let mut last: Option<(u64, u64)> = None;
            loop {
                let seen = {
                    let m = rx.borrow_and_update();
                    m.current_leader.map(|l| (l, m.vote.leader_id().term()))
                };
                if let Some(now) = seen {
                    if last != Some(now) {
                        counter.inc();
                        last = Some(now);
                    }
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        });
    }
}
