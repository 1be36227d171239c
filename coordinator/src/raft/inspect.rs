//! What one metadata partition's Raft bookkeeping holds in a stopped node's data directory, for
//! `coordctl inspect`: vote, committed and purged log ids, the log's extent, the applied log id
//! and membership, a snapshot install under way, the snapshot files. Read only; it must not
//! interpret the state machine's keys.

use std::path::Path;

use serde_json::json;

use super::seglog::SegLog;
use super::{keys, snapshot, Entry, LogId, StoredMembership, Vote};
use crate::storage::{codec, Db, Family, KvRead};

fn get<T: serde::de::DeserializeOwned>(db: &Db, key: &[u8]) -> anyhow::Result<Option<T>> {
    Ok(match db.get(Family::Raft, key)? {
        Some(v) => Some(codec::decode(key, &v)?),
        None => None,
    })
}

/// One JSON object describing metadata partition `g`'s Raft bookkeeping in `db`, `log` /
/// `data_dir`.
pub fn partition(db: &Db, log: &SegLog, data_dir: &Path, g: u32) -> anyhow::Result<serde_json::Value> {
    let vote: Option<Vote> = get(db, &keys::vote(g))?;
    let committed: Option<LogId> = get(db, &keys::committed(g))?;
    let purged: Option<LogId> = get(db, &keys::purged(g))?;
    let installing = db.get(Family::Raft, &keys::installing(g))?.map(|p| String::from_utf8_lossy(&p).into_owned());
    let (mut first, mut last, mut entries) = (None::<u64>, None::<u64>, 0u64);
    if let Some((f, l)) = log.bounds(g) {
        // Each entry read back and decoded: a damaged one fails here.
        let (_, all) = log.read(g, f, l + 1)?;
        for b in &all {
            let _: Entry = codec::decode(b"log entry", b)?;
        }
        (first, last, entries) = (Some(f), Some(l), all.len() as u64);
    }
    let applied_key = crate::state_machine::keys::Keys::new(g).applied();
    let applied: Option<(Option<LogId>, StoredMembership)> = match db.read().get(&applied_key)? {
        Some(v) => Some(codec::decode(&applied_key, &v)?),
        None => None,
    };
    let log_id = |l: &Option<LogId>| {
        l.as_ref().map(|l| json!({ "index": l.index, "term": l.leader_id.term, "leader": l.leader_id.node_id }))
    };
    let membership = applied.as_ref().map(|(_, m)| {
        let m = m.membership();
        let nodes: serde_json::Map<String, serde_json::Value> = m
            .nodes()
            .map(|(id, r)| (id.to_string(), json!({ "addr": r.addr, "incarnation": format!("{:016x}", r.incarnation) })))
            .collect();
        json!({ "voters": m.voter_ids().collect::<Vec<_>>(), "learners": m.learner_ids().collect::<Vec<_>>(), "nodes": nodes })
    });
    let dir = snapshot::partition_dir(data_dir, g);
    let mut snapshots = vec![];
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let size = e.metadata().map_or(0, |m| m.len());
            snapshots.push(json!({ "file": e.file_name().to_string_lossy(), "bytes": size }));
        }
    }
    snapshots.sort_by_key(|s| s["file"].as_str().unwrap_or_default().to_string());
    Ok(json!({
        "vote": vote.map(|v| serde_json::to_value(v).unwrap_or_default()),
        "committed": log_id(&committed),
        "purged": log_id(&purged),
        "log": { "first_index": first, "last_index": last, "entries": entries },
        "applied": applied.as_ref().and_then(|(l, _)| log_id(l)),
        "membership": membership,
        "installing_snapshot": installing,
        "snapshots": snapshots,
    }))
}
