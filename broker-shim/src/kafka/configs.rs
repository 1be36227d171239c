//! Configs over the Kafka protocol: DescribeConfigs, IncrementalAlterConfigs and AlterConfigs for
//! topics (and DescribeConfigs for this broker), after Kafka's `ConfigHelper.describeConfigs`,
//! `ConfigAdminManager` and `ControllerConfigurationValidator`: names, values, sources, synonyms,
//! documentation and types as a Kafka broker gives them; Kafka's codes and messages for refusals;
//! `validate_only` honoured. Authorized as Kafka's `KafkaApis`: a topic's configs need
//! DESCRIBE_CONFIGS or ALTER_CONFIGS on it (TOPIC_AUTHORIZATION_FAILED), a broker's on the cluster
//! (CLUSTER_AUTHORIZATION_FAILED).
//!
//! What a diskless topic honours, each kept in the coordinator cluster (AlterTopicConfigs):
//! `retention.ms` and `retention.bytes`, enforced by the cluster; `max.message.bytes`,
//! `message.timestamp.type` and `message.timestamp.before.max.ms` / `after.max.ms`, enforced by
//! every broker at produce (unset: the broker's own, its `[produce]` section); `cleanup.policy` is
//! `delete` (compaction is refused: diskless topics have no compacted form); `diskless.enable` is
//! `true` and immutable. Any other Kafka topic config is refused with INVALID_CONFIG naming it, so
//! nothing is silently ignored.
//!
//! Owns the config vocabulary of the Kafka listener; it must not write anything but through the
//! coordinator cluster's AlterTopicConfigs.

use diskless_proto::v1 as coord;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::listener::Listener;
use super::response::{encode, message, Reply};
use super::session::{refused, Session};
use crate::authz::{Access, Operation, Resource, CLUSTER_NAME};
use crate::cluster::{TopicMeta, DEFAULT_RETENTION_BYTES, DEFAULT_RETENTION_MS};
use crate::error::KafkaError;

/// Kafka's resource types (`ConfigResource.Type`).
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Kafka's config sources (`DescribeConfigsResponse.ConfigSource`).
const TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;

/// Kafka's config types (`DescribeConfigsResponse.ConfigType`).
const STRING: i8 = 2;
const INT: i8 = 3;
const LONG: i8 = 5;
const LIST: i8 = 7;
const BOOLEAN: i8 = 1;

const DEFAULT_MAX_MESSAGE_BYTES: usize = crate::validate::DEFAULT_MAX_MESSAGE_BYTES;

/// One config as DescribeConfigs shows it.
struct Shown {
    name: &'static str,
    value: String,
    source: i8,
    read_only: bool,
    config_type: i8,
    /// The broker-level name Kafka lists as the synonym, its value and that value's source.
    synonym: Option<(&'static str, String, i8)>,
    doc: &'static str,
}

/// A topic's configs, in Kafka's order (alphabetical).
fn topic_configs(l: &Listener, t: &TopicMeta) -> Vec<Shown> {
    let limits = l.shim.producer.limits();
    let o = &t.overrides;
    let own = |v: i64, default: i64| if v == default { DEFAULT_CONFIG } else { TOPIC_CONFIG };
    let broker_source =
        if limits.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES { DEFAULT_CONFIG } else { STATIC_BROKER_CONFIG };
    // A setting the topic has is its own; one it lacks is the broker's.
    let setting = |topic: Option<String>, broker: String, broker_source: i8| match topic {
        Some(v) => (v, TOPIC_CONFIG),
        None => (broker, broker_source),
    };
    let bound = |b: Option<i64>| b.unwrap_or(i64::MAX).to_string();
    let kind = |lat: bool| if lat { "LogAppendTime" } else { "CreateTime" }.to_string();
    let (max_bytes, max_bytes_source) =
        setting(o.max_message_bytes.map(|v| v.to_string()), limits.max_message_bytes.to_string(), broker_source);
    let (after, after_source) =
        setting(o.timestamp_after_max_ms.map(|v| v.to_string()), bound(limits.timestamp_after_max_ms), DEFAULT_CONFIG);
    let (before, before_source) = setting(
        o.timestamp_before_max_ms.map(|v| v.to_string()),
        bound(limits.timestamp_before_max_ms),
        DEFAULT_CONFIG,
    );
    let (ts_type, ts_type_source) = setting(o.log_append_time.map(kind), kind(limits.log_append_time), DEFAULT_CONFIG);
    vec![
        Shown {
            name: "cleanup.policy",
            value: "delete".into(),
            source: DEFAULT_CONFIG,
            read_only: false,
            config_type: LIST,
            synonym: Some(("log.cleanup.policy", "delete".into(), DEFAULT_CONFIG)),
            doc: "delete: old batches are discarded by retention. compact is not supported on diskless topics.",
        },
        Shown {
            name: "diskless.enable",
            value: "true".into(),
            source: TOPIC_CONFIG,
            read_only: true,
            config_type: BOOLEAN,
            synonym: None,
            doc: "The topic's data lives in object storage (KIP-1150). Set at creation; it cannot change.",
        },
        Shown {
            name: "max.message.bytes",
            value: max_bytes,
            source: max_bytes_source,
            read_only: false,
            config_type: INT,
            synonym: Some(("message.max.bytes", limits.max_message_bytes.to_string(), broker_source)),
            doc: "The largest record batch size allowed (at most what one WAL segment holds).",
        },
        Shown {
            name: "message.timestamp.after.max.ms",
            value: after,
            source: after_source,
            read_only: false,
            config_type: LONG,
            synonym: Some(("log.message.timestamp.after.max.ms", i64::MAX.to_string(), DEFAULT_CONFIG)),
            doc: "How far ahead of the broker's clock a CreateTime may be.",
        },
        Shown {
            name: "message.timestamp.before.max.ms",
            value: before,
            source: before_source,
            read_only: false,
            config_type: LONG,
            synonym: Some(("log.message.timestamp.before.max.ms", i64::MAX.to_string(), DEFAULT_CONFIG)),
            doc: "How far behind the broker's clock a CreateTime may be.",
        },
        Shown {
            name: "message.timestamp.type",
            value: ts_type,
            source: ts_type_source,
            read_only: false,
            config_type: STRING,
            synonym: Some(("log.message.timestamp.type", "CreateTime".into(), DEFAULT_CONFIG)),
            doc: "Whether a record's timestamp is the producer's (CreateTime) or the broker's (LogAppendTime).",
        },
        Shown {
            name: "retention.bytes",
            value: t.retention_bytes.to_string(),
            source: own(t.retention_bytes, DEFAULT_RETENTION_BYTES),
            read_only: false,
            config_type: LONG,
            synonym: Some(("log.retention.bytes", DEFAULT_RETENTION_BYTES.to_string(), DEFAULT_CONFIG)),
            doc: "The most bytes a partition keeps before its oldest batches are deleted; -1: no limit.",
        },
        Shown {
            name: "retention.ms",
            value: t.retention_ms.to_string(),
            source: own(t.retention_ms, DEFAULT_RETENTION_MS),
            read_only: false,
            config_type: LONG,
            synonym: Some(("log.retention.ms", DEFAULT_RETENTION_MS.to_string(), DEFAULT_CONFIG)),
            doc: "How long a batch is kept after its timestamp before it is deleted; -1: forever.",
        },
    ]
}

/// This broker's configs a client may want to see.
fn broker_configs(l: &Listener) -> Vec<Shown> {
    let limits = l.shim.producer.limits();
    vec![
        Shown {
            name: "broker.id",
            value: l.broker_id.to_string(),
            source: STATIC_BROKER_CONFIG,
            read_only: true,
            config_type: INT,
            synonym: None,
            doc: "This broker's id in the broker registry.",
        },
        Shown {
            name: "message.max.bytes",
            value: limits.max_message_bytes.to_string(),
            source: if limits.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES {
                DEFAULT_CONFIG
            } else {
                STATIC_BROKER_CONFIG
            },
            read_only: true,
            config_type: INT,
            synonym: None,
            doc: "The largest record batch size allowed (produce.max_message_bytes).",
        },
    ]
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn describe_one(
    shown: Vec<Shown>,
    keys: Option<&Vec<StrBytes>>,
    synonyms: bool,
    docs: bool,
    v: i16,
) -> Vec<describe_configs_response::DescribeConfigsResourceResult> {
    shown
        .into_iter()
        .filter(|c| keys.is_none_or(|k| k.iter().any(|k| k.as_str() == c.name)))
        .map(|c| {
            let mut r = describe_configs_response::DescribeConfigsResourceResult::default()
                .with_name(s(c.name))
                .with_value(Some(s(&c.value)))
                .with_read_only(c.read_only)
                .with_is_sensitive(false);
            r = r.with_config_source(c.source);
            if synonyms {
                let mut list = vec![];
                if c.source == TOPIC_CONFIG {
                    list.push(
                        describe_configs_response::DescribeConfigsSynonym::default()
                            .with_name(s(c.name))
                            .with_value(Some(s(&c.value)))
                            .with_source(c.source),
                    );
                }
                if let Some((name, value, source)) = &c.synonym {
                    list.push(
                        describe_configs_response::DescribeConfigsSynonym::default()
                            .with_name(s(name))
                            .with_value(Some(s(value)))
                            .with_source(*source),
                    );
                }
                r = r.with_synonyms(list);
            }
            if v >= 3 {
                r = r.with_config_type(c.config_type);
                if docs {
                    r = r.with_documentation(Some(s(c.doc)));
                }
            }
            r
        })
        .collect()
}

pub(super) async fn describe_configs(l: &Session, header: &RequestHeader, req: DescribeConfigsRequest) -> Reply {
    let v = header.request_api_version;
    let mut results = vec![];
    let access = l.access().await;
    for r in &req.resources {
        let name = r.resource_name.as_str();
        let shown: Result<Vec<Shown>, KafkaError> = match r.resource_type {
            TOPIC => {
                l.shim.cluster.forget_topic(name);
                l.topic(&access, Operation::DescribeConfigs, name).await.map(|t| topic_configs(l, &t))
            }
            BROKER if !access.on_cluster(Operation::DescribeConfigs) => {
                Err(refused(Resource::Cluster, Operation::DescribeConfigs, CLUSTER_NAME))
            }
            BROKER if name.is_empty() || name == l.broker_id.to_string() => Ok(broker_configs(l)),
            BROKER => Err(KafkaError::new(
                ErrorCode::InvalidRequest,
                format!("Unexpected broker id, expected {} or empty string, but received {name}", l.broker_id),
            )),
            other => Err(KafkaError::new(
                ErrorCode::InvalidRequest,
                format!("resource type {other} has no configs on a diskless broker (topics and brokers do)"),
            )),
        };
        let mut res = describe_configs_response::DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        match shown {
            Ok(shown) => {
                let configs = describe_one(
                    shown,
                    r.configuration_keys.as_ref(),
                    req.include_synonyms,
                    req.include_documentation,
                    v,
                );
                res = res.with_configs(configs);
            }
            Err(e) => res = res.with_error_code(e.code.code()).with_error_message(message(e.message)),
        }
        results.push(res);
    }
    encode(ApiKey::DescribeConfigs, header, v, &DescribeConfigsResponse::default().with_results(results))
}

/// What an alteration asks of one config.
enum Change {
    Set(String),
    /// Back to the default.
    Delete,
}

/// Kafka's topic-level configs that a diskless topic does not honour (refused by name).
const KAFKA_TOPIC_CONFIGS: &[&str] = &[
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "message.downconversion.enable",
    "message.format.version",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.storage.enable",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
];

fn invalid(m: String) -> KafkaError {
    KafkaError::new(ErrorCode::InvalidConfig, m)
}

/// A LONG config's value, at least `min`, as Kafka's `ConfigDef` parses it.
fn long_value(name: &str, value: &str, min: i64) -> Result<i64, KafkaError> {
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid(format!("Invalid value {value} for configuration {name}: Not a number of type LONG")))?;
    if n < min {
        return Err(invalid(format!("Invalid value {n} for configuration {name}: Value must be at least {min}")));
    }
    Ok(n)
}

/// The broker-enforced settings (the coordinator cluster keeps them; unset: the broker's own).
const SETTINGS: [&str; 4] = [
    "max.message.bytes",
    "message.timestamp.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
];

/// Sets `name` in `out` when it is a config the coordinator cluster keeps for diskless topics,
/// checked as Kafka checks it (and a batch size against what one WAL segment of this broker
/// holds, `ceiling`). Returns whether it was one.
pub(super) fn set_config(
    out: &mut coord::TopicConfigs,
    name: &str,
    value: &str,
    ceiling: usize,
) -> Result<bool, KafkaError> {
    match name {
        "retention.ms" => out.retention_ms = Some(long_value(name, value, -1)?),
        "retention.bytes" => out.retention_bytes = Some(long_value(name, value, -1)?),
        "max.message.bytes" => {
            let n: i32 = value.trim().parse().map_err(|_| {
                invalid(format!("Invalid value {value} for configuration {name}: Not a number of type INT"))
            })?;
            if n < 0 {
                return Err(invalid(format!("Invalid value {n} for configuration {name}: Value must be at least 0")));
            }
            if usize::try_from(n).unwrap_or(0) > ceiling {
                return Err(invalid(format!(
                    "Invalid value {n} for configuration {name}: a diskless broker stores a batch in one WAL segment, \
                     at most {ceiling} bytes here (produce.buffer_max_bytes - 1)"
                )));
            }
            out.max_message_bytes = Some(n);
        }
        "message.timestamp.type" => match value.trim() {
            v @ ("CreateTime" | "LogAppendTime") => out.message_timestamp_type = Some(v.to_string()),
            _ => {
                return Err(invalid(format!(
                    "Invalid value {value} for configuration {name}: String must be one of: CreateTime, LogAppendTime"
                )))
            }
        },
        "message.timestamp.before.max.ms" => out.message_timestamp_before_max_ms = Some(long_value(name, value, 0)?),
        "message.timestamp.after.max.ms" => out.message_timestamp_after_max_ms = Some(long_value(name, value, 0)?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Folds one resource's changes into the values to store (`None`: unchanged) and the settings to
/// return to the broker's default.
fn plan(
    t: &TopicMeta,
    changes: &[(String, Change)],
    ceiling: usize,
) -> Result<(coord::TopicConfigs, Vec<String>), KafkaError> {
    let mut out = coord::TopicConfigs::default();
    let mut reset = vec![];
    let mut seen = std::collections::HashSet::new();
    for (name, change) in changes {
        if !seen.insert(name.as_str()) {
            return Err(KafkaError::new(
                ErrorCode::InvalidRequest,
                format!("Error due to duplicate config keys: {name}"),
            ));
        }
        match (name.as_str(), change) {
            (n, Change::Set(v)) if set_config(&mut out, n, v, ceiling)? => {}
            ("retention.ms", Change::Delete) => out.retention_ms = Some(DEFAULT_RETENTION_MS),
            ("retention.bytes", Change::Delete) => out.retention_bytes = Some(DEFAULT_RETENTION_BYTES),
            (n, Change::Delete) if SETTINGS.contains(&n) => reset.push(n.to_string()),
            ("cleanup.policy", Change::Set(v)) if v.trim() == "delete" => {}
            ("cleanup.policy", Change::Set(v)) => {
                return Err(invalid(format!(
                    "Invalid value {v} for configuration cleanup.policy: diskless topics support only delete (no compaction)"
                )))
            }
            ("cleanup.policy", Change::Delete) => {}
            // Clients that replace the whole set send it back as they read it.
            ("diskless.enable", Change::Set(v)) if v.trim().eq_ignore_ascii_case("true") => {}
            ("diskless.enable", _) => {
                return Err(invalid(format!("diskless.enable cannot be changed: topic {} is diskless", t.name)))
            }
            (n, _) => return Err(not_honoured(n)),
        }
    }
    Ok((out, reset))
}

/// The refusal of a topic config a diskless topic does not keep: one of Kafka's (named as not
/// supported) or a name Kafka does not know (its `Unknown topic config name`).
pub(super) fn not_honoured(name: &str) -> KafkaError {
    if KAFKA_TOPIC_CONFIGS.contains(&name) {
        invalid(format!("{name} is not supported on diskless topics"))
    } else {
        invalid(format!("Unknown topic config name: {name}"))
    }
}

/// Applies one topic's alteration (unless `validate_only`); the error to answer.
async fn alter_topic(
    l: &Session,
    access: &Access,
    name: &str,
    changes: Vec<(String, Change)>,
    validate_only: bool,
    replace: bool,
) -> Result<(), KafkaError> {
    l.shim.cluster.forget_topic(name);
    let t = l.topic(access, Operation::AlterConfigs, name).await?;
    let (mut configs, mut reset) = plan(&t, &changes, l.shim.producer.max_batch_ceiling())?;
    if replace {
        // AlterConfigs replaces the whole set: what it does not name goes back to its default.
        configs.retention_ms.get_or_insert(DEFAULT_RETENTION_MS);
        configs.retention_bytes.get_or_insert(DEFAULT_RETENTION_BYTES);
        let set = [
            configs.max_message_bytes.is_some(),
            configs.message_timestamp_type.is_some(),
            configs.message_timestamp_before_max_ms.is_some(),
            configs.message_timestamp_after_max_ms.is_some(),
        ];
        for (n, set) in SETTINGS.iter().zip(set) {
            if !set && !reset.iter().any(|r| r == n) {
                reset.push(n.to_string());
            }
        }
    }
    if validate_only || (configs == coord::TopicConfigs::default() && reset.is_empty()) {
        return Ok(());
    }
    let q = coord::AlterTopicConfigsRequest {
        topics: vec![coord::alter_topic_configs_request::AlterableTopic {
            topic_id: t.id.to_vec(),
            configs: Some(configs),
            reset_configs: reset,
        }],
        timeout_ms: 10_000,
    };
    let resp = l
        .shim
        .cluster
        .call_once(|mut c| async move { c.alter_topic_configs(q).await })
        .await
        .map_err(|s| KafkaError::unavailable("alter topic configs", &s));
    l.shim.cluster.forget_topic(name);
    match resp?.topics.into_iter().next() {
        Some(r) => KafkaError::from_wire(r.error_code, r.error_message).map_or(Ok(()), Err),
        None => Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")),
    }
}

/// The answer to altering a resource that is not a topic (a broker's needs ALTER_CONFIGS on the
/// cluster before it is refused).
fn not_a_topic(access: &Access, resource_type: i8) -> KafkaError {
    if resource_type == BROKER && !access.on_cluster(Operation::AlterConfigs) {
        refused(Resource::Cluster, Operation::AlterConfigs, CLUSTER_NAME)
    } else if resource_type == BROKER {
        KafkaError::new(
            ErrorCode::InvalidRequest,
            "broker configs are set in the broker's configuration file on diskless brokers, not dynamically",
        )
    } else {
        KafkaError::new(ErrorCode::InvalidRequest, format!("resource type {resource_type} has no alterable configs"))
    }
}

pub(super) async fn incremental_alter_configs(
    l: &Session,
    header: &RequestHeader,
    req: IncrementalAlterConfigsRequest,
) -> Reply {
    let v = header.request_api_version;
    let mut responses = vec![];
    let access = l.access().await;
    for r in &req.resources {
        let result = async {
            if r.resource_type != TOPIC {
                return Err(not_a_topic(&access, r.resource_type));
            }
            let mut changes = vec![];
            for c in &r.configs {
                let name = c.name.as_str().to_string();
                let value = c.value.as_ref().map(|v| v.as_str().to_string());
                let change = match (c.config_operation, value) {
                    (0, Some(v)) => Change::Set(v),
                    (0, None) => {
                        return Err(KafkaError::new(
                            ErrorCode::InvalidRequest,
                            format!("Null value not supported for : {name}"),
                        ))
                    }
                    (1, _) => Change::Delete,
                    (2 | 3, _) if name == "cleanup.policy" => {
                        return Err(invalid("cleanup.policy on diskless topics is delete only".into()))
                    }
                    (2 | 3, _) => {
                        return Err(KafkaError::new(
                            ErrorCode::InvalidConfig,
                            format!("Config value append is not allowed for config key: {name}"),
                        ))
                    }
                    (op, _) => {
                        return Err(KafkaError::new(
                            ErrorCode::InvalidRequest,
                            format!("Unknown config operation {op}"),
                        ))
                    }
                };
                changes.push((name, change));
            }
            alter_topic(l, &access, r.resource_name.as_str(), changes, req.validate_only, false).await
        }
        .await;
        let mut res = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        if let Err(e) = result {
            res = res.with_error_code(e.code.code()).with_error_message(message(e.message));
        }
        responses.push(res);
    }
    encode(
        ApiKey::IncrementalAlterConfigs,
        header,
        v,
        &IncrementalAlterConfigsResponse::default().with_responses(responses),
    )
}

pub(super) async fn alter_configs(l: &Session, header: &RequestHeader, req: AlterConfigsRequest) -> Reply {
    let v = header.request_api_version;
    let mut responses = vec![];
    let access = l.access().await;
    for r in &req.resources {
        let result = async {
            if r.resource_type != TOPIC {
                return Err(not_a_topic(&access, r.resource_type));
            }
            let changes = r
                .configs
                .iter()
                .map(|c| {
                    let value = c.value.as_ref().map(|v| v.as_str().to_string());
                    (c.name.as_str().to_string(), value.map_or(Change::Delete, Change::Set))
                })
                .collect();
            alter_topic(l, &access, r.resource_name.as_str(), changes, req.validate_only, true).await
        }
        .await;
        let mut res = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        if let Err(e) = result {
            res = res.with_error_code(e.code.code()).with_error_message(message(e.message));
        }
        responses.push(res);
    }
    encode(ApiKey::AlterConfigs, header, v, &AlterConfigsResponse::default().with_responses(responses))
}
