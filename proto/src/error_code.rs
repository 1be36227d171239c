//! Kafka's error codes, as the coordinator API returns them (KIP-1164 uses Kafka's `int16` codes).
//!
//! The one vocabulary of Kafka codes for the whole project: the coordinator's state machine and
//! services, and every answer of the broker's Kafka listener. Only the codes this project produces
//! are listed; their numbers are Kafka's and must never change. The state machine stores codes as
//! their `i16`: adding a variant is safe, renaming its number or removing it is not. `retriable`
//! follows Kafka's classification, so callers can decide to retry without a table of their own.

/// A Kafka protocol error code. The default is NONE, as in Kafka's messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i16)]
pub enum ErrorCode {
    #[default]
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
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    InvalidRequest = 42,
    OutOfOrderSequenceNumber = 45,
    DuplicateSequenceNumber = 46,
    InvalidProducerEpoch = 47,
    KafkaStorageError = 56,
    UnknownProducerId = 59,
    UnknownTopicId = 100,
    // Produce validation (Kafka's LogValidator).
    TransactionalIdAuthorizationFailed = 53,
    UnsupportedCompressionType = 76,
    InvalidRecord = 87,
    // Consumer groups.
    IllegalGeneration = 22,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    NonEmptyGroup = 68,
    GroupIdNotFound = 69,
    GroupSubscribedToTopic = 86,
    OffsetMetadataTooLarge = 12,
    // The broker's group coordinator (its codes were a private table).
    CoordinatorLoadInProgress = 14,
    CoordinatorNotAvailable = 15,
    NotCoordinator = 16,
    InconsistentGroupProtocol = 23,
    InvalidSessionTimeout = 26,
    RebalanceInProgress = 27,
    MemberIdRequired = 79,
    FencedInstanceId = 82,
    // SASL on the broker's Kafka listeners.
    UnsupportedSaslMechanism = 33,
    IllegalSaslState = 34,
    SaslAuthenticationFailed = 58,
    // Authorization on the broker's Kafka listeners.
    TopicAuthorizationFailed = 29,
    GroupAuthorizationFailed = 30,
    ClusterAuthorizationFailed = 31,
    SecurityDisabled = 54,
    // Leader epochs (KIP-320).
    FencedLeaderEpoch = 74,
    UnknownLeaderEpoch = 75,
    // The broker registry.
    StaleBrokerEpoch = 77,
    DuplicateBrokerRegistration = 101,
    // Transactions.
    InvalidTxnState = 48,
    InvalidProducerIdMapping = 49,
    InvalidTransactionTimeout = 50,
    ConcurrentTransactions = 51,
    TransactionCoordinatorFenced = 52,
    ProducerFenced = 90,
    TransactionAbortable = 120,
    OperationNotAttempted = 55,
    TransactionalIdNotFound = 105,
    UnstableOffsetCommit = 88,
    // KIP-848 consumer groups.
    FencedMemberEpoch = 110,
    UnreleasedInstanceId = 111,
    UnsupportedAssignor = 112,
    StaleMemberEpoch = 113,
    InvalidRegularExpression = 128,
    // KIP-932 share groups.
    InvalidRecordState = 121,
    ShareSessionNotFound = 122,
    InvalidShareSessionEpoch = 123,
    FencedStateEpoch = 124,
    ShareSessionLimitReached = 133,
    GroupMaxSizeReached = 81,
}

impl ErrorCode {
    /// Every code above, for exhaustive tests and lookups.
    pub const ALL: [ErrorCode; 75] = [
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
        ErrorCode::InvalidReplicaAssignment,
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
        ErrorCode::OffsetMetadataTooLarge,
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotCoordinator,
        ErrorCode::InconsistentGroupProtocol,
        ErrorCode::InvalidSessionTimeout,
        ErrorCode::RebalanceInProgress,
        ErrorCode::MemberIdRequired,
        ErrorCode::FencedInstanceId,
        ErrorCode::UnsupportedSaslMechanism,
        ErrorCode::IllegalSaslState,
        ErrorCode::SaslAuthenticationFailed,
        ErrorCode::TopicAuthorizationFailed,
        ErrorCode::GroupAuthorizationFailed,
        ErrorCode::ClusterAuthorizationFailed,
        ErrorCode::SecurityDisabled,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::StaleBrokerEpoch,
        ErrorCode::DuplicateBrokerRegistration,
        ErrorCode::InvalidTxnState,
        ErrorCode::InvalidProducerIdMapping,
        ErrorCode::InvalidTransactionTimeout,
        ErrorCode::ConcurrentTransactions,
        ErrorCode::TransactionCoordinatorFenced,
        ErrorCode::ProducerFenced,
        ErrorCode::TransactionAbortable,
        ErrorCode::OperationNotAttempted,
        ErrorCode::TransactionalIdNotFound,
        ErrorCode::UnstableOffsetCommit,
        ErrorCode::FencedMemberEpoch,
        ErrorCode::UnreleasedInstanceId,
        ErrorCode::UnsupportedAssignor,
        ErrorCode::StaleMemberEpoch,
        ErrorCode::InvalidRegularExpression,
        ErrorCode::InvalidRecordState,
        ErrorCode::ShareSessionNotFound,
        ErrorCode::InvalidShareSessionEpoch,
        ErrorCode::FencedStateEpoch,
        ErrorCode::ShareSessionLimitReached,
        ErrorCode::GroupMaxSizeReached,
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

    /// The code of a gRPC message's `int32`; one this project does not know (or out of `int16`'s
    /// range) is UNKNOWN_SERVER_ERROR.
    pub fn from_wire(code: i32) -> ErrorCode {
        i16::try_from(code).ok().and_then(ErrorCode::from_code).unwrap_or(ErrorCode::UnknownServerError)
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
            ErrorCode::InvalidReplicaAssignment => "INVALID_REPLICA_ASSIGNMENT",
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
            ErrorCode::CoordinatorLoadInProgress => "COORDINATOR_LOAD_IN_PROGRESS",
            ErrorCode::CoordinatorNotAvailable => "COORDINATOR_NOT_AVAILABLE",
            ErrorCode::NotCoordinator => "NOT_COORDINATOR",
            ErrorCode::InconsistentGroupProtocol => "INCONSISTENT_GROUP_PROTOCOL",
            ErrorCode::InvalidSessionTimeout => "INVALID_SESSION_TIMEOUT",
            ErrorCode::RebalanceInProgress => "REBALANCE_IN_PROGRESS",
            ErrorCode::MemberIdRequired => "MEMBER_ID_REQUIRED",
            ErrorCode::FencedInstanceId => "FENCED_INSTANCE_ID",
            ErrorCode::UnsupportedSaslMechanism => "UNSUPPORTED_SASL_MECHANISM",
            ErrorCode::IllegalSaslState => "ILLEGAL_SASL_STATE",
            ErrorCode::SaslAuthenticationFailed => "SASL_AUTHENTICATION_FAILED",
            ErrorCode::TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
            ErrorCode::GroupAuthorizationFailed => "GROUP_AUTHORIZATION_FAILED",
            ErrorCode::ClusterAuthorizationFailed => "CLUSTER_AUTHORIZATION_FAILED",
            ErrorCode::SecurityDisabled => "SECURITY_DISABLED",
            ErrorCode::FencedLeaderEpoch => "FENCED_LEADER_EPOCH",
            ErrorCode::UnknownLeaderEpoch => "UNKNOWN_LEADER_EPOCH",
            ErrorCode::StaleBrokerEpoch => "STALE_BROKER_EPOCH",
            ErrorCode::DuplicateBrokerRegistration => "DUPLICATE_BROKER_REGISTRATION",
            ErrorCode::InvalidTxnState => "INVALID_TXN_STATE",
            ErrorCode::InvalidProducerIdMapping => "INVALID_PRODUCER_ID_MAPPING",
            ErrorCode::InvalidTransactionTimeout => "INVALID_TRANSACTION_TIMEOUT",
            ErrorCode::ConcurrentTransactions => "CONCURRENT_TRANSACTIONS",
            ErrorCode::TransactionCoordinatorFenced => "TRANSACTION_COORDINATOR_FENCED",
            ErrorCode::ProducerFenced => "PRODUCER_FENCED",
            ErrorCode::TransactionAbortable => "TRANSACTION_ABORTABLE",
            ErrorCode::OperationNotAttempted => "OPERATION_NOT_ATTEMPTED",
            ErrorCode::TransactionalIdNotFound => "TRANSACTIONAL_ID_NOT_FOUND",
            ErrorCode::OffsetMetadataTooLarge => "OFFSET_METADATA_TOO_LARGE",
            ErrorCode::UnstableOffsetCommit => "UNSTABLE_OFFSET_COMMIT",
            ErrorCode::FencedMemberEpoch => "FENCED_MEMBER_EPOCH",
            ErrorCode::UnreleasedInstanceId => "UNRELEASED_INSTANCE_ID",
            ErrorCode::UnsupportedAssignor => "UNSUPPORTED_ASSIGNOR",
            ErrorCode::StaleMemberEpoch => "STALE_MEMBER_EPOCH",
            ErrorCode::InvalidRegularExpression => "INVALID_REGULAR_EXPRESSION",
            ErrorCode::InvalidRecordState => "INVALID_RECORD_STATE",
            ErrorCode::ShareSessionNotFound => "SHARE_SESSION_NOT_FOUND",
            ErrorCode::InvalidShareSessionEpoch => "INVALID_SHARE_SESSION_EPOCH",
            ErrorCode::FencedStateEpoch => "FENCED_STATE_EPOCH",
            ErrorCode::ShareSessionLimitReached => "SHARE_SESSION_LIMIT_REACHED",
            ErrorCode::GroupMaxSizeReached => "GROUP_MAX_SIZE_REACHED",
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
                | ErrorCode::CoordinatorLoadInProgress
                | ErrorCode::CoordinatorNotAvailable
                | ErrorCode::NotCoordinator
                | ErrorCode::FencedLeaderEpoch
                | ErrorCode::UnknownLeaderEpoch
                | ErrorCode::ConcurrentTransactions
                | ErrorCode::UnstableOffsetCommit
                | ErrorCode::ShareSessionNotFound
                | ErrorCode::InvalidShareSessionEpoch
                | ErrorCode::ShareSessionLimitReached
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
    fn names_are_unique_and_match_the_variants() {
        let mut names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ErrorCode::ALL.len());
        for c in ErrorCode::ALL {
            // Kafka's name is the variant's, in SCREAMING_SNAKE_CASE.
            let variant: String = format!("{c:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, ch)| {
                    let sep = (i > 0 && ch.is_ascii_uppercase()).then_some('_');
                    sep.into_iter().chain(std::iter::once(ch.to_ascii_uppercase()))
                })
                .collect();
            assert_eq!(c.name(), variant, "{c:?}");
        }
    }

    #[test]
    fn codes_round_trip_and_are_unique() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
            assert_eq!(ErrorCode::from_wire(c.wire()), c);
        }
        assert_eq!(ErrorCode::from_wire(1 << 20), ErrorCode::UnknownServerError);
        assert_eq!(ErrorCode::from_wire(i32::from(i16::MAX)), ErrorCode::UnknownServerError);
        let mut codes: Vec<i16> = ErrorCode::ALL.iter().map(|c| c.code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), ErrorCode::ALL.len());
    }
}
