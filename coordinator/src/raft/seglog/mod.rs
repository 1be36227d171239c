//! The Raft log of every metadata partition of one data directory: one append-only sequence of
//! records in preallocated segment files (`segment.rs`, `record.rs`), so that one `fdatasync` makes
//! the appends of all metadata partitions durable, and writes nothing but the data (no size or
//! extent changes to journal, no memtable, no compaction). Measured against the log in RocksDB
//! (`examples/log_bench`, `bench/HISTORY.md`, "Where the Raft log should live"): half the sync time, a third of
//! the CPU per entry.
//!
//! Owns: appending, truncating and dropping a metadata partition's entries, reading them back,
//! syncing, the in-memory index (where each live entry is), recovery at open (`recover.rs`), and deleting segments
//! nobody needs. It keeps neither votes nor purge points: those stay in RocksDB (`log_store.rs`),
//! and the caller tells the log what is purged ([`SegLog::purge`]) once that is durable there.
//!
//! **Replay rules** (recovery and the running log agree on them): an entry record of metadata
//! partition `g` at index `i` replaces `g`'s entries from `i` on (after a gap, all of them); a
//! truncate record removes them from its index on; a drop record voids all of `g`'s earlier
//! records. Everything of a metadata partition at or below its purge point is gone.
//!
//! **Crash safety.** Records are written in order into zero-filled space; a sync covers every
//! record written before it. At open, segments must be numbered without gaps, every segment but the
//! last must end with a seal, and every record before a seal must check out (else the directory is
//! corrupt and the node refuses to start, naming the segment file and the offset; recovery is total
//! on hostile bytes, never a panic). The last segment is read up to its first zero or invalid
//! record (a torn tail: never acknowledged); what lies after that is zeroed and synced before
//! writing resumes there, so bytes of a torn write are never read again. Segments go oldest first,
//! each only when no live entry is in it, after a sync and followed by a directory fsync, so what
//! remains always replays to the same log. A metadata partition whose few live entries hold up the
//! oldest segment has them written again at the head (`relocate`), so an idle metadata partition
//! cannot pin the log.

pub(crate) mod record;
mod recover;
mod segment;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;

use record::Kind;

/// The default size of a segment.
pub const DEFAULT_SEGMENT_BYTES: u64 = 16 << 20;

/// Where one entry's record is.
#[derive(Debug, Clone, Copy)]
struct Loc {
    seg: u64,
    offset: u64,
    len: u32,
}

/// One metadata partition's live entries: contiguous indexes from `first`.
#[derive(Debug, Default)]
struct PartitionLog {
    first: u64,
    locs: VecDeque<Loc>,
    /// Entries at or below this are purged (durably, by the caller).
    purged: Option<u64>,
}

impl PartitionLog {
    fn last(&self) -> Option<u64> {
        (!self.locs.is_empty()).then(|| self.first + self.locs.len() as u64 - 1)
    }

    /// The replay rule of an entry record.
    fn put(&mut self, index: u64, loc: Loc) {
        match self.last() {
            Some(last) if index >= self.first && index <= last + 1 => {
                self.locs.truncate((index - self.first) as usize);
            }
            _ => {
                self.locs.clear();
                self.first = index;
            }
        }
        self.locs.push_back(loc);
    }

    fn truncate(&mut self, from: u64) {
        if from <= self.first {
            self.locs.clear();
        } else {
            self.locs.truncate((from - self.first).min(self.locs.len() as u64) as usize);
        }
    }

    fn purge(&mut self, upto: u64) {
        while !self.locs.is_empty() && self.first <= upto {
            self.locs.pop_front();
            self.first += 1;
        }
        if self.locs.is_empty() {
            self.first = upto + 1;
        }
        self.purged = self.purged.max(Some(upto));
    }

    fn bytes(&self) -> u64 {
        self.locs.iter().map(|l| l.len as u64).sum()
    }
}

struct Segment {
    file: Arc<File>,
    /// Per metadata partition: the highest index of its entry records here (what the segment holds
    /// up).
    tops: HashMap<u32, u64>,
}

struct Inner {
    segments: BTreeMap<u64, Segment>,
    /// The segment written to (the last one), where, and its size.
    current: u64,
    offset: u64,
    capacity: u64,
    partitions: HashMap<u32, PartitionLog>,
    /// The spare segment being prepared in the background.
    spare: Option<std::thread::JoinHandle<io::Result<()>>>,
    buf: Vec<u8>,
    /// A relocation is writing (it does not start another).
    relocating: bool,
    /// Set after a failed write: what is on disk is unknown, so nothing more is written.
    failed: Option<String>,
}

/// Figures of the log, for operators.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogFigures {
    pub segments: u64,
    pub bytes: u64,
    pub relocated_entries: u64,
}

/// One data directory's Raft log (see the module docs).
pub struct SegLog {
    dir: PathBuf,
    segment_bytes: u64,
    writable: bool,
    inner: Mutex<Inner>,
    relocated: std::sync::atomic::AtomicU64,
    /// No segment existed when it was opened.
    fresh: bool,
}

impl std::fmt::Debug for SegLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegLog").field("dir", &self.dir).finish()
    }
}

fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl SegLog {
    /// Opens (creating it if needed) the log in `dir`: recovery, then a new segment to write to.
    pub fn open(dir: &Path, segment_bytes: u64) -> anyhow::Result<SegLog> {
        if !dir.exists() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            if let Some(parent) = dir.parent() {
                segment::sync_dir(parent).with_context(|| format!("sync {}", parent.display()))?;
            }
        }
        segment::remove_spare(dir).with_context(|| format!("remove the spare segment in {}", dir.display()))?;
        Self::load(dir, segment_bytes.max(1 << 20), true)
    }

    /// Reads the log in `dir` without changing anything (offline tools).
    pub fn open_read_only(dir: &Path) -> anyhow::Result<SegLog> {
        Self::load(dir, DEFAULT_SEGMENT_BYTES, false)
    }

    /// Whether no segment existed when the log was opened (a new log, or a missing one).
    pub fn was_fresh(&self) -> bool {
        self.fresh
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes an I/O failure: what is on disk is unknown (a failed fsync may have dropped dirty
    /// pages that a later fsync would then not report), so nothing more is written or synced.
    fn fail(inner: &mut Inner, e: io::Error) -> io::Error {
        if inner.failed.is_none() {
            inner.failed = Some(e.to_string());
        }
        e
    }

    fn usable(&self, inner: &Inner) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::other("the Raft log is open read-only"));
        }
        match &inner.failed {
            Some(why) => Err(io::Error::other(format!("the Raft log failed earlier: {why}"))),
            None => Ok(()),
        }
    }

    /// The metadata partitions that have live entries.
    pub fn partitions(&self) -> Vec<u32> {
        let inner = self.lock();
        let mut gs: Vec<u32> = inner.partitions.iter().filter(|(_, g)| !g.locs.is_empty()).map(|(&g, _)| g).collect();
        gs.extend(inner.segments.values().flat_map(|s| s.tops.keys().copied()));
        gs.sort_unstable();
        gs.dedup();
        gs
    }

    /// The first and last index of metadata partition `g`'s live entries.
    pub fn bounds(&self, g: u32) -> Option<(u64, u64)> {
        let inner = self.lock();
        let pl = inner.partitions.get(&g)?;
        pl.last().map(|l| (pl.first, l))
    }

    /// Metadata partition `g`'s purge point as this log knows it.
    pub fn purged(&self, g: u32) -> Option<u64> {
        self.lock().partitions.get(&g).and_then(|x| x.purged)
    }

    /// Appends metadata partition `g`'s entries `(index, bytes)`, in order; readable at once,
    /// durable after the next [`sync`](Self::sync).
    pub fn append(&self, g: u32, entries: &[(u64, Vec<u8>)]) -> io::Result<()> {
        let mut inner = self.lock();
        self.usable(&inner)?;
        let mut buf = std::mem::take(&mut inner.buf);
        let r = self.append_in(&mut inner, &mut buf, g, entries.iter().map(|(i, b)| (*i, b.as_slice())));
        buf.clear();
        inner.buf = buf;
        r
    }

    fn append_in<'e>(
        &self,
        inner: &mut Inner,
        buf: &mut Vec<u8>,
        g: u32,
        entries: impl Iterator<Item = (u64, &'e [u8])>,
    ) -> io::Result<()> {
        // Records are framed into `buf` and written in as few writes as the segments allow.
        let mut pending: Vec<(u64, usize)> = vec![];
        let flush = |this: &Self, inner: &mut Inner, buf: &mut Vec<u8>, pending: &mut Vec<(u64, usize)>| {
            if pending.is_empty() {
                return Ok(());
            }
            let at = this.room(inner, buf.len() as u64)?;
            let file = inner.segments[&inner.current].file.clone();
            if let Err(e) = file.write_all_at(buf, at) {
                return Err(Self::fail(inner, e));
            }
            let seq = inner.current;
            let mut start = 0usize;
            for &(index, end) in pending.iter() {
                let loc = Loc { seg: seq, offset: at + start as u64, len: (end - start) as u32 };
                inner.partitions.entry(g).or_default().put(index, loc);
                let top = inner.segments.get_mut(&seq).map(|s| s.tops.entry(g).or_insert(0));
                if let Some(top) = top {
                    *top = (*top).max(index);
                }
                start = end;
            }
            inner.offset = at + buf.len() as u64;
            buf.clear();
            pending.clear();
            Ok(())
        };
        for (index, payload) in entries {
            let size = record::size(payload.len()) as u64;
            if !pending.is_empty() && (buf.len() as u64 + size > self.segment_bytes / 4) {
                flush(self, inner, buf, &mut pending)?;
            }
            record::encode(buf, Kind::Entry, g, index, payload);
            pending.push((index, buf.len()));
        }
        flush(self, inner, buf, &mut pending)
    }

    /// Where `len` bytes of records go: the current offset, after switching to a new segment when
    /// they (and a seal) do not fit.
    fn room(&self, inner: &mut Inner, len: u64) -> io::Result<u64> {
        let seal = record::size(0) as u64;
        let mut relocated = false;
        loop {
            if inner.offset + len + seal <= inner.capacity {
                return Ok(inner.offset);
            }
            let r = (|| {
                segment::seal(&inner.segments[&inner.current].file, inner.offset)?;
                let next = inner.current + 1;
                let bytes = self.segment_bytes.max((segment::FIRST + len + seal).next_multiple_of(1 << 20));
                self.start_segment(inner, next, bytes)
            })();
            if let Err(e) = r {
                return Err(Self::fail(inner, e));
            }
            // Relocation appends too: never from within itself, and once per call.
            if !inner.relocating && !relocated {
                relocated = true;
                inner.relocating = true;
                let r = self.after_switch(inner);
                inner.relocating = false;
                r?;
            }
        }
    }

    fn start_segment(&self, inner: &mut Inner, seq: u64, bytes: u64) -> io::Result<()> {
        if let Some(h) = inner.spare.take() {
            // A failed preparation is removed (its zeros may not be durable) and redone by
            // `activate`.
            if !matches!(h.join(), Ok(Ok(()))) {
                tracing::warn!(dir = %self.dir.display(), "preparing a spare Raft log segment failed; preparing it again");
                segment::remove_spare(&self.dir)?;
            }
        }
        let file = segment::activate(&self.dir, seq, bytes)?;
        inner.segments.insert(seq, Segment { file: Arc::new(file), tops: HashMap::new() });
        inner.current = seq;
        inner.offset = segment::FIRST;
        inner.capacity = bytes;
        let (dir, size) = (self.dir.clone(), self.segment_bytes);
        inner.spare = std::thread::Builder::new()
            .name("raft-log-spare".into())
            .spawn(move || segment::prepare_spare(&dir, size))
            .ok();
        Ok(())
    }

    /// After a switch: when writing the live entries of the metadata partitions that hold up the
    /// oldest `k` segments again at the head costs at most half of those segments (so a relocation
    /// frees at least twice what it writes), for the largest such `k`, they are; then old segments
    /// go. So the log holds less than twice its live bytes plus a segment, however idle some
    /// metadata partitions are.
    fn after_switch(&self, inner: &mut Inner) -> io::Result<()> {
        let purged = |inner: &Inner, g: u32| inner.partitions.get(&g).and_then(|x| x.purged);
        let mut blockers: Vec<u32> = vec![];
        let mut cost = 0u64;
        let mut chosen: Option<Vec<u32>> = None;
        for (k, (&seq, seg)) in inner.segments.iter().enumerate() {
            if seq == inner.current {
                break;
            }
            for (&g, &top) in &seg.tops {
                if purged(inner, g).is_none_or(|p| top > p) && !blockers.contains(&g) {
                    blockers.push(g);
                    cost += inner.partitions.get(&g).map_or(0, PartitionLog::bytes);
                }
            }
            if cost * 2 <= (k as u64 + 1) * self.segment_bytes {
                chosen = Some(blockers.clone());
            }
        }
        for g in chosen.unwrap_or_default() {
            self.relocate(inner, g)?;
        }
        self.collect(inner)
    }

    /// Writes metadata partition `g`'s live entries again at the head: its records in older
    /// segments are then superseded (the first rewritten entry replaces them all).
    fn relocate(&self, inner: &mut Inner, g: u32) -> io::Result<()> {
        let Some(pl) = inner.partitions.get(&g) else { return Ok(()) };
        let first = pl.first;
        let locs: Vec<Loc> = pl.locs.iter().copied().collect();
        let mut payloads = Vec::with_capacity(locs.len());
        for (i, loc) in locs.iter().enumerate() {
            payloads.push((
                first + i as u64,
                read_at(&self.dir, &inner.segments[&loc.seg].file, *loc, g, first + i as u64)?,
            ));
        }
        let start = inner.current;
        let mut buf = vec![];
        self.append_in(inner, &mut buf, g, payloads.iter().map(|(i, b)| (*i, b.as_slice())))?;
        // A metadata partition with no live entries (all truncated or purged) has nothing to write
        // again: any part of its old records replays to the same empty log.
        for (_, s) in inner.segments.range_mut(..start) {
            s.tops.remove(&g);
        }
        self.relocated.fetch_add(payloads.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Deletes the oldest segments while nothing live is in them (synced first, so that what
    /// supersedes their records is durable; each deletion made durable before the next).
    fn collect(&self, inner: &mut Inner) -> io::Result<()> {
        let mut synced = false;
        while let Some((&seq, s)) = inner.segments.first_key_value() {
            if seq == inner.current {
                break;
            }
            let dead =
                s.tops.iter().all(|(g, top)| inner.partitions.get(g).and_then(|x| x.purged).is_some_and(|p| *top <= p));
            if !dead {
                break;
            }
            if !synced {
                if let Err(e) = inner.segments[&inner.current].file.sync_data() {
                    return Err(Self::fail(inner, e));
                }
                synced = true;
            }
            inner.segments.remove(&seq);
            let gone = std::fs::remove_file(segment::path(&self.dir, seq)).and_then(|()| segment::sync_dir(&self.dir));
            if let Err(e) = gone {
                return Err(Self::fail(inner, e));
            }
        }
        Ok(())
    }

    fn write_record(&self, inner: &mut Inner, kind: Kind, g: u32, index: u64) -> io::Result<()> {
        let mut b = Vec::with_capacity(record::size(0));
        record::encode(&mut b, kind, g, index, &[]);
        let at = self.room(inner, b.len() as u64)?;
        if let Err(e) = inner.segments[&inner.current].file.write_all_at(&b, at) {
            return Err(Self::fail(inner, e));
        }
        inner.offset = at + b.len() as u64;
        Ok(())
    }

    /// Removes metadata partition `g`'s entries from index `from` on (durable with the next sync; a
    /// later append is never durable without it, the log being read in order).
    pub fn truncate(&self, g: u32, from: u64) -> io::Result<()> {
        let mut inner = self.lock();
        self.usable(&inner)?;
        if inner.partitions.get(&g).and_then(PartitionLog::last).is_none_or(|last| last < from) {
            return Ok(());
        }
        self.write_record(&mut inner, Kind::Truncate, g, from)?;
        if let Some(pl) = inner.partitions.get_mut(&g) {
            pl.truncate(from);
        }
        Ok(())
    }

    /// Forgets metadata partition `g` here (its replica leaves this directory): a drop record,
    /// synced.
    pub fn drop_partition(&self, g: u32) -> io::Result<()> {
        let mut inner = self.lock();
        self.usable(&inner)?;
        let held = inner.partitions.contains_key(&g) || inner.segments.values().any(|s| s.tops.contains_key(&g));
        if !held {
            return Ok(());
        }
        self.write_record(&mut inner, Kind::Drop, g, 0)?;
        if let Err(e) = inner.segments[&inner.current].file.sync_data() {
            return Err(Self::fail(&mut inner, e));
        }
        inner.forget(g);
        self.collect(&mut inner)
    }

    /// Notes that metadata partition `g`'s entries up to `upto` are purged — the caller made that
    /// durable — and deletes the segments that no longer hold anything live.
    pub fn purge(&self, g: u32, upto: u64) -> io::Result<()> {
        let mut inner = self.lock();
        inner.partitions.entry(g).or_default().purge(upto);
        if self.writable && inner.failed.is_none() {
            self.collect(&mut inner)?;
        }
        Ok(())
    }

    /// Metadata partition `g`'s entries in `[from, to)` that are here: the index of the first one
    /// returned (`from`, or the first live index when `from` is purged) and their bytes.
    pub fn read(&self, g: u32, from: u64, to: u64) -> io::Result<(u64, Vec<Vec<u8>>)> {
        let (start, wanted): (u64, Vec<(Loc, Arc<File>)>) = {
            let inner = self.lock();
            let Some(pl) = inner.partitions.get(&g) else { return Ok((from, vec![])) };
            let Some(last) = pl.last() else { return Ok((from, vec![])) };
            let start = from.max(pl.first);
            let end = to.min(last + 1);
            let wanted = (start..end.max(start))
                .map(|i| {
                    let loc = pl.locs[(i - pl.first) as usize];
                    (loc, inner.segments[&loc.seg].file.clone())
                })
                .collect();
            (start, wanted)
        };
        let entries = wanted
            .into_iter()
            .enumerate()
            .map(|(i, (loc, file))| read_at(&self.dir, &file, loc, g, start + i as u64))
            .collect::<io::Result<_>>()?;
        Ok((start, entries))
    }

    /// Makes everything written so far durable.
    pub fn sync(&self) -> io::Result<()> {
        let file = {
            let inner = self.lock();
            self.usable(&inner)?;
            inner.segments[&inner.current].file.clone()
        };
        // Earlier segments were synced when they were sealed.
        file.sync_data().map_err(|e| Self::fail(&mut self.lock(), e))
    }

    pub fn figures(&self) -> LogFigures {
        let inner = self.lock();
        let bytes = inner
            .segments
            .keys()
            .filter_map(|&s| std::fs::metadata(segment::path(&self.dir, s)).ok())
            .map(|m| m.len())
            .sum();
        LogFigures {
            segments: inner.segments.len() as u64,
            bytes,
            relocated_entries: self.relocated.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl Drop for SegLog {
    fn drop(&mut self) {
        // The spare being prepared is not left writing after the log is gone.
        if let Some(h) = self.lock().spare.take() {
            let _ = h.join();
        }
    }
}

impl Inner {
    fn forget(&mut self, g: u32) {
        self.partitions.remove(&g);
        for s in self.segments.values_mut() {
            s.tops.remove(&g);
        }
    }
}

/// Reads and checks the entry record at `loc` (metadata partition `g`, index `index`); its payload.
/// `loc.len` was read back from the file at open, so the buffer is never larger than what the
/// file held.
fn read_at(dir: &Path, file: &File, loc: Loc, g: u32, index: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; loc.len as usize];
    let at = || format!("{} offset {}", segment::path(dir, loc.seg).display(), loc.offset);
    file.read_exact_at(&mut buf, loc.offset).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("read the Raft log record of metadata partition {g} index {index} ({}): {e}", at()),
        )
    })?;
    match record::parse(&buf) {
        record::Next::Record(r) if r.kind == Kind::Entry && r.partition == g && r.index == index => {}
        other => {
            return Err(corrupt(format!(
                "the Raft log record of metadata partition {g} index {index} ({}) reads back as {other:?}",
                at()
            )))
        }
    }
    buf.drain(..record::HEADER + record::FIXED);
    Ok(buf)
}

/// Copies metadata partition `g`'s log from `src` to `dst` (a replica move): everything (`from` =
/// `None`: `dst`'s earlier records of `g` dropped first) or what changed from index `from` on; then
/// `dst` ends where `src` does and knows its purge point. `pace` is told the bytes copied and says
/// whether to go on. Not synced. Returns the entries and bytes copied.
pub fn copy_partition(
    src: &SegLog,
    dst: &SegLog,
    g: u32,
    from: Option<u64>,
    pace: &mut dyn FnMut(u64) -> bool,
) -> io::Result<(u64, u64)> {
    if from.is_none() {
        dst.drop_partition(g)?;
    }
    let (mut copied, mut count) = (0, 0);
    let mut at = from.unwrap_or(0);
    // The source's bounds are read again for every chunk: a purge while copying moves its first
    // index past what is left to copy (copying goes on from there, never leaving a hole), a
    // truncation moves its last back (the next pass or the switch copies from there: it is noted).
    loop {
        let Some((first, last)) = src.bounds(g) else {
            dst.truncate(g, at)?;
            break;
        };
        at = at.max(first);
        if at > last {
            dst.truncate(g, at)?;
            break;
        }
        let (start, chunk) = src.read(g, at, at.saturating_add(256).min(last + 1))?;
        if chunk.is_empty() {
            continue;
        }
        let entries: Vec<(u64, Vec<u8>)> = chunk.into_iter().enumerate().map(|(i, b)| (start + i as u64, b)).collect();
        let bytes: u64 = entries.iter().map(|(_, b)| b.len() as u64).sum();
        at = start + entries.len() as u64;
        dst.append(g, &entries)?;
        copied += bytes;
        count += entries.len() as u64;
        if !pace(bytes) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "cancelled"));
        }
    }
    if let Some(p) = src.purged(g) {
        dst.purge(g, p)?;
    }
    Ok((count, copied))
}
