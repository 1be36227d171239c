//! `coordctl status --cluster`, `health` and `check`: ask every node of the membership (as the node
//! at `--addr` knows it) and say whether the cluster is healthy. Unhealthy — exit status 1 — when a
//! node does not answer, sees a metadata partition without a leader, or holds a replica its
//! metadata partition does not count as a member; for `health`, when a node's gRPC health is not
//! SERVING; for `check`, when two replicas of a metadata partition differ at the same applied
//! index.

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
    ask(addr, false).await
}

async fn ask(addr: &str, with_digest: bool) -> anyhow::Result<StatusResponse> {
    let mut c = AdminServiceClient::new(connect(addr, ANSWER_WITHIN).await?);
    let r = tokio::time::timeout(ANSWER_WITHIN, c.status(StatusRequest { with_digest, reset_stages: false }))
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
    let num_partitions = first.num_metadata_partitions;
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
    for g in 0..num_partitions {
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
    let _ = writeln!(text, "cluster {} ({num_partitions} metadata partitions), asked through {addr}", first.cluster_id);
    let _ =
        writeln!(text, "\n{:>6}  {:<22} {:<11} {:>9}  {:>10}", "node", "address", "answer", "leaders", "log fsyncs");
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
    let _ = write!(text, "\n{:>9}", "partition");
    for id in answers.keys() {
        let _ = write!(text, "  {:>24}", format!("node {id}: leader/applied"));
    }
    let _ = writeln!(text);
    for g in 0..num_partitions as usize {
        let _ = write!(text, "{g:>9}");
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
        "num_metadata_partitions": num_partitions,
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

/// Rounds of digests `check` asks for before it gives up waiting for replicas to reach the same
/// applied index, and the pause between them.
const CHECK_ROUNDS: usize = 20;
const CHECK_PAUSE: Duration = Duration::from_millis(250);

/// One metadata partition's replicas compared.
#[derive(Debug, serde::Serialize)]
struct PartitionCheck {
    metadata_partition: u32,
    /// `equal` (every replica, same applied index), `DIFFERENT` (two replicas at the same applied
    /// index differ), or `unverified` (the replicas never stood at one applied index together).
    verdict: &'static str,
    /// Per node: (applied index, state digest).
    replicas: BTreeMap<u64, (u64, String)>,
}

/// Compares the digests of `replicas` (node → (applied index, digest)): replicas at the same
/// applied index must have the same digest.
fn verdict(replicas: &BTreeMap<u64, (u64, String)>) -> &'static str {
    let mut by_index: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for (index, digest) in replicas.values() {
        by_index.entry(*index).or_default().insert(digest);
    }
    if by_index.values().any(|d| d.len() > 1) {
        "DIFFERENT"
    } else if by_index.len() == 1 {
        "equal"
    } else {
        "unverified"
    }
}

/// `coordctl check`: every metadata partition's replica digests compared across the nodes. Replicas
/// are comparable only at the same applied index, so it asks again (up to [`CHECK_ROUNDS`] times)
/// until each metadata partition's replicas stand at one index; a metadata partition still moving
/// is `unverified`.
pub async fn check(addr: &str) -> anyhow::Result<Report> {
    let (first, members) = members(addr).await?;
    let num_partitions = first.num_metadata_partitions;
    let mut results: BTreeMap<u32, PartitionCheck> = BTreeMap::new();
    let mut unreachable: BTreeMap<u64, String> = BTreeMap::new();
    for round in 0..CHECK_ROUNDS {
        if round > 0 {
            tokio::time::sleep(CHECK_PAUSE).await;
        }
        let todo: Vec<u32> =
            (0..num_partitions).filter(|g| results.get(g).is_none_or(|c| c.verdict == "unverified")).collect();
        if todo.is_empty() {
            break;
        }
        let answers = futures_util::future::join_all(members.values().map(|a| ask(a, true))).await;
        unreachable.clear();
        let mut per_partition: BTreeMap<u32, BTreeMap<u64, (u64, String)>> = BTreeMap::new();
        for ((id, a), r) in members.iter().zip(answers) {
            match r {
                Ok(s) => {
                    for g in s.groups.into_iter().filter(|g| g.member) {
                        per_partition
                            .entry(g.metadata_partition)
                            .or_default()
                            .insert(*id, (g.digest_applied_index, g.digest));
                    }
                }
                Err(e) => {
                    unreachable.insert(*id, format!("{a}: {e:#}"));
                }
            }
        }
        for g in todo {
            let replicas = per_partition.remove(&g).unwrap_or_default();
            results.insert(g, PartitionCheck { metadata_partition: g, verdict: verdict(&replicas), replicas });
        }
    }
    let different: Vec<u32> =
        results.values().filter(|c| c.verdict == "DIFFERENT").map(|c| c.metadata_partition).collect();
    let unverified: Vec<u32> =
        results.values().filter(|c| c.verdict == "unverified").map(|c| c.metadata_partition).collect();
    let ok = different.is_empty() && unreachable.is_empty();

    let mut text = String::new();
    let _ = writeln!(text, "{:>9}  {:<10}  replicas (node: applied index, digest)", "partition", "verdict");
    for c in results.values() {
        let replicas: Vec<String> = c
            .replicas
            .iter()
            .map(|(id, (index, digest))| format!("{id}: {index} {}", digest.get(..12).unwrap_or(digest)))
            .collect();
        let _ = writeln!(text, "{:>9}  {:<10}  {}", c.metadata_partition, c.verdict, replicas.join(", "));
    }
    for (id, e) in &unreachable {
        let _ = writeln!(text, "node {id} does not answer: {e}");
    }
    if !unverified.is_empty() {
        let _ = writeln!(
            text,
            "metadata partitions {unverified:?}: replicas never at one applied index together (under load?); run again"
        );
    }
    let _ = writeln!(
        text,
        "{}",
        if !different.is_empty() {
            format!("REPLICAS DIFFER in metadata partitions {different:?}")
        } else if ok {
            "consistent: replicas at the same applied index have the same state".to_string()
        } else {
            "incomplete: not every node answered".to_string()
        }
    );
    let json = json!({
        "consistent": ok,
        "different": different,
        "unverified": unverified,
        "unreachable": unreachable,
        "groups": results.into_values().collect::<Vec<_>>(),
    });
    Ok(Report { json, text, ok })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_compared_only_at_the_same_applied_index() {
        let r = |v: &[(u64, u64, &str)]| -> BTreeMap<u64, (u64, String)> {
            v.iter().map(|(n, i, d)| (*n, (*i, d.to_string()))).collect()
        };
        assert_eq!(verdict(&r(&[(1, 5, "a"), (2, 5, "a"), (3, 5, "a")])), "equal");
        assert_eq!(verdict(&r(&[(1, 5, "a"), (2, 5, "b"), (3, 6, "c")])), "DIFFERENT");
        assert_eq!(verdict(&r(&[(1, 5, "a"), (2, 6, "b"), (3, 6, "b")])), "unverified");
    }
}
