//! `[consolidation]`: when and how much a broker rewrites the batches of the partitions it
//! consolidates (object consolidation, KIP-1165). Parsing and validation only; `consolidate`
//! applies them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsolidationConfig {
    /// Whether this broker consolidates at all (off by default until its benchmark figures and
    /// crash tests are in).
    pub enabled: bool,
    /// How often the partitions this broker consolidates are looked at.
    pub interval_ms: u64,
    /// A batch is rewritten once it has been committed this long (younger data is still read by
    /// tail consumers from the WAL objects, and may be deleted soon by a short retention).
    pub min_age_ms: u64,
    /// The size a consolidated object aims at; one job reads, holds and writes at most about this
    /// much (a batch is never split).
    pub target_bytes: u64,
    /// A partition is rewritten once this many of its batches wait in WAL objects.
    pub min_batches: usize,
    /// Bytes read for consolidation per second, at most (the produce and fetch paths keep their
    /// share of the store).
    pub max_bytes_per_sec: u64,
    /// A batch this close to its retention deadline is left where it is (it goes soon anyway).
    pub expiry_margin_ms: i64,
}

impl Default for ConsolidationConfig {
    fn default() -> Self {
        ConsolidationConfig {
            enabled: false,
            interval_ms: 30_000,
            min_age_ms: 60_000,
            target_bytes: 32 << 20,
            min_batches: 4,
            max_bytes_per_sec: 16 << 20,
            expiry_margin_ms: 300_000,
        }
    }
}

impl ConsolidationConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.interval_ms > 0, "[consolidation] interval_ms must be positive");
        anyhow::ensure!(
            (1 << 10..=1 << 30).contains(&self.target_bytes),
            "[consolidation] target_bytes must be between 1 KiB and 1 GiB (an object's byte offsets are int32)"
        );
        anyhow::ensure!(self.min_batches >= 1, "[consolidation] min_batches must be at least 1");
        anyhow::ensure!(self.max_bytes_per_sec > 0, "[consolidation] max_bytes_per_sec must be positive");
        anyhow::ensure!(self.expiry_margin_ms >= 0, "[consolidation] expiry_margin_ms must not be negative");
        Ok(())
    }
}
