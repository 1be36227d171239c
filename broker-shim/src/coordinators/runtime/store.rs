//! What the runtime needs of the place a kind of state is kept (the coordinator cluster, faked in
//! tests): a load that answers the stored state with its version, and a compare-and-set store.
//!
//! Owns the contract and its one error type. It must not know a kind's wire messages: each kind's
//! implementation converts (`StoreShareState`, `StoreGroup`, `StoreTxn`) and maps the cluster's
//! codes onto [`StoreError`].

use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

/// Why a load or a store did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Another version is stored: another broker stored since this one read. Reload and retry.
    #[error("fenced: {0}")]
    Fenced(String),
    /// This change is refused as such (e.g. INVALID_RECORD_STATE): retrying it changes nothing.
    #[error("refused with error {code}: {message}")]
    Refused { code: ErrorCode, message: String },
    /// Unknown whether it was stored (the cluster could not be reached, or did not answer in time).
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

/// Where one kind of state is kept, by key, each stored state with a version (0: none stored).
pub trait Store<K, S>: Send + Sync + 'static {
    /// The stored state of `key` and its version, or `None`.
    fn load<'a>(&'a self, key: &'a K) -> BoxFuture<'a, Result<Option<(S, u64)>, StoreError>>;
    /// Stores `state` for `key` if the stored version is `expected` (0: none is stored), else
    /// [`StoreError::Fenced`]; the version it was stored at.
    fn store<'a>(&'a self, key: &'a K, state: &'a S, expected: u64) -> BoxFuture<'a, Result<u64, StoreError>>;
}
