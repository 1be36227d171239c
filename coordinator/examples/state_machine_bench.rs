//! Micro-benchmark of the metadata state machine on RocksDB (no Raft, no network):
//!
//! 1. applying a CommitFile of 64 batches (64 partitions of 1,000), transaction + RocksDB write;
//! 2. FindBatches on a partition 10,000 batches deep vs one `--deep` batches deep (default
//!    10,000,000), from random offsets, 10 batches per answer; the ratio is the point: it should
//!    stay near 1 because a lookup is one seek;
//! 3. ListOffsets by timestamp at both depths.
//!
//! Run: `cargo run --release -p diskless-coordinator --example state_machine_bench [-- --deep N]`.
//! Writes are not fsynced here (`--sync` to fsync each commit): this measures the state machine,
//! the Raft layer's benchmark measures durability.
//!
//! Commands are applied as a node applies log entries: through the hot-key cache, with the
//! applied-index key written in the same transaction; `--per-write K` applies K commits per
//! transaction (a node applies the entries of one apply call in one); `--cold` reads every key from
//! RocksDB (no cache).
//!
//! `--apply-only` runs part 1 alone (with `--commits N` commits of `--batches B` batches each,
//! `--idempotent` to give every batch a producer), short enough to run under
//! `valgrind --tool=callgrind`: instructions per batch are the difference between two runs with
//! different `--commits`, divided by the extra batches (setup cancels out).

use std::time::Instant;

use diskless_coordinator::state_machine::keys::Keys;
use diskless_coordinator::state_machine::*;
use diskless_coordinator::storage::{Db, HotKeys, Txn};
use hdrhistogram::Histogram;
use uuid::Uuid;

struct Args {
    deep: i64,
    commits: usize,
    batches: usize,
    per_write: usize,
    cold: bool,
    idempotent: bool,
    apply_only: bool,
    sync: bool,
    dir: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        deep: 10_000_000,
        commits: 20_000,
        batches: 64,
        per_write: 1,
        cold: false,
        idempotent: false,
        apply_only: false,
        sync: false,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--deep" => a.deep = it.next().and_then(|v| v.parse().ok()).expect("--deep N"),
            "--commits" => a.commits = it.next().and_then(|v| v.parse().ok()).expect("--commits N"),
            "--batches" => a.batches = it.next().and_then(|v| v.parse().ok()).expect("--batches N"),
            "--per-write" => a.per_write = it.next().and_then(|v| v.parse::<usize>().ok()).expect("--per-write K").max(1),
            "--cold" => a.cold = true,
            "--idempotent" => a.idempotent = true,
            "--apply-only" => a.apply_only = true,
            "--sync" => a.sync = true,
            "--dir" => a.dir = it.next(),
            other => panic!(
                "unknown flag {other}; flags: --deep N --commits N --batches N --per-write K --cold --idempotent --apply-only --sync --dir PATH"
            ),
        }
    }
    a
}

fn batch(tp: TopicPartition, ts: i64) -> CommitBatch {
    CommitBatch {
        magic: 2,
        request_id: 0,
        tp,
        byte_offset: 0,
        size: 16_384,
        base_offset: 0,
        last_offset: 9,
        batch_max_timestamp: ts,
        timestamp_type: 0,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
    }
}

struct Bench {
    db: Db,
    sm: StateMachine,
    /// `None` (`--cold`): every read goes to RocksDB.
    hot: Option<HotKeys>,
    now: i64,
    key: u64,
    sync: bool,
}

/// The size of the applied-index value a node writes with each apply call (log id + membership).
const APPLIED_VALUE_BYTES: usize = 60;

impl Bench {
    fn apply(&mut self, op: Op) -> Outcome {
        self.apply_all(vec![op]).remove(0)
    }

    /// Applies `ops` in one transaction, as a node applies the entries of one apply call.
    fn apply_all(&mut self, ops: Vec<Op>) -> Vec<Outcome> {
        let mut txn = match &mut self.hot {
            Some(hot) => Txn::with_hot(&self.db, hot),
            None => Txn::new(&self.db),
        };
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            self.now += 1;
            out.push(self.sm.apply(&mut txn, &Command { now_ms: self.now, op }).expect("apply"));
        }
        txn.put(Keys::new(self.sm.metadata_partition()).applied(), vec![7; APPLIED_VALUE_BYTES]);
        txn.commit(self.sync).expect("write");
        out
    }

    fn commit(&mut self, batches: Vec<CommitBatch>) {
        let c = self.file(batches);
        let Outcome::CommitFile(r) = self.apply(Op::CommitFile(c)) else { unreachable!() };
        assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    }

    /// Commits the files in one transaction.
    fn commit_all(&mut self, files: Vec<CommitFile>) {
        for out in self.apply_all(files.into_iter().map(Op::CommitFile).collect()) {
            let Outcome::CommitFile(r) = out else { unreachable!() };
            assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
        }
    }

    fn file(&mut self, mut batches: Vec<CommitBatch>) -> CommitFile {
        let mut at = 0;
        for b in &mut batches {
            b.byte_offset = at;
            at += b.size;
        }
        self.key += 1;
        CommitFile {
            deadline_ms: None,
            // Shaped like the broker's keys: a prefix and a UUID.
            object_key: format!("wal/{}", Uuid::from_u128(u128::from(self.key))),
            object_format: 1,
            file_size: i64::from(at),
            uploader_broker_id: 1,
            owner_ids: vec![0],
            batches,
        }
    }
}

fn report(name: &str, h: &Histogram<u64>) {
    println!(
        "{name:<44} n={:>8}  p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>7.1} µs  p99.9 {:>7.1} µs  max {:>8.1} µs",
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.9) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        h.value_at_quantile(0.999) as f64 / 1e3,
        h.max() as f64 / 1e3
    );
}

fn main() {
    let a = args();
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = a.dir.clone().map(std::path::PathBuf::from).unwrap_or_else(|| tmp.path().to_path_buf());
    let db = Db::open(&path).expect("open db");
    let mut b = Bench {
        db,
        sm: StateMachine::new(0, 1),
        hot: (!a.cold).then(StateMachine::hot_keys),
        now: 1_700_000_000_000,
        key: 0,
        sync: a.sync,
    };
    let topic = Uuid::from_bytes([1; 16]);
    let deep_topic = Uuid::from_bytes([2; 16]);
    let shallow_topic = Uuid::from_bytes([3; 16]);
    let create = |id, name: &str, n| {
        Op::CreatePartitions(vec![CreateTopic {
            topic_id: id,
            name: name.into(),
            num_partitions: n,
            retention_ms: Some(-1),
            retention_bytes: None,
        }
        .into()])
    };
    b.apply(create(topic, "wide", 1_000));
    b.apply(create(deep_topic, "deep", 1));
    b.apply(create(shallow_topic, "shallow", 1));
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);

    // 1. CommitFile of 64 batches over 1,000 partitions; with --idempotent, partition p's batches
    // come from producer p, in sequence.
    let mut h = Histogram::<u64>::new(3).unwrap();
    let mut sequences = vec![0i32; 1_000];
    let start = Instant::now();
    let mut done = 0;
    while done < a.commits {
        let k = a.per_write.min(a.commits - done);
        let files: Vec<CommitFile> = (0..k)
            .map(|_| {
                let batches = (0..a.batches)
                    .map(|_| {
                        let p = (rng.u64(..) % 1_000) as usize;
                        let mut bt = batch(TopicPartition { topic_id: topic, partition: p as i32 }, 0);
                        if a.idempotent {
                            bt.producer_id = p as i64;
                            bt.producer_epoch = 0;
                            bt.base_sequence = sequences[p];
                            bt.last_sequence = sequences[p] + 9;
                            sequences[p] += 10;
                        }
                        bt
                    })
                    .collect();
                b.file(batches)
            })
            .collect();
        let t = Instant::now();
        b.commit_all(files);
        h.record(t.elapsed().as_nanos() as u64).unwrap();
        done += k;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "state machine micro-benchmark (single thread, RocksDB {} fsync)",
        if a.sync { "with" } else { "without" }
    );
    let what = format!(
        "apply {}CommitFile, {} batches{}{}",
        if a.per_write > 1 { format!("{} × ", a.per_write) } else { String::new() },
        a.batches,
        if a.idempotent { ", idempotent" } else { "" },
        if a.cold { ", no cache" } else { "" }
    );
    report(&what, &h);
    println!(
        "{:<44} {:.0} commits/s = {:.0} batch coordinates/s = {:.2} µs/batch",
        "",
        a.commits as f64 / secs,
        (a.commits * a.batches) as f64 / secs,
        secs * 1e6 / (a.commits * a.batches) as f64
    );
    if a.apply_only {
        return;
    }

    // 2. Fill the shallow and deep partitions.
    let fill = |b: &mut Bench, id: Uuid, n: i64| {
        let tp = TopicPartition { topic_id: id, partition: 0 };
        let t = Instant::now();
        let mut done = 0;
        while done < n {
            let k = (n - done).min(64);
            let ts = b.now;
            b.commit((0..k).map(|_| batch(tp, ts)).collect());
            done += k;
            if done % 1_000_000 < 64 && n >= 1_000_000 {
                eprintln!("  filling: {done} / {n} batches ({:.0} s)", t.elapsed().as_secs_f64());
            }
        }
        tp
    };
    let shallow = fill(&mut b, shallow_topic, 10_000);
    let deep = fill(&mut b, deep_topic, a.deep);
    b.db.flush().expect("flush");

    let measure = |b: &Bench, tp: TopicPartition, depth: i64, rng: &mut fastrand::Rng| {
        let hwm = depth * 10;
        let mut find = Histogram::<u64>::new(3).unwrap();
        let mut lookup = Histogram::<u64>::new(3).unwrap();
        for _ in 0..20_000 {
            let offset = (rng.u64(..) % hwm as u64) as i64;
            let view = b.db.read();
            let t = Instant::now();
            let mut budget = FetchBudget::new(i32::MAX, 10);
            let r = b.sm.find_batches(&view, &tp, offset, i32::MAX, &mut budget, false).unwrap();
            find.record(t.elapsed().as_nanos() as u64).unwrap();
            assert!(!r.batches.is_empty());
            let t = Instant::now();
            let r = b.sm.list_offsets(&view, &tp, (rng.u64(..) % 1_000) as i64, false).unwrap();
            lookup.record(t.elapsed().as_nanos() as u64).unwrap();
            assert!(r.is_ok());
        }
        (find, lookup)
    };
    let (f10k, l10k) = measure(&b, shallow, 10_000, &mut rng);
    let (fdeep, ldeep) = measure(&b, deep, a.deep, &mut rng);
    report("FindBatches (10 batches), 10k deep", &f10k);
    report(&format!("FindBatches (10 batches), {} deep", a.deep), &fdeep);
    println!(
        "{:<44} p50 ratio deep/10k = {:.2}, p99 ratio = {:.2}",
        "",
        fdeep.value_at_quantile(0.5) as f64 / f10k.value_at_quantile(0.5) as f64,
        fdeep.value_at_quantile(0.99) as f64 / f10k.value_at_quantile(0.99) as f64
    );
    report("ListOffsets by time, 10k deep", &l10k);
    report(&format!("ListOffsets by time, {} deep", a.deep), &ldeep);
    println!(
        "{:<44} p50 ratio deep/10k = {:.2}",
        "",
        ldeep.value_at_quantile(0.5) as f64 / l10k.value_at_quantile(0.5) as f64
    );
}
