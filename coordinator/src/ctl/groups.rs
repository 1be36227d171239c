//! `coordctl groups list` and `groups describe ID`: consumer groups as the coordinator cluster holds
//! them (`ListGroups`, `FetchOffsets`): each group's last completed generation and members, and its
//! committed offsets by topic name. Live member state (heartbeats, a rebalance in progress) is in
//! the coordinating broker's memory, not here. Only gRPC calls and tables.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::{ConsumerGroup, FetchOffsetsRequest, ListGroupsRequest, ListTopicsRequest};
use serde_json::json;

use super::{connect, Report};

const TIMEOUT_MS: i32 = 10_000;

async fn client(addr: &str) -> anyhow::Result<CoordinatorServiceClient<tonic::transport::Channel>> {
    Ok(CoordinatorServiceClient::new(connect(addr, Duration::from_secs(5)).await?).max_decoding_message_size(256 << 20))
}

fn state(g: Option<&ConsumerGroup>) -> &'static str {
    match g {
        Some(g) if !g.members.is_empty() => "Stable",
        _ => "Empty",
    }
}

/// `groups list`.
pub async fn list(addr: &str) -> anyhow::Result<Report> {
    let r = client(addr).await?.list_groups(ListGroupsRequest { timeout_ms: TIMEOUT_MS }).await?.into_inner();
    let mut text = format!("{:<40} {:<8} {:<12} {:>10} {:>8}\n", "group", "state", "protocol", "generation", "members");
    let mut rows = vec![];
    for e in &r.groups {
        let g = e.group.as_ref();
        let protocol = g.and_then(|g| g.protocol.clone()).unwrap_or_else(|| "-".into());
        let generation = g.map_or(-1, |g| g.generation_id);
        let members = g.map_or(0, |g| g.members.len());
        let _ = writeln!(text, "{:<40} {:<8} {:<12} {:>10} {:>8}", e.group_id, state(g), protocol, generation, members);
        rows.push(json!({
            "group_id": e.group_id, "state": state(g), "protocol": protocol,
            "generation": generation, "members": members,
        }));
    }
    let ok = r.error_code == 0;
    if !ok {
        let _ = writeln!(text, "incomplete: {}", r.error_message.clone().unwrap_or_default());
    }
    Ok(Report { json: json!({ "groups": rows, "error_code": r.error_code }), text, ok })
}

/// `groups describe ID`.
pub async fn describe(addr: &str, group_id: &str) -> anyhow::Result<Report> {
    let mut c = client(addr).await?;
    let req = FetchOffsetsRequest { group_id: group_id.to_string(), partitions: vec![], timeout_ms: TIMEOUT_MS };
    let r = c.fetch_offsets(req).await?.into_inner();
    anyhow::ensure!(r.error_code == 0, "FetchOffsets: {}", r.error_message.unwrap_or_default());
    let topics = c.list_topics(ListTopicsRequest { names: vec![], timeout_ms: TIMEOUT_MS }).await?.into_inner().topics;
    let names: HashMap<Vec<u8>, String> = topics.into_iter().map(|t| (t.topic_id, t.name)).collect();
    let g = r.group.as_ref();
    let mut text = format!(
        "group {group_id}: {}, generation {}, protocol {}, leader {}\n",
        state(g),
        g.map_or(-1, |g| g.generation_id),
        g.and_then(|g| g.protocol.clone()).unwrap_or_else(|| "-".into()),
        g.and_then(|g| g.leader.clone()).unwrap_or_else(|| "-".into()),
    );
    let mut members = vec![];
    if let Some(g) = g {
        let _ = writeln!(text, "\n{:<60} {:<20} {:<20} {:>10}", "member", "instance", "client", "session.ms");
        for m in &g.members {
            let instance = m.group_instance_id.clone().unwrap_or_else(|| "-".into());
            let _ =
                writeln!(text, "{:<60} {:<20} {:<20} {:>10}", m.member_id, instance, m.client_id, m.session_timeout_ms);
            members.push(json!({
                "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "client_id": m.client_id, "session_timeout_ms": m.session_timeout_ms,
            }));
        }
    }
    let _ = writeln!(text, "\n{:<32} {:>9} {:>12} {:>12}", "topic", "partition", "offset", "leader.epoch");
    let mut offsets = vec![];
    for o in &r.offsets {
        let topic = names.get(&o.topic_id).cloned().unwrap_or_else(|| "(deleted)".into());
        let _ = writeln!(text, "{:<32} {:>9} {:>12} {:>12}", topic, o.partition, o.offset, o.leader_epoch);
        offsets.push(json!({
            "topic": topic, "partition": o.partition, "offset": o.offset,
            "leader_epoch": o.leader_epoch, "metadata": o.metadata,
        }));
    }
    let found = g.is_some() || !offsets.is_empty();
    if !found {
        let _ = writeln!(text, "(no such group)");
    }
    Ok(Report {
        json: json!({
            "group_id": group_id, "state": state(g), "generation": g.map_or(-1, |g| g.generation_id),
            "members": members, "offsets": offsets,
        }),
        text,
        ok: found,
    })
}
