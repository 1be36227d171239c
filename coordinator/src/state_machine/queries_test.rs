use super::command::{ErrorCode, TIMESTAMP_LOG_APPEND_TIME};
use super::fixture::*;
use super::queries::FetchBudget;

fn at(t: super::TopicPartition, records: i64, ts: i64) -> super::CommitBatch {
    let mut b = batch(t, records);
    b.batch_max_timestamp = ts;
    b
}

#[test]
fn special_timestamps() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    for ts in [50, 70, 60] {
        f.commit_one(at(t, 2, ts)).unwrap();
    }
    f.delete_records(t, 1, 100).unwrap();
    let lo = |ts| f.list_offsets(t, ts).map(|o| (o.offset, o.timestamp));
    assert_eq!(lo(-2), Ok((1, -1)));
    assert_eq!(lo(-4), Ok((1, -1)));
    assert_eq!(lo(-1), Ok((6, -1)));
    assert_eq!(lo(-5), Ok((-1, -1)));
    assert_eq!(lo(-3), Ok((2, 70)));
    assert_eq!(code(&lo(-6)), ErrorCode::InvalidRequest);
    assert_eq!(code(&f.list_offsets(tp(1, 1), -1)), ErrorCode::UnknownTopicOrPartition);
}

#[test]
fn time_lookup_finds_the_first_batch_at_or_after_the_time_never_below_log_start() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    for ts in [50, 70, 60, 80] {
        f.commit_one(at(t, 2, ts)).unwrap();
    }
    let lo = |f: &Fixture, ts| f.list_offsets(t, ts).map(|o| (o.offset, o.timestamp)).unwrap();
    assert_eq!(lo(&f, 0), (0, 50));
    assert_eq!(lo(&f, 55), (2, 70), "the first batch whose timestamp reaches 55, not the closest");
    assert_eq!(lo(&f, 61), (2, 70));
    assert_eq!(lo(&f, 75), (6, 80));
    assert_eq!(lo(&f, 81), (-1, -1));
    f.delete_records(t, 3, 100).unwrap();
    assert_eq!(lo(&f, 0), (3, 70), "clamped to the log start inside a batch");
    assert_eq!(lo(&f, 71), (6, 80));
}

#[test]
fn max_timestamp_ignores_deleted_batches_and_prefers_the_earliest_on_ties() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    for ts in [90, 10, 40, 40, 20] {
        f.commit_one(at(t, 1, ts)).unwrap();
    }
    assert_eq!(f.list_offsets(t, -3).unwrap().offset, 0);
    f.delete_records(t, 1, 100).unwrap();
    let m = f.list_offsets(t, -3).unwrap();
    assert_eq!((m.offset, m.timestamp), (2, 40));
    f.delete_records(t, 5, 100).unwrap();
    assert_eq!(f.list_offsets(t, -3).unwrap().offset, -1, "empty partition");
}

/// Compares the index's answers with a plain scan, deep enough to close chunks on two levels, with
/// random timestamps and deletions cutting through chunks.
#[test]
fn time_index_agrees_with_a_scan_across_chunk_levels() {
    use rand_free::Lcg;
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    let fanout = i64::from(super::time_index::FANOUT);
    let n = fanout * fanout * 2 + 77;
    let mut rng = Lcg(7);
    let mut all = vec![]; // (base, last, effective ts)
    let mut hwm = 0;
    while (all.len() as i64) < n {
        let mut batches = vec![];
        for _ in 0..64 {
            let records = 1 + (rng.next() % 3) as i64;
            let mut b = at(t, records, (rng.next() % 1_000_000) as i64);
            if rng.next().is_multiple_of(5) {
                b.timestamp_type = TIMESTAMP_LOG_APPEND_TIME;
            }
            batches.push(b);
        }
        f.now += 10;
        for (b, r) in batches.iter().zip(f.commit(batches.clone()).1) {
            let r = r.unwrap();
            let eff = if b.timestamp_type == TIMESTAMP_LOG_APPEND_TIME { f.now } else { b.batch_max_timestamp };
            all.push((r.assigned_base_offset, r.assigned_base_offset + b.last_offset, eff));
            hwm = r.assigned_base_offset + b.last_offset + 1;
        }
    }
    let check = |f: &Fixture, rng: &mut Lcg, lso: i64| {
        let live: Vec<_> = all.iter().filter(|b| b.1 >= lso).collect();
        for _ in 0..40 {
            let ts = (rng.next() % 1_100_000) as i64;
            let want = live.iter().find(|b| b.2 >= ts).map_or((-1, -1), |b| (b.0.max(lso), b.2));
            let got = f.list_offsets(t, ts).unwrap();
            assert_eq!((got.offset, got.timestamp), want, "ts {ts} lso {lso}");
        }
        let best = live.iter().fold(None::<&&(i64, i64, i64)>, |m, b| match m {
            Some(m) if m.2 >= b.2 => Some(m),
            _ => Some(b),
        });
        let got = f.list_offsets(t, -3).unwrap();
        assert_eq!((got.offset, got.timestamp), best.map_or((-1, -1), |b| (b.0.max(lso), b.2)), "max, lso {lso}");
    };
    check(&f, &mut rng, 0);
    for cut in [1, fanout * 3 + 5, fanout * fanout + 10, hwm / 2, hwm - 3, hwm] {
        f.delete_records(t, cut, 1_000_000).unwrap();
        check(&f, &mut rng, cut);
    }
}

mod rand_free {
    /// A tiny deterministic generator, so the test needs no dependency and replays exactly.
    pub struct Lcg(pub u64);
    impl Lcg {
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }
}

fn sized(t: super::TopicPartition, size: i32) -> super::CommitBatch {
    let mut b = batch(t, 1);
    b.size = size;
    b
}

#[test]
fn find_batches_starts_at_the_batch_holding_the_offset() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    for _ in 0..4 {
        f.commit_one(batch(t, 10)).unwrap();
    }
    let r = f.find(t, 25, i32::MAX);
    assert_eq!(r.error, None);
    assert_eq!((r.log_start_offset, r.high_watermark), (0, 40));
    assert_eq!(r.batches.iter().map(|b| b.base_offset).collect::<Vec<_>>(), [20, 30]);
    assert!(f.find(t, 40, i32::MAX).batches.is_empty(), "at the high watermark: nothing yet");
    let out = f.find(t, 41, i32::MAX);
    assert_eq!(out.error.unwrap().code, ErrorCode::OffsetOutOfRange);
    assert_eq!((out.log_start_offset, out.high_watermark), (0, 40));
    let unknown = f.find(tp(2, 0), 0, 100);
    assert_eq!(unknown.error.unwrap().code, ErrorCode::UnknownTopicOrPartition);
    assert_eq!((unknown.log_start_offset, unknown.high_watermark), (-1, -1));
}

#[test]
fn find_batches_respects_byte_and_count_limits_with_min_one() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    for p in 0..2 {
        for _ in 0..5 {
            f.commit_one(sized(tp(1, p), 100)).unwrap();
        }
    }
    let view = f.db.read();
    let find = |budget: &mut FetchBudget, p, max_bytes| {
        f.sm.find_batches(&view, &tp(1, p), 0, max_bytes, budget, false).unwrap().batches.len()
    };
    // Partition limit.
    assert_eq!(find(&mut FetchBudget::new(10_000, 0), 0, 250), 2);
    // Min one: the first partition gets a batch bigger than its limit...
    let mut b = FetchBudget::new(10_000, 0);
    assert_eq!(find(&mut b, 0, 50), 1);
    // ...but the next partition does not.
    assert_eq!(find(&mut b, 1, 50), 0);
    // The request's limit is shared.
    let mut b = FetchBudget::new(350, 0);
    assert_eq!(find(&mut b, 0, 1_000), 3);
    assert_eq!(find(&mut b, 1, 1_000), 0);
    // Even a zero total gets one batch.
    assert_eq!(find(&mut FetchBudget::new(0, 0), 0, 1_000), 1);
    // Batch count per partition.
    let mut b = FetchBudget::new(10_000, 2);
    assert_eq!(find(&mut b, 0, 10_000), 2);
    assert_eq!(find(&mut b, 1, 10_000), 2);
    assert_eq!(f.find(tp(1, 0), 0, -1).error.unwrap().code, ErrorCode::InvalidRequest);
}

#[test]
fn describe_partition_counts_batches_and_bytes_from_the_log_start() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    for _ in 0..3 {
        f.commit_one(batch(t, 2)).unwrap();
    }
    let d = |f: &Fixture, t| f.sm.describe_partition(&f.db.read(), &t).expect("read");
    let figures = d(&f, t).unwrap();
    assert_eq!((figures.log_start_offset, figures.high_watermark, figures.byte_size, figures.batches), (0, 6, 300, 3));
    // Offset 3 cuts batch 0–1 off wholly and keeps batch 2–3 (it holds offset 3).
    f.delete_records(t, 3, 0).unwrap();
    let figures = d(&f, t).unwrap();
    assert_eq!((figures.log_start_offset, figures.batches), (3, 2));
    f.delete_records(t, 3, 100).unwrap();
    assert_eq!(d(&f, t).unwrap().byte_size, 200);
    assert_eq!(d(&f, tp(1, 1)).map_err(|e| e.code), Err(ErrorCode::UnknownTopicOrPartition));
}
