//! The run's summary: the seed, faults injected by kind, operations by outcome (ok / failed /
//! unknown) per kind, anomalies by kind with a few examples, and a last line `N passed, M failed`
//! (one check per anomaly kind the checker looks for).
//!
//! It must not decide anything: it formats what the nemesis, the checker and `settle` found.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use super::checker::{operations, Anomaly, End};
use super::history::{Event, FINAL};

/// Every check, by the anomaly kind it reports, with what it proves.
pub const CHECKS: [(&str, &str); 25] = [
    ("lost", "every acknowledged record is at its acknowledged offset, byte-exact"),
    ("duplicate", "no record at two offsets, none twice for one idempotent producer sequence"),
    ("gap", "offsets are contiguous from the log start to the high watermark"),
    ("phantom", "every record present was sent by someone, to that partition, undamaged"),
    ("failed-write-present", "no record whose every produce attempt was refused"),
    ("inconsistent-read", "reads agree on the record at each offset"),
    ("stale-read", "a strict ListOffsets sees every write acknowledged before it began"),
    ("offset-regression", "strict ListOffsets answers never go back in real time"),
    ("stale-log-start", "log starts reflect every acknowledged DeleteRecords"),
    ("deleted-topic-present", "an acknowledged topic deletion holds"),
    ("created-topic-missing", "an acknowledged topic creation holds"),
    ("zombie-topic", "a topic gone from the topic list is gone from every metadata partition"),
    ("final-read-failed", "every partition can be read whole after healing"),
    (
        "tail-missed",
        "every tail consumer (long polls, through each broker) reads every acknowledged record after the heal",
    ),
    ("commit-regression", "a consumer group's committed offsets never go back (KIP-848 members, fenced by epoch)"),
    ("share-redelivered", "a share group never delivers a record again after its acceptance was answered"),
    ("share-missed", "the share consumers acquire every acknowledged record after the heal"),
    ("unavailable", "the cluster serves every partition again within the bound after the last fault"),
    ("digest-mismatch", "replicas at equal applied indexes have equal state digests"),
    ("replicas-diverged", "replicas reach equal applied indexes after healing"),
    ("dangling-batch", "no object referenced by a live batch was deleted"),
    ("process-crash", "no node or broker exits unless the nemesis killed it (or failed its fsync)"),
    ("panic", "no process logs a panic (a Raft group that panics stops while its process runs on)"),
    ("fsync-error-ignored", "a node whose WAL fsync fails stops"),
    ("membership-not-restored", "a removed node can be added back to every metadata partition"),
];

pub struct Summary {
    pub text: String,
    pub passed: usize,
    pub failed: usize,
}

pub struct Facts<'a> {
    pub seed: u64,
    pub shape: String,
    pub fault_phase: Duration,
    pub faults: &'a BTreeMap<String, usize>,
    pub events: &'a [Event],
    pub anomalies: &'a [Anomaly],
    pub recovered_in: Option<Duration>,
    pub history: String,
    pub replay: String,
}

pub fn summarize(f: &Facts) -> Summary {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== nemesis summary: seed {} ({}; {:.0} s of faults)",
        f.seed,
        f.shape,
        f.fault_phase.as_secs_f64()
    );
    let total: usize = f.faults.values().sum();
    let _ = writeln!(s, "faults injected: {total}");
    for (k, n) in f.faults {
        let _ = writeln!(s, "  {k:<40} {n:>6}");
    }
    let mut ops: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    for o in operations(f.events) {
        let kind = if o.process == FINAL { format!("{} (final)", o.op.kind()) } else { o.op.kind() };
        let e = ops.entry(kind).or_default();
        match o.end {
            Some((_, End::Ok(_))) => e[0] += 1,
            Some((_, End::Fail(_))) => e[1] += 1,
            Some((_, End::Unknown(_))) | None => e[2] += 1,
        }
    }
    let _ = writeln!(s, "operations{:>39} {:>8} {:>8}", "ok", "failed", "unknown");
    for (k, [ok, fail, unknown]) in &ops {
        let _ = writeln!(s, "  {k:<42} {ok:>7} {fail:>8} {unknown:>8}");
    }
    let mut by_kind: BTreeMap<&str, Vec<&Anomaly>> = BTreeMap::new();
    for a in f.anomalies {
        by_kind.entry(a.kind.as_str()).or_default().push(a);
    }
    let _ = writeln!(s, "anomalies: {}", f.anomalies.len());
    for (k, list) in &by_kind {
        let _ = writeln!(s, "  {k} ({}), e.g.:", list.len());
        for a in list.iter().take(3) {
            let mut d = a.detail.clone();
            if d.len() > 400 {
                d.truncate(400);
                d.push_str(" ...");
            }
            let _ = writeln!(s, "    {d}");
        }
    }
    match f.recovered_in {
        Some(d) => {
            let _ = writeln!(s, "served every partition again {:.1} s after the last heal", d.as_secs_f64());
        }
        None => {
            let _ = writeln!(s, "did not serve every partition again within the bound");
        }
    }
    let _ = writeln!(s, "history: {}", f.history);
    let _ = writeln!(s, "replay: {}", f.replay);
    let mut passed = 0;
    let mut failed = 0;
    for (kind, what) in CHECKS {
        let n = by_kind.get(kind).map_or(0, |l| l.len());
        if n == 0 {
            passed += 1;
        } else {
            failed += 1;
            let _ = writeln!(s, "FAILED {kind}: {what} ({n} anomalies)");
        }
    }
    // Kinds outside the list (a live check that could not run, say) fail too.
    for (kind, list) in &by_kind {
        if !CHECKS.iter().any(|(k, _)| k == kind) {
            failed += 1;
            let _ = writeln!(s, "FAILED {kind} ({} anomalies)", list.len());
        }
    }
    let _ = writeln!(s, "{passed} passed, {failed} failed");
    Summary { text: s, passed, failed }
}
