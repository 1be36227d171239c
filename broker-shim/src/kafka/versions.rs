//! The API versions this broker speaks: what kafka-protocol decodes, cut to what the handlers
//! implement (Produce and Fetch stop at 12, OffsetCommit and OffsetFetch at 9: later versions name
//! topics by id only).

use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Message, VersionRange};

pub fn supported(api: ApiKey) -> Option<VersionRange> {
    let cap = |r: VersionRange, max: i16| VersionRange { min: r.min, max: r.max.min(max) };
    Some(match api {
        ApiKey::ApiVersions => ApiVersionsRequest::VERSIONS,
        ApiKey::Metadata => cap(MetadataRequest::VERSIONS, 12),
        ApiKey::Produce => cap(ProduceRequest::VERSIONS, 12),
        ApiKey::Fetch => cap(FetchRequest::VERSIONS, 12),
        ApiKey::ListOffsets => ListOffsetsRequest::VERSIONS,
        ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS,
        ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS,
        ApiKey::DeleteRecords => DeleteRecordsRequest::VERSIONS,
        ApiKey::InitProducerId => InitProducerIdRequest::VERSIONS,
        ApiKey::FindCoordinator => FindCoordinatorRequest::VERSIONS,
        ApiKey::JoinGroup => JoinGroupRequest::VERSIONS,
        ApiKey::SyncGroup => SyncGroupRequest::VERSIONS,
        ApiKey::Heartbeat => HeartbeatRequest::VERSIONS,
        ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS,
        ApiKey::OffsetCommit => cap(OffsetCommitRequest::VERSIONS, 9),
        ApiKey::OffsetFetch => cap(OffsetFetchRequest::VERSIONS, 9),
        ApiKey::ListGroups => ListGroupsRequest::VERSIONS,
        ApiKey::DescribeGroups => cap(DescribeGroupsRequest::VERSIONS, 5),
        ApiKey::DeleteGroups => DeleteGroupsRequest::VERSIONS,
        ApiKey::OffsetDelete => OffsetDeleteRequest::VERSIONS,
        // Answered before authentication on SASL listeners (`security::sasl`), with
        // ILLEGAL_SASL_STATE elsewhere.
        ApiKey::SaslHandshake => SaslHandshakeRequest::VERSIONS,
        ApiKey::SaslAuthenticate => SaslAuthenticateRequest::VERSIONS,
        // Accepted only to be refused (UNSUPPORTED_VERSION) and never advertised: KIP-848 clients
        // fall back to the classic protocol.
        ApiKey::ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest::VERSIONS,
        _ => return None,
    })
}

/// Every API this broker answers, for ApiVersions.
pub const APIS: [ApiKey; 22] = [
    ApiKey::ApiVersions,
    ApiKey::Metadata,
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::DeleteRecords,
    ApiKey::InitProducerId,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::ListGroups,
    ApiKey::DescribeGroups,
    ApiKey::DeleteGroups,
    ApiKey::OffsetDelete,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
];
