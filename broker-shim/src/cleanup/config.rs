//! `[cleanup]`: how often the cleaner runs, how long released and orphan objects are kept. Owned
//! here, composed by `crate::config`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanupConfig {
    /// How often released files are deleted.
    pub interval_ms: u64,
    /// How long a file waits after its last release before it is deleted (readers in flight may
    /// still be fetching from it).
    pub delete_grace_ms: u64,
    /// `diskless.coordinator.orphan.scan.interval.ms` (0: no orphan scans).
    pub orphan_scan_interval_ms: u64,
    /// `diskless.coordinator.orphan.scan.grace.period.ms`: an unknown object younger than this may
    /// still be waiting for its commit, and is left alone. The produce path sends no commit of a
    /// segment later than this (less a margin, see `produce::commit_deadline`) after its upload.
    pub orphan_grace_ms: u64,
}

impl Default for CleanupConfig {
    fn default() -> Self {
        CleanupConfig {
            interval_ms: 30_000,
            delete_grace_ms: 60_000,
            orphan_scan_interval_ms: 600_000,
            orphan_grace_ms: 600_000,
        }
    }
}

/// Clock difference between brokers and coordinator nodes the grace periods allow for.
const CLOCK_SKEW_MARGIN_MS: u64 = 15_000;

impl CleanupConfig {
    /// Warns about grace periods short enough to inconvenience readers or producers (never
    /// unsafe: an object is fenced through the coordinators' logs before it is deleted).
    pub fn validate(&self) {
        // Safety does not depend on the grace periods (an object is fenced through the
        // coordinators' logs before it is deleted); they decide who is inconvenienced.
        let reader_bound = 15_000 + CLOCK_SKEW_MARGIN_MS;
        if self.delete_grace_ms < reader_bound {
            tracing::warn!(
                grace_ms = self.delete_grace_ms,
                "cleanup.delete_grace_ms is under {reader_bound} ms: a consumer that looked batches up just before \
                 they were released may find their object deleted (a retriable storage error)"
            );
        }
        if self.orphan_grace_ms < 60_000 {
            tracing::warn!(
                grace_ms = self.orphan_grace_ms,
                "cleanup.orphan_grace_ms is under a minute: a segment not committed within it (less a margin) is \
                 abandoned and its producers must retry"
            );
        }
    }
}
