//! gRPC health checking (`grpc.health.v1.Health`) for load balancers, Kubernetes probes and
//! `grpc_health_probe`.
//!
//! Statuses, per service name:
//! - `""` (the whole node) and `diskless.coordinator.v1.CoordinatorService`: SERVING when the node
//!   has joined a cluster and every metadata partition it hosts is in working order here: the
//!   partition's membership names this node's replica, a leader is known, and the replica is in touch
//!   with it (`Node::check_serving`: as a follower it heard from the leader lately, as the leader a
//!   quorum acknowledged it lately). NOT_SERVING otherwise: starting, bootstrapping, waiting to be
//!   added, or cut off from a quorum.
//! - `diskless.admin.v1.AdminService` and `diskless.internal.v1.RaftService`: SERVING while the
//!   server runs — operators and peers must reach a node that is not healthy, to see why and to
//!   repair it.
//!
//! Everything is NOT_SERVING once the node starts shutting down. A task watches the metadata
//! partitions' Raft server metrics (leader, state, membership) and re-evaluates at each change, and at least every
//! [`CHECK_EVERY`] (being in touch with a leader is a matter of time, not only of metric changes);
//! it updates the reporter when the answer changes. It must not act on the node.

use std::sync::Weak;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::node::Node;

/// How often the metadata partitions are looked at.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

pub const COORDINATOR: &str = "diskless.coordinator.v1.CoordinatorService";
pub const ADMIN: &str = "diskless.admin.v1.AdminService";
pub const RAFT: &str = "diskless.internal.v1.RaftService";

/// Whether the node serves clients, and if not, why.
pub fn check(node: &Node) -> Result<(), String> {
    if node.identity().cluster_id().is_none() {
        return Err("not part of a cluster yet (bootstrapping, or waiting to be added)".into());
    }
    for g in 0..node.num_partitions() {
        let m = node.metrics(g).map_err(|e| e.to_string())?;
        if m.current_leader.is_none() {
            return Err(format!("metadata partition {g} has no leader"));
        }
        node.check_serving(g).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The health service and the task keeping it true; call from the server's start.
pub async fn start(
    node: &std::sync::Arc<Node>,
) -> tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health> {
    let (reporter, service) = tonic_health::server::health_reporter();
    for name in ["", COORDINATOR] {
        reporter.set_service_status(name, ServingStatus::NotServing).await;
    }
    for name in [ADMIN, RAFT] {
        reporter.set_service_status(name, ServingStatus::Serving).await;
    }
    tokio::spawn(keep(std::sync::Arc::downgrade(node), node.stopping(), reporter));
    service
}

async fn keep(node: Weak<Node>, mut stopping: tokio::sync::watch::Receiver<bool>, reporter: HealthReporter) {
    let mut last: Option<bool> = None;
    let mut watches: Vec<_> = match node.upgrade() {
        Some(n) => (0..n.num_partitions()).filter_map(|g| n.raft(g).ok().map(|r| r.server_metrics())).collect(),
        None => vec![],
    };
    loop {
        let Some(n) = node.upgrade() else { break };
        if *stopping.borrow() {
            break;
        }
        let verdict = check(&n);
        drop(n);
        let serving = verdict.is_ok();
        if last != Some(serving) {
            match &verdict {
                Ok(()) => tracing::info!("health: SERVING"),
                Err(why) => tracing::info!(why, "health: NOT_SERVING"),
            }
            let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
            for name in ["", COORDINATOR] {
                reporter.set_service_status(name, status).await;
            }
            last = Some(serving);
        }
        // A watch whose Raft group stopped is dropped (it would report a change for ever).
        let changed = async {
            if watches.is_empty() {
                std::future::pending::<()>().await;
            }
            let (r, i, _) = futures_util::future::select_all(watches.iter_mut().map(|w| Box::pin(w.changed()))).await;
            r.err().map(|_| i)
        };
        let stopped = tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => None,
            gone = changed => gone,
            _ = stopping.changed() => None,
        };
        if let Some(i) = stopped {
            watches.remove(i);
        }
    }
    for name in ["", COORDINATOR, ADMIN, RAFT] {
        reporter.set_service_status(name, ServingStatus::NotServing).await;
    }
}
