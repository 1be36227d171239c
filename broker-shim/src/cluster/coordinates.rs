//! The broker's batch-coordinate cache: where each recent batch of a partition lives (object key,
//! byte range, assigned offsets, timestamps — what FindBatches answers), learned from this
//! broker's own commits, from the batches the watch streams announce (every other broker's
//! commits) and from FindBatches answers. A fetch whose partition the broker knows (`marks`: a
//! trusted high watermark and log start) and whose batches from its offset are here is served
//! without asking the coordinator cluster (`fetch`).
//!
//! A batch's offsets are fixed when it is appended, and a diskless log is only ever cut at its
//! start; its object and byte offset change only when a replace (object consolidation) moves it,
//! which the watch streams announce and the entries follow (`moved`). Every coordinate is learned
//! with the Raft index it was true at: one known at an index below a replace announced on its
//! partition is not kept (it may name the object the batch left), and a watch stream that reset
//! or started afresh drops its metadata partition's entries (announcements may have been missed).
//! The old object of a moved batch is deleted only after the cleaner's grace, so a fetch that
//! read its coordinates just before still finds its bytes. What makes a cached batch unservable is
//! its partition's log start passing it (DeleteRecords, retention) or its topic's deletion — which
//! the caller checks against the trusted marks before serving; entries below a learned log start
//! and those of a deleted topic are dropped. Bounded by entries (the oldest inserted go first), with a
//! gauge. Hostile input (a coordinate no batch can have) is not kept. A `read_committed` fetch is
//! served only batches known not to be transactional (this broker's own, or announced so by a
//! watch: FindBatches does not say), and only while its partition has no transaction open (the
//! marks' `settled`), so it never needs the last stable offset or aborted transactions the cache
//! does not know. Decides nothing about Kafka semantics.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use diskless_proto::v1::find_batches_response::BatchInfo;
use diskless_proto::v1::{AppendedBatch, TxnMarker};

type Tp = ([u8; 16], i32);

/// Entries kept by default (about 150 bytes each).
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// One batch's coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinate {
    pub object_key: Arc<str>,
    pub magic: i32,
    pub byte_offset: i64,
    pub byte_size: i64,
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_append_timestamp: i64,
    pub batch_max_timestamp: i64,
    pub timestamp_type: i32,
    /// A transaction marker (no object bytes).
    pub marker: Option<TxnMarker>,
    /// Whether the batch is transactional, when known (`None`: learned from FindBatches, which
    /// does not say).
    pub transactional: Option<bool>,
}

impl Coordinate {
    pub fn from_batch_info(b: &BatchInfo, object_key: Arc<str>) -> Coordinate {
        Coordinate {
            object_key,
            magic: b.magic,
            byte_offset: b.byte_offset,
            byte_size: b.byte_size,
            base_offset: b.base_offset,
            last_offset: b.last_offset,
            log_append_timestamp: b.log_append_timestamp,
            batch_max_timestamp: b.batch_max_timestamp,
            timestamp_type: b.timestamp_type,
            marker: b.marker,
            transactional: if b.marker.is_some() { Some(true) } else { None },
        }
    }

    pub fn from_appended(b: &AppendedBatch, object_key: Arc<str>) -> Coordinate {
        Coordinate {
            object_key,
            magic: b.magic,
            byte_offset: b.byte_offset,
            byte_size: b.byte_size,
            base_offset: b.base_offset,
            last_offset: b.last_offset,
            log_append_timestamp: b.log_append_timestamp,
            batch_max_timestamp: b.batch_max_timestamp,
            timestamp_type: b.timestamp_type,
            marker: b.marker,
            transactional: Some(b.is_transactional || b.marker.is_some()),
        }
    }

    /// Known to hold records every reader may see (not transactional, not a marker).
    fn plain(&self) -> bool {
        self.transactional == Some(false) && self.marker.is_none()
    }

    fn batch_info(&self) -> BatchInfo {
        BatchInfo {
            batch_id: 0,
            object_key: self.object_key.to_string(),
            magic: self.magic,
            byte_offset: self.byte_offset,
            byte_size: self.byte_size,
            base_offset: self.base_offset,
            last_offset: self.last_offset,
            log_append_timestamp: self.log_append_timestamp,
            batch_max_timestamp: self.batch_max_timestamp,
            timestamp_type: self.timestamp_type,
            marker: self.marker,
        }
    }

    /// Whether these can be a batch's coordinates at all (the fetch path checks the rest).
    fn plausible(&self) -> bool {
        let marker = self.marker.is_some() && self.last_offset == self.base_offset;
        self.byte_offset >= 0
            && (self.byte_size > 0 || marker)
            && self.base_offset >= 0
            && self.last_offset >= self.base_offset
            && self.last_offset < i64::MAX
    }
}

/// What a fetch may be served from the cache.
#[derive(Debug, PartialEq, Eq)]
pub struct Served {
    pub batches: Vec<BatchInfo>,
    pub bytes: i64,
}

#[derive(Default)]
struct Inner {
    /// Per partition: its batches by base offset, and the log start below which nothing is kept.
    parts: HashMap<Tp, Partition>,
    /// Insertion order, for eviction (keys of entries already gone are skipped).
    order: VecDeque<(Tp, i64)>,
    entries: usize,
}

#[derive(Default)]
struct Partition {
    batches: BTreeMap<i64, Coordinate>,
    floor: i64,
    /// The index of the last replace announced on the partition: a coordinate known at an
    /// earlier index may be stale.
    moved_at: u64,
}

pub struct Coordinates {
    inner: Mutex<Inner>,
    max_entries: usize,
}

impl Coordinates {
    pub fn new(max_entries: usize) -> Coordinates {
        Coordinates { inner: Mutex::default(), max_entries }
    }

    /// Whether the cache keeps anything (0 entries: off).
    pub fn enabled(&self) -> bool {
        self.max_entries > 0
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Learns a batch of `topic_id`/`partition`, as true at Raft index `known_at` of its
    /// metadata partition. A batch overlapping one already known, below the partition's known log
    /// start, known before a replace announced on the partition, or with impossible coordinates
    /// is not kept.
    pub fn insert(&self, topic_id: [u8; 16], partition: i32, c: Coordinate, known_at: u64) {
        if !self.enabled() || partition < 0 || !c.plausible() {
            return;
        }
        let tp = (topic_id, partition);
        let mut g = self.inner();
        let p = g.parts.entry(tp).or_default();
        if c.last_offset < p.floor || known_at < p.moved_at {
            return;
        }
        let before = p.batches.range(..=c.base_offset).next_back();
        if before.is_some_and(|(_, b)| b.last_offset >= c.base_offset) {
            return; // known already (or a conflicting claim: the first one stays)
        }
        if p.batches.range(c.base_offset..=c.last_offset).next().is_some() {
            return;
        }
        let base = c.base_offset;
        p.batches.insert(base, c);
        g.entries += 1;
        g.order.push_back((tp, base));
        while g.entries > self.max_entries {
            let Some((tp, base)) = g.order.pop_front() else { break };
            g.remove(&tp, base);
        }
        // Keys of entries dropped otherwise (log starts, deleted topics) linger in `order`: compact
        // it once they are most of it.
        if g.order.len() > 2 * self.max_entries.max(1024) {
            let Inner { parts, order, .. } = &mut *g;
            order.retain(|(tp, base)| parts.get(tp).is_some_and(|p| p.batches.contains_key(base)));
        }
        crate::metrics::get().coordinate_cache_entries.set(g.entries as i64);
    }

    /// The batches of `topic_id`/`partition` from the one holding `offset`, back to back, below
    /// `high_watermark`, as many as fit in `max_bytes` (the first always); `None` when the batch
    /// holding `offset` is not here. `plain_only` (a `read_committed` fetch of a partition with no
    /// open transaction): only batches known not to be transactional, up to the first other.
    pub fn serve(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        offset: i64,
        high_watermark: i64,
        max_bytes: i64,
        plain_only: bool,
    ) -> Option<Served> {
        let g = self.inner();
        let p = g.parts.get(&(topic_id, partition))?;
        let (_, first) = p.batches.range(..=offset).next_back()?;
        if first.last_offset < offset || first.last_offset >= high_watermark || offset < p.floor {
            return None;
        }
        if plain_only && !first.plain() {
            return None;
        }
        let mut out = Served { batches: vec![], bytes: 0 };
        let mut next = first.base_offset;
        for (&base, b) in p.batches.range(first.base_offset..) {
            if base != next || b.last_offset >= high_watermark || (plain_only && !b.plain()) {
                break;
            }
            if !out.batches.is_empty() && out.bytes.saturating_add(b.byte_size) > max_bytes {
                break;
            }
            out.bytes = out.bytes.saturating_add(b.byte_size);
            out.batches.push(b.batch_info());
            next = b.last_offset + 1;
        }
        Some(out)
    }

    /// A replace at Raft index `index` moved these batches of `topic_id`/`partition` (by last
    /// offset) into `object_key`, at these byte offsets: the entries follow them, and coordinates
    /// known before `index` are not learned any more.
    pub fn moved(&self, topic_id: [u8; 16], partition: i32, index: u64, object_key: &Arc<str>, moves: &[(i64, i64)]) {
        if !self.enabled() || partition < 0 {
            return;
        }
        let mut g = self.inner();
        let p = g.parts.entry((topic_id, partition)).or_default();
        p.moved_at = p.moved_at.max(index);
        for &(last_offset, byte_offset) in moves {
            let entry = p.batches.range_mut(..=last_offset).next_back().map(|(_, c)| c);
            if let Some(c) = entry.filter(|c| c.last_offset == last_offset && c.marker.is_none()) {
                c.object_key = object_key.clone();
                c.byte_offset = byte_offset;
            }
        }
    }

    /// Drops the entries of the partitions `which` names (their metadata partition's watch reset:
    /// a replace may have been missed).
    pub fn forget(&self, which: impl Fn(&[u8; 16], i32) -> bool) {
        let mut g = self.inner();
        let mut dropped = 0;
        g.parts.retain(|(t, p), part| {
            let drop = which(t, *p);
            if drop {
                dropped += part.batches.len();
            }
            !drop
        });
        g.entries -= dropped;
        crate::metrics::get().coordinate_cache_entries.set(g.entries as i64);
    }

    /// `topic_id`/`partition` starts at `log_start` now: its batches wholly below go.
    pub fn truncate_below(&self, topic_id: [u8; 16], partition: i32, log_start: i64) {
        if !self.enabled() || partition < 0 {
            return;
        }
        let mut g = self.inner();
        let p = g.parts.entry((topic_id, partition)).or_default();
        if log_start <= p.floor {
            return;
        }
        p.floor = log_start;
        let gone: Vec<i64> =
            p.batches.iter().take_while(|(_, b)| b.last_offset < log_start).map(|(&base, _)| base).collect();
        for base in gone {
            g.remove(&(topic_id, partition), base);
        }
        crate::metrics::get().coordinate_cache_entries.set(g.entries as i64);
    }

    /// The topic was deleted: its entries go.
    pub fn topic_deleted(&self, topic_id: [u8; 16]) {
        let mut g = self.inner();
        let mut dropped = 0;
        g.parts.retain(|(t, _), p| {
            if *t == topic_id {
                dropped += p.batches.len();
            }
            *t != topic_id
        });
        g.entries -= dropped;
        crate::metrics::get().coordinate_cache_entries.set(g.entries as i64);
    }

    /// Entries held.
    pub fn entries(&self) -> usize {
        self.inner().entries
    }
}

impl Inner {
    fn remove(&mut self, tp: &Tp, base: i64) {
        let Some(p) = self.parts.get_mut(tp) else { return };
        if p.batches.remove(&base).is_some() {
            self.entries -= 1;
        }
        if p.batches.is_empty() && p.floor <= 0 && p.moved_at == 0 {
            self.parts.remove(tp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: [u8; 16] = [7; 16];

    fn batch(base: i64, last: i64, size: i64) -> Coordinate {
        Coordinate {
            object_key: Arc::from("wal/a"),
            magic: 2,
            byte_offset: base * 10,
            byte_size: size,
            base_offset: base,
            last_offset: last,
            log_append_timestamp: 1,
            batch_max_timestamp: 2,
            timestamp_type: 0,
            marker: None,
            transactional: Some(false),
        }
    }

    fn bases(s: Option<Served>) -> Option<Vec<i64>> {
        s.map(|s| s.batches.iter().map(|b| b.base_offset).collect())
    }

    #[test]
    fn a_fetch_is_served_the_batches_back_to_back_from_its_offset_up_to_the_high_watermark_and_a_gap() {
        let c = Coordinates::new(100);
        for (b, l) in [(0, 4), (5, 9), (10, 10), (11, 19), (25, 30)] {
            c.insert(T, 0, batch(b, l, 100), 0);
        }
        // From inside a batch: the whole batch, as Kafka serves it.
        assert_eq!(bases(c.serve(T, 0, 7, 31, 1 << 20, false)), Some(vec![5, 10, 11]), "stops at the gap 20..25");
        assert_eq!(
            bases(c.serve(T, 0, 0, 10, 1 << 20, false)),
            Some(vec![0, 5]),
            "nothing at or past the high watermark"
        );
        assert_eq!(bases(c.serve(T, 0, 0, 9, 1 << 20, false)), Some(vec![0]), "a batch ending past it is not served");
        assert_eq!(bases(c.serve(T, 0, 25, 31, 1 << 20, false)), Some(vec![25]));
        // Not here: the batch holding the offset is unknown, or the partition is.
        assert_eq!(c.serve(T, 0, 21, 31, 1 << 20, false), None);
        assert_eq!(c.serve(T, 0, 31, 40, 1 << 20, false), None);
        assert_eq!(c.serve(T, 1, 0, 10, 1 << 20, false), None);
        assert_eq!(c.serve([8; 16], 0, 0, 10, 1 << 20, false), None);
        // The byte limit: the first batch always, then what fits.
        assert_eq!(bases(c.serve(T, 0, 0, 31, 1, false)), Some(vec![0]));
        assert_eq!(bases(c.serve(T, 0, 0, 31, 250, false)), Some(vec![0, 5]));
        let s = c.serve(T, 0, 0, 31, 250, false).unwrap();
        assert_eq!(s.bytes, 200);
        assert_eq!(s.batches[1].object_key, "wal/a");
        assert_eq!((s.batches[1].byte_offset, s.batches[1].last_offset), (50, 9));
    }

    #[test]
    fn a_transaction_marker_is_kept_and_served_though_it_has_no_bytes() {
        let c = Coordinates::new(100);
        let marker = TxnMarker { producer_id: 3, producer_epoch: 1, commit: true, coordinator_epoch: 0 };
        c.insert(T, 0, batch(0, 4, 100), 0);
        c.insert(
            T,
            0,
            Coordinate { object_key: Arc::from(""), byte_size: 0, marker: Some(marker), ..batch(5, 5, 0) },
            0,
        );
        // Without a marker, no bytes is no batch; a marker spans one offset.
        c.insert(T, 0, batch(6, 6, 0), 0);
        c.insert(T, 0, Coordinate { marker: Some(marker), ..batch(7, 8, 0) }, 0);
        assert_eq!(c.entries(), 2);
        let s = c.serve(T, 0, 0, 6, 1 << 20, false).unwrap();
        assert_eq!((s.batches.len(), s.bytes), (2, 100));
        assert_eq!(s.batches[1].marker, Some(marker));
    }

    #[test]
    fn a_read_committed_fetch_is_served_only_batches_known_not_to_be_transactional() {
        let c = Coordinates::new(100);
        let marker = TxnMarker { producer_id: 3, producer_epoch: 1, commit: false, coordinator_epoch: 0 };
        c.insert(T, 0, batch(0, 4, 100), 0);
        c.insert(T, 0, Coordinate { transactional: None, ..batch(5, 6, 100) }, 0); // from FindBatches
        c.insert(T, 0, batch(7, 7, 100), 0);
        c.insert(T, 0, Coordinate { transactional: Some(true), ..batch(8, 9, 100) }, 0);
        c.insert(T, 0, Coordinate { object_key: Arc::from(""), marker: Some(marker), ..batch(10, 10, 0) }, 0);
        c.insert(T, 0, batch(11, 12, 100), 0);
        assert_eq!(bases(c.serve(T, 0, 0, 13, 1 << 20, false)), Some(vec![0, 5, 7, 8, 10, 11]));
        assert_eq!(bases(c.serve(T, 0, 0, 13, 1 << 20, true)), Some(vec![0]), "up to what FindBatches told");
        assert_eq!(c.serve(T, 0, 5, 13, 1 << 20, true), None);
        assert_eq!(bases(c.serve(T, 0, 7, 13, 1 << 20, true)), Some(vec![7]));
        assert_eq!(c.serve(T, 0, 8, 13, 1 << 20, true), None, "a transactional batch");
        assert_eq!(c.serve(T, 0, 10, 13, 1 << 20, true), None, "a marker");
        assert_eq!(bases(c.serve(T, 0, 11, 13, 1 << 20, true)), Some(vec![11]));
    }

    #[test]
    fn overlapping_and_impossible_coordinates_are_not_kept() {
        let c = Coordinates::new(100);
        c.insert(T, 0, batch(10, 19, 100), 0);
        c.insert(T, 0, batch(15, 25, 100), 0); // starts inside
        c.insert(T, 0, batch(5, 12, 100), 0); // ends inside
        c.insert(T, 0, batch(0, 40, 100), 0); // spans it
        c.insert(T, 0, batch(10, 19, 100), 0); // the same again
        assert_eq!(c.entries(), 1);
        for bad in [batch(30, 29, 100), batch(-1, 3, 100), batch(40, 41, 0), batch(50, i64::MAX, 10)] {
            c.insert(T, 0, bad, 0);
        }
        let mut negative = batch(60, 61, 10);
        negative.byte_offset = -5;
        c.insert(T, 0, negative, 0);
        c.insert(T, -1, batch(0, 1, 10), 0);
        assert_eq!(c.entries(), 1);
        assert_eq!(bases(c.serve(T, 0, 10, 100, 1 << 20, false)), Some(vec![10]));
    }

    #[test]
    fn a_moved_log_start_and_a_deleted_topic_drop_their_batches_and_keep_them_out() {
        let c = Coordinates::new(100);
        for (b, l) in [(0, 4), (5, 9), (10, 14)] {
            c.insert(T, 0, batch(b, l, 100), 0);
            c.insert(T, 1, batch(b, l, 100), 0);
        }
        c.truncate_below(T, 0, 7);
        assert_eq!(c.entries(), 5, "the batch 0..4 went; 5..9 holds the new log start");
        assert_eq!(c.serve(T, 0, 3, 15, 1 << 20, false), None);
        assert_eq!(c.serve(T, 0, 6, 15, 1 << 20, false), None, "below the log start, though its batch is kept");
        assert_eq!(bases(c.serve(T, 0, 7, 15, 1 << 20, false)), Some(vec![5, 10]));
        // A late announcement of a batch below the log start is not kept.
        c.insert(T, 0, batch(0, 4, 100), 0);
        assert_eq!(c.serve(T, 0, 0, 15, 1 << 20, false), None);
        c.topic_deleted(T);
        assert_eq!(c.entries(), 0);
        assert_eq!(c.serve(T, 1, 0, 15, 1 << 20, false), None);
    }

    #[test]
    fn the_cache_is_bounded_and_the_oldest_inserted_go_first() {
        let c = Coordinates::new(10);
        for i in 0..25 {
            c.insert(T, 0, batch(i * 2, i * 2 + 1, 10), 0);
        }
        assert_eq!(c.entries(), 10);
        assert_eq!(c.serve(T, 0, 0, 100, 1 << 20, false), None);
        assert_eq!(bases(c.serve(T, 0, 30, 100, 1 << 20, false)).map(|b| b.len()), Some(10));
        // Many entries dropped by log starts, then many inserted: the order queue stays bounded.
        for round in 0..50i64 {
            for i in 0..10 {
                c.insert(T, 1, batch(round * 20 + i * 2, round * 20 + i * 2 + 1, 10), 0);
            }
            c.truncate_below(T, 1, round * 20 + 20);
        }
        assert!(c.inner().order.len() <= 2 * 1024 + 1);
        assert!(c.entries() <= 10);
        let off = Coordinates::new(0);
        off.insert(T, 0, batch(0, 1, 10), 0);
        assert_eq!((off.entries(), off.enabled()), (0, false));
    }

    #[test]
    fn a_moved_batch_is_served_from_its_new_object_and_older_coordinates_are_not_learned() {
        let c = Coordinates::new(100);
        c.insert(T, 0, batch(0, 4, 100), 10);
        c.insert(T, 0, batch(5, 9, 100), 11);
        let merged: Arc<str> = Arc::from("merged");
        c.moved(T, 0, 20, &merged, &[(4, 0), (7, 100)]);
        let s = c.serve(T, 0, 0, 10, 1_000, false).expect("served");
        let got: Vec<(&str, i64)> = s.batches.iter().map(|b| (b.object_key.as_str(), b.byte_offset)).collect();
        assert_eq!(got, vec![("merged", 0), ("wal/a", 50)], "only the batch whose last offset moved follows");
        // A FindBatches answer read before the replace names the old object: not kept.
        c.insert(T, 0, batch(10, 14, 100), 19);
        assert!(c.serve(T, 0, 10, 15, 1_000, false).is_none());
        c.insert(T, 0, batch(10, 14, 100), 20);
        assert!(c.serve(T, 0, 10, 15, 1_000, false).is_some());
        // A reset of the partition's watch: its entries go.
        c.forget(|t, p| *t == T && p == 0);
        assert_eq!(c.entries(), 0);
        assert!(c.serve(T, 0, 0, 15, 1_000, false).is_none());
    }
}
