//! The segmented log against a plain model, across reopenings, torn tails and damage.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;

use super::*;

const SEG: u64 = 1 << 20;

/// What a group's log should hold: index → bytes, and its purge point.
#[derive(Debug, Default, Clone, PartialEq)]
struct Model {
    groups: BTreeMap<u32, BTreeMap<u64, Vec<u8>>>,
}

impl Model {
    fn append(&mut self, g: u32, entries: &[(u64, Vec<u8>)]) {
        let log = self.groups.entry(g).or_default();
        for (i, b) in entries {
            let contiguous = log.last_key_value().is_some_and(|(&l, _)| *i <= l + 1)
                && log.first_key_value().is_some_and(|(&f, _)| *i >= f);
            if contiguous {
                log.split_off(i);
            } else {
                log.clear();
            }
            log.insert(*i, b.clone());
        }
    }
    fn truncate(&mut self, g: u32, from: u64) {
        if let Some(log) = self.groups.get_mut(&g) {
            log.split_off(&from);
        }
    }
    fn purge(&mut self, g: u32, upto: u64) {
        if let Some(log) = self.groups.get_mut(&g) {
            *log = log.split_off(&(upto + 1));
        }
    }
}

fn payload(g: u32, i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (g as u64 * 31 + i * 7 + k as u64) as u8).collect()
}

/// Everything the log holds, read back through its API.
fn contents(log: &SegLog) -> BTreeMap<u32, BTreeMap<u64, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for g in log.groups() {
        if let Some((first, last)) = log.bounds(g) {
            let (start, entries) = log.read(g, first, last + 1).unwrap();
            assert_eq!(start, first);
            let m: BTreeMap<u64, Vec<u8>> =
                entries.into_iter().enumerate().map(|(k, b)| (first + k as u64, b)).collect();
            out.insert(g, m);
        }
    }
    out
}

fn model_contents(m: &Model) -> BTreeMap<u32, BTreeMap<u64, Vec<u8>>> {
    m.groups.iter().filter(|(_, l)| !l.is_empty()).map(|(g, l)| (*g, l.clone())).collect()
}

/// Reopens the log and tells it the purge points, as the node does at start.
fn reopen(dir: &Path, purged: &BTreeMap<u32, u64>) -> SegLog {
    let log = SegLog::open(dir, SEG).unwrap();
    for (&g, &p) in purged {
        log.purge(g, p).unwrap();
    }
    log
}

#[derive(Debug, Clone)]
enum Op {
    Append { g: u32, n: u64, len: usize, back: u64 },
    Truncate { g: u32, back: u64 },
    Purge { g: u32, keep: u64 },
    Drop { g: u32 },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u32..4, 1u64..20, 0usize..40_000, 0u64..3).prop_map(|(g, n, len, back)| Op::Append { g, n, len, back }),
        1 => (0u32..4, 0u64..5).prop_map(|(g, back)| Op::Truncate { g, back }),
        2 => (0u32..4, 0u64..10).prop_map(|(g, keep)| Op::Purge { g, keep }),
        1 => (0u32..4).prop_map(|g| Op::Drop { g }),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random appends (with overwrites), truncations, purges, drops and reopenings: the log reads
    /// back as the model says, and its segments stay bounded (old ones collected, idle groups
    /// relocated).
    #[test]
    fn the_log_matches_a_model_across_reopenings(ops in proptest::collection::vec(op(), 1..120)) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let mut log = SegLog::open(&dir, SEG).unwrap();
        let mut model = Model::default();
        let mut purged: BTreeMap<u32, u64> = BTreeMap::new();
        let live = |m: &Model| -> u64 { m.groups.values().flat_map(|l| l.values()).map(|b| b.len() as u64 + 64).sum() };
        let mut most_live = 0;
        for op in ops {
            match op {
                Op::Append { g, n, len, back } => {
                    let next = model.groups.get(&g).and_then(|l| l.last_key_value()).map_or(
                        purged.get(&g).map_or(1, |p| p + 1),
                        |(&l, _)| l + 1,
                    );
                    let from = next.saturating_sub(back).max(purged.get(&g).map_or(1, |p| p + 1));
                    let entries: Vec<(u64, Vec<u8>)> = (from..from + n).map(|i| (i, payload(g, i, len))).collect();
                    log.append(g, &entries).unwrap();
                    model.append(g, &entries);
                }
                Op::Truncate { g, back } => {
                    if let Some((&last, _)) = model.groups.get(&g).and_then(|l| l.last_key_value()) {
                        let from = last.saturating_sub(back).max(1);
                        log.truncate(g, from).unwrap();
                        model.truncate(g, from);
                    }
                }
                Op::Purge { g, keep } => {
                    if let Some((&last, _)) = model.groups.get(&g).and_then(|l| l.last_key_value()) {
                        let upto = last.saturating_sub(keep);
                        if upto > 0 && purged.get(&g).is_none_or(|&p| upto > p) {
                            purged.insert(g, upto);
                            log.purge(g, upto).unwrap();
                            model.purge(g, upto);
                        }
                    }
                }
                Op::Drop { g } => {
                    log.drop_group(g).unwrap();
                    model.groups.remove(&g);
                    purged.remove(&g);
                }
                Op::Reopen => {
                    log.sync().unwrap();
                    drop(log);
                    log = reopen(&dir, &purged);
                }
            }
            prop_assert_eq!(contents(&log), model_contents(&model));
            most_live = most_live.max(live(&model));
            // Segments are added only at a switch, which relocates or collects when the log holds
            // more than twice what is live.
            let f = log.figures();
            prop_assert!(f.segments <= 2 * most_live / SEG + 4, "{} segments for at most {} live bytes", f.segments, most_live);
        }
        log.sync().unwrap();
        drop(log);
        let log = reopen(&dir, &purged);
        prop_assert_eq!(contents(&log), model_contents(&model));
    }
}

/// The current segment and the offset where its synced records end.
fn position(log: &SegLog) -> (u64, u64) {
    let inner = log.lock();
    (inner.current, inner.offset)
}

/// Damage: `bytes` written over segment `seq` of `dir` at `at`.
fn overwrite(dir: &Path, seq: u64, at: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(segment::path(dir, seq)).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

/// Appends `n` entries of group 0 from `from`; returns them.
fn fill(log: &SegLog, from: u64, n: u64, len: usize) -> Vec<(u64, Vec<u8>)> {
    let entries: Vec<(u64, Vec<u8>)> = (from..from + n).map(|i| (i, payload(0, i, len))).collect();
    log.append(0, &entries).unwrap();
    entries
}

/// Whatever happens to the bytes written after the last sync (cut anywhere, garbled anywhere),
/// the log reopens with every synced entry and a gap-free prefix of the rest; and entries written
/// after that reopening never revive records of the damaged tail.
#[test]
fn a_torn_tail_loses_only_unsynced_entries_and_never_revives_them() {
    for damage in 0..40u64 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let log = SegLog::open(&dir, SEG).unwrap();
        fill(&log, 1, 10, 3_000);
        log.sync().unwrap();
        let (seq, synced_end) = position(&log);
        fill(&log, 11, 10, 3_000);
        let (seq2, end) = position(&log);
        assert_eq!(seq, seq2);
        drop(log);
        // The damage: a cut (zeros from a point on) or a garbled byte, somewhere in the tail.
        let at = synced_end + (end - synced_end) * damage / 40;
        if damage % 2 == 0 {
            overwrite(&dir, seq, at, &vec![0u8; (end - at) as usize]);
        } else {
            overwrite(&dir, seq, at + 9, &[0x5a]);
        }
        let log = SegLog::open(&dir, SEG).unwrap();
        let (first, last) = log.bounds(0).unwrap();
        assert_eq!(first, 1);
        assert!((10..=20).contains(&last), "damage {damage}: last {last}");
        if damage % 2 == 1 {
            // The bytes that were zeroed are kept aside.
            let kept =
                std::fs::read_dir(&dir).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".torn"));
            assert!(kept, "damage {damage}: no .torn file");
        }
        let (_, got) = log.read(0, 1, last + 1).unwrap();
        for (k, b) in got.iter().enumerate() {
            assert_eq!(b, &payload(0, 1 + k as u64, 3_000));
        }
        // New entries overwrite nothing of the old tail, and a third opening sees exactly them.
        let fresh: Vec<(u64, Vec<u8>)> = (last + 1..last + 4).map(|i| (i, vec![i as u8; 3_000])).collect();
        log.append(0, &fresh).unwrap();
        log.sync().unwrap();
        drop(log);
        let log = SegLog::open(&dir, SEG).unwrap();
        assert_eq!(log.bounds(0), Some((1, last + 3)));
        let (_, tail) = log.read(0, last + 1, last + 4).unwrap();
        assert_eq!(tail, fresh.into_iter().map(|(_, b)| b).collect::<Vec<_>>());
    }
}

/// Damage before a seal is not a torn tail: the log refuses to open, naming the segment.
#[test]
fn damage_in_a_sealed_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = SegLog::open(&dir, SEG).unwrap();
    fill(&log, 1, 40, 30_000);
    log.sync().unwrap();
    let (current, _) = position(&log);
    assert!(current >= 2);
    drop(log);
    let sealed = current - 1;
    overwrite(&dir, sealed, segment::FIRST + 30, &[0xff]);
    let e = SegLog::open(&dir, SEG).unwrap_err();
    assert!(format!("{e:#}").contains("corrupt"), "{e:#}");
    assert!(format!("{e:#}").contains(&format!("{sealed:016x}")), "{e:#}");
}

/// A segment missing from the middle is refused, not read around.
#[test]
fn a_missing_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = SegLog::open(&dir, SEG).unwrap();
    fill(&log, 1, 100, 30_000);
    let f = log.figures();
    assert!(f.segments >= 3, "{f:?}");
    log.sync().unwrap();
    let (current, _) = position(&log);
    drop(log);
    std::fs::remove_file(segment::path(&dir, current - 1)).unwrap();
    let e = SegLog::open(&dir, SEG).unwrap_err();
    assert!(format!("{e:#}").contains("missing segments"), "{e:#}");
}

/// A group that stops writing does not pin the log: while another writes and purges, the idle
/// group's entries are written again at the head and old segments go.
#[test]
fn an_idle_group_does_not_pin_old_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = SegLog::open(&dir, SEG).unwrap();
    let idle: Vec<(u64, Vec<u8>)> = (1..=5).map(|i| (i, payload(9, i, 500))).collect();
    log.append(9, &idle).unwrap();
    let mut next = 1;
    for _ in 0..200 {
        let entries: Vec<(u64, Vec<u8>)> = (next..next + 10).map(|i| (i, payload(1, i, 20_000))).collect();
        log.append(1, &entries).unwrap();
        next += 10;
        log.purge(1, next - 5).unwrap();
    }
    let f = log.figures();
    assert!(f.segments <= 4, "{f:?}");
    assert!(f.relocated_entries >= 5, "{f:?}");
    log.sync().unwrap();
    drop(log);
    let log = reopen(&dir, &BTreeMap::from([(1, next - 5)]));
    assert_eq!(log.read(9, 1, 6).unwrap(), (1, idle.into_iter().map(|(_, b)| b).collect()));
    assert_eq!(log.bounds(1), Some((next - 4, next - 1)));
}

/// A crash right after switching to a new segment (its header never synced, so nothing in it
/// was acknowledged) keeps everything of the sealed one.
#[test]
fn a_blank_last_segment_is_dropped_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = SegLog::open(&dir, SEG).unwrap();
    fill(&log, 1, 40, 30_000);
    let (current, _) = position(&log);
    assert!(current >= 2);
    drop(log);
    overwrite(&dir, current, 0, &[0u8; 64]);
    let log = SegLog::open(&dir, SEG).unwrap();
    // Its records (behind the blank header) are kept aside as evidence, not deleted.
    let aside = dir.join(format!("{current:016x}.blank-header"));
    assert!(std::fs::metadata(&aside).is_ok_and(|m| m.len() > 0), "{} kept", aside.display());
    let (first, last) = log.bounds(0).unwrap();
    assert_eq!(first, 1);
    assert!((20..40).contains(&last), "{last}");
    let (_, got) = log.read(0, 1, last + 1).unwrap();
    assert!(got.iter().enumerate().all(|(k, b)| b == &payload(0, 1 + k as u64, 30_000)));
    // Writing goes on in a new segment of that number.
    fill(&log, last + 1, 2, 10);
    log.sync().unwrap();
    drop(log);
    assert_eq!(SegLog::open(&dir, SEG).unwrap().bounds(0), Some((1, last + 2)));
}

/// A copy (a replica move) reproduces the source's log, whole or from a changed index on.
#[test]
fn copying_a_group_reproduces_its_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (SegLog::open(&tmp.path().join("a"), SEG).unwrap(), SegLog::open(&tmp.path().join("b"), SEG).unwrap());
    let entries: Vec<(u64, Vec<u8>)> = (1..=50).map(|i| (i, payload(3, i, 700))).collect();
    a.append(3, &entries).unwrap();
    b.append(3, &[(1, b"stale".to_vec())]).unwrap();
    copy_group(&a, &b, 3, None, &mut |_| true).unwrap();
    assert_eq!(b.read(3, 1, 51).unwrap(), a.read(3, 1, 51).unwrap());
    // Changes at the source: a truncation at 40 and new entries, and a purge.
    a.truncate(3, 40).unwrap();
    let more: Vec<(u64, Vec<u8>)> = (40..=45).map(|i| (i, vec![i as u8; 10])).collect();
    a.append(3, &more).unwrap();
    a.purge(3, 10).unwrap();
    copy_group(&a, &b, 3, Some(40), &mut |_| true).unwrap();
    assert_eq!(b.bounds(3), Some((11, 45)));
    assert_eq!(b.read(3, 11, 46).unwrap(), a.read(3, 11, 46).unwrap());
    b.sync().unwrap();
    drop(b);
    let b = reopen(&tmp.path().join("b"), &BTreeMap::from([(3, 10)]));
    assert_eq!(b.read(3, 11, 46).unwrap(), a.read(3, 11, 46).unwrap());
}

/// A purge at the source while a copy runs (a snapshot taken mid-move) moves the copy on to the
/// source's new first entry: the copy never has a hole.
#[test]
fn a_purge_during_a_copy_leaves_no_hole() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (SegLog::open(&tmp.path().join("a"), SEG).unwrap(), SegLog::open(&tmp.path().join("b"), SEG).unwrap());
    let entries: Vec<(u64, Vec<u8>)> = (1..=2_000).map(|i| (i, payload(4, i, 100))).collect();
    a.append(4, &entries).unwrap();
    let mut chunks = 0;
    copy_group(&a, &b, 4, None, &mut |_| {
        chunks += 1;
        if chunks == 1 {
            // Far past the next chunk.
            a.purge(4, 1_500).unwrap();
        }
        true
    })
    .unwrap();
    assert_eq!(b.bounds(4), Some((1_501, 2_000)));
    assert_eq!(b.read(4, 1_501, 2_001).unwrap(), a.read(4, 1_501, 2_001).unwrap());
    assert_eq!(b.purged(4), Some(1_500));
}
