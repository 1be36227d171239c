//! After the last fault is healed: waits for the cluster to serve again (within a bound), reads
//! every partition back whole, and checks what only the live system can show: replica digests,
//! objects referenced by live batches, the topic list.
//!
//! Reads are recorded in the history under the `FINAL` process, so the checker judges them with
//! the rest; the live checks return [`Anomaly`]s directly. It must not inject faults.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::v1 as c;

use super::checker::{self, Anomaly};
use super::history::{Op, Outcome, Res, Via, FINAL};
use super::system::System;
use super::workload::transactions::TXN_TIMEOUT_MS;
use super::workload::{self, Ctx, Topic};

/// How long after the last fault the cluster must serve every partition again.
pub const AVAILABILITY_BOUND: Duration = Duration::from_secs(30);
/// How long the final reads may take in all (each partition gets one attempt past it).
const FINAL_READS_BOUND: Duration = Duration::from_secs(60);
/// How long replicas may take to reach the same applied index once everything is healed.
const CONVERGENCE_BOUND: Duration = Duration::from_secs(30);
/// How long a partition of a listed topic may stay unknown to its metadata partition before the
/// final read gives up on it: a create that failed part-way reaches the other metadata partitions
/// through the topic reconciler, one pass every `topic_reconcile_ms` (5 s) on each leader, after
/// the elections that follow the heal.
const UNKNOWN_PARTITION_BOUND: Duration = Duration::from_secs(15);

/// What the final phase measured.
#[derive(Debug, Default)]
pub struct Settled {
    pub anomalies: Vec<Anomaly>,
    /// Time from the heal until every partition took a write and a strict read.
    pub recovered_in: Option<Duration>,
}

pub async fn settle(ctx: &Arc<Ctx>) -> Settled {
    let mut out = Settled::default();
    let healed = Instant::now();
    ctx.history.note("final phase: availability");
    match available(ctx, healed + AVAILABILITY_BOUND).await {
        Ok(()) => out.recovered_in = Some(healed.elapsed()),
        Err(e) => out.anomalies.push(Anomaly::new("unavailable", e)),
    }
    ctx.history.note("final phase: topics and final reads");
    let listed = final_topics(ctx).await;
    let topics = listed.clone().unwrap_or_else(|| ctx.topics.clone());
    let deadline = Instant::now() + FINAL_READS_BOUND;
    let txn_topic = ctx.txn_topic.as_ref().map(|t| t.name.as_str());
    for t in topics.iter().filter(|t| Some(t.name.as_str()) != txn_topic) {
        for p in 0..t.partitions {
            final_read(ctx, t, p, deadline).await;
        }
    }
    if let Some(t) = &ctx.txn_topic {
        ctx.history.note("final phase: read_committed reads of the transactional topic");
        // Transactions the stopped producers left open end by their timeout first.
        let deadline = Instant::now() + FINAL_READS_BOUND + Duration::from_millis(TXN_TIMEOUT_MS as u64);
        let mut reads = workload::CommittedReads::new(ctx);
        for p in 0..t.partitions {
            final_committed_read(ctx, &mut reads, t, p, deadline).await;
        }
    }
    ctx.history.note("final phase: replica digests");
    out.anomalies.extend(digests(&ctx.system).await);
    ctx.history.note("final phase: objects of live batches");
    out.anomalies.extend(objects(ctx, &topics).await);
    ctx.history.note("final phase: deleted topics");
    match &listed {
        Some(live) => out.anomalies.extend(zombies(ctx, live).await),
        // Without the topic list nothing tells a deleted topic from a live one.
        None => ctx.history.note("no topic list: deleted topics not checked"),
    }
    out.anomalies.extend(panics(&ctx.system.root));
    out
}

/// A panic in any process's log (a Raft group that panicked stops on that node while the process
/// runs on): one anomaly per distinct message.
fn panics(root: &std::path::Path) -> Vec<Anomaly> {
    let mut seen: BTreeMap<String, (String, usize)> = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(root) else { return vec![] };
    for entry in dir.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !file.ends_with(".log") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if let Some(at) = l.find("panicked at ") {
                let message = lines.get(i + 1).copied().unwrap_or_default();
                let key = format!("{} {message}", &l[at..]);
                let e = seen.entry(key).or_insert((file.clone(), 0));
                e.1 += 1;
            }
        }
    }
    seen.into_iter().map(|(what, (file, n))| Anomaly::new("panic", format!("{file} ({n}x): {what}"))).collect()
}

/// Every topic the history saw listed that is not in the final list must be gone from every
/// metadata partition too: a partition of it that still answers is a zombie (a deletion that
/// did not converge).
async fn zombies(ctx: &Arc<Ctx>, live: &[Topic]) -> Vec<Anomaly> {
    let mut seen: BTreeMap<String, (String, i32)> = BTreeMap::new();
    for o in checker::operations(&ctx.history.events()) {
        if let Some(Res::Topics { names, ids, partitions }) = o.ok() {
            for ((name, id), p) in names.iter().zip(ids).zip(partitions) {
                seen.insert(id.clone(), (name.clone(), *p));
            }
        }
    }
    let live: BTreeSet<String> = live.iter().map(|t| hex(&t.id)).collect();
    let nodes = ctx.system.node_ids();
    let mut out = vec![];
    for (id, (name, partitions)) in seen.into_iter().filter(|(id, _)| !live.contains(id)) {
        let Some(bytes) = unhex(&id) else { continue };
        for p in 0..partitions {
            let req = c::ListOffsetsRequest {
                topics: vec![c::list_offsets_request::ListOffsetsTopic {
                    topic_id: bytes.clone(),
                    partitions: vec![c::list_offsets_request::ListOffsetsPartition {
                        partition_index: p,
                        timestamp: -1,
                    }],
                }],
                timeout_ms: 10_000,
                isolation_level: 0,
            };
            // Asked until a node answers for the partition's metadata partition (any node
            // forwards).
            for k in 0..10 {
                let mut client = ctx.system.coordinator(nodes[k % nodes.len()]);
                let r = tokio::time::timeout(Duration::from_secs(15), client.list_offsets(req.clone())).await;
                let Ok(Ok(r)) = r else { continue };
                let Some(a) = r.into_inner().topics.first().and_then(|t| t.partitions.first()).cloned() else {
                    continue;
                };
                match a.error_code {
                    0 => {
                        out.push(Anomaly::new(
                            "zombie-topic",
                            format!(
                                "{name}/{p} (id {id}): gone from the topic list, still answers (high watermark {})",
                                a.offset
                            ),
                        ));
                        break;
                    }
                    3 | 100 => break,
                    _ => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
        }
    }
    out
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Waits a little before the next attempt; `false` once `deadline` has passed.
async fn again(deadline: Instant) -> bool {
    if Instant::now() > deadline {
        return false;
    }
    tokio::time::sleep(Duration::from_millis(250)).await;
    true
}

/// One recorded produce of `values` through `broker`: whether it was acknowledged.
async fn probe_produce(ctx: &Ctx, t: &Topic, p: i32, broker: usize, values: Vec<String>) -> bool {
    let records = crate::batch_of(&values);
    let op = Op::Produce {
        via: Via::Grpc,
        target: broker as u64,
        topic: t.name.clone(),
        partition: p,
        values,
        producer: None,
        txn: None,
    };
    let id = ctx.history.invoke(FINAL, op);
    let mut client = ctx.system.broker(broker);
    let req = diskless_proto::broker::ProduceRequest { topic: t.name.clone(), partition: p, records };
    let outcome = match tokio::time::timeout(Duration::from_secs(15), client.produce(req)).await {
        Ok(Ok(r)) => {
            let r = r.into_inner();
            let msg = format!("{} {}", r.error_code, r.error_message.unwrap_or_default());
            match r.error_code {
                0 => Outcome::Ok(Res::Offset { offset: r.base_offset }),
                7 | -1 => Outcome::Unknown(msg),
                _ => Outcome::Fail(msg),
            }
        }
        Ok(Err(s)) => Outcome::Unknown(s.message().to_string()),
        Err(_) => Outcome::Unknown("no answer".into()),
    };
    let ok = matches!(outcome, Outcome::Ok(_));
    ctx.history.complete(FINAL, id, outcome);
    ok
}

/// Every partition of the long-lived topics takes a write through each broker and a strict read.
async fn available(ctx: &Arc<Ctx>, deadline: Instant) -> Result<(), String> {
    let nodes = ctx.system.node_ids();
    let mut n = 0u64;
    for t in &ctx.topics {
        for p in 0..t.partitions {
            for broker in 0..ctx.system.brokers.len() {
                loop {
                    // New values each attempt: an unknown outcome may have written the last ones.
                    n += 1;
                    if probe_produce(ctx, t, p, broker, vec![format!("{FINAL}-{n}-0")]).await {
                        break;
                    }
                    if !again(deadline).await {
                        return Err(format!(
                            "{}/{p} took no write through broker {broker} within {AVAILABILITY_BOUND:?} of the heal",
                            t.name
                        ));
                    }
                }
            }
            loop {
                n += 1;
                let node = nodes[n as usize % nodes.len()];
                if matches!(workload::list_offsets_coordinator(ctx, FINAL, node, t, p, -1).await, Outcome::Ok(_)) {
                    break;
                }
                if !again(deadline).await {
                    return Err(format!(
                        "{}/{p}: no strict ListOffsets answered within {AVAILABILITY_BOUND:?} of the heal",
                        t.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The topics as the cluster lists them (recorded), each with its id; `None` if no node could
/// list them.
async fn final_topics(ctx: &Arc<Ctx>) -> Option<Vec<Topic>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let nodes = ctx.system.node_ids();
    for i in 0.. {
        if let Some(t) = workload::list_topics(ctx, FINAL, nodes[i % nodes.len()]).await {
            return Some(t);
        }
        if !again(deadline).await {
            break;
        }
    }
    None
}

/// Reads one partition whole: strict log start and high watermark, then every record between.
/// Failed attempts are recorded and retried; a read that never succeeds is left failed (the
/// checker reports it).
async fn final_read(ctx: &Arc<Ctx>, t: &Topic, p: i32, deadline: Instant) {
    let nodes = ctx.system.node_ids();
    let mut bounds = [0i64; 2];
    for (i, timestamp) in [-2i64, -1].into_iter().enumerate() {
        let mut k = 0;
        // Since when the partition's owner has answered only "unknown partition".
        let mut unknown_since: Option<Instant> = None;
        loop {
            k += 1;
            let node = nodes[k % nodes.len()];
            match workload::list_offsets_coordinator(ctx, FINAL, node, t, p, timestamp).await {
                Outcome::Ok(Res::Offset { offset }) => {
                    bounds[i] = offset;
                    break;
                }
                // A listed topic whose partition its owner does not know yet: the reconciler
                // completes a create that failed part-way; past its bound, asking on is useless.
                Outcome::Fail(e) if e.starts_with("3 ") => {
                    unknown_since.get_or_insert_with(Instant::now);
                }
                _ => unknown_since = None,
            }
            if unknown_since.is_some_and(|s| s.elapsed() > UNKNOWN_PARTITION_BOUND) || !again(deadline).await {
                return;
            }
        }
    }
    let [start, hw] = bounds;
    let mut offset = start;
    let mut no_kafka = vec![];
    while offset < hw {
        match workload::read(ctx, &mut no_kafka, Via::Grpc, 0, &t.name, p, offset, FINAL).await {
            (Outcome::Ok(Res::Records { records, .. }), _) if !records.is_empty() => {
                offset = records.last().map_or(offset, |r| r.0 + 1);
            }
            _ => {
                if !again(deadline).await {
                    return;
                }
            }
        }
    }
}

/// Reads one partition of the transactional topic whole, `read_committed`, until the end: the last
/// read asks at the high watermark and finds the last stable offset there (no transaction open),
/// which tells the checker the read is complete. Failed attempts are recorded and retried.
async fn final_committed_read(
    ctx: &Arc<Ctx>,
    reads: &mut workload::CommittedReads,
    t: &Topic,
    p: i32,
    deadline: Instant,
) {
    let brokers = ctx.system.brokers.len();
    let mut offset = 0i64;
    for k in 0.. {
        match reads.read(ctx, k % brokers, &t.name, p, offset, FINAL).await {
            (Outcome::Ok(Res::Records { high_watermark, last_stable_offset: Some(lso), .. }), Some(next)) => {
                if offset >= high_watermark && lso >= high_watermark {
                    return;
                }
                if next > offset {
                    offset = next;
                    continue;
                }
            }
            (_, Some(next)) => offset = next,
            _ => {}
        }
        if !again(deadline).await {
            return;
        }
    }
}

/// Every metadata partition's replicas reach the same applied index, where their digests must be
/// equal. The replicas are asked together, and what each reported is kept across polls: under the
/// brokers' registry heartbeats a partition's applied index keeps moving, so one poll rarely finds
/// every replica at the same index, but every replica passes through the indexes the others
/// reported. Every index two replicas reported is compared, not only the last.
async fn digests(system: &System) -> Vec<Anomaly> {
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    // metadata partition → applied index → node → digest
    let mut seen: BTreeMap<u32, BTreeMap<u64, BTreeMap<u64, String>>> = BTreeMap::new();
    // metadata partition → its replicas (from the latest answers)
    let mut replicas: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
    loop {
        let nodes = system.node_ids();
        let answers =
            futures_util::future::join_all(nodes.iter().map(|&n| system.status(n, true, Duration::from_secs(20))))
                .await;
        let mut answered = true;
        for (&n, answer) in nodes.iter().zip(answers) {
            let Some(s) = answer else {
                answered = false;
                continue;
            };
            for g in s.groups {
                // Only replicas that are members of the metadata partition.
                if g.voters.contains(&n) || g.learners.contains(&n) {
                    replicas.entry(g.metadata_partition).or_default().insert(n);
                    seen.entry(g.metadata_partition)
                        .or_default()
                        .entry(g.digest_applied_index)
                        .or_default()
                        .insert(n, g.digest);
                } else if let Some(r) = replicas.get_mut(&g.metadata_partition) {
                    r.remove(&n);
                }
            }
        }
        let mut out = vec![];
        for (g, by_index) in &seen {
            for (index, m) in by_index {
                if m.values().collect::<BTreeSet<_>>().len() > 1 {
                    out.push(Anomaly::new(
                        "digest-mismatch",
                        format!("metadata partition {g}: replicas at index {index} differ: {m:?}"),
                    ));
                }
            }
        }
        if !out.is_empty() {
            return out;
        }
        // Converged: for every metadata partition, some index every replica reported.
        let converged = answered
            && replicas.iter().all(|(g, members)| {
                seen.get(g).is_some_and(|by_index| by_index.values().any(|m| members.iter().all(|n| m.contains_key(n))))
            });
        if converged {
            return vec![];
        }
        if Instant::now() > deadline {
            let last: BTreeMap<u32, Vec<(u64, usize)>> = seen
                .iter()
                .map(|(g, by_index)| (*g, by_index.iter().rev().take(8).map(|(i, m)| (*i, m.len())).collect()))
                .collect();
            return vec![Anomaly::new(
                "replicas-diverged",
                format!(
                    "no applied index reported by every replica within {CONVERGENCE_BOUND:?}: replicas {replicas:?}, \
                     latest indexes (index, replicas at it) {last:?}"
                ),
            )];
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every object a live batch points to is still in the store.
async fn objects(ctx: &Arc<Ctx>, topics: &[Topic]) -> Vec<Anomaly> {
    let store = ctx.system.storage.open();
    let listed: BTreeSet<String> = match store.list("").await {
        Ok(l) => l.into_iter().map(|o| o.key).collect(),
        Err(e) => return vec![Anomaly::new("objects-unlisted", format!("listing the store failed: {e}"))],
    };
    let node = ctx.system.node_ids()[0];
    let mut client = ctx.system.coordinator(node);
    let mut out = vec![];
    for t in topics {
        for p in 0..t.partitions {
            let mut offset = -1i64;
            loop {
                let req = c::FindBatchesRequest {
                    fetch_max_bytes: i32::MAX,
                    max_batches_per_partition: 10_000,
                    topics: vec![c::find_batches_request::FindBatchesTopic {
                        topic_id: t.id.to_vec(),
                        partitions: vec![c::find_batches_request::FindBatchesPartition {
                            partition_index: p,
                            offset: offset.max(0),
                            max_partition_fetch_bytes: i32::MAX,
                        }],
                    }],
                    timeout_ms: 10_000,
                    min_applied: vec![],
                    isolation_level: 0,
                };
                let r = match tokio::time::timeout(Duration::from_secs(15), client.find_batches(req)).await {
                    Ok(Ok(r)) => r.into_inner(),
                    _ => {
                        out.push(Anomaly::new("objects-unchecked", format!("{}/{p}: FindBatches failed", t.name)));
                        break;
                    }
                };
                let Some(a) = r.topics.first().and_then(|t| t.partitions.first()) else { break };
                if a.error_code == 1 && offset < 0 {
                    // Below the log start: start there.
                    offset = a.log_start_offset;
                    continue;
                }
                if a.error_code != 0 || a.batches.is_empty() {
                    break;
                }
                // Transaction markers have no object.
                for b in a.batches.iter().filter(|b| b.marker.is_none()) {
                    if !listed.contains(&b.object_key) {
                        out.push(Anomaly::new(
                            "dangling-batch",
                            format!(
                                "{}/{p} offsets {}..={}: object {} was deleted",
                                t.name, b.base_offset, b.last_offset, b.object_key
                            ),
                        ));
                    }
                }
                offset = a.batches.last().map_or(offset, |b| b.last_offset + 1);
                if offset >= a.high_watermark {
                    break;
                }
            }
        }
    }
    out
}
