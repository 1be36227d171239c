//! `[storage]`: where WAL segments go (a local directory, memory, S3 or an S3-compatible server,
//! any store `object_store` builds from a URL), tagged by `kind`. Parsing only; `storage` builds
//! the store.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where WAL segments go.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "lowercase")]
pub enum StorageConfig {
    /// A local directory (the default for local setups).
    Local { path: PathBuf },
    /// In memory (tests).
    Memory,
    /// S3 or an S3-compatible server.
    S3 {
        bucket: String,
        #[serde(default)]
        endpoint: Option<String>,
        #[serde(default = "default_region")]
        region: String,
        #[serde(default)]
        access_key_id: Option<String>,
        #[serde(default)]
        secret_access_key: Option<String>,
        /// Path-style requests (`endpoint/bucket/key`), what MinIO-like servers expect.
        #[serde(default = "yes")]
        path_style: bool,
        #[serde(default)]
        allow_http: bool,
    },
    /// Any store `object_store` can build from a URL (`gs://bucket`, `az://container`, ...),
    /// with its options (credentials and so on).
    Url {
        url: String,
        #[serde(default)]
        options: BTreeMap<String, String>,
    },
}

fn yes() -> bool {
    true
}
fn default_region() -> String {
    "us-east-1".into()
}
