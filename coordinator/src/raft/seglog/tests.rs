//! The segmented log against a plain model, across reopenings, torn tails and damage.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;

use super::*;
use crate::raft::snapshot::tests::{damage, flip};

const SEG: u64 = 1 << 20;

/// What a metadata partition's log should hold: index → bytes, and its purge point.
#[derive(Debug, Default, Clone, PartialEq)]
struct Model {
    partitions: BTreeMap<u32, BTreeMap<u64, Vec<u8>>>,
}

impl Model {
    fn append(&mut self, g: u32, entries: &[(u64, Vec<u8>)]) {
        let log = self.partitions.entry(g).or_default();
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
        if let Some(log) = self.partitions.get_mut(&g) {
            log.split_off(&from);
        }
    }
    fn purge(&mut self, g: u32, upto: u64) {
        if let Some(log) = self.partitions.get_mut(&g) {
            *log = log.split_off(&(upto + 1));
        }
    }
}

fn payload(g: u32, i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (g as u64 * 31).wrapping_add(i.wrapping_mul(7)).wrapping_add(k as u64) as u8).collect()
}

/// Everything the log holds, read back through its API.
fn contents(log: &SegLog) -> BTreeMap<u32, BTreeMap<u64, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for g in log.partitions() {
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
    m.partitions.iter().filter(|(_, l)| !l.is_empty()).map(|(g, l)| (*g, l.clone())).collect()
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
    /// back as the model says, and its segments stay bounded (old ones collected, idle metadata
    /// partitions relocated).
    #[test]
    fn the_log_matches_a_model_across_reopenings(ops in proptest::collection::vec(op(), 1..120)) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let mut log = SegLog::open(&dir, SEG).unwrap();
        let mut model = Model::default();
        let mut purged: BTreeMap<u32, u64> = BTreeMap::new();
        let live = |m: &Model| -> u64 { m.partitions.values().flat_map(|l| l.values()).map(|b| b.len() as u64 + 64).sum() };
        let mut most_live = 0;
        for op in ops {
            match op {
                Op::Append { g, n, len, back } => {
                    let next = model.partitions.get(&g).and_then(|l| l.last_key_value()).map_or(
                        purged.get(&g).map_or(1, |p| p + 1),
                        |(&l, _)| l + 1,
                    );
                    let from = next.saturating_sub(back).max(purged.get(&g).map_or(1, |p| p + 1));
                    let entries: Vec<(u64, Vec<u8>)> = (from..from + n).map(|i| (i, payload(g, i, len))).collect();
                    log.append(g, &entries).unwrap();
                    model.append(g, &entries);
                }
                Op::Truncate { g, back } => {
                    if let Some((&last, _)) = model.partitions.get(&g).and_then(|l| l.last_key_value()) {
                        let from = last.saturating_sub(back).max(1);
                        log.truncate(g, from).unwrap();
                        model.truncate(g, from);
                    }
                }
                Op::Purge { g, keep } => {
                    if let Some((&last, _)) = model.partitions.get(&g).and_then(|l| l.last_key_value()) {
                        let upto = last.saturating_sub(keep);
                        if upto > 0 && purged.get(&g).is_none_or(|&p| upto > p) {
                            purged.insert(g, upto);
                            log.purge(g, upto).unwrap();
                            model.purge(g, upto);
                        }
                    }
                }
                Op::Drop { g } => {
                    log.drop_partition(g).unwrap();
                    model.partitions.remove(&g);
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

/// Appends `n` entries of metadata partition 0 from `from`; returns them.
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

/// A metadata partition that stops writing does not pin the log: while another writes and purges,
/// the idle metadata partition's entries are written again at the head and old segments go.
#[test]
fn an_idle_partition_does_not_pin_old_segments() {
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
fn copying_a_partition_reproduces_its_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (SegLog::open(&tmp.path().join("a"), SEG).unwrap(), SegLog::open(&tmp.path().join("b"), SEG).unwrap());
    let entries: Vec<(u64, Vec<u8>)> = (1..=50).map(|i| (i, payload(3, i, 700))).collect();
    a.append(3, &entries).unwrap();
    b.append(3, &[(1, b"stale".to_vec())]).unwrap();
    copy_partition(&a, &b, 3, None, &mut |_| true).unwrap();
    assert_eq!(b.read(3, 1, 51).unwrap(), a.read(3, 1, 51).unwrap());
    // Changes at the source: a truncation at 40 and new entries, and a purge.
    a.truncate(3, 40).unwrap();
    let more: Vec<(u64, Vec<u8>)> = (40..=45).map(|i| (i, vec![i as u8; 10])).collect();
    a.append(3, &more).unwrap();
    a.purge(3, 10).unwrap();
    copy_partition(&a, &b, 3, Some(40), &mut |_| true).unwrap();
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
    copy_partition(&a, &b, 4, None, &mut |_| {
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

/// Segment `seq` made by hand: its header, then `records` (metadata partition 0's entries at these
/// indexes, or anything else) from `FIRST` on, then a seal when `sealed`, then `pad` zeros.
fn handmade(seq: u64, records: &[(Kind, u32, u64)], sealed: bool, pad: usize) -> Vec<u8> {
    let mut b = segment::header(seq).to_vec();
    b.resize(segment::FIRST as usize, 0);
    for &(kind, g, i) in records {
        let p = if kind == Kind::Entry { payload(g, i, 10) } else { vec![] };
        record::encode(&mut b, kind, g, i, &p);
    }
    if sealed {
        record::encode(&mut b, Kind::Seal, 0, 0, &[]);
    }
    b.resize(b.len() + pad, 0);
    b
}

/// A log of two handmade segments: 1 (sealed, entries 1 and 2 of metadata partition 0 and 1 of
/// metadata partition 5) and 2 (the last one: entries 3 to 5 of metadata partition 0). Returns the
/// directory and both files' bytes.
fn two_segments(tmp: &Path) -> (PathBuf, Vec<u8>, Vec<u8>) {
    let dir = tmp.join("log");
    std::fs::create_dir_all(&dir).unwrap();
    let e = |g, i| (Kind::Entry, g, i);
    let one = handmade(1, &[e(0, 1), e(0, 2), e(5, 1)], true, 0);
    let two = handmade(2, &[e(0, 3), e(0, 4), e(0, 5)], false, 64);
    std::fs::write(segment::path(&dir, 1), &one).unwrap();
    std::fs::write(segment::path(&dir, 2), &two).unwrap();
    let log = SegLog::open_read_only(&dir).unwrap();
    assert_eq!((log.bounds(0), log.bounds(5)), (Some((1, 5)), Some((1, 1))));
    (dir, one, two)
}

/// Opening `dir` fails, naming segment `seq`'s file and an offset.
fn refused_naming(dir: &Path, seq: u64, what: &str) -> String {
    let e = SegLog::open_read_only(dir).err().unwrap_or_else(|| panic!("{what}: the log opened"));
    let m = format!("{e:#}");
    let file = segment::path(dir, seq).display().to_string();
    assert!(m.contains(&file) && m.contains("offset"), "{what}: {m}");
    m
}

/// Metadata partition 0's entries read back are those written, from 1 on.
fn reads_back_partition_0(log: &SegLog, what: &str) -> u64 {
    let (first, last) = log.bounds(0).unwrap_or_else(|| panic!("{what}: no entries"));
    assert_eq!(first, 1, "{what}");
    let (_, got) = log.read(0, 1, last + 1).unwrap();
    for (k, b) in got.iter().enumerate() {
        assert_eq!(b, &payload(0, 1 + k as u64, 10), "{what}: entry {}", 1 + k);
    }
    last
}

/// Every record before a seal must check out: a sealed segment cut anywhere, a byte of it
/// flipped anywhere it is read, or a length field of any size is an error naming the file and
/// the offset (never a panic); damage in the unread padding between header and records is none.
#[test]
fn a_sealed_segment_with_any_byte_damaged_or_cut_is_an_error_naming_its_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, one, _) = two_segments(tmp.path());
    let path = segment::path(&dir, 1);
    for cut in 0..one.len() {
        std::fs::write(&path, &one[..cut]).unwrap();
        refused_naming(&dir, 1, &format!("cut at {cut}"));
    }
    let mut rng = damage(0x9e37_79b9_7f4a_7c15);
    for _ in 0..300 {
        let (at, mask) = flip(&mut rng, one.len());
        let mut bad = one.clone();
        bad[at] ^= mask;
        std::fs::write(&path, &bad).unwrap();
        let what = format!("byte {at} ^ {mask:#04x}");
        if (20..segment::FIRST as usize).contains(&at) {
            let log = SegLog::open_read_only(&dir).unwrap_or_else(|e| panic!("{what}: {e:#}"));
            assert_eq!(reads_back_partition_0(&log, &what), 5, "{what}");
        } else {
            refused_naming(&dir, 1, &what);
        }
    }
    let first = segment::FIRST as usize;
    for len in [0u32, 5, 12, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff] {
        let mut bad = one.clone();
        bad[first..first + 4].copy_from_slice(&len.to_le_bytes());
        std::fs::write(&path, &bad).unwrap();
        let m = refused_naming(&dir, 1, &format!("length {len:#x}"));
        assert!(m.contains(&format!("offset {first}")), "length {len:#x}: {m}");
    }
}

/// The last segment's damage is a torn tail: cut or flipped anywhere past its header, the log
/// opens with a gap-free prefix of its entries, each as written; a damaged header is an error
/// naming the file and the offset.
#[test]
fn the_last_segment_damaged_anywhere_opens_to_a_prefix_of_its_entries_or_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _, two) = two_segments(tmp.path());
    let path = segment::path(&dir, 2);
    let mut rng = damage(0x2545_f491_4f6c_dd1d);
    let cuts = (0..two.len()).map(|cut| (two[..cut].to_vec(), format!("cut at {cut}")));
    let flips = (0..300).map(|_| {
        let (at, mask) = flip(&mut rng, two.len());
        let mut bad = two.clone();
        bad[at] ^= mask;
        (bad, format!("byte {at} ^ {mask:#04x}"))
    });
    for (bytes, what) in cuts.chain(flips.collect::<Vec<_>>()) {
        std::fs::write(&path, &bytes).unwrap();
        let header_intact = bytes.get(..20) == Some(&two[..20]);
        match SegLog::open_read_only(&dir) {
            Ok(log) => {
                assert!(header_intact, "{what}: opened with a damaged header");
                let last = reads_back_partition_0(&log, &what);
                assert!((2..=5).contains(&last), "{what}: last {last}");
            }
            Err(_) => {
                assert!(!header_intact, "{what}: refused with its header intact");
                refused_naming(&dir, 2, &what);
            }
        }
    }
}

/// An entry at the last index (with a good checksum: forged, not torn) would overflow the index
/// arithmetic when replayed: before a seal it is an error naming the file and the offset; in the
/// last segment it ends the log there. A segment numbered `u64::MAX` is refused.
#[test]
fn an_entry_at_the_last_index_or_a_segment_numbered_past_any_log_is_refused_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _, _) = two_segments(tmp.path());
    let e = |g, i| (Kind::Entry, g, i);
    let forged = handmade(1, &[e(0, 1), e(0, u64::MAX)], true, 0);
    std::fs::write(segment::path(&dir, 1), &forged).unwrap();
    let m = refused_naming(&dir, 1, "an entry at u64::MAX before a seal");
    assert!(m.contains("past any log"), "{m}");

    std::fs::write(segment::path(&dir, 1), handmade(1, &[e(0, 1), e(0, 2)], true, 0)).unwrap();
    std::fs::write(segment::path(&dir, 2), handmade(2, &[e(0, 3), e(0, u64::MAX), e(0, 4)], false, 0)).unwrap();
    let log = SegLog::open_read_only(&dir).unwrap();
    assert_eq!(reads_back_partition_0(&log, "an entry at u64::MAX in the last segment"), 3);
    drop(log);

    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(segment::path(&other, u64::MAX), handmade(u64::MAX, &[e(0, 1)], false, 0)).unwrap();
    let e = SegLog::open_read_only(&other).unwrap_err();
    assert!(format!("{e:#}").contains("ffffffffffffffff.seg"), "{e:#}");
}
