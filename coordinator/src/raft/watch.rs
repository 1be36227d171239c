//! One metadata partition's recent partition changes on this replica, for `WatchPartitions`: the
//! state machine store publishes each applied run of entries here once it is written; a watcher
//! reads the changes after its cursor (a Raft log index, the same on every replica, so a watcher
//! moves between nodes and resumes where it was).
//!
//! The history is bounded (entries and changes). It holds every change after its `floor`: the
//! replica's applied index when the node started, when a snapshot was installed (the entries it
//! covers were never applied here), or the last entry that aged out. A cursor below the floor is
//! answered with a reset, as etcd answers a compacted revision: the watcher re-reads what it
//! derived. Owns no I/O and decides nothing about what a change means.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::state_machine::changes::Changes;

/// Entries with changes kept, at most.
const MAX_ENTRIES: usize = 16_384;
/// Partition changes kept over all entries, at most (a batch's coordinates weigh two).
const MAX_CHANGES: usize = 131_072;

/// What a watcher at some cursor gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// The changes after the cursor are not all held: start again from `at`.
    Reset { at: u64 },
    /// The entries after the cursor with changes, in index order; the cursor moves to `upto`.
    Changes { upto: u64, entries: Vec<(u64, Changes)> },
}

#[derive(Default)]
struct History {
    floor: u64,
    entries: VecDeque<(u64, Changes)>,
    changes: usize,
}

/// See the module doc. Shared by the state machine store (writer) and the watch streams.
pub struct WatchHub {
    history: Mutex<History>,
    /// The applied index, set under the history's lock after its entries are in.
    applied: tokio::sync::watch::Sender<u64>,
}

impl Default for WatchHub {
    fn default() -> Self {
        WatchHub { history: Mutex::default(), applied: tokio::sync::watch::channel(0).0 }
    }
}

impl WatchHub {
    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the history at `index` (the replica's state reflects the entries up to it, whose
    /// changes are not held): at start and when a snapshot is installed.
    pub fn restart_at(&self, index: u64) {
        let mut h = self.history();
        h.entries.clear();
        h.changes = 0;
        h.floor = index;
        self.applied.send_replace(index);
    }

    /// Records the changes of entries just applied (and written), up to `index`.
    pub fn applied(&self, index: u64, entries: Vec<(u64, Changes)>) {
        let mut h = self.history();
        for (at, c) in entries {
            if at <= h.floor || h.entries.back().is_some_and(|(last, _)| *last >= at) {
                continue;
            }
            h.changes += c.weight();
            h.entries.push_back((at, c));
        }
        while h.entries.len() > MAX_ENTRIES || (h.changes > MAX_CHANGES && h.entries.len() > 1) {
            let Some((at, c)) = h.entries.pop_front() else { break };
            h.changes -= c.weight();
            h.floor = at;
        }
        if index > *self.applied.borrow() {
            self.applied.send_replace(index);
        }
    }

    /// The applied index now.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Fires when the applied index moves.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// The changes after `cursor`, at most about `max_changes` of them (whole entries, at least
    /// one).
    pub fn read_after(&self, cursor: u64, max_changes: usize) -> Read {
        let h = self.history();
        let applied = *self.applied.borrow();
        if cursor < h.floor {
            return Read::Reset { at: applied };
        }
        let start = h.entries.partition_point(|(at, _)| *at <= cursor);
        let mut entries = vec![];
        let mut taken = 0;
        for (at, c) in h.entries.iter().skip(start) {
            if !entries.is_empty() && taken + c.weight() > max_changes {
                return Read::Changes { upto: entries.last().map_or(cursor, |(a, _)| *a), entries };
            }
            taken += c.weight();
            entries.push((*at, c.clone()));
        }
        Read::Changes { upto: applied.max(cursor), entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_machine::changes::PartitionChange;
    use crate::state_machine::keys::TopicPartition;

    fn change(p: i32, hwm: i64) -> Changes {
        Changes {
            partitions: vec![PartitionChange {
                tp: TopicPartition { topic_id: uuid::Uuid::from_u128(1), partition: p },
                high_watermark: Some(hwm),
                log_start_offset: None,
                deleted: false,
            }],
            log_starts_moved: false,
            batches: vec![],
            moved: vec![],
        }
    }

    fn hwms(r: &Read) -> Vec<(u64, i64)> {
        match r {
            Read::Changes { entries, .. } => {
                entries.iter().map(|(at, c)| (*at, c.partitions[0].high_watermark.unwrap())).collect()
            }
            Read::Reset { .. } => panic!("reset"),
        }
    }

    #[test]
    fn a_watcher_resumes_after_its_cursor_without_missing_or_repeating_a_change() {
        let hub = WatchHub::default();
        hub.restart_at(10);
        hub.applied(13, vec![(11, change(0, 5)), (13, change(1, 7))]);
        hub.applied(15, vec![(15, change(0, 9))]);
        assert_eq!(hwms(&hub.read_after(10, 100)), vec![(11, 5), (13, 7), (15, 9)]);
        assert_eq!(hwms(&hub.read_after(11, 100)), vec![(13, 7), (15, 9)]);
        assert_eq!(hwms(&hub.read_after(15, 100)), vec![]);
        let Read::Changes { upto, .. } = hub.read_after(15, 100) else { panic!() };
        assert_eq!(upto, 15);
        // A small budget: whole entries, and the cursor stops at the last one given.
        let r = hub.read_after(10, 1);
        assert_eq!(hwms(&r), vec![(11, 5)]);
        assert!(matches!(r, Read::Changes { upto: 11, .. }));
        // A cursor ahead of this replica (it came from another node) waits, it is not a reset.
        assert!(matches!(hub.read_after(20, 100), Read::Changes { upto: 20, .. }));
    }

    #[test]
    fn a_cursor_below_what_the_replica_holds_is_told_to_reset() {
        let hub = WatchHub::default();
        hub.restart_at(10);
        assert_eq!(hub.read_after(9, 100), Read::Reset { at: 10 });
        hub.applied(12, vec![(12, change(0, 1))]);
        // A snapshot install: the entries it covers were never applied here.
        hub.restart_at(50);
        assert_eq!(hub.read_after(12, 100), Read::Reset { at: 50 });
        assert_eq!(hwms(&hub.read_after(50, 100)), vec![]);
    }

    #[test]
    fn the_history_is_bounded_and_what_aged_out_resets_its_watchers() {
        let hub = WatchHub::default();
        hub.restart_at(0);
        let n = MAX_ENTRIES as u64 + 10;
        for i in 1..=n {
            hub.applied(i, vec![(i, change(0, i as i64))]);
        }
        assert!(matches!(hub.read_after(5, 10), Read::Reset { at } if at == n));
        assert_eq!(hwms(&hub.read_after(n - 1, 10)), vec![(n, n as i64)]);
    }
}
