//! `coordctl brokers`: the live brokers of the broker registry (`ListBrokers`, served by metadata
//! partition 0's leader): id, advertised Kafka address, rack, incarnation, time left on the lease.
//! Only a gRPC call and a table.

use std::fmt::Write;
use std::time::Duration;

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::ListBrokersRequest;
use serde_json::json;

use super::{connect, Report};

pub async fn list(addr: &str) -> anyhow::Result<Report> {
    let mut c = CoordinatorServiceClient::new(connect(addr, Duration::from_secs(5)).await?);
    let r = c.list_brokers(ListBrokersRequest { timeout_ms: 10_000 }).await?.into_inner();
    anyhow::ensure!(r.error_code == 0, "ListBrokers: {}", r.error_message.unwrap_or_default());
    let mut text = format!("{:>6} {:<30} {:<12} {:<18} {:>10}\n", "id", "address", "rack", "incarnation", "lease left");
    let mut rows = vec![];
    for b in &r.brokers {
        let address = format!("{}:{}", b.host, b.port);
        let rack = b.rack.clone().unwrap_or_else(|| "-".into());
        let left_ms = b.lease_until_ms - r.now_ms;
        let incarnation = format!("{:016x}", b.incarnation);
        let _ = writeln!(text, "{:>6} {address:<30} {rack:<12} {incarnation:<18} {:>8} ms", b.broker_id, left_ms);
        rows.push(json!({
            "broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
            "incarnation": incarnation, "registered_ms": b.registered_ms, "lease_left_ms": left_ms,
            "listeners": b.listeners.iter().map(|l| json!({ "name": l.name, "host": l.host, "port": l.port })).collect::<Vec<_>>(),
        }));
    }
    Ok(Report::ok(json!({ "brokers": rows }), text))
}
