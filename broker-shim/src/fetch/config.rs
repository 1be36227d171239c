//! `[fetch]`: the fetch path's settings (its caches, and how near byte ranges must be to be read as
//! one). Owned here, composed by `crate::config`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchConfig {
    /// Bytes of raw batches kept in the byte-range cache.
    pub cache_bytes: usize,
    /// Ranges of one object closer than this are read with one GET.
    pub coalesce_gap_bytes: u64,
    /// Batch coordinates kept so fetches of recent data need no FindBatches (about 150 bytes
    /// each; 0: none).
    pub coordinate_cache_entries: usize,
    /// Batches appended longer ago than this are catch-up reads (a consumer replaying old data).
    pub catch_up_age_ms: u64,
    /// Object bytes of catch-up reads in flight at once, over all fetches of the broker; reads of
    /// newer data never wait for it.
    pub catch_up_bytes_in_flight: u64,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            cache_bytes: 64 << 20,
            coalesce_gap_bytes: 64 << 10,
            coordinate_cache_entries: crate::cluster::coordinates::DEFAULT_MAX_ENTRIES,
            catch_up_age_ms: 30_000,
            catch_up_bytes_in_flight: 32 << 20,
        }
    }
}
