//! What this broker knows of each partition's high watermark and log start, as it learns it — from
//! its own commits at once, and from every other broker's through the watch streams (`watch`) —
//! and the waits of parked fetches on it ([`Marks::waiter`]). A parked fetch costs a receiver per
//! partition and wakes only when one of its partitions moves past what its last read saw: no loop
//! whose cost grows with the number of waiting consumers.
//!
//! A mark known to be its partition's whole state (a read at or after the point from which the live
//! watch delivers every change, no retention since) lets a caught-up fetch park without reading
//! at all ([`Marks::caught_up`]): idle consumers cost the coordinator cluster nothing.
//!
//! A mark is also *settled* while its partition has no transaction open: a read showed its last
//! stable offset at its high watermark, and no transactional batch or marker was seen since
//! ([`Marks::settled`]); a `read_committed` fetch may then be served from the coordinate cache.
//!
//! Per metadata partition there is also a reset signal, raised when its watch could not account for
//! every change (a reset from the node, a lost stream): parked fetches then read again, and while
//! the watch is down they read every [`POLL_WHILE_BLIND`]. Memory: one entry per partition that
//! moved since the broker started (bounded by the cluster's partitions; a deleted topic's entries
//! are dropped). It decides nothing about Kafka semantics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use diskless_proto::metadata_partition_for;
use diskless_proto::v1::AppliedIndex;
use futures_util::future::{select_all, BoxFuture, FutureExt};
use tokio::sync::watch;
use tokio::time::Instant;

/// How often a parked fetch reads again while its metadata partition's watch is down.
pub const POLL_WHILE_BLIND: Duration = Duration::from_millis(250);

type Tp = ([u8; 16], i32);

/// A partition as last learned; `index` is the Raft log index (of the partition's metadata
/// partition) at which it was so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub index: u64,
    pub deleted: bool,
    /// The trust epoch of the partition's metadata partition in which this mark was known to be
    /// the partition's whole state (0: never): see [`Marks::caught_up`].
    trusted: u64,
    /// The index of the last read that showed no transaction open (0: none).
    stable_read: u64,
    /// The index of the last transactional batch or marker seen, or read showing an open
    /// transaction (0: none).
    txn_seen: u64,
}

impl Default for Mark {
    fn default() -> Self {
        Mark {
            high_watermark: -1,
            log_start_offset: -1,
            index: 0,
            deleted: false,
            trusted: 0,
            stable_read: 0,
            txn_seen: 0,
        }
    }
}

impl Mark {
    /// What a parked fetch waits on (a change of the transaction indexes alone wakes nobody).
    fn moved(&self, before: &Mark) -> bool {
        (self.high_watermark, self.log_start_offset, self.index, self.deleted, self.trusted)
            != (before.high_watermark, before.log_start_offset, before.index, before.deleted, before.trusted)
    }
}

pub struct Marks {
    num_metadata_partitions: u32,
    partitions: Mutex<HashMap<Tp, watch::Sender<Mark>>>,
    /// Per metadata partition: bumped when its changes may have been missed.
    resets: Vec<watch::Sender<u64>>,
    /// Per metadata partition: whether its watch stream is up.
    live: Vec<AtomicBool>,
    /// Per metadata partition: the trust epoch, bumped whenever a mark may stop being the whole
    /// state (changes missed, the watch down, log starts moved by retention).
    trust: Vec<AtomicU64>,
    /// Per metadata partition: the index after which the live watch delivers every change.
    stream_start: Vec<AtomicU64>,
}

/// How a parked fetch's wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Woken {
    /// A partition moved (or its topic went, or changes may have been missed): read again, from a
    /// replica that has applied at least these indexes.
    Moved(Vec<AppliedIndex>),
    /// The deadline passed with nothing new.
    Deadline,
}

/// A parked fetch's interest, taken before its read so that no change after the read is missed.
pub struct Waiter {
    partitions: Vec<(u32, watch::Receiver<Mark>)>,
    resets: Vec<watch::Receiver<u64>>,
    blind: bool,
}

impl Marks {
    pub fn new(num_metadata_partitions: u32) -> Marks {
        let n = num_metadata_partitions.max(1) as usize;
        Marks {
            num_metadata_partitions,
            partitions: Mutex::new(HashMap::new()),
            resets: (0..n).map(|_| watch::channel(0).0).collect(),
            live: (0..n).map(|_| AtomicBool::new(false)).collect(),
            trust: (0..n).map(|_| AtomicU64::new(1)).collect(),
            stream_start: (0..n).map(|_| AtomicU64::new(u64::MAX)).collect(),
        }
    }

    fn partitions(&self) -> std::sync::MutexGuard<'_, HashMap<Tp, watch::Sender<Mark>>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn owner(&self, tp: &Tp) -> usize {
        metadata_partition_for(&tp.0, tp.1, self.num_metadata_partitions) as usize
    }

    /// Learns that `tp` reached a high watermark and/or log start (only ever forward) at `index`.
    pub fn observe(&self, topic_id: [u8; 16], partition: i32, hwm: Option<i64>, log_start: Option<i64>, index: u64) {
        let mut map = self.partitions();
        let tx = map.entry((topic_id, partition)).or_insert_with(|| watch::channel(Mark::default()).0);
        tx.send_if_modified(|m| {
            let before = *m;
            if let Some(h) = hwm {
                m.high_watermark = m.high_watermark.max(h);
            }
            if let Some(l) = log_start {
                m.log_start_offset = m.log_start_offset.max(l);
            }
            if *m != before {
                m.index = m.index.max(index);
            }
            *m != before
        });
        crate::metrics::get().watched_partitions.set(map.len() as i64);
    }

    /// Learns that a topic was deleted: its waiters wake, its entries go.
    pub fn topic_deleted(&self, topic_id: [u8; 16], index: u64) {
        let mut map = self.partitions();
        map.retain(|(t, _), tx| {
            if *t != topic_id {
                return true;
            }
            tx.send_modify(|m| {
                m.deleted = true;
                m.index = m.index.max(index);
            });
            false
        });
        crate::metrics::get().watched_partitions.set(map.len() as i64);
    }

    /// The changes of metadata partition `g` up to `index` may have been missed: wake its waiters.
    pub fn reset(&self, g: u32, index: u64) {
        self.distrust(g);
        if let Some(tx) = self.resets.get(g as usize) {
            tx.send_modify(|i| *i = (*i).max(index).saturating_add(1));
        }
    }

    /// No mark of `g` is known to be its partition's whole state any more (retention moved log
    /// starts it does not name; changes may have been missed).
    pub fn distrust(&self, g: u32) {
        if let Some(t) = self.trust.get(g as usize) {
            t.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `g`'s watch now delivers every change after `index`.
    pub fn stream_started(&self, g: u32, index: u64) {
        if let Some(s) = self.stream_start.get(g as usize) {
            s.store(index, Ordering::SeqCst);
        }
    }

    /// Learns a partition's whole state from a read of a replica that had applied `index`: the
    /// mark is then trusted (see [`Marks::caught_up`]) if the live watch delivers every change
    /// after that index, and settled if the read's last stable offset `lso` was its high
    /// watermark.
    pub fn observe_read(&self, topic_id: [u8; 16], partition: i32, hwm: i64, log_start: i64, lso: i64, index: u64) {
        let g = self.owner(&(topic_id, partition));
        // Read before the state is looked at: a bump meanwhile leaves the mark untrusted.
        let epoch = self.trust[g].load(Ordering::SeqCst);
        let complete = self.live[g].load(Ordering::SeqCst) && index >= self.stream_start[g].load(Ordering::SeqCst);
        let mut map = self.partitions();
        let tx = map.entry((topic_id, partition)).or_insert_with(|| watch::channel(Mark::default()).0);
        tx.send_if_modified(|m| {
            let before = *m;
            m.high_watermark = m.high_watermark.max(hwm);
            m.log_start_offset = m.log_start_offset.max(log_start);
            if *m != before {
                m.index = m.index.max(index);
            }
            if complete && hwm >= 0 && log_start >= 0 {
                m.trusted = epoch;
            }
            if lso >= 0 && lso == hwm {
                m.stable_read = m.stable_read.max(index);
            } else {
                m.txn_seen = m.txn_seen.max(index);
            }
            m.moved(&before)
        });
    }

    /// A transactional batch or a marker of `tp` was appended at `index`: its mark is not settled
    /// until a later read shows no transaction open. Called before the high watermark it reached
    /// is observed, so a fetch that wakes on it finds the mark unsettled.
    pub fn observe_transactional(&self, topic_id: [u8; 16], partition: i32, index: u64) {
        let mut map = self.partitions();
        let tx = map.entry((topic_id, partition)).or_insert_with(|| watch::channel(Mark::default()).0);
        tx.send_if_modified(|m| {
            m.txn_seen = m.txn_seen.max(index);
            false
        });
    }

    /// Whether `tp`'s known mark is settled: no transaction open as of the last read, and no
    /// transactional batch or marker since (what serving `read_committed` from the cache relies on).
    pub fn settled(&self, topic_id: [u8; 16], partition: i32) -> bool {
        self.known(topic_id, partition).is_some_and(|m| m.stable_read > 0 && m.stable_read >= m.txn_seen)
    }

    /// The partition's high watermark and log start when a fetch at `offset` has nothing to read:
    /// the mark is trusted (its partition's whole state since a read, kept current by a watch that
    /// has stayed up, no retention since), names `offset` as the high watermark and the log starts
    /// at or before it. Then the fetch parks without asking FindBatches.
    pub fn caught_up(&self, topic_id: [u8; 16], partition: i32, offset: i64) -> Option<(i64, i64)> {
        let m = self.known(topic_id, partition)?;
        (m.high_watermark == offset && m.log_start_offset <= offset).then_some((m.high_watermark, m.log_start_offset))
    }

    /// The partition's mark when it is known to be the partition's whole state: trusted (a read
    /// since which the live watch delivered every change, no retention since), its topic not
    /// deleted, both offsets known. What a fetch served without FindBatches relies on.
    pub fn known(&self, topic_id: [u8; 16], partition: i32) -> Option<Mark> {
        let g = self.owner(&(topic_id, partition));
        if !self.live[g].load(Ordering::SeqCst) {
            return None;
        }
        let epoch = self.trust[g].load(Ordering::SeqCst);
        let m = *self.partitions().get(&(topic_id, partition))?.borrow();
        (m.trusted == epoch && !m.deleted && m.log_start_offset >= 0 && m.high_watermark >= m.log_start_offset)
            .then_some(m)
    }

    /// Whether `g`'s watch is up; going down wakes `g`'s waiters (they poll until it is back).
    pub fn set_live(&self, g: u32, live: bool) {
        let Some(l) = self.live.get(g as usize) else { return };
        if !live {
            self.distrust(g);
        }
        if l.swap(live, Ordering::SeqCst) != live && !live {
            self.reset(g, 0);
        }
    }

    /// Whether every metadata partition's watch is up.
    pub fn all_live(&self) -> bool {
        self.live.iter().all(|l| l.load(Ordering::SeqCst))
    }

    /// The interest of a fetch in these partitions; take it before reading them.
    pub fn waiter(&self, partitions: impl IntoIterator<Item = Tp>) -> Waiter {
        let mut w = Waiter { partitions: vec![], resets: vec![], blind: false };
        let mut groups = vec![];
        let mut map = self.partitions();
        for tp in partitions {
            let g = self.owner(&tp);
            let rx = map.entry(tp).or_insert_with(|| watch::channel(Mark::default()).0).subscribe();
            w.partitions.push((g as u32, rx));
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        crate::metrics::get().watched_partitions.set(map.len() as i64);
        drop(map);
        for g in groups {
            w.blind |= !self.live[g].load(Ordering::SeqCst);
            w.resets.push(self.resets[g].subscribe());
        }
        w
    }
}

impl Waiter {
    /// Waits until one of the partitions moves past the high watermark its read answered
    /// (`answered`, in the order the waiter was made; -1 when the read gave none), its topic is
    /// deleted, its metadata partition's changes may have been missed, or `deadline`. While a watch
    /// is down, or with `poll` (the read is known to be behind), no longer than
    /// [`POLL_WHILE_BLIND`].
    pub async fn wait(mut self, answered: &[i64], deadline: Instant, poll: bool) -> Woken {
        let until = if self.blind || poll { deadline.min(Instant::now() + POLL_WHILE_BLIND) } else { deadline };
        let mut waits: Vec<BoxFuture<'_, ()>> = vec![];
        for ((_, rx), &hwm) in self.partitions.iter_mut().zip(answered) {
            waits.push(
                async move {
                    // A closed sender (the topic's entries dropped) wakes too.
                    let _ = rx.wait_for(|m| m.deleted || m.high_watermark > hwm).await;
                }
                .boxed(),
            );
        }
        for rx in self.resets.iter_mut() {
            waits.push(
                async move {
                    let _ = rx.changed().await;
                }
                .boxed(),
            );
        }
        waits.push(tokio::time::sleep_until(until).boxed());
        let _ = select_all(waits).await;
        if Instant::now() >= deadline {
            return Woken::Deadline;
        }
        // Read again from a replica that has what woke us.
        let mut at: HashMap<u32, u64> = HashMap::new();
        for (g, rx) in &self.partitions {
            let m = *rx.borrow();
            let e = at.entry(*g).or_insert(0);
            *e = (*e).max(m.index);
        }
        Woken::Moved(
            at.into_iter()
                .filter(|(_, i)| *i > 0)
                .map(|(metadata_partition, index)| AppliedIndex { metadata_partition, index })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: [u8; 16] = [7; 16];

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_fetch_wakes_when_its_partition_moves_past_what_it_read_and_not_before() {
        let marks = std::sync::Arc::new(Marks::new(1));
        marks.set_live(0, true);
        marks.observe(T, 0, Some(5), None, 10);
        // Read answered 5: an equal mark does not wake it; 6 does, naming the index.
        let w = marks.waiter([(T, 0), (T, 1)]);
        let m2 = marks.clone();
        let t = tokio::spawn(async move { w.wait(&[5, -1], soon(), false).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        m2.observe(T, 0, Some(5), None, 11);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!t.is_finished());
        m2.observe(T, 0, Some(6), None, 12);
        assert_eq!(t.await.unwrap(), Woken::Moved(vec![AppliedIndex { metadata_partition: 0, index: 12 }]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_between_the_interest_and_the_read_answer_is_not_missed() {
        let marks = Marks::new(1);
        marks.set_live(0, true);
        let w = marks.waiter([(T, 0)]);
        // The change lands while the read is in flight; the read (a lagging replica) saw 3.
        marks.observe(T, 0, Some(4), None, 20);
        assert!(matches!(w.wait(&[3], soon(), false).await, Woken::Moved(_)));
    }

    #[test]
    fn a_read_is_trusted_only_when_the_live_watch_covers_every_change_after_it() {
        let marks = Marks::new(1);
        // No watch yet: nothing is trusted.
        marks.observe_read(T, 0, 5, 0, 5, 10);
        assert_eq!(marks.caught_up(T, 0, 5), None);
        marks.stream_started(0, 20);
        marks.set_live(0, true);
        // A read older than the stream's start may miss a change between the two.
        marks.observe_read(T, 0, 5, 0, 5, 15);
        assert_eq!(marks.caught_up(T, 0, 5), None);
        marks.observe_read(T, 0, 5, 0, 5, 20);
        assert_eq!(marks.caught_up(T, 0, 5), Some((5, 0)));
        // The watch moves it on: a fetch at 5 now has something to read; one at 7 has not.
        marks.observe(T, 0, Some(7), None, 21);
        assert_eq!(marks.caught_up(T, 0, 5), None);
        assert_eq!(marks.caught_up(T, 0, 7), Some((7, 0)));
        // Retention, a reset and a lost watch each end the trust.
        marks.distrust(0);
        assert_eq!(marks.caught_up(T, 0, 7), None);
        marks.observe_read(T, 0, 7, 2, 7, 22);
        assert_eq!(marks.caught_up(T, 0, 7), Some((7, 2)));
        marks.reset(0, 30);
        assert_eq!(marks.caught_up(T, 0, 7), None);
        marks.observe_read(T, 0, 7, 2, 7, 30);
        marks.set_live(0, false);
        assert_eq!(marks.caught_up(T, 0, 7), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_mark_is_settled_from_a_read_without_open_transactions_until_one_is_seen() {
        let marks = std::sync::Arc::new(Marks::new(1));
        marks.stream_started(0, 0);
        marks.set_live(0, true);
        marks.observe_read(T, 0, 9, 0, 4, 10);
        assert!(!marks.settled(T, 0), "a transaction is open: the last stable offset is below");
        marks.observe_read(T, 0, 9, 0, 9, 12);
        assert!(marks.settled(T, 0));
        // A transactional batch (or a marker) seen on the watch unsettles it, waking nobody.
        let w = marks.waiter([(T, 0)]);
        let t = tokio::spawn(async move { w.wait(&[9], soon(), false).await });
        marks.observe_transactional(T, 0, 13);
        assert!(!marks.settled(T, 0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!t.is_finished());
        // A read older than what was seen does not settle it again; a newer one does.
        marks.observe_read(T, 0, 9, 0, 9, 12);
        assert!(!marks.settled(T, 0));
        marks.observe_read(T, 0, 10, 0, 10, 14);
        assert!(marks.settled(T, 0));
        assert!(matches!(t.await.unwrap(), Woken::Moved(_)), "the high watermark moved");
        // Not known (a lost watch): not settled either.
        marks.set_live(0, false);
        assert!(!marks.settled(T, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_resets_deletions_and_lost_watches_end_the_wait() {
        let marks = std::sync::Arc::new(Marks::new(1));
        marks.set_live(0, true);
        let deadline = Instant::now() + Duration::from_secs(2);
        assert_eq!(marks.waiter([(T, 0)]).wait(&[0], deadline, false).await, Woken::Deadline);

        let w = marks.waiter([(T, 0)]);
        marks.reset(0, 40);
        assert!(matches!(w.wait(&[0], soon(), false).await, Woken::Moved(_)));

        let w = marks.waiter([(T, 0)]);
        marks.topic_deleted(T, 41);
        assert!(matches!(w.wait(&[0], soon(), false).await, Woken::Moved(_)));

        let w = marks.waiter([(T, 0)]);
        marks.set_live(0, false);
        assert!(matches!(w.wait(&[0], soon(), false).await, Woken::Moved(_)));
        // Blind: the wait is a poll, ended (to read again) long before its deadline.
        let w = marks.waiter([(T, 0)]);
        assert!(matches!(w.wait(&[0], soon(), false).await, Woken::Moved(_)));
    }
}
