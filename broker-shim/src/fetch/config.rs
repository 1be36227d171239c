//! `[fetch]`: the fetch path's settings (its cache, and how near byte ranges must be to be read as
//! one). Owned here, composed by `crate::config`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchConfig {
    /// Bytes of raw batches kept in the byte-range cache.
    pub cache_bytes: usize,
    /// Ranges of one object closer than this are read with one GET.
    pub coalesce_gap_bytes: u64,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig { cache_bytes: 64 << 20, coalesce_gap_bytes: 64 << 10 }
    }
}
