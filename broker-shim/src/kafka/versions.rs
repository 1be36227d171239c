//! The API versions this broker speaks: what kafka-protocol decodes, cut to what the handlers
//! implement (Produce and Fetch stop at 12: later versions name topics by id only).

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
        _ => return None,
    })
}

/// Every API this broker answers, for ApiVersions.
pub const APIS: [ApiKey; 10] = [
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
];
