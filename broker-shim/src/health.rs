//! gRPC health checking (`grpc.health.v1.Health`) of the broker's API, for load balancers,
//! Kubernetes probes and `grpc_health_probe`.
//!
//! Statuses, per service name:
//! - `""` (the whole broker) and `diskless.broker.v1.BrokerService`: with a Kafka listener, SERVING
//!   while this broker's registration in the coordinators' broker registry holds (granted or
//!   renewed less than one lease ago, `Registry::lease_held`): the broker reaches the coordinator
//!   cluster and the other brokers count it among the live ones. NOT_SERVING before it registered,
//!   and once its lease lapsed (the coordinators are out of reach, or the id is held by another
//!   live broker). Without a Kafka listener (no registry), SERVING while the process runs.
//!
//! Everything is NOT_SERVING once the broker starts shutting down. A task re-evaluates every
//! [`CHECK_EVERY`] and updates the reporter when the answer changes. It must not act on the broker.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::shim::Shim;

/// How often the registration is looked at.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

pub const BROKER: &str = "diskless.broker.v1.BrokerService";

/// Whether the broker serves, and if not, why.
pub fn check(shim: &Shim) -> Result<(), String> {
    if shim.advertised && !shim.registry.lease_held() {
        return Err(format!(
            "broker {} holds no registration in the broker registry (not yet registered, or its lease lapsed)",
            shim.broker_id
        ));
    }
    Ok(())
}

/// The health service and the task keeping it true; call from the server's start.
pub async fn start(
    shim: &Arc<Shim>,
) -> tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health> {
    let (reporter, service) = tonic_health::server::health_reporter();
    for name in ["", BROKER] {
        reporter.set_service_status(name, ServingStatus::NotServing).await;
    }
    tokio::spawn(keep(Arc::downgrade(shim), shim.stopping(), reporter));
    service
}

async fn keep(shim: Weak<Shim>, mut stopping: tokio::sync::watch::Receiver<bool>, reporter: HealthReporter) {
    let mut last: Option<bool> = None;
    loop {
        let Some(s) = shim.upgrade() else { break };
        if *stopping.borrow() {
            break;
        }
        let verdict = check(&s);
        drop(s);
        let serving = verdict.is_ok();
        if last != Some(serving) {
            match &verdict {
                Ok(()) => tracing::info!("broker health: SERVING"),
                Err(why) => tracing::info!(reason = %why, "broker health: NOT_SERVING"),
            }
            let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
            for name in ["", BROKER] {
                reporter.set_service_status(name, status).await;
            }
            last = Some(serving);
        }
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = stopping.changed() => {}
        }
    }
    for name in ["", BROKER] {
        reporter.set_service_status(name, ServingStatus::NotServing).await;
    }
}
