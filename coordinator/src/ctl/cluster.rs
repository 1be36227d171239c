//! `coordctl status --cluster` and `coordctl health`: ask every node of the membership (as the
//! node at `--addr` knows it) and say whether the cluster is healthy. Unhealthy — exit status 1 —
//! when a node does not answer, sees a metadata partition without a leader, or holds a replica
//! its group does not count as a member; for `health`, when a node's gRPC health is not SERVING.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::time::Duration;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::{StatusRequest, StatusResponse};
use serde_json::json;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::{connect, Report};

/// How long a node has to answer before it counts as unreachable.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

async fn ask_status(addr: &str) -> anyhow::Result<StatusResponse> {
    let mut c = AdminServiceClient::new(connect(addr, ANSWER_WITHIN).await?);
    let r = tokio::time::timeout(ANSWER_WITHIN, c.status(StatusRequest::default()))
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {addr} within {ANSWER_WITHIN:?}"))??;
    Ok(r.into_inner())
}

/// Every node of the membership `addr` knows: id → address.
async fn members(addr: &str) -> anyhow::Result<(StatusResponse, BTreeMap<u64, String>)> {
    let first = ask_status(addr).await?;
    let members = first.nodes.iter().map(|n| (n.node_id, n.address.clone())).collect();
    Ok((first, members))
}

pub async fn status(addr: &str) -> anyhow::Result<Report> {
    let (first, members) = members(addr).await?;
    let asked = futures_util::future::join_all(members.iter().map(|(id, a)| {
        let first = (*id == first.node_id).then(|| first.clone());
        async move {
            match first {
                Some(s) => Ok(s),
                None => ask_status(a).await,
            }
        }
    }))
    .await;
    let answers: BTreeMap<u64, (String, anyhow::Result<StatusResponse>)> =
        members.iter().zip(asked).map(|((id, a), r)| (*id, (a.clone(), r))).collect();

    let mut problems = vec![];
    let mut notes = vec![];
    let groups = first.num_metadata_partitions;
    for (id, (a, r)) in &answers {
        match r {
            Err(e) => problems.push(format!("node {id} at {a} does not answer: {e:#}")),
            Ok(s) => {
                for g in &s.groups {
                    if g.leader == 0 {
                        problems
                            .push(format!("node {id} sees no leader for metadata partition {}", g.metadata_partition));
                    }
                    if !g.member {
                        problems.push(format!(
                            "node {id}'s replica of metadata partition {} is not a member (add it with `coordctl \
                             add-node --id {id} --address {a}`)",
                            g.metadata_partition
                        ));
                    }
                }
            }
        }
    }
    for g in 0..groups {
        let seen: BTreeSet<u64> = answers
            .values()
            .filter_map(|(_, r)| r.as_ref().ok())
            .filter_map(|s| s.groups.get(g as usize))
            .map(|gs| gs.leader)
            .filter(|l| *l != 0)
            .collect();
        if seen.len() > 1 {
            notes.push(format!("nodes disagree on metadata partition {g}'s leader ({seen:?}): an election under way?"));
        }
    }
    let ok = problems.is_empty();

    let mut text = String::new();
    let _ = writeln!(text, "cluster {} ({groups} metadata partitions), asked through {addr}", first.cluster_id);
    let _ =
        writeln!(text, "\n{:>6}  {:<22} {:<11} {:>9}  {:>10}", "node", "address", "answer", "leaders", "WAL fsyncs");
    for (id, (a, r)) in &answers {
        match r {
            Ok(s) => {
                let led = s.groups.iter().filter(|g| g.leader == *id).count();
                let _ = writeln!(text, "{id:>6}  {a:<22} {:<11} {led:>9}  {:>10}", "ok", s.wal_syncs);
            }
            Err(_) => {
                let _ = writeln!(text, "{id:>6}  {a:<22} {:<11} {:>9}  {:>10}", "UNREACHABLE", "-", "-");
            }
        }
    }
    let _ = write!(text, "\n{:>5}", "group");
    for id in answers.keys() {
        let _ = write!(text, "  {:>24}", format!("node {id}: leader/applied"));
    }
    let _ = writeln!(text);
    for g in 0..groups as usize {
        let _ = write!(text, "{g:>5}");
        for (_, r) in answers.values() {
            let cell = match r.as_ref().ok().and_then(|s| s.groups.get(g)) {
                Some(gs) if gs.leader == 0 => format!("-/{}", gs.applied_index),
                Some(gs) => format!("{}/{}", gs.leader, gs.applied_index),
                None => "?".into(),
            };
            let _ = write!(text, "  {cell:>24}");
        }
        let _ = writeln!(text);
    }
    for n in &notes {
        let _ = writeln!(text, "note: {n}");
    }
    if ok {
        let _ = writeln!(text, "\nhealthy: every node answers and sees a leader for every metadata partition");
    } else {
        let _ = writeln!(text, "\nUNHEALTHY:");
        for p in &problems {
            let _ = writeln!(text, "  - {p}");
        }
    }

    let nodes: Vec<serde_json::Value> = answers
        .iter()
        .map(|(id, (a, r))| match r {
            Ok(s) => json!({ "node_id": id, "address": a, "reachable": true, "status": s }),
            Err(e) => json!({ "node_id": id, "address": a, "reachable": false, "error": format!("{e:#}") }),
        })
        .collect();
    let json = json!({
        "healthy": ok,
        "cluster_id": first.cluster_id,
        "asked_through": addr,
        "num_metadata_partitions": groups,
        "nodes": nodes,
        "problems": problems,
        "notes": notes,
    });
    Ok(Report { json, text, ok })
}

/// The gRPC health of the node at `addr` (`""`: the node as a whole).
async fn check_health(addr: &str) -> Result<String, String> {
    let ch = connect(addr, ANSWER_WITHIN).await.map_err(|e| format!("{e:#}"))?;
    let mut h = HealthClient::new(ch);
    let r = tokio::time::timeout(ANSWER_WITHIN, h.check(HealthCheckRequest { service: String::new() }))
        .await
        .map_err(|_| format!("no answer within {ANSWER_WITHIN:?}"))?
        .map_err(|s| format!("health check failed: {}", s.message()))?;
    let status = tonic_health::pb::health_check_response::ServingStatus::try_from(r.into_inner().status)
        .map_or("UNKNOWN", |s| s.as_str_name());
    Ok(status.to_string())
}

pub async fn health(addr: &str, cluster: bool) -> anyhow::Result<Report> {
    let targets: Vec<(Option<u64>, String)> = if cluster {
        members(addr).await?.1.into_iter().map(|(id, a)| (Some(id), a)).collect()
    } else {
        vec![(None, addr.to_string())]
    };
    let results = futures_util::future::join_all(targets.iter().map(|(_, a)| check_health(a))).await;
    let mut ok = true;
    let mut text = String::new();
    let mut nodes = vec![];
    for ((id, a), r) in targets.iter().zip(results) {
        let who = id.map_or_else(|| a.clone(), |id| format!("node {id} at {a}"));
        match r {
            Ok(status) => {
                ok &= status == "SERVING";
                let _ = writeln!(text, "{who}: {status}");
                nodes.push(json!({ "node_id": id, "address": a, "status": status }));
            }
            Err(e) => {
                ok = false;
                let _ = writeln!(text, "{who}: UNREACHABLE ({e})");
                nodes.push(json!({ "node_id": id, "address": a, "status": "UNREACHABLE", "error": e }));
            }
        }
    }
    Ok(Report { json: json!({ "healthy": ok, "nodes": nodes }), text, ok })
}
