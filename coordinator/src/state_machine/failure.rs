//! A Kafka error with its message, as every operation answers one item it refuses, and Kafka's
//! error codes. The bottom of the state machine's types: it imports none of them.

use serde::{Deserialize, Serialize};

pub use diskless_proto::ErrorCode;

/// A Kafka error with its message, for one item of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}
