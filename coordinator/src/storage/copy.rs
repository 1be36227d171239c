//! Copying key ranges from one data directory's RocksDB to another's, as a difference.
//!
//! Owns: [`sync_ranges`], which makes the destination's keys in the given ranges equal to the
//! source's as of one consistent source snapshot — puts for keys that are new or differ, deletes
//! for keys the source no longer has — in bounded unsynced batches, calling a pacing callback
//! after each (throttle, cancellation, progress). Run once on an empty destination it is a full
//! copy; run again later it transfers only what changed since, so a replica move converges by
//! repeating it. It must not decide what a range means (that is the caller's) nor fsync: the
//! caller makes the destination durable when it needs to.

use rocksdb::{IteratorMode, ReadOptions, WriteBatch};

use super::{Db, Family, StorageError};

/// Bytes of puts per destination batch.
const BATCH_BYTES: usize = 1 << 20;

/// What one pass changed in the destination.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncStats {
    /// Bytes of keys and values put.
    pub bytes: u64,
    pub puts: u64,
    pub deletes: u64,
}

impl SyncStats {
    pub fn changed(&self) -> u64 {
        self.puts + self.deletes
    }
}

/// A key range `[from, to)` of one column family.
#[derive(Debug, Clone)]
pub struct Range {
    pub family: Family,
    pub from: Vec<u8>,
    pub to: Vec<u8>,
}

/// The pacing callback's answer: go on, or stop the pass (a cancelled move).
pub type Pace<'a> = &'a mut dyn FnMut(u64) -> bool;

/// Makes `dst`'s keys in `ranges` equal to `src`'s (see the module docs). `pace(bytes)` is called
/// after each written batch with the batch's size; when it returns false the pass stops with
/// [`StorageError::Cancelled`]. Returns what changed.
pub fn sync_ranges(src: &Db, dst: &Db, ranges: &[Range], pace: Pace<'_>) -> Result<SyncStats, StorageError> {
    let src_snap = src.db.snapshot();
    let dst_snap = dst.db.snapshot();
    let mut stats = SyncStats::default();
    for r in ranges {
        let mut a = iter(src, &src_snap, r).peekable();
        let mut b = iter(dst, &dst_snap, r).peekable();
        let mut batch = WriteBatch::default();
        let mut pending = 0usize;
        loop {
            let next_a = match a.peek() {
                Some(Ok(kv)) => Some(kv),
                Some(Err(_)) => return Err(a.next().and_then(|r| r.err()).map_or(StorageError::Cancelled, Into::into)),
                None => None,
            };
            let next_b = match b.peek() {
                Some(Ok(kv)) => Some(kv),
                Some(Err(_)) => return Err(b.next().and_then(|r| r.err()).map_or(StorageError::Cancelled, Into::into)),
                None => None,
            };
            match (next_a, next_b) {
                (None, None) => break,
                (Some((ka, va)), Some((kb, vb))) if ka == kb => {
                    if va != vb {
                        dst.batch_put(&mut batch, r.family, ka, va);
                        pending += ka.len() + va.len();
                        stats.bytes += (ka.len() + va.len()) as u64;
                        stats.puts += 1;
                    }
                    a.next();
                    b.next();
                }
                (Some((ka, va)), kb) if kb.is_none_or(|(kb, _)| ka < kb) => {
                    dst.batch_put(&mut batch, r.family, ka, va);
                    pending += ka.len() + va.len();
                    stats.bytes += (ka.len() + va.len()) as u64;
                    stats.puts += 1;
                    a.next();
                }
                (_, Some((kb, _))) => {
                    dst.batch_delete(&mut batch, r.family, kb);
                    pending += kb.len();
                    stats.deletes += 1;
                    b.next();
                }
                (Some(_), None) => unreachable!("handled by the guard above"),
            }
            if pending >= BATCH_BYTES {
                dst.write(std::mem::take(&mut batch), false)?;
                if !pace(pending as u64) {
                    return Err(StorageError::Cancelled);
                }
                pending = 0;
            }
        }
        if !batch.is_empty() {
            dst.write(batch, false)?;
            if !pace(pending as u64) {
                return Err(StorageError::Cancelled);
            }
        }
    }
    Ok(stats)
}

/// Makes `dst`'s `keys` of `family` equal to `src`'s as they are now, after deleting `ranges`
/// of `family` in `dst` (ranges `src` deleted; keys written in them since are among `keys`). One
/// unsynced batch. For a move's switch, with the keys its writers changed since the last pass.
pub fn copy_keys<'k>(
    src: &Db,
    dst: &Db,
    family: Family,
    ranges: &[(Vec<u8>, Vec<u8>)],
    keys: impl IntoIterator<Item = &'k Vec<u8>>,
) -> Result<SyncStats, StorageError> {
    let mut batch = WriteBatch::default();
    let mut stats = SyncStats::default();
    for (from, to) in ranges {
        dst.batch_delete_range(&mut batch, family, from, to);
        stats.deletes += 1;
    }
    for k in keys {
        match src.get(family, k)? {
            Some(v) => {
                stats.bytes += (k.len() + v.len()) as u64;
                stats.puts += 1;
                dst.batch_put(&mut batch, family, k, &v);
            }
            None => {
                stats.deletes += 1;
                dst.batch_delete(&mut batch, family, k);
            }
        }
    }
    dst.write(batch, false)?;
    Ok(stats)
}

fn iter<'a>(db: &'a Db, snap: &rocksdb::Snapshot<'a>, r: &Range) -> rocksdb::DBIteratorWithThreadMode<'a, rocksdb::DB> {
    let mut ro = ReadOptions::default();
    ro.set_iterate_upper_bound(r.to.clone());
    ro.set_snapshot(snap);
    db.db.iterator_cf_opt(db.cf(r.family), ro, IteratorMode::From(&r.from, rocksdb::Direction::Forward))
}

/// Bytes of the keys and values in `ranges` of `db` (a scan; for reporting replica sizes).
pub fn range_bytes(db: &Db, ranges: &[Range]) -> Result<u64, StorageError> {
    let mut total = 0u64;
    for r in ranges {
        db.scan_family(r.family, None, &r.from, &r.to, &mut |k, v| {
            total += (k.len() + v.len()) as u64;
            Ok(true)
        })?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(db: &Db, k: &[u8], v: &[u8]) {
        let mut b = WriteBatch::default();
        db.batch_put(&mut b, Family::State, k, v);
        db.write(b, false).unwrap();
    }

    fn all(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = vec![];
        db.scan_family(Family::State, None, b"", b"\xff", &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
        out
    }

    #[test]
    fn a_second_pass_transfers_only_the_difference_including_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let src = Db::open(&dir.path().join("a")).unwrap();
        let dst = Db::open(&dir.path().join("b")).unwrap();
        for i in 0..100u32 {
            put(&src, &i.to_be_bytes(), b"v");
        }
        put(&src, b"\xfe-out-of-range", b"x");
        let ranges = [Range { family: Family::State, from: vec![0], to: vec![0xf0] }];
        let first = sync_ranges(&src, &dst, &ranges, &mut |_| true).unwrap();
        assert_eq!((first.puts, first.deletes), (100, 0));
        // Changes, additions and deletions since.
        put(&src, &5u32.to_be_bytes(), b"changed");
        put(&src, &500u32.to_be_bytes(), b"new");
        let mut b = WriteBatch::default();
        src.batch_delete(&mut b, Family::State, &7u32.to_be_bytes());
        src.write(b, false).unwrap();
        let second = sync_ranges(&src, &dst, &ranges, &mut |_| true).unwrap();
        assert_eq!((second.puts, second.deletes), (2, 1));
        let in_range = |v: Vec<(Vec<u8>, Vec<u8>)>| v.into_iter().filter(|(k, _)| k[0] < 0xf0).collect::<Vec<_>>();
        assert_eq!(in_range(all(&src)), all(&dst));
        assert_eq!(sync_ranges(&src, &dst, &ranges, &mut |_| true).unwrap().changed(), 0);
    }

    #[test]
    fn copying_the_changed_keys_after_a_pass_equals_a_full_pass() {
        let dir = tempfile::tempdir().unwrap();
        let src = Db::open(&dir.path().join("a")).unwrap();
        let dst = Db::open(&dir.path().join("b")).unwrap();
        for i in 0..50u32 {
            put(&src, &i.to_be_bytes(), b"v");
        }
        let ranges = [Range { family: Family::State, from: vec![0], to: vec![0xf0] }];
        sync_ranges(&src, &dst, &ranges, &mut |_| true).unwrap();
        // Later: a range deleted, a key rewritten inside it, one changed, one deleted.
        let mut b = WriteBatch::default();
        src.batch_delete_range(&mut b, Family::State, &10u32.to_be_bytes(), &20u32.to_be_bytes());
        src.batch_delete(&mut b, Family::State, &30u32.to_be_bytes());
        src.write(b, false).unwrap();
        put(&src, &15u32.to_be_bytes(), b"back");
        put(&src, &40u32.to_be_bytes(), b"changed");
        let changed: Vec<Vec<u8>> = [15u32, 30, 40].iter().map(|i| i.to_be_bytes().to_vec()).collect();
        let deleted = [(10u32.to_be_bytes().to_vec(), 20u32.to_be_bytes().to_vec())];
        copy_keys(&src, &dst, Family::State, &deleted, &changed).unwrap();
        assert_eq!(all(&src), all(&dst));
    }

    #[test]
    fn a_pass_stops_when_the_pace_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let src = Db::open(&dir.path().join("a")).unwrap();
        let dst = Db::open(&dir.path().join("b")).unwrap();
        put(&src, b"k", &vec![0u8; 2 << 20]);
        let ranges = [Range { family: Family::State, from: vec![], to: vec![0xff] }];
        assert!(matches!(sync_ranges(&src, &dst, &ranges, &mut |_| false), Err(StorageError::Cancelled)));
    }
}
