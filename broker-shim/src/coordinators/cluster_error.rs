//! Why a coordinator's call to the coordinator cluster (a load, a store, a marker write) did not
//! go through: the cluster's answer with its Kafka error code, or no answer. One type for every
//! kind of state the broker keeps there; the runtime reads it as its own `StoreError`.
//!
//! Owns the error and its reading of the cluster's answers; it must not decide what a code means
//! to a kind (ILLEGAL_GENERATION fences a group, TRANSACTION_COORDINATOR_FENCED a transactional id).

use diskless_proto::ErrorCode;

use super::runtime;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The cluster refused it with this Kafka error code (e.g. a compare-and-set on a version
    /// another broker moved).
    #[error("refused with error {code}: {message}")]
    Refused { code: ErrorCode, message: String },
    /// No answer (the cluster could not be reached, or did not answer in time).
    #[error("coordinator cluster unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// The cluster's answer `code` (0: it went through) with its message.
    pub fn check(code: i32, message: Option<String>) -> Result<(), StoreError> {
        match code {
            0 => Ok(()),
            code => Err(StoreError::Refused { code: ErrorCode::from_wire(code), message: message.unwrap_or_default() }),
        }
    }

    /// A transport failure: no answer.
    pub fn unavailable(status: &tonic::Status) -> StoreError {
        StoreError::Unavailable(status.message().to_string())
    }

    /// As the runtime reads it: a refusal with `fenced` (the kind's code for "another version is
    /// stored": ILLEGAL_GENERATION, FENCED_STATE_EPOCH, TRANSACTION_COORDINATOR_FENCED) is a fence,
    /// another refusal stands, no answer is an unknown outcome.
    pub fn for_runtime(self, fenced: ErrorCode) -> runtime::StoreError {
        match self {
            StoreError::Refused { code, message } if code == fenced => runtime::StoreError::Fenced(message),
            StoreError::Refused { code, message } => runtime::StoreError::Refused { code, message },
            StoreError::Unavailable(message) => runtime::StoreError::Unknown(message),
        }
    }

    /// Whether the cluster refused it with `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        matches!(self, StoreError::Refused { code: c, .. } if *c == code)
    }
}
