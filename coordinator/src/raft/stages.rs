//! Where a log entry's time goes on this node, for finding what a commit waits for.
//!
//! Stages of every entry this node appends (all metadata partitions together):
//! - `append_to_durable`: written to the segmented log → covered by a log fsync (group commit);
//! - `durable_to_apply`: durable here → applied here: on a leader, the wait for a quorum of
//!   followers to make it durable too (replication); on a follower, the wait for the leader's next
//!   message saying it is committed;
//! - `apply`: applying it to the state machine;
//! - `proposal`, for every proposal made on this node: proposed → applied on this leader (what a
//!   client waits for beyond routing).
//!
//! Owns only timing (histograms in microseconds, reset on demand); it must not change what happens
//! to an entry. Cost: a short lock per entry and stage.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use hdrhistogram::Histogram;

/// The stage names, in order.
pub const STAGES: [&str; 4] = ["append_to_durable", "durable_to_apply", "apply", "proposal"];

/// Entries whose append time is kept while they wait to be applied, at most (older ones are
/// dropped: a follower far behind does not grow this without bound).
const MAX_PENDING: usize = 100_000;

pub struct Stages {
    inner: Mutex<Inner>,
}

struct Inner {
    /// (metadata partition, index) → (appended, durable)
    pending: HashMap<(u32, u64), (Instant, Option<Instant>)>,
    histograms: Vec<Histogram<u64>>,
}

/// One stage's figures, in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageFigures {
    pub name: &'static str,
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 2).expect("valid histogram bounds")
}

impl Default for Stages {
    fn default() -> Self {
        Stages {
            inner: Mutex::new(Inner {
                pending: HashMap::new(),
                histograms: STAGES.iter().map(|_| histogram()).collect(),
            }),
        }
    }
}

impl Stages {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(inner: &mut Inner, stage: usize, from: Instant, to: Instant) {
        let us = to.saturating_duration_since(from).as_micros().max(1) as u64;
        inner.histograms[stage].saturating_record(us);
    }

    /// Entries `indexes` of `partition` were written (not yet durable).
    pub fn appended(&self, partition: u32, indexes: impl Iterator<Item = u64>) {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.pending.len() > MAX_PENDING {
            inner.pending.clear();
        }
        for i in indexes {
            inner.pending.insert((partition, i), (now, None));
        }
    }

    /// Entries `indexes` of `partition` are durable.
    pub fn durable(&self, partition: u32, indexes: impl Iterator<Item = u64>) {
        let now = Instant::now();
        let mut inner = self.lock();
        for i in indexes {
            if let Some((appended, durable)) = inner.pending.get_mut(&(partition, i)) {
                *durable = Some(now);
                let appended = *appended;
                Self::record(&mut inner, 0, appended, now);
            }
        }
    }

    /// Entry `index` of `partition` was applied: it started at `started`.
    pub fn applied(&self, partition: u32, index: u64, started: Instant) {
        let now = Instant::now();
        let mut inner = self.lock();
        if let Some((_, Some(durable))) = inner.pending.remove(&(partition, index)) {
            Self::record(&mut inner, 1, durable, started);
        }
        Self::record(&mut inner, 2, started, now);
    }

    /// A proposal made at `started` was applied on this leader.
    pub fn proposed(&self, started: Instant) {
        let mut inner = self.lock();
        Self::record(&mut inner, 3, started, Instant::now());
    }

    /// Every stage's figures since the last reset.
    pub fn figures(&self) -> Vec<StageFigures> {
        let inner = self.lock();
        STAGES
            .iter()
            .zip(&inner.histograms)
            .map(|(name, h)| StageFigures {
                name,
                count: h.len(),
                p50_us: h.value_at_quantile(0.5),
                p99_us: h.value_at_quantile(0.99),
                max_us: h.max(),
            })
            .collect()
    }

    pub fn reset(&self) {
        let mut inner = self.lock();
        inner.histograms.iter_mut().for_each(|h| h.reset());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_goes_through_every_stage_once() {
        let s = Stages::default();
        s.appended(3, [7, 8].into_iter());
        s.durable(3, [7, 8].into_iter());
        s.applied(3, 7, Instant::now());
        s.proposed(Instant::now());
        let f = s.figures();
        assert_eq!(f.iter().map(|f| f.count).collect::<Vec<_>>(), vec![2, 1, 1, 1]);
        s.reset();
        assert!(s.figures().iter().all(|f| f.count == 0));
        // Entry 8 is still waiting to be applied; applying it later counts it.
        s.applied(3, 8, Instant::now());
        assert_eq!(s.figures()[1].count, 1);
    }
}
