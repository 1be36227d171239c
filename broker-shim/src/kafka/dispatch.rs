//! The one table of the Kafka APIs this broker answers ([`APIS`]): each API's versions (what
//! kafka-protocol decodes, cut to what its handler implements) and how it is started. Version
//! checks, dispatch and the ApiVersions answer all read this table, so they cannot disagree.
//!
//! Owns which API goes to which handler, and refuses (closing the connection) an API it does not
//! list or a version outside its range. It must not answer an API itself, except ApiVersions,
//! whose answer is the table.

use std::sync::Arc;

use bytes::Bytes;
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Message, VersionRange};

use super::frame::{Malformed, Reason};
use super::listener::Listener;
use super::response::{encode, ready, Pending, Reply};
use super::security::sasl;
use super::{fetch, groups, metadata, offsets, produce, producer_ids, topics};

/// How a request is started.
#[derive(Clone, Copy)]
pub(super) enum Start {
    /// Answered at once whatever its version, the body unread: ApiVersions (a client must learn
    /// the versions even when it speaks none of ours), and the SASL APIs once authentication is
    /// over or on a listener without SASL (`security::sasl` answers them before).
    Any(fn(&RequestHeader) -> Reply),
    /// Decoded now; answered by the future.
    Later(fn(Arc<Listener>, RequestHeader, Bytes) -> anyhow::Result<Pending>),
    /// Started in request order before the next request is read: Produce enqueues its batches,
    /// so a pipelining producer keeps its order.
    InOrder(fn(Arc<Listener>, RequestHeader, Bytes) -> BoxFuture<'static, anyhow::Result<Pending>>),
}

/// One API of the table.
pub(super) struct Api {
    pub key: ApiKey,
    pub versions: VersionRange,
    /// Listed in ApiVersions (ConsumerGroupHeartbeat is accepted only to be refused).
    pub advertised: bool,
    pub start: Start,
}

const fn cap(r: VersionRange, max: i16) -> VersionRange {
    VersionRange { min: r.min, max: if r.max < max { r.max } else { max } }
}

/// Decodes a request body at the header's version; what does not decode closes the connection.
pub(super) fn decode<R: Decodable>(api: ApiKey, header: &RequestHeader, body: &mut Bytes) -> anyhow::Result<R> {
    let v = header.request_api_version;
    R::decode(body, v).map_err(|e| Malformed::body(api, v, e).into())
}

/// A row whose request `$req` is answered later by `$handle(&Listener, &RequestHeader, $req)`.
macro_rules! later {
    ($key:ident, $req:ty, $versions:expr, $handle:path) => {
        Api {
            key: ApiKey::$key,
            versions: $versions,
            advertised: true,
            start: Start::Later(|l, header, mut body| {
                let req = decode::<$req>(ApiKey::$key, &header, &mut body)?;
                Ok(Box::pin(async move { $handle(&l, &header, req).await }))
            }),
        }
    };
}

/// Every API this broker answers. Produce and Fetch stop at 12, OffsetCommit and OffsetFetch at
/// 9 (later versions name topics by id only), Metadata at 12, DescribeGroups at 5.
pub(super) static APIS: [Api; 23] = [
    Api {
        key: ApiKey::ApiVersions,
        versions: ApiVersionsRequest::VERSIONS,
        advertised: true,
        start: Start::Any(api_versions),
    },
    later!(Metadata, MetadataRequest, cap(MetadataRequest::VERSIONS, 12), metadata::metadata),
    Api {
        key: ApiKey::Produce,
        versions: cap(ProduceRequest::VERSIONS, 12),
        advertised: true,
        start: Start::InOrder(|l, header, mut body| {
            Box::pin(async move {
                let req = decode::<ProduceRequest>(ApiKey::Produce, &header, &mut body)?;
                Ok(produce::produce(l, header, req).await)
            })
        }),
    },
    later!(Fetch, FetchRequest, cap(FetchRequest::VERSIONS, 12), fetch::fetch),
    later!(ListOffsets, ListOffsetsRequest, ListOffsetsRequest::VERSIONS, offsets::list_offsets),
    later!(CreateTopics, CreateTopicsRequest, CreateTopicsRequest::VERSIONS, topics::create_topics),
    later!(DeleteTopics, DeleteTopicsRequest, DeleteTopicsRequest::VERSIONS, topics::delete_topics),
    later!(DeleteRecords, DeleteRecordsRequest, DeleteRecordsRequest::VERSIONS, offsets::delete_records),
    later!(InitProducerId, InitProducerIdRequest, InitProducerIdRequest::VERSIONS, producer_ids::init_producer_id),
    Api {
        key: ApiKey::FindCoordinator,
        versions: FindCoordinatorRequest::VERSIONS,
        advertised: true,
        // Answered from the live brokers as they are when the request is read.
        start: Start::Later(|l, header, mut body| {
            let req = decode::<FindCoordinatorRequest>(ApiKey::FindCoordinator, &header, &mut body)?;
            Ok(ready(groups::find_coordinator(&l, &header, req)))
        }),
    },
    later!(JoinGroup, JoinGroupRequest, JoinGroupRequest::VERSIONS, groups::join_group),
    later!(SyncGroup, SyncGroupRequest, SyncGroupRequest::VERSIONS, groups::sync_group),
    later!(Heartbeat, HeartbeatRequest, HeartbeatRequest::VERSIONS, groups::heartbeat),
    later!(LeaveGroup, LeaveGroupRequest, LeaveGroupRequest::VERSIONS, groups::leave_group),
    later!(OffsetCommit, OffsetCommitRequest, cap(OffsetCommitRequest::VERSIONS, 9), groups::offset_commit),
    later!(OffsetFetch, OffsetFetchRequest, cap(OffsetFetchRequest::VERSIONS, 9), groups::offset_fetch),
    later!(ListGroups, ListGroupsRequest, ListGroupsRequest::VERSIONS, groups::list_groups),
    later!(DescribeGroups, DescribeGroupsRequest, cap(DescribeGroupsRequest::VERSIONS, 5), groups::describe_groups),
    later!(DeleteGroups, DeleteGroupsRequest, DeleteGroupsRequest::VERSIONS, groups::delete_groups),
    later!(OffsetDelete, OffsetDeleteRequest, OffsetDeleteRequest::VERSIONS, groups::offset_delete),
    Api {
        key: ApiKey::SaslHandshake,
        versions: sasl::HANDSHAKE_VERSIONS,
        advertised: true,
        start: Start::Any(|header| sasl::illegal_state(ApiKey::SaslHandshake, header)),
    },
    Api {
        key: ApiKey::SaslAuthenticate,
        versions: sasl::AUTHENTICATE_VERSIONS,
        advertised: true,
        start: Start::Any(|header| sasl::illegal_state(ApiKey::SaslAuthenticate, header)),
    },
    // Accepted only to be refused (UNSUPPORTED_VERSION) and never advertised: KIP-848 clients
    // fall back to the classic protocol.
    Api {
        key: ApiKey::ConsumerGroupHeartbeat,
        versions: ConsumerGroupHeartbeatRequest::VERSIONS,
        advertised: false,
        start: Start::Later(|_, header, _| Ok(ready(groups::consumer_group_heartbeat(&header)))),
    },
];

fn api(key: ApiKey) -> Option<&'static Api> {
    APIS.iter().find(|a| a.key == key)
}

/// Starts a request: checks its API and version against the table, then runs the API's start.
pub(super) async fn start(
    l: Arc<Listener>,
    key: ApiKey,
    header: RequestHeader,
    body: Bytes,
) -> anyhow::Result<Pending> {
    let version = header.request_api_version;
    let unsupported = |why: String| Malformed::new(Reason::UnsupportedVersion, why);
    let api = api(key).ok_or_else(|| unsupported(format!("API {key:?} is not served")))?;
    let range = api.versions;
    let spoken = (range.min..=range.max).contains(&version);
    match api.start {
        Start::Any(answer) => Ok(ready(answer(&header))),
        _ if !spoken => Err(unsupported(format!(
            "API {key:?} version {version} is not spoken (only {}..={})",
            range.min, range.max
        ))
        .into()),
        Start::Later(start) => start(l, header, body),
        Start::InOrder(start) => start(l, header, body).await,
    }
}

/// Decodes a whole request the way the listener does: its header, the version checked against
/// the table, and its body at that version (the fuzz targets drive this).
pub fn decode_request(mut frame: Bytes) -> Result<(RequestHeader, RequestKind), Malformed> {
    let (key, header) = super::frame::decode_header(&mut frame)?;
    let version = header.request_api_version;
    let range = api(key)
        .map(|a| a.versions)
        .ok_or_else(|| Malformed::new(Reason::UnsupportedVersion, format!("API {key:?} is not served")))?;
    // ApiVersions is answered whatever its version (the client learns which to use).
    if key != ApiKey::ApiVersions && !(range.min..=range.max).contains(&version) {
        return Err(Malformed::new(Reason::UnsupportedVersion, format!("API {key:?} version {version}")));
    }
    let body = RequestKind::decode(key, &mut frame, version).map_err(|e| Malformed::body(key, version, e))?;
    Ok((header, body))
}

/// ApiVersions: answered for any version; a version we do not speak gets v0 with
/// UNSUPPORTED_VERSION and our list, as Kafka does.
pub fn api_versions(header: &RequestHeader) -> Reply {
    let keys: Vec<api_versions_response::ApiVersion> = APIS
        .iter()
        .filter(|api| api.advertised)
        .map(|api| {
            api_versions_response::ApiVersion::default()
                .with_api_key(api.key as i16)
                .with_min_version(api.versions.min)
                .with_max_version(api.versions.max)
        })
        .collect();
    let range = ApiVersionsRequest::VERSIONS;
    let mut version = header.request_api_version;
    let mut body = ApiVersionsResponse::default().with_api_keys(keys);
    if !(range.min..=range.max).contains(&version) {
        body = body.with_error_code(ErrorCode::UnsupportedVersion.code());
        version = 0;
    }
    encode(ApiKey::ApiVersions, header, version, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_each_api_once_and_advertises_all_but_consumer_group_heartbeat() {
        let mut keys: Vec<i16> = APIS.iter().map(|a| a.key as i16).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), APIS.len());
        let hidden: Vec<ApiKey> = APIS.iter().filter(|a| !a.advertised).map(|a| a.key).collect();
        assert_eq!(hidden, [ApiKey::ConsumerGroupHeartbeat]);
        for a in &APIS {
            assert!(a.versions.min <= a.versions.max, "{:?}", a.key);
        }
    }
}
