//! Errors the broker answers with: Kafka error codes and a message, as clients see them.

use diskless_proto::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct KafkaError {
    pub code: ErrorCode,
    pub message: String,
    /// The records of a refused batch that were at fault (Produce v8+'s `record_errors`: the
    /// record's index in its batch, and why), as Kafka's `RecordValidationException` carries them.
    pub record_errors: Vec<(i32, String)>,
}

impl KafkaError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> KafkaError {
        KafkaError { code, message: message.into(), record_errors: vec![] }
    }

    /// The error of a batch with faulty records.
    pub fn with_record_errors(mut self, errors: Vec<(i32, String)>) -> KafkaError {
        self.record_errors = errors;
        self
    }

    /// From a code and optional message as they come in coordinator responses.
    pub fn from_wire(code: i32, message: Option<String>) -> Option<KafkaError> {
        if code == 0 {
            return None;
        }
        Some(KafkaError::new(ErrorCode::from_wire(code), message.unwrap_or_else(|| format!("error code {code}"))))
    }

    /// A coordinator that could not be reached: retriable.
    pub fn unavailable(what: &str, status: &tonic::Status) -> KafkaError {
        KafkaError::new(ErrorCode::RequestTimedOut, format!("{what}: coordinator unavailable: {}", status.message()))
    }
}
