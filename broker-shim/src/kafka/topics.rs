//! CreateTopics, CreatePartitions and DeleteTopics, sent once to the coordinator cluster (never
//! repeated: a topic change's outcome may be unknown). Diskless topics only
//! (`diskless.enable=true`); the settings kept are those AlterConfigs keeps (retention,
//! `max.message.bytes`, the timestamp settings: `configs.rs`, checked the same way),
//! `cleanup.policy` other than delete is refused, and so is any other config, by name, as
//! AlterConfigs refuses it (a setting asked for is never dropped silently). CreatePartitions is KIP-1164's DisklessCreatePartitions with the topic's own id, with
//! Kafka's checks and messages (`ReplicationControlManager.createPartitions`); the catalog cache
//! forgets a topic whose partitions changed or that was deleted. Authorized as Kafka's `KafkaApis`
//! does: CreateTopics CREATE on the cluster or the topic, CreatePartitions ALTER, DeleteTopics
//! DELETE, each TOPIC_AUTHORIZATION_FAILED when refused.

use diskless_proto::v1 as coord;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::response::{encode, message, topic_name, Reply};
use super::session::{refused, Session};
use crate::authz::{Operation, Resource};
use crate::error::KafkaError;

/// The least time a topic change is given in the coordinator cluster. Kafka clients send 0 or a
/// few seconds ("do not wait", librdkafka's default `operation_timeout`); a change is sent once
/// and a cut-short one answers REQUEST_TIMED_OUT though it may still apply, so it is given time
/// to finish even on a loaded cluster (the client may stop waiting sooner).
const MIN_TOPIC_CHANGE_MS: i32 = 15_000;

/// Topic settings a CreateTopics request may carry; `diskless.enable=true` is required.
fn topic_configs(t: &create_topics_request::CreatableTopic, ceiling: usize) -> Result<coord::TopicConfigs, KafkaError> {
    let bad = |m: String| KafkaError::new(ErrorCode::InvalidConfig, m);
    let mut diskless = false;
    let mut out = coord::TopicConfigs::default();
    for c in &t.configs {
        let value = c.value.as_ref().map(|v| v.as_str().to_string()).unwrap_or_default();
        match c.name.as_str() {
            "diskless.enable" => diskless = value.eq_ignore_ascii_case("true"),
            n if super::configs::set_config(&mut out, n, &value, ceiling)? => {}
            "cleanup.policy" if value.trim() != "delete" => {
                return Err(bad(format!(
                    "Invalid value {value} for configuration cleanup.policy: diskless topics support only delete (no compaction)"
                )))
            }
            "cleanup.policy" => {}
            // Refused as AlterConfigs refuses it: a setting asked for is never dropped silently.
            other => return Err(super::configs::not_honoured(other)),
        }
    }
    if !diskless {
        return Err(bad(
            "this cluster serves diskless topics only: create the topic with the config diskless.enable=true".into(),
        ));
    }
    Ok(out)
}

pub(super) async fn create_topics(l: &Session, header: &RequestHeader, req: CreateTopicsRequest) -> Reply {
    let v = header.request_api_version;
    let mut results = vec![];
    let access = l.access().await;
    // CREATE on the cluster allows every topic; else CREATE on each topic (Kafka's rule).
    let on_cluster = access.on_cluster(Operation::Create);
    for t in &req.topics {
        let partitions = if t.num_partitions == -1 { 1 } else { t.num_partitions };
        let id = uuid::Uuid::new_v4();
        let r: Result<(), KafkaError> = async {
            if !on_cluster && !access.allowed(Operation::Create, Resource::Topic, t.name.as_str()) {
                return Err(refused(Resource::Topic, Operation::Create, t.name.as_str()));
            }
            let configs = topic_configs(t, l.shim.producer.max_batch_ceiling())?;
            if t.replication_factor != -1 && t.replication_factor < 1 {
                return Err(KafkaError::new(ErrorCode::InvalidRequest, "replication factor must be positive"));
            }
            if req.validate_only {
                return Ok(());
            }
            let q = coord::CreatePartitionsRequest {
                topics: vec![coord::create_partitions_request::CreatablePartitions {
                    topic_id: id.as_bytes().to_vec(),
                    name: t.name.as_str().to_string(),
                    num_partitions: partitions,
                    configs: Some(configs),
                }],
                timeout_ms: req.timeout_ms.max(MIN_TOPIC_CHANGE_MS),
            };
            let resp = l
                .shim
                .cluster
                .call_once(|mut c| async move { c.create_partitions(q).await })
                .await
                .map_err(|s| KafkaError::unavailable("create topic", &s))?;
            match resp.topics.into_iter().next() {
                Some(r) => KafkaError::from_wire(r.error_code, r.error_message).map_or(Ok(()), Err),
                None => Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")),
            }
        }
        .await;
        let mut res = create_topics_response::CreatableTopicResult::default().with_name(t.name.clone());
        match r {
            Ok(()) => {
                if v >= 7 && !req.validate_only {
                    res = res.with_topic_id(id);
                }
                if v >= 5 {
                    res = res.with_num_partitions(partitions).with_replication_factor(1);
                }
            }
            Err(e) => {
                res = res.with_error_code(e.code.code());
                if v >= 1 {
                    res = res.with_error_message(message(e.message));
                }
                if v >= 5 {
                    res = res.with_num_partitions(-1).with_replication_factor(-1);
                }
            }
        }
        results.push(res);
    }
    encode(ApiKey::CreateTopics, header, v, &CreateTopicsResponse::default().with_topics(results))
}

pub(super) async fn delete_topics(l: &Session, header: &RequestHeader, req: DeleteTopicsRequest) -> Reply {
    let v = header.request_api_version;
    let names: Vec<String> = if v >= 6 {
        req.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.as_str().to_string())).collect()
    } else {
        req.topic_names.iter().map(|n| n.as_str().to_string()).collect()
    };
    let mut results = vec![];
    let access = l.access().await;
    for n in names {
        let r: Result<(), KafkaError> = async {
            let tm = l.topic(&access, Operation::Delete, &n).await?;
            let q = coord::DeleteTopicsRequest {
                topics: vec![coord::delete_topics_request::DeletableTopicState { topic_id: tm.id.to_vec() }],
                timeout_ms: req.timeout_ms.max(MIN_TOPIC_CHANGE_MS),
            };
            l.shim.cluster.forget_topic(&n);
            let resp = l
                .shim
                .cluster
                .call_once(|mut c| async move { c.delete_topics(q).await })
                .await
                .map_err(|s| KafkaError::unavailable("delete topic", &s))?;
            match resp.responses.into_iter().next() {
                Some(r) => KafkaError::from_wire(r.error_code, r.error_message).map_or(Ok(()), Err),
                None => Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")),
            }
        }
        .await;
        let mut res = delete_topics_response::DeletableTopicResult::default().with_name(Some(topic_name(&n)));
        if let Err(e) = r {
            res = res.with_error_code(e.code.code());
            if v >= 5 {
                res = res.with_error_message(message(e.message));
            }
        }
        results.push(res);
    }
    encode(ApiKey::DeleteTopics, header, v, &DeleteTopicsResponse::default().with_responses(results))
}

pub(super) async fn create_partitions(l: &Session, header: &RequestHeader, req: CreatePartitionsRequest) -> Reply {
    let v = header.request_api_version;
    let mut results = vec![];
    let access = l.access().await;
    let mut seen = std::collections::HashSet::new();
    let duplicates: std::collections::HashSet<&str> =
        req.topics.iter().map(|t| t.name.as_str()).filter(|n| !seen.insert(*n)).collect();
    for t in &req.topics {
        let name = t.name.as_str();
        let r: Result<(), KafkaError> = async {
            if duplicates.contains(name) {
                return Err(KafkaError::new(ErrorCode::InvalidRequest, "Duplicate topic name."));
            }
            // The partition count as the cluster has it now, not as this broker cached it.
            l.shim.cluster.forget_topic(name);
            let tm = l.topic(&access, Operation::Alter, name).await?;
            if t.count == tm.partitions {
                return Err(KafkaError::new(
                    ErrorCode::InvalidPartitions,
                    format!("Topic already has {} partition(s).", tm.partitions),
                ));
            }
            if t.count < tm.partitions {
                return Err(KafkaError::new(
                    ErrorCode::InvalidPartitions,
                    format!(
                        "The topic {name} currently has {} partition(s); {} would not be an increase.",
                        tm.partitions, t.count
                    ),
                ));
            }
            if let Some(assignments) = &t.assignments {
                let additional = t.count - tm.partitions;
                if assignments.len() as i64 != i64::from(additional) {
                    return Err(KafkaError::new(
                        ErrorCode::InvalidReplicaAssignment,
                        format!(
                            "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                            assignments.len()
                        ),
                    ));
                }
                // A diskless partition has no replicas to place: every broker serves it.
            }
            if req.validate_only {
                return Ok(());
            }
            let q = coord::CreatePartitionsRequest {
                topics: vec![coord::create_partitions_request::CreatablePartitions {
                    topic_id: tm.id.to_vec(),
                    name: name.to_string(),
                    num_partitions: t.count,
                    configs: None,
                }],
                timeout_ms: req.timeout_ms.max(MIN_TOPIC_CHANGE_MS),
            };
            let resp = l
                .shim
                .cluster
                .call_once(|mut c| async move { c.create_partitions(q).await })
                .await
                .map_err(|s| KafkaError::unavailable("create partitions", &s));
            l.shim.cluster.forget_topic(name);
            match resp?.topics.into_iter().next() {
                Some(r) => KafkaError::from_wire(r.error_code, r.error_message).map_or(Ok(()), Err),
                None => Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")),
            }
        }
        .await;
        let mut res = create_partitions_response::CreatePartitionsTopicResult::default().with_name(t.name.clone());
        if let Err(e) = r {
            res = res.with_error_code(e.code.code()).with_error_message(message(e.message));
        }
        results.push(res);
    }
    encode(ApiKey::CreatePartitions, header, v, &CreatePartitionsResponse::default().with_results(results))
}
