//! Kafka's error codes, as the coordinator API returns them (KIP-1164 uses Kafka's `int16` codes).
//!
//! Only the codes this project produces are listed; their numbers are Kafka's and must never
//! change. `retriable` follows Kafka's classification, so callers can decide to retry without a
//! table of their own.

/// A Kafka protocol error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i16)]
pub enum ErrorCode {
    None = 0,
    UnknownServerError = -1,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    ReplicaNotAvailable = 9,
    MessageTooLarge = 10,
    RecordListTooLarge = 18,
    InvalidTopicException = 17,
    InvalidRequiredAcks = 21,
    InvalidTimestamp = 32,
    UnsupportedVersion = 35,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidConfig = 40,
    InvalidRequest = 42,
    OutOfOrderSequenceNumber = 45,
    DuplicateSequenceNumber = 46,
    InvalidProducerEpoch = 47,
    KafkaStorageError = 56,
    UnknownProducerId = 59,
    UnknownTopicId = 100,
    // Produce validation (Kafka's LogValidator, issue 23).
    TransactionalIdAuthorizationFailed = 53,
    UnsupportedCompressionType = 76,
    InvalidRecord = 87,
    // Consumer groups (issue 15).
    IllegalGeneration = 22,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    NonEmptyGroup = 68,
    GroupIdNotFound = 69,
    GroupSubscribedToTopic = 86,
    // The broker registry (issue 15).
    StaleBrokerEpoch = 77,
    DuplicateBrokerRegistration = 101,
}

impl ErrorCode {
    /// Every code above, for exhaustive tests and lookups.
    pub const ALL: [ErrorCode; 35] = [
        ErrorCode::None,
        ErrorCode::UnknownServerError,
        ErrorCode::OffsetOutOfRange,
        ErrorCode::CorruptMessage,
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::RequestTimedOut,
        ErrorCode::ReplicaNotAvailable,
        ErrorCode::MessageTooLarge,
        ErrorCode::RecordListTooLarge,
        ErrorCode::InvalidTopicException,
        ErrorCode::InvalidRequiredAcks,
        ErrorCode::InvalidTimestamp,
        ErrorCode::UnsupportedVersion,
        ErrorCode::TopicAlreadyExists,
        ErrorCode::InvalidPartitions,
        ErrorCode::InvalidConfig,
        ErrorCode::InvalidRequest,
        ErrorCode::OutOfOrderSequenceNumber,
        ErrorCode::DuplicateSequenceNumber,
        ErrorCode::InvalidProducerEpoch,
        ErrorCode::KafkaStorageError,
        ErrorCode::UnknownProducerId,
        ErrorCode::UnknownTopicId,
        ErrorCode::TransactionalIdAuthorizationFailed,
        ErrorCode::UnsupportedCompressionType,
        ErrorCode::InvalidRecord,
        ErrorCode::IllegalGeneration,
        ErrorCode::InvalidGroupId,
        ErrorCode::UnknownMemberId,
        ErrorCode::NonEmptyGroup,
        ErrorCode::GroupIdNotFound,
        ErrorCode::GroupSubscribedToTopic,
        ErrorCode::StaleBrokerEpoch,
        ErrorCode::DuplicateBrokerRegistration,
    ];

    /// The code as Kafka's `int16`.
    pub fn code(self) -> i16 {
        self as i16
    }

    /// The code as carried in the gRPC messages (`int32`).
    pub fn wire(self) -> i32 {
        i32::from(self.code())
    }

    /// The code for a Kafka `int16`, if this project knows it.
    pub fn from_code(code: i16) -> Option<ErrorCode> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }

    /// Kafka's name for the code, as in its documentation.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "NONE",
            ErrorCode::UnknownServerError => "UNKNOWN_SERVER_ERROR",
            ErrorCode::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            ErrorCode::CorruptMessage => "CORRUPT_MESSAGE",
            ErrorCode::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
            ErrorCode::NotLeaderOrFollower => "NOT_LEADER_OR_FOLLOWER",
            ErrorCode::RequestTimedOut => "REQUEST_TIMED_OUT",
            ErrorCode::ReplicaNotAvailable => "REPLICA_NOT_AVAILABLE",
            ErrorCode::MessageTooLarge => "MESSAGE_TOO_LARGE",
            ErrorCode::RecordListTooLarge => "RECORD_LIST_TOO_LARGE",
            ErrorCode::InvalidTopicException => "INVALID_TOPIC_EXCEPTION",
            ErrorCode::InvalidRequiredAcks => "INVALID_REQUIRED_ACKS",
            ErrorCode::InvalidTimestamp => "INVALID_TIMESTAMP",
            ErrorCode::UnsupportedVersion => "UNSUPPORTED_VERSION",
            ErrorCode::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            ErrorCode::InvalidPartitions => "INVALID_PARTITIONS",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::OutOfOrderSequenceNumber => "OUT_OF_ORDER_SEQUENCE_NUMBER",
            ErrorCode::DuplicateSequenceNumber => "DUPLICATE_SEQUENCE_NUMBER",
            ErrorCode::InvalidProducerEpoch => "INVALID_PRODUCER_EPOCH",
            ErrorCode::KafkaStorageError => "KAFKA_STORAGE_ERROR",
            ErrorCode::UnknownProducerId => "UNKNOWN_PRODUCER_ID",
            ErrorCode::UnknownTopicId => "UNKNOWN_TOPIC_ID",
            ErrorCode::TransactionalIdAuthorizationFailed => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            ErrorCode::UnsupportedCompressionType => "UNSUPPORTED_COMPRESSION_TYPE",
            ErrorCode::InvalidRecord => "INVALID_RECORD",
            ErrorCode::IllegalGeneration => "ILLEGAL_GENERATION",
            ErrorCode::InvalidGroupId => "INVALID_GROUP_ID",
            ErrorCode::UnknownMemberId => "UNKNOWN_MEMBER_ID",
            ErrorCode::NonEmptyGroup => "NON_EMPTY_GROUP",
            ErrorCode::GroupIdNotFound => "GROUP_ID_NOT_FOUND",
            ErrorCode::GroupSubscribedToTopic => "GROUP_SUBSCRIBED_TO_TOPIC",
            ErrorCode::StaleBrokerEpoch => "STALE_BROKER_EPOCH",
            ErrorCode::DuplicateBrokerRegistration => "DUPLICATE_BROKER_REGISTRATION",
        }
    }

    /// Whether Kafka clients treat the error as retriable.
    pub fn retriable(self) -> bool {
        matches!(
            self,
            ErrorCode::CorruptMessage
                | ErrorCode::UnknownTopicOrPartition
                | ErrorCode::NotLeaderOrFollower
                | ErrorCode::RequestTimedOut
                | ErrorCode::ReplicaNotAvailable
                | ErrorCode::KafkaStorageError
                | ErrorCode::UnknownTopicId
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i16(self.code())
    }
}

impl<'de> serde::Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let code = i16::deserialize(d)?;
        ErrorCode::from_code(code).ok_or_else(|| serde::de::Error::custom(format!("unknown error code {code}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
        }
        let mut codes: Vec<i16> = ErrorCode::ALL.iter().map(|c| c.code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), ErrorCode::ALL.len());
    }
}
