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
use kafka_protocol::protocol::{Decodable, Message, StrBytes, VersionRange};

use super::frame::{Malformed, Reason};
use super::response::{encode, ready, Pending, Reply};
use super::security::sasl;
use super::session::Session;
use super::{
    acls, configs, consumer_groups, epochs, fetch, group_offsets, groups, metadata, offsets, produce, producer_ids,
    producers, share_fetch, share_groups, topics, transactions,
};

/// How a request is started.
#[derive(Clone, Copy)]
pub(super) enum Start {
    /// Answered at once whatever its version, the body unread: ApiVersions (a client must learn
    /// the versions even when it speaks none of ours), and the SASL APIs once authentication is
    /// over or on a listener without SASL (`security::sasl` answers them before).
    Any(fn(&RequestHeader) -> Reply),
    /// Decoded now; answered by the future.
    Later(fn(Arc<Session>, RequestHeader, Bytes) -> anyhow::Result<Pending>),
    /// Started in request order before the next request is read: Produce enqueues its batches,
    /// so a pipelining producer keeps its order.
    InOrder(fn(Arc<Session>, RequestHeader, Bytes) -> BoxFuture<'static, anyhow::Result<Pending>>),
}

/// One API of the table.
pub(super) struct Api {
    pub key: ApiKey,
    pub versions: VersionRange,
    /// What a client sees differ from a Kafka broker's answer ("" for nothing): the documentation's
    /// API table (`docs/broker.md`) is generated from this column (by a test: nothing else reads it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub differs: &'static str,
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

/// A row whose request `$req` is answered later by `$handle(&Session, &RequestHeader, $req)`.
macro_rules! later {
    ($key:ident, $req:ty, $versions:expr, $handle:path, $differs:expr) => {
        Api {
            key: ApiKey::$key,
            versions: $versions,
            differs: $differs,
            start: Start::Later(|l, header, mut body| {
                let req = decode::<$req>(ApiKey::$key, &header, &mut body)?;
                Ok(Box::pin(async move { $handle(&l, &header, req).await }))
            }),
        }
    };
}

/// Every API this broker answers. Produce and Fetch stop at 12, OffsetCommit and OffsetFetch at
/// 9 (later versions name topics by id only), Metadata at 12, DescribeGroups at 5.
pub(super) static APIS: [Api; 46] = [
    Api {
        key: ApiKey::ApiVersions,
        versions: ApiVersionsRequest::VERSIONS,
        differs: "the only feature listed (KIP-584) is `transaction.version`, finalized at 2",
        start: Start::Any(api_versions),
    },
    later!(Metadata, MetadataRequest, cap(MetadataRequest::VERSIONS, 12), metadata::metadata, "v13+ not spoken; the leader epoch is the broker registry's generation (it grows whenever the live brokers change); every live broker leads a share of the partitions (any broker serves any partition); KIP-1163's v14 fields are not in kafka-protocol yet"),
    Api {
        key: ApiKey::Produce,
        versions: cap(ProduceRequest::VERSIONS, 12),
        differs: "answered once the batch's segment is uploaded and committed: `acks=1` waits as `all` does (no answer for `acks=0`); a transactional batch is checked against its transaction in the coordinator cluster (KIP-890 part 1: the partition added, the producer's epoch; else INVALID_TXN_STATE or INVALID_PRODUCER_EPOCH); from v12 its partition is added to the transaction first (KIP-890 part 2), a coordinator out of reach answered REQUEST_TIMED_OUT where Kafka answers NOT_ENOUGH_REPLICAS",
        start: Start::InOrder(|l, header, mut body| {
            Box::pin(async move {
                let req = decode::<ProduceRequest>(ApiKey::Produce, &header, &mut body)?;
                Ok(produce::produce(l, header, req).await)
            })
        }),
    },
    later!(Fetch, FetchRequest, cap(FetchRequest::VERSIONS, 12), fetch::fetch, "v13+ (topic ids only) not spoken; a fetch that must wait parks until its partitions move (this broker's commits, the cluster's watch streams); no fetch sessions (KIP-227: every fetch is a full one); `read_committed` stops at the last stable offset with the aborted transactions (from the coordinate cache only while no transaction is open)"),
    later!(ListOffsets, ListOffsetsRequest, ListOffsetsRequest::VERSIONS, offsets::list_offsets, "`read_committed` answers the last stable offset for latest and finds nothing past it"),
    later!(CreateTopics, CreateTopicsRequest, CreateTopicsRequest::VERSIONS, topics::create_topics, "diskless topics only (`diskless.enable=true`); configs kept: `retention.ms`, `retention.bytes`, `max.message.bytes`, `message.timestamp.type`, `message.timestamp.before.max.ms`, `message.timestamp.after.max.ms`; `cleanup.policy=compact` and any other config refused by name (INVALID_CONFIG), as AlterConfigs refuses them; the v5+ answer's `configs` left empty"),
    later!(
        CreatePartitions,
        CreatePartitionsRequest,
        CreatePartitionsRequest::VERSIONS,
        topics::create_partitions,
        "manual assignments are checked for their count only: a diskless partition has no replicas to place"
    ),
    later!(DeleteTopics, DeleteTopicsRequest, DeleteTopicsRequest::VERSIONS, topics::delete_topics, ""),
    later!(
        DescribeConfigs,
        DescribeConfigsRequest,
        DescribeConfigsRequest::VERSIONS,
        configs::describe_configs,
        "topics: the configs diskless topics honour (retention, `max.message.bytes` and the timestamp settings, alterable; `cleanup.policy` delete; `diskless.enable`, read-only); brokers: this broker's id and `message.max.bytes`"
    ),
    later!(
        AlterConfigs,
        AlterConfigsRequest,
        AlterConfigsRequest::VERSIONS,
        configs::alter_configs,
        "topics only; retention, `max.message.bytes` and the timestamp settings (others refused with INVALID_CONFIG naming them); a setting a broker enforces reaches every broker within 5 s"
    ),
    later!(
        IncrementalAlterConfigs,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsRequest::VERSIONS,
        configs::incremental_alter_configs,
        "topics only; SET and DELETE of retention, `max.message.bytes` and the timestamp settings (others refused with INVALID_CONFIG naming them); a setting a broker enforces reaches every broker within 5 s"
    ),
    later!(
        OffsetForLeaderEpoch,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochRequest::VERSIONS,
        epochs::offset_for_leader_epoch,
        "consumers only; every epoch up to the current one ends at the high watermark (a diskless log is never truncated)"
    ),
    later!(DeleteRecords, DeleteRecordsRequest, DeleteRecordsRequest::VERSIONS, offsets::delete_records, ""),
    later!(InitProducerId, InitProducerIdRequest, InitProducerIdRequest::VERSIONS, producer_ids::init_producer_id, "two-phase commit (KIP-939, `enable_2pc`) refused"),
    later!(AddPartitionsToTxn, AddPartitionsToTxnRequest, cap(AddPartitionsToTxnRequest::VERSIONS, 3), transactions::add_partitions_to_txn, "v4+ (broker-to-broker verification) not spoken: a broker verifies a transactional produce against the coordinator cluster itself"),
    later!(AddOffsetsToTxn, AddOffsetsToTxnRequest, AddOffsetsToTxnRequest::VERSIONS, transactions::add_offsets_to_txn, ""),
    later!(EndTxn, EndTxnRequest, EndTxnRequest::VERSIONS, transactions::end_txn, ""),
    later!(TxnOffsetCommit, TxnOffsetCommitRequest, TxnOffsetCommitRequest::VERSIONS, transactions::txn_offset_commit, "the offsets are kept with the transaction in the coordinator cluster and committed to the group by the transaction's coordinator at its COMMIT"),
    later!(DescribeTransactions, DescribeTransactionsRequest, DescribeTransactionsRequest::VERSIONS, transactions::describe_transactions, ""),
    later!(ListTransactions, ListTransactionsRequest, ListTransactionsRequest::VERSIONS, transactions::list_transactions, ""),
    later!(DescribeProducers, DescribeProducersRequest, DescribeProducersRequest::VERSIONS, producers::describe_producers, "any broker answers for any partition; `last_timestamp` is the last batch's append time, `coordinator_epoch` -1"),
    Api {
        key: ApiKey::FindCoordinator,
        versions: FindCoordinatorRequest::VERSIONS,
        differs: "",
        start: Start::Later(|l, header, mut body| {
            let req = decode::<FindCoordinatorRequest>(ApiKey::FindCoordinator, &header, &mut body)?;
            Ok(Box::pin(async move { groups::find_coordinator(&l, &header, req).await }))
        }),
    },
    later!(JoinGroup, JoinGroupRequest, JoinGroupRequest::VERSIONS, groups::join_group, ""),
    later!(SyncGroup, SyncGroupRequest, SyncGroupRequest::VERSIONS, groups::sync_group, ""),
    later!(Heartbeat, HeartbeatRequest, HeartbeatRequest::VERSIONS, groups::heartbeat, ""),
    later!(LeaveGroup, LeaveGroupRequest, LeaveGroupRequest::VERSIONS, groups::leave_group, ""),
    later!(OffsetCommit, OffsetCommitRequest, cap(OffsetCommitRequest::VERSIONS, 9), group_offsets::offset_commit, "v10+ (topic ids) not spoken"),
    later!(OffsetFetch, OffsetFetchRequest, cap(OffsetFetchRequest::VERSIONS, 9), group_offsets::offset_fetch, "v10+ (topic ids) not spoken"),
    later!(ListGroups, ListGroupsRequest, ListGroupsRequest::VERSIONS, groups::list_groups, "a group this broker does not hold in memory is Empty or Stable, from its stored record"),
    later!(DescribeGroups, DescribeGroupsRequest, cap(DescribeGroupsRequest::VERSIONS, 5), groups::describe_groups, "v6 not spoken"),
    later!(DeleteGroups, DeleteGroupsRequest, DeleteGroupsRequest::VERSIONS, groups::delete_groups, ""),
    later!(OffsetDelete, OffsetDeleteRequest, OffsetDeleteRequest::VERSIONS, groups::offset_delete, ""),
    later!(DescribeAcls, DescribeAclsRequest, DescribeAclsRequest::VERSIONS, acls::describe_acls, "SECURITY_DISABLED unless `[kafka.authorizer]` is set; the bindings are the coordinator cluster's"),
    later!(CreateAcls, CreateAclsRequest, CreateAclsRequest::VERSIONS, acls::create_acls, "SECURITY_DISABLED unless `[kafka.authorizer]` is set; enforced by this broker at once, by the others within a second"),
    later!(DeleteAcls, DeleteAclsRequest, DeleteAclsRequest::VERSIONS, acls::delete_acls, "SECURITY_DISABLED unless `[kafka.authorizer]` is set; enforced by this broker at once, by the others within a second"),
    Api {
        key: ApiKey::SaslHandshake,
        versions: sasl::HANDSHAKE_VERSIONS,
        differs: "PLAIN and SCRAM-SHA-256/512",
        start: Start::Any(|header| sasl::illegal_state(ApiKey::SaslHandshake, header)),
    },
    Api {
        key: ApiKey::SaslAuthenticate,
        versions: sasl::AUTHENTICATE_VERSIONS,
        differs: "",
        start: Start::Any(|header| sasl::illegal_state(ApiKey::SaslAuthenticate, header)),
    },
    later!(ConsumerGroupHeartbeat, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatRequest::VERSIONS, consumer_groups::consumer_group_heartbeat, "KIP-848 groups: the `uniform` (sticky) and `range` assignors; a broker taking a group over continues it where it was; no online migration from or to a classic group with members (GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL)"),
    later!(ConsumerGroupDescribe, ConsumerGroupDescribeRequest, ConsumerGroupDescribeRequest::VERSIONS, consumer_groups::consumer_group_describe, "authorized operations not answered"),
    later!(ShareGroupHeartbeat, ShareGroupHeartbeatRequest, ShareGroupHeartbeatRequest::VERSIONS, share_groups::share_group_heartbeat, "assignment as Kafka's `simple` assignor in effect (every subscribed partition to at least one member), not its hashing; a member rejoining at epoch 0 is taken back rather than fenced"),
    later!(ShareGroupDescribe, ShareGroupDescribeRequest, ShareGroupDescribeRequest::VERSIONS, share_groups::share_group_describe, "authorized operations not answered"),
    later!(ShareFetch, ShareFetchRequest, ShareFetchRequest::VERSIONS, share_fetch::share_fetch, "acquisitions are stored in the coordinator cluster (Kafka keeps them in the partition leader's memory), so a broker's failure loses no lock; any broker serves any partition; `share.isolation.level` is read_uncommitted; `share.auto.offset.reset` is the broker's `[groups] share_auto_offset_reset`"),
    later!(ShareAcknowledge, ShareAcknowledgeRequest, ShareAcknowledgeRequest::VERSIONS, share_fetch::share_acknowledge, ""),
    later!(DescribeShareGroupOffsets, DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest::VERSIONS, share_groups::describe_share_group_offsets, "leader epoch 0"),
    later!(AlterShareGroupOffsets, AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsRequest::VERSIONS, share_groups::alter_share_group_offsets, ""),
    later!(DeleteShareGroupOffsets, DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest::VERSIONS, share_groups::delete_share_group_offsets, ""),
];

fn api(key: ApiKey) -> Option<&'static Api> {
    APIS.iter().find(|a| a.key == key)
}

/// Starts a request: checks its API and version against the table, then runs the API's start.
pub(super) async fn start(l: Arc<Session>, key: ApiKey, header: RequestHeader, body: Bytes) -> anyhow::Result<Pending> {
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

/// Kafka's feature naming the transaction protocol's version, and its level here.
const TRANSACTION_VERSION: &str = "transaction.version";
const TRANSACTIONS_V2: i16 = 2;
/// The epoch of the finalized features (they never change).
const FEATURES_EPOCH: i64 = 1;

/// ApiVersions: answered for any version; a version we do not speak gets v0 with
/// UNSUPPORTED_VERSION and our list, as Kafka does.
pub fn api_versions(header: &RequestHeader) -> Reply {
    let keys: Vec<api_versions_response::ApiVersion> = APIS
        .iter()
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
    // KIP-584's features (v3+, tagged): `transaction.version` 2 is finalized, so Kafka 4's Java
    // producer speaks transactions v2 (KIP-890 part 2). As Kafka's `ApiVersionsResponse` does, a
    // feature whose lowest version is 0 is listed as supported from v4 only (v3 clients misread
    // it), and a finalized one with min = max = its level; the epoch never changes here (it is
    // Kafka's metadata offset), and the client takes features only from an epoch of 0 or more.
    if version >= 4 {
        body = body.with_supported_features(vec![api_versions_response::SupportedFeatureKey::default()
            .with_name(StrBytes::from_static_str(TRANSACTION_VERSION))
            .with_min_version(0)
            .with_max_version(TRANSACTIONS_V2)]);
    }
    body = body.with_finalized_features_epoch(FEATURES_EPOCH).with_finalized_features(vec![
        api_versions_response::FinalizedFeatureKey::default()
            .with_name(StrBytes::from_static_str(TRANSACTION_VERSION))
            .with_min_version_level(TRANSACTIONS_V2)
            .with_max_version_level(TRANSACTIONS_V2),
    ]);
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
    fn the_table_lists_each_api_once_with_a_version_range() {
        let mut keys: Vec<i16> = APIS.iter().map(|a| a.key as i16).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), APIS.len());
        for a in &APIS {
            assert!(a.versions.min <= a.versions.max, "{:?}", a.key);
        }
    }

    const BEGIN: &str = "<!-- kafka-apis:begin -->";
    const END: &str = "<!-- kafka-apis:end -->";

    /// The documentation's API table, from [`APIS`].
    fn table() -> String {
        let mut rows: Vec<&Api> = APIS.iter().collect();
        rows.sort_by_key(|a| a.key as i16);
        let mut t =
            String::from("| key | API | versions | what differs from a Kafka broker |\n| --- | --- | --- | --- |\n");
        for a in rows {
            let differs = if a.differs.is_empty() { "nothing" } else { a.differs };
            t.push_str(&format!(
                "| {} | {:?} | {}–{} | {} |\n",
                a.key as i16, a.key, a.versions.min, a.versions.max, differs
            ));
        }
        t
    }

    #[test]
    fn the_documented_api_table_is_the_dispatch_table() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/broker.md");
        let text = std::fs::read_to_string(&path).expect("docs/broker.md");
        let (head, rest) = text.split_once(BEGIN).expect("the begin marker");
        let (_, tail) = rest.split_once(END).expect("the end marker");
        let want = format!("{head}{BEGIN}\n{}{END}{tail}", table());
        if std::env::var_os("DISKLESS_BLESS").is_some() {
            std::fs::write(&path, &want).expect("rewrite docs/broker.md");
            return;
        }
        assert!(
            text == want,
            "docs/broker.md's API table differs from broker-shim/src/kafka/dispatch.rs: run \
             DISKLESS_BLESS=1 cargo test -p diskless-broker-shim the_documented_api_table"
        );
    }
}
