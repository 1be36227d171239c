//! The checker: judges a history (the Jepsen Kafka checker's ideas, for one log per partition).
//!
//! From the history alone (so a saved history file can be checked again):
//! - **lost**: an acknowledged record is not at its acknowledged offset (at or above the final
//!   log start), byte-exact (key and value), in the final read or in any read during the run;
//! - **duplicate**: one record at two offsets (acknowledged twice, or read twice);
//! - **gap**: an offset between the final log start and high watermark that holds no record;
//! - **phantom**: a record nobody sent, or whose key does not match its value (damage);
//! - **failed-write-present**: a record whose every produce attempt failed definitely;
//! - **inconsistent-read**: two reads saw different records at one offset;
//! - **stale-read**: a strict ListOffsets (latest) that began after an acknowledgement at offset
//!   `o` returned a high watermark `<= o`;
//! - **offset-regression**: a strict ListOffsets returned less than one that ended before it
//!   began (high watermarks and log starts never go back in real time);
//! - **stale-log-start**: a strict earliest ListOffsets, or the final log start, below what an
//!   acknowledged DeleteRecords set before it began;
//! - **deleted-topic-present** / **created-topic-missing**: the final topic list against the
//!   acknowledged topic creations and deletions;
//! - **final-read-failed**: the final read of a partition could not be done;
//! - **tail-missed**: a tail consumer (long polls, reading on after the workload stops until it
//!   has caught up or the run's tail bound passes) never read an acknowledged record at or above
//!   its partition's final log start: a parked fetch not woken, or a cache answer that left a
//!   record out.
//! - **commit-regression**: a group's committed offset of a partition went back: an OffsetFetch
//!   that began after an OffsetCommit of offset `o` was answered NONE (or after another
//!   OffsetFetch answered `o`) answered less than `o` (KIP-848 members, fenced by member epoch);
//! - **share-redelivered**: a ShareFetch (KIP-932) that began after a ShareFetch acknowledging a
//!   record (ACCEPT, its partition's acknowledgement answered NONE) had ended acquired that record
//!   again;
//! - **share-missed**: the share consumers (reading on after the workload stops, until the tail
//!   phase ends) never acquired an acknowledged record at or above its partition's final log start.
//!
//! And of transactions (Jepsen's transactional anomalies), from the transactional producers'
//! batches and ends and the `read_committed` reads: a transaction is *committed* when an EndTxn
//! COMMIT of it was answered NONE, *aborted* when it was never asked to commit or an ABORT of it was
//! answered NONE, else its fate is unknown.
//! - **aborted-read**: a `read_committed` read delivered a record of an aborted transaction;
//! - **read-past-lso**: a `read_committed` read delivered a record at or past the last stable
//!   offset its answer gave;
//! - **torn-transaction**: the final `read_committed` reads hold some of a committed or unknown
//!   transaction's records and not the others;
//! - **committed-missing**: they hold none of a committed transaction's records;
//! - **final-read-incomplete**: a final `read_committed` read of a partition never reached its
//!   end with no transaction open there (those checks then leave its transactions out).
//!
//! Unknown outcomes may be present or absent, but never twice nor at a wrong offset. The live
//! checks (digests, objects, availability, crashes) are done on the running system by `settle`
//! and reported as [`Anomaly`]s too. It must not talk to the system.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::history::{Body, Event, Op, ProducerSeq, Res, FINAL};

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Anomaly {
    pub kind: String,
    pub detail: String,
}

impl Anomaly {
    pub fn new(kind: &str, detail: impl Into<String>) -> Anomaly {
        Anomaly { kind: kind.into(), detail: detail.into() }
    }
}

/// An operation with how it ended.
#[derive(Debug, Clone)]
pub struct OpRecord {
    pub id: u64,
    pub process: u32,
    pub op: Op,
    pub invoked: u64,
    /// `(time, outcome)`; `None`: never completed (the run ended first: unknown).
    pub end: Option<(u64, End)>,
}

#[derive(Debug, Clone)]
pub enum End {
    Ok(Res),
    Fail(String),
    Unknown(String),
}

impl OpRecord {
    pub fn ok(&self) -> Option<&Res> {
        match &self.end {
            Some((_, End::Ok(r))) => Some(r),
            _ => None,
        }
    }
}

/// Pairs every invoke with its completion.
pub fn operations(events: &[Event]) -> Vec<OpRecord> {
    let mut ops: Vec<OpRecord> = vec![];
    let mut at: HashMap<u64, usize> = HashMap::new();
    for e in events {
        match &e.body {
            Body::Invoke { id, op } => {
                at.insert(*id, ops.len());
                ops.push(OpRecord { id: *id, process: e.p, op: op.clone(), invoked: e.t, end: None });
            }
            Body::Ok { id, res } => {
                if let Some(&i) = at.get(id) {
                    ops[i].end = Some((e.t, End::Ok(res.clone())));
                }
            }
            Body::Fail { id, error } => {
                if let Some(&i) = at.get(id) {
                    ops[i].end = Some((e.t, End::Fail(error.clone())));
                }
            }
            Body::Info { id, error } => {
                if let Some(&i) = at.get(id) {
                    ops[i].end = Some((e.t, End::Unknown(error.clone())));
                }
            }
            _ => {}
        }
    }
    ops
}

type Tp = (String, i32);

/// What was sent of one value: where, and how its attempts ended.
#[derive(Debug, Default)]
struct Sent {
    tp: Tp,
    producer: Option<ProducerSeq>,
    acked: Vec<(i64, u64)>,
    any_unknown: bool,
}

/// Judges the history. Returns every anomaly found (empty: the history is consistent).
pub fn check(events: &[Event]) -> Vec<Anomaly> {
    let ops = operations(events);
    let mut out = vec![];

    // ---- what was sent and acknowledged
    let mut sent: HashMap<String, Sent> = HashMap::new();
    // Per partition: acknowledged (last offset, completion time).
    let mut acks: HashMap<Tp, Vec<(u64, i64)>> = HashMap::new();
    for o in &ops {
        let Op::Produce { topic, partition, values, producer, .. } = &o.op else { continue };
        let tp = (topic.clone(), *partition);
        for (i, v) in values.iter().enumerate() {
            let s = sent.entry(v.clone()).or_default();
            s.tp = tp.clone();
            s.producer = *producer;
            match &o.end {
                Some((t, End::Ok(Res::Offset { offset }))) => s.acked.push((offset + i as i64, *t)),
                Some((_, End::Fail(_))) => {}
                _ => s.any_unknown = true,
            }
        }
        if let Some((t, End::Ok(Res::Offset { offset }))) = &o.end {
            acks.entry(tp).or_default().push((*t, offset + values.len() as i64 - 1));
        }
    }
    for (v, s) in &sent {
        let offsets: BTreeSet<i64> = s.acked.iter().map(|(o, _)| *o).collect();
        if offsets.len() > 1 {
            out.push(Anomaly::new(
                "duplicate",
                format!("{}/{}: value {v} acknowledged at offsets {offsets:?}{}", s.tp.0, s.tp.1, idem(s.producer)),
            ));
        }
    }

    // ---- what was read
    // Per partition: offset → (key, value, read op id), the first record read at each offset.
    let mut observed: HashMap<Tp, BTreeMap<i64, (String, String, u64)>> = HashMap::new();
    // Every distinct (partition, offset, key, value) any read returned.
    let mut every: BTreeSet<(Tp, i64, String, String)> = BTreeSet::new();
    for o in &ops {
        let (Op::Read { topic, partition, .. }, Some(Res::Records { records, .. })) = (&o.op, o.ok()) else {
            continue;
        };
        let tp = (topic.clone(), *partition);
        let seen = observed.entry(tp.clone()).or_default();
        for (off, key, value) in records {
            every.insert((tp.clone(), *off, key.clone(), value.clone()));
            match seen.get(off) {
                Some((k, v, first)) if (k, v) != (key, value) => out.push(Anomaly::new(
                    "inconsistent-read",
                    format!("{}/{} offset {off}: read {v:?} (op {first}) and {value:?} (op {})", tp.0, tp.1, o.id),
                )),
                Some(_) => {}
                None => {
                    seen.insert(*off, (key.clone(), value.clone(), o.id));
                }
            }
        }
    }
    let mut at: HashMap<(&Tp, &str), i64> = HashMap::new();
    for (tp, off, key, value) in &every {
        if *key != format!("k{value}") {
            out.push(Anomaly::new(
                "phantom",
                format!("{}/{} offset {off}: key {key:?} does not match value {value:?}", tp.0, tp.1),
            ));
            continue;
        }
        match sent.get(value) {
            None => {
                out.push(Anomaly::new("phantom", format!("{}/{} offset {off}: {value:?} was never sent", tp.0, tp.1)))
            }
            Some(s) if s.tp != *tp => out.push(Anomaly::new(
                "phantom",
                format!("{}/{} offset {off}: {value:?} was sent to {}/{}", tp.0, tp.1, s.tp.0, s.tp.1),
            )),
            Some(s) if s.acked.is_empty() && !s.any_unknown => out.push(Anomaly::new(
                "failed-write-present",
                format!("{}/{} offset {off}: {value:?} was refused to its producer{}", tp.0, tp.1, idem(s.producer)),
            )),
            Some(_) => {}
        }
        match at.insert((tp, value.as_str()), *off) {
            Some(first) if first != *off => {
                let p = sent.get(value).and_then(|s| s.producer);
                out.push(Anomaly::new(
                    "duplicate",
                    format!("{}/{}: {value:?} read at offsets {first} and {off}{}", tp.0, tp.1, idem(p)),
                ));
            }
            _ => {}
        }
    }

    // ---- the final state of each partition
    // (log start, high watermark) from the final strict reads, and whether its final read failed.
    let mut final_bounds: HashMap<Tp, (Option<i64>, Option<i64>)> = HashMap::new();
    let mut final_read: HashMap<Tp, BTreeMap<i64, String>> = HashMap::new();
    // Whether the last final read or ListOffsets of each partition succeeded (attempts that
    // failed and were retried do not count).
    let mut final_last_ok: BTreeMap<Tp, bool> = BTreeMap::new();
    for o in ops.iter().filter(|o| o.process == FINAL) {
        match (&o.op, &o.end) {
            (Op::ListOffsets { topic, partition, timestamp, .. }, Some((_, End::Ok(Res::Offset { offset })))) => {
                let b = final_bounds.entry((topic.clone(), *partition)).or_default();
                if *timestamp == -2 {
                    b.0 = Some(*offset);
                } else {
                    b.1 = Some(*offset);
                }
            }
            (Op::Read { topic, partition, .. }, Some((_, End::Ok(Res::Records { records, .. })))) => {
                let m = final_read.entry((topic.clone(), *partition)).or_default();
                for (off, _, v) in records {
                    m.insert(*off, v.clone());
                }
            }
            _ => {}
        }
        if let Op::Read { topic, partition, .. } | Op::ListOffsets { topic, partition, .. } = &o.op {
            final_last_ok.insert((topic.clone(), *partition), matches!(o.end, Some((_, End::Ok(_)))));
        }
    }
    let final_failed: BTreeSet<Tp> = final_last_ok.into_iter().filter(|(_, ok)| !ok).map(|(tp, _)| tp).collect();
    for tp in &final_failed {
        out.push(Anomaly::new("final-read-failed", format!("{}/{}: the final read did not complete", tp.0, tp.1)));
    }
    for (tp, (start, hw)) in &final_bounds {
        let (Some(start), Some(hw)) = (*start, *hw) else { continue };
        if final_failed.contains(tp) {
            continue;
        }
        let got = final_read.get(tp).cloned().unwrap_or_default();
        let missing: Vec<i64> = (start..hw).filter(|o| !got.contains_key(o)).collect();
        if !missing.is_empty() {
            out.push(Anomaly::new(
                "gap",
                format!(
                    "{}/{}: {} offsets in [{start}, {hw}) hold no record, first {:?}",
                    tp.0,
                    tp.1,
                    missing.len(),
                    &missing[..missing.len().min(5)]
                ),
            ));
        }
    }

    // ---- lost: every acknowledged record at its offset
    for (v, s) in &sent {
        let Some(&(offset, _)) = s.acked.first() else { continue };
        let tp = &s.tp;
        if let Some((_, val, op)) = observed.get(tp).and_then(|m| m.get(&offset)) {
            if val != v {
                out.push(Anomaly::new(
                    "lost",
                    format!(
                        "{}/{}: {v:?} acknowledged at offset {offset}, read op {op} found {val:?} there{}",
                        tp.0,
                        tp.1,
                        idem(s.producer)
                    ),
                ));
                continue;
            }
        }
        let Some((Some(start), Some(hw))) = final_bounds.get(tp).copied() else { continue };
        if final_failed.contains(tp) || offset < start {
            continue;
        }
        let at = final_read.get(tp).and_then(|m| m.get(&offset));
        if at != Some(v) {
            let elsewhere = observed.get(tp).and_then(|m| m.iter().find(|(_, (_, val, _))| val == v).map(|(o, _)| *o));
            out.push(Anomaly::new(
                "lost",
                format!(
                    "{}/{}: {v:?} acknowledged at offset {offset} (final log [{start}, {hw})): found {:?} there{}{}",
                    tp.0,
                    tp.1,
                    at,
                    elsewhere.map(|o| format!(", and the value at offset {o}")).unwrap_or_default(),
                    idem(s.producer)
                ),
            ));
        }
    }

    out.extend(tail_missed(&ops, &final_bounds, &final_failed));
    out.extend(share(&ops, &final_bounds, &final_failed));
    out.extend(commit_regression(&ops));
    out.extend(transactions(&ops));

    // ---- strict reads: linearizable against acknowledgements, never going back
    let mut delete_acks: HashMap<Tp, Vec<(u64, i64)>> = HashMap::new();
    for o in &ops {
        if let (Op::DeleteRecords { topic, partition, .. }, Some((t, End::Ok(Res::Offset { offset })))) =
            (&o.op, &o.end)
        {
            delete_acks.entry((topic.clone(), *partition)).or_default().push((*t, *offset));
        }
    }
    let mut reads: HashMap<(Tp, i64), Vec<(u64, u64, i64, u64)>> = HashMap::new();
    for o in &ops {
        if let (Op::ListOffsets { topic, partition, timestamp, .. }, Some((t, End::Ok(Res::Offset { offset })))) =
            (&o.op, &o.end)
        {
            reads.entry(((topic.clone(), *partition), *timestamp)).or_default().push((o.invoked, *t, *offset, o.id));
        }
    }
    for ((tp, timestamp), rs) in &reads {
        // Acknowledged writes (or log starts) each read must reflect: those done before it began.
        let mut floor: Vec<(u64, i64)> = match timestamp {
            -1 => acks.get(tp).cloned().unwrap_or_default().into_iter().map(|(t, last)| (t, last + 1)).collect(),
            -2 => delete_acks.get(tp).cloned().unwrap_or_default(),
            _ => continue,
        };
        floor.sort();
        let mut best = i64::MIN;
        let mut prefix: Vec<(u64, i64)> = vec![];
        for (t, v) in floor {
            best = best.max(v);
            prefix.push((t, best));
        }
        let (kind, what) =
            if *timestamp == -1 { ("stale-read", "high watermark") } else { ("stale-log-start", "log start") };
        let mut reported = 0;
        for (invoked, _, got, id) in rs {
            let i = prefix.partition_point(|(t, _)| t < invoked);
            if i == 0 {
                continue;
            }
            let need = prefix[i - 1].1;
            if *got < need && reported < 3 {
                reported += 1;
                out.push(Anomaly::new(
                    kind,
                    format!(
                        "{}/{}: ListOffsets op {id} returned {what} {got}, but {need} was acknowledged before it began",
                        tp.0, tp.1
                    ),
                ));
            }
        }
        // Real-time order: a read that began after another ended returns at least as much.
        let mut by_end: Vec<(u64, i64, u64)> = rs.iter().map(|(_, e, v, id)| (*e, *v, *id)).collect();
        by_end.sort();
        let mut best_end: Vec<(u64, i64, u64)> = vec![];
        let mut best = (i64::MIN, 0);
        for (e, v, id) in by_end {
            if v > best.0 {
                best = (v, id);
            }
            best_end.push((e, best.0, best.1));
        }
        let mut reported = 0;
        for (invoked, _, got, id) in rs {
            let i = best_end.partition_point(|(e, _, _)| e < invoked);
            if i == 0 {
                continue;
            }
            let (_, before, before_id) = best_end[i - 1];
            if *got < before && reported < 3 {
                reported += 1;
                out.push(Anomaly::new(
                    "offset-regression",
                    format!("{}/{}: ListOffsets({timestamp}) op {id} returned {got} after op {before_id} had returned {before}", tp.0, tp.1),
                ));
            }
        }
    }
    for (tp, ds) in &delete_acks {
        let Some((Some(start), _)) = final_bounds.get(tp) else { continue };
        if let Some(max) = ds.iter().map(|(_, o)| *o).max() {
            if *start < max {
                out.push(Anomaly::new(
                    "stale-log-start",
                    format!("{}/{}: final log start {start} below an acknowledged DeleteRecords to {max}", tp.0, tp.1),
                ));
            }
        }
    }

    // ---- topics: acknowledged creations and deletions against the final list
    let mut created: BTreeSet<String> = BTreeSet::new();
    let mut delete_tried: BTreeSet<String> = BTreeSet::new();
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let mut final_topics: Option<BTreeSet<String>> = None;
    for o in &ops {
        match (&o.op, o.ok()) {
            (Op::CreateTopic { topic, .. }, Some(_)) if o.process != FINAL => {
                created.insert(topic.clone());
            }
            (Op::DeleteTopic { topic, .. }, ok) => {
                delete_tried.insert(topic.clone());
                if ok.is_some() {
                    deleted.insert(topic.clone());
                }
            }
            (Op::ListTopics { .. }, Some(Res::Topics { names, .. })) if o.process == FINAL => {
                final_topics = Some(names.iter().cloned().collect());
            }
            _ => {}
        }
    }
    if let Some(names) = final_topics {
        for t in &deleted {
            if names.contains(t) {
                out.push(Anomaly::new(
                    "deleted-topic-present",
                    format!("topic {t}: deletion acknowledged, still listed"),
                ));
            }
        }
        for t in created.difference(&delete_tried) {
            if !names.contains(t) {
                out.push(Anomaly::new(
                    "created-topic-missing",
                    format!("topic {t}: creation acknowledged, not listed"),
                ));
            }
        }
    }

    out.sort();
    out
}

/// Every tail consumer (a process whose reads wait) read every record acknowledged to the
/// workload at or above the final log start of each partition it followed (the final phase's own
/// writes come after the tail phase).
fn tail_missed(
    ops: &[OpRecord],
    final_bounds: &HashMap<Tp, (Option<i64>, Option<i64>)>,
    final_failed: &BTreeSet<Tp>,
) -> Vec<Anomaly> {
    // Per tail process: the partitions it followed, and every (partition, offset) it read.
    let mut followed: BTreeMap<u32, (u64, BTreeSet<Tp>)> = BTreeMap::new();
    let mut read: HashMap<u32, HashSet<(Tp, i64)>> = HashMap::new();
    for o in ops {
        let Op::Read { topic, partition, wait_ms, target, .. } = &o.op else { continue };
        if *wait_ms <= 0 {
            continue;
        }
        let tp = (topic.clone(), *partition);
        followed.entry(o.process).or_insert_with(|| (*target, BTreeSet::new())).1.insert(tp.clone());
        if let Some(Res::Records { records, .. }) = o.ok() {
            let got = read.entry(o.process).or_default();
            for (off, _, _) in records {
                got.insert((tp.clone(), *off));
            }
        }
    }
    let mut acked: Vec<(Tp, i64)> = vec![];
    for o in ops.iter().filter(|o| o.process != FINAL) {
        if let (Op::Produce { topic, partition, values, .. }, Some(Res::Offset { offset })) = (&o.op, o.ok()) {
            acked.extend((0..values.len() as i64).map(|i| ((topic.clone(), *partition), offset + i)));
        }
    }
    let mut out = vec![];
    for (process, (broker, tps)) in &followed {
        let got = read.get(process);
        let mut missed: BTreeMap<&Tp, Vec<i64>> = BTreeMap::new();
        for (tp, offset) in &acked {
            if !tps.contains(tp) || final_failed.contains(tp) {
                continue;
            }
            let Some((Some(start), _)) = final_bounds.get(tp) else { continue };
            if offset >= start && !got.is_some_and(|g| g.contains(&(tp.clone(), *offset))) {
                missed.entry(tp).or_default().push(*offset);
            }
        }
        for (tp, mut offsets) in missed {
            offsets.sort_unstable();
            out.push(Anomaly::new(
                "tail-missed",
                format!(
                    "{}/{}: the tail consumer of broker {broker} (process {process}) never read {} acknowledged records, first at offsets {:?}",
                    tp.0,
                    tp.1,
                    offsets.len(),
                    &offsets[..offsets.len().min(5)]
                ),
            ));
        }
    }
    out
}

/// Committed offsets never go back in real time: each OffsetFetch answers at least what every
/// OffsetCommit answered NONE, and every OffsetFetch, that ended before it began.
fn commit_regression(ops: &[OpRecord]) -> Vec<Anomaly> {
    // Per (group, topic, partition): (ended at, offset, what) of commits and fetches that succeeded.
    let mut known: HashMap<(String, String, i32), Vec<(u64, i64, String)>> = HashMap::new();
    for o in ops {
        match (&o.op, &o.end) {
            (Op::CommitOffset { group, topic, partition, offset, .. }, Some((t, End::Ok(_)))) => known
                .entry((group.clone(), topic.clone(), *partition))
                .or_default()
                .push((*t, *offset, format!("commit op {}", o.id))),
            (Op::FetchCommitted { group, topic, partition }, Some((t, End::Ok(Res::Offset { offset })))) => known
                .entry((group.clone(), topic.clone(), *partition))
                .or_default()
                .push((*t, *offset, format!("fetch op {}", o.id))),
            _ => {}
        }
    }
    let mut out = vec![];
    for o in ops {
        let (Op::FetchCommitted { group, topic, partition }, Some(Res::Offset { offset })) = (&o.op, o.ok()) else {
            continue;
        };
        let Some(before) = known.get(&(group.clone(), topic.clone(), *partition)) else { continue };
        if let Some((_, floor, what)) =
            before.iter().filter(|(t, _, _)| *t < o.invoked).max_by_key(|(_, off, _)| *off).filter(|b| b.1 > *offset)
        {
            out.push(Anomaly::new(
                "commit-regression",
                format!("{group} {topic}/{partition}: fetch op {} answered {offset}, below {floor} ({what}) answered before it began", o.id),
            ));
        }
    }
    out
}

/// Share groups: no record accepted is acquired again by a fetch that began after the acceptance
/// was answered; every acknowledged record at or above the final log start was acquired.
fn share(
    ops: &[OpRecord],
    final_bounds: &HashMap<Tp, (Option<i64>, Option<i64>)>,
    final_failed: &BTreeSet<Tp>,
) -> Vec<Anomaly> {
    let mut out = vec![];
    // (partition of the topic, offset) → when its acceptance was answered (the earliest).
    let mut accepted: HashMap<(String, i32, i64), u64> = HashMap::new();
    let mut topic_of_share: Option<String> = None;
    for o in ops {
        let (Op::ShareFetch { topic, acks, .. }, Some((t, End::Ok(Res::Shared { ack_codes, .. })))) = (&o.op, &o.end)
        else {
            continue;
        };
        topic_of_share = Some(topic.clone());
        for (p, first, last) in acks {
            if ack_codes.iter().any(|(ap, code)| ap == p && *code == 0) {
                for off in *first..=*last {
                    let at = accepted.entry((topic.clone(), *p, off)).or_insert(*t);
                    *at = (*at).min(*t);
                }
            }
        }
    }
    let Some(topic) = topic_of_share else { return out };
    let mut delivered: HashSet<(i32, i64)> = HashSet::new();
    for o in ops {
        let (Op::ShareFetch { .. }, Some(Res::Shared { acquired, .. })) = (&o.op, o.ok()) else { continue };
        for (p, off, value, count) in acquired {
            delivered.insert((*p, *off));
            if let Some(at) = accepted.get(&(topic.clone(), *p, *off)) {
                if *at <= o.invoked {
                    out.push(Anomaly::new(
                        "share-redelivered",
                        format!(
                            "{topic}/{p} offset {off} ({value}): accepted at {at} µs, acquired again (delivery {count}) by op {} begun at {} µs",
                            o.id, o.invoked
                        ),
                    ));
                }
            }
        }
    }
    let mut missed: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for o in ops.iter().filter(|o| o.process != FINAL) {
        let (Op::Produce { topic: t, partition, values, .. }, Some(Res::Offset { offset })) = (&o.op, o.ok()) else {
            continue;
        };
        let tp = (t.clone(), *partition);
        if *t != topic || final_failed.contains(&tp) {
            continue;
        }
        let Some((Some(start), _)) = final_bounds.get(&tp) else { continue };
        for off in *offset..*offset + values.len() as i64 {
            if off >= *start && !delivered.contains(&(*partition, off)) {
                missed.entry(*partition).or_default().push(off);
            }
        }
    }
    for (p, offs) in missed {
        out.push(Anomaly::new(
            "share-missed",
            format!(
                "{topic}/{p}: the share consumers never acquired {} acknowledged records, first at offsets {:?}",
                offs.len(),
                &offs[..offs.len().min(5)]
            ),
        ));
    }
    out
}

/// How a transaction ended, as its producer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Committed,
    Aborted,
    Unknown,
}

/// The transactional checks (see the module's documentation).
fn transactions(ops: &[OpRecord]) -> Vec<Anomaly> {
    // Per transaction: its values (partition, value), whether a COMMIT was asked, how it ended.
    let mut values: BTreeMap<&str, Vec<(Tp, &str)>> = BTreeMap::new();
    let mut commit_asked: HashSet<&str> = HashSet::new();
    let mut ended: HashMap<&str, Fate> = HashMap::new();
    for o in ops {
        match &o.op {
            Op::Produce { topic, partition, values: vs, txn: Some(txn), .. } => {
                let e = values.entry(txn.as_str()).or_default();
                for v in vs {
                    if !e.iter().any(|(_, w)| w == v) {
                        e.push(((topic.clone(), *partition), v.as_str()));
                    }
                }
            }
            Op::EndTxn { txn, commit, .. } => {
                if *commit {
                    commit_asked.insert(txn.as_str());
                }
                if o.ok().is_some() {
                    ended.insert(txn.as_str(), if *commit { Fate::Committed } else { Fate::Aborted });
                }
            }
            _ => {}
        }
    }
    let fate = |txn: &str| match ended.get(txn) {
        Some(f) => *f,
        None if !commit_asked.contains(txn) => Fate::Aborted,
        None => Fate::Unknown,
    };
    let mut of_value: HashMap<&str, &str> = HashMap::new();
    for (txn, vs) in &values {
        for (_, v) in vs {
            of_value.insert(v, txn);
        }
    }
    let mut out = vec![];
    // Per partition of the transactional topic: the values the final reads delivered, and
    // whether the last of them reached the end with nothing open.
    let mut final_values: HashMap<Tp, HashSet<&str>> = HashMap::new();
    let mut final_complete: HashMap<Tp, bool> = HashMap::new();
    let mut reported: BTreeMap<&str, usize> = BTreeMap::new();
    for o in ops {
        let Op::Read { topic, partition, offset, isolation: 1, .. } = &o.op else { continue };
        let tp = (topic.clone(), *partition);
        let res = o.ok();
        if o.process == FINAL {
            let complete = matches!(res, Some(Res::Records { high_watermark, last_stable_offset: Some(lso), .. })
                if offset >= high_watermark && lso >= high_watermark);
            final_complete.insert(tp.clone(), complete);
        }
        let Some(Res::Records { records, last_stable_offset, .. }) = res else { continue };
        for (off, _, v) in records {
            if o.process == FINAL {
                final_values.entry(tp.clone()).or_default().insert(v.as_str());
            }
            if let Some(txn) = of_value.get(v.as_str()) {
                if fate(txn) == Fate::Aborted && bump(&mut reported, "aborted-read") {
                    out.push(Anomaly::new(
                        "aborted-read",
                        format!(
                            "{}/{} offset {off}: read op {} delivered {v:?} of aborted transaction {txn}",
                            tp.0, tp.1, o.id
                        ),
                    ));
                }
            }
            if last_stable_offset.is_some_and(|lso| *off >= lso) && bump(&mut reported, "read-past-lso") {
                out.push(Anomaly::new(
                    "read-past-lso",
                    format!(
                        "{}/{}: read op {} delivered offset {off} with last stable offset {last_stable_offset:?}",
                        tp.0, tp.1, o.id
                    ),
                ));
            }
        }
    }
    for (tp, complete) in &final_complete {
        if !complete {
            out.push(Anomaly::new(
                "final-read-incomplete",
                format!(
                    "{}/{}: the final read_committed read never reached the end with no transaction open",
                    tp.0, tp.1
                ),
            ));
        }
    }
    for (txn, vs) in &values {
        let f = fate(txn);
        // Only transactions whose every partition was read to its end.
        if f == Fate::Aborted || vs.iter().any(|(tp, _)| final_complete.get(tp) != Some(&true)) {
            continue;
        }
        let present: Vec<&str> =
            vs.iter().filter(|(tp, v)| final_values.get(tp).is_some_and(|s| s.contains(v))).map(|(_, v)| *v).collect();
        let kind = match (f, present.len()) {
            (_, n) if n == vs.len() => continue,
            (Fate::Committed, 0) => "committed-missing",
            (Fate::Unknown, 0) => continue,
            _ => "torn-transaction",
        };
        if bump(&mut reported, kind) {
            out.push(Anomaly::new(
                kind,
                format!(
                    "transaction {txn} ({f:?}): the final reads hold {} of its {} records ({present:?} of {:?})",
                    present.len(),
                    vs.len(),
                    vs.iter().map(|(tp, v)| format!("{}/{}:{v}", tp.0, tp.1)).collect::<Vec<_>>()
                ),
            ));
        }
    }
    out
}

/// Counts one more finding of `kind`; whether it is among the first 20 (the rest are counted, not
/// listed, so one broken run does not print thousands of lines).
fn bump<'a>(reported: &mut BTreeMap<&'a str, usize>, kind: &'a str) -> bool {
    let n = reported.entry(kind).or_default();
    *n += 1;
    *n <= 20
}

fn idem(p: Option<ProducerSeq>) -> String {
    p.map(|p| format!(" (idempotent producer {} epoch {} seq {})", p.id, p.epoch, p.seq)).unwrap_or_default()
}
