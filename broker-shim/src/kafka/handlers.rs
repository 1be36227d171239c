//! One handler per Kafka API. Each decodes its request body at the negotiated version, does the
//! work through the shim (producer, fetcher, coordinators), and encodes the answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::v1 as coord;
use diskless_proto::ErrorCode;
use futures_util::future::{join_all, BoxFuture};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::frame::{Malformed, Reason};
use super::{encode, groups, versions, Listener, Reply};
use crate::coordinator::TopicMeta;
use crate::error::KafkaError;
use crate::fetch::FetchPartition;
use crate::produce::{Producer, Waiting};

const NONE: i16 = 0;
const UNSUPPORTED_VERSION: i16 = 35;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const INVALID_REQUIRED_ACKS: i16 = 21;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn msg(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}

/// ApiVersions: answered for any version; a version we do not speak gets v0 with
/// UNSUPPORTED_VERSION and our list, as Kafka does.
pub fn api_versions(header: &RequestHeader) -> Reply {
    let keys: Vec<api_versions_response::ApiVersion> = versions::APIS
        .iter()
        .filter_map(|api| {
            let r = versions::supported(*api)?;
            Some(
                api_versions_response::ApiVersion::default()
                    .with_api_key(*api as i16)
                    .with_min_version(r.min)
                    .with_max_version(r.max),
            )
        })
        .collect();
    let range = <ApiVersionsRequest as kafka_protocol::protocol::Message>::VERSIONS;
    let mut version = header.request_api_version;
    let mut body = ApiVersionsResponse::default().with_api_keys(keys);
    if !(range.min..=range.max).contains(&version) {
        body = body.with_error_code(UNSUPPORTED_VERSION);
        version = 0;
    }
    encode(ApiKey::ApiVersions, header, version, &body)
}

type Pending = BoxFuture<'static, Reply>;

fn ready(r: Reply) -> Pending {
    Box::pin(async move { r })
}

/// Starts a request: produce enqueues its batches now (order), the rest runs in the future.
pub async fn dispatch(
    l: Arc<Listener>,
    api: ApiKey,
    header: RequestHeader,
    mut body: Bytes,
) -> anyhow::Result<Pending> {
    let v = header.request_api_version;
    let bad = |e| Malformed::body(api, v, e);
    Ok(match api {
        ApiKey::Produce => produce(l, header, ProduceRequest::decode(&mut body, v).map_err(bad)?).await,
        ApiKey::Metadata => {
            let req = MetadataRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { metadata(&l, &header, req).await })
        }
        ApiKey::Fetch => {
            let req = FetchRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { fetch(&l, &header, req).await })
        }
        ApiKey::ListOffsets => {
            let req = ListOffsetsRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { list_offsets(&l, &header, req).await })
        }
        ApiKey::CreateTopics => {
            let req = CreateTopicsRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { create_topics(&l, &header, req).await })
        }
        ApiKey::DeleteTopics => {
            let req = DeleteTopicsRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { delete_topics(&l, &header, req).await })
        }
        ApiKey::DeleteRecords => {
            let req = DeleteRecordsRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { delete_records(&l, &header, req).await })
        }
        ApiKey::InitProducerId => {
            let req = InitProducerIdRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { init_producer_id(&l, &header, req).await })
        }
        ApiKey::FindCoordinator => {
            let req = FindCoordinatorRequest::decode(&mut body, v).map_err(bad)?;
            ready(groups::find_coordinator(&l, &header, req))
        }
        ApiKey::JoinGroup => {
            let req = JoinGroupRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::join_group(&l, &header, req).await })
        }
        ApiKey::SyncGroup => {
            let req = SyncGroupRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::sync_group(&l, &header, req).await })
        }
        ApiKey::Heartbeat => {
            let req = HeartbeatRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::heartbeat(&l, &header, req).await })
        }
        ApiKey::LeaveGroup => {
            let req = LeaveGroupRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::leave_group(&l, &header, req).await })
        }
        ApiKey::OffsetCommit => {
            let req = OffsetCommitRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::offset_commit(&l, &header, req).await })
        }
        ApiKey::OffsetFetch => {
            let req = OffsetFetchRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::offset_fetch(&l, &header, req).await })
        }
        ApiKey::ListGroups => {
            let req = ListGroupsRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::list_groups(&l, &header, req).await })
        }
        ApiKey::DescribeGroups => {
            let req = DescribeGroupsRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::describe_groups(&l, &header, req).await })
        }
        ApiKey::DeleteGroups => {
            let req = DeleteGroupsRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::delete_groups(&l, &header, req).await })
        }
        ApiKey::OffsetDelete => {
            let req = OffsetDeleteRequest::decode(&mut body, v).map_err(bad)?;
            Box::pin(async move { groups::offset_delete(&l, &header, req).await })
        }
        ApiKey::ConsumerGroupHeartbeat => ready(groups::consumer_group_heartbeat(&header)),
        other => return Err(Malformed::new(Reason::UnsupportedVersion, format!("API {other:?} is not served")).into()),
    })
}

impl Listener {
    pub(super) async fn topic(&self, name: &str) -> Result<TopicMeta, KafkaError> {
        match self.shim.coordinators.topic(name).await {
            Ok(Some(t)) => Ok(t),
            Ok(None) => Err(KafkaError::new(ErrorCode::UnknownTopicOrPartition, format!("no topic named {name:?}"))),
            Err(s) => Err(KafkaError::unavailable("list topics", &s)),
        }
    }

    fn partition(&self, t: &TopicMeta, p: i32) -> Result<(), KafkaError> {
        if p < 0 || p >= t.partitions {
            return Err(KafkaError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("{} has no partition {p}", t.name),
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- Produce

async fn produce(l: Arc<Listener>, header: RequestHeader, req: ProduceRequest) -> Pending {
    let v = header.request_api_version;
    let acks = req.acks;
    let refuse_all = |code: i16, why: &str| {
        let responses = req
            .topic_data
            .iter()
            .map(|t| {
                produce_response::TopicProduceResponse::default().with_name(t.name.clone()).with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            produce_response::PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code)
                                .with_base_offset(-1)
                                .with_error_message(if v >= 8 { msg(why) } else { None })
                        })
                        .collect(),
                )
            })
            .collect();
        ProduceResponse::default().with_responses(responses)
    };
    if !(-1..=1).contains(&acks) {
        let body = refuse_all(INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1");
        return ready(encode(ApiKey::Produce, &header, v, &body));
    }
    if req.transactional_id.is_some() {
        let body =
            refuse_all(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported on diskless topics yet");
        return ready(if acks == 0 {
            Err(anyhow::anyhow!("a transactional Produce with acks=0 was refused: closing the connection"))
        } else {
            encode(ApiKey::Produce, &header, v, &body)
        });
    }

    // Enqueue every batch now, in request order; wait for the commits in the future.
    type Waits = Result<Vec<Waiting>, KafkaError>;
    let mut plan: Vec<(TopicName, Vec<(i32, Waits, bool)>)> = vec![];
    for t in req.topic_data {
        let topic = l.topic(t.name.as_str()).await;
        let mut parts = vec![];
        for p in t.partition_data {
            let mut log_append_time = false;
            let waits = async {
                let topic = topic.clone()?;
                l.partition(&topic, p.index)?;
                let (waits, lat) =
                    submit_partition(&l.shim.producer, v, &topic, p.index, p.records.unwrap_or_default()).await?;
                log_append_time = lat;
                Ok(waits)
            }
            .await;
            parts.push((p.index, waits, log_append_time));
        }
        plan.push((t.name, parts));
    }
    Box::pin(async move {
        let mut responses = vec![];
        let mut failed = 0usize;
        for (topic, parts) in plan {
            let mut out = vec![];
            for (index, waits, lat) in parts {
                let result = match waits {
                    Err(e) => Err(e),
                    Ok(waits) => {
                        // The first batch's offsets, or the first error.
                        let results = join_all(waits).await;
                        let first_error = results.iter().find_map(|r| r.as_ref().err()).cloned();
                        match (first_error, results.into_iter().next()) {
                            (Some(e), _) => Err(e),
                            (None, Some(first)) => first,
                            (None, None) => {
                                Err(KafkaError::new(ErrorCode::UnknownServerError, "no batch was produced"))
                            }
                        }
                    }
                };
                let mut r = produce_response::PartitionProduceResponse::default().with_index(index);
                match result {
                    Ok(a) => {
                        r = r.with_error_code(NONE).with_base_offset(a.base_offset).with_log_append_time_ms(if lat {
                            a.log_append_time
                        } else {
                            -1
                        });
                        if v >= 5 {
                            r = r.with_log_start_offset(a.log_start_offset);
                        }
                    }
                    Err(e) => {
                        if e.code == ErrorCode::UnknownTopicOrPartition {
                            l.shim.coordinators.forget_topic(topic.as_str());
                        }
                        failed += 1;
                        r = r.with_error_code(e.code.code()).with_base_offset(-1);
                        if v >= 8 {
                            let record_errors = e
                                .record_errors
                                .iter()
                                .map(|(i, m)| {
                                    produce_response::BatchIndexAndErrorMessage::default()
                                        .with_batch_index(*i)
                                        .with_batch_index_error_message(msg(m.clone()))
                                })
                                .collect();
                            r = r.with_error_message(msg(e.message)).with_record_errors(record_errors);
                        }
                    }
                }
                out.push(r);
            }
            responses
                .push(produce_response::TopicProduceResponse::default().with_name(topic).with_partition_responses(out));
        }
        if acks == 0 {
            // No answer is sent: a failure closes the connection (as Kafka's broker does), so the
            // producer notices, reconnects and refreshes its metadata.
            anyhow::ensure!(
                failed == 0,
                "a Produce with acks=0 failed for {failed} partition(s): closing the connection"
            );
            return Ok(None);
        }
        encode(ApiKey::Produce, &header, v, &ProduceResponse::default().with_responses(responses))
    })
}

/// One partition's records of a Produce request (v3+): exactly one record batch, as
/// `ProduceRequest.validateRecords` requires, validated record by record (`crate::validate`)
/// before it is enqueued; zstd only from v7. Returns the batch's future and whether the stored
/// batch carries LogAppendTime.
async fn submit_partition(
    producer: &Producer,
    version: i16,
    topic: &TopicMeta,
    partition: i32,
    records: bytes::Bytes,
) -> Result<(Vec<Waiting>, bool), KafkaError> {
    let name = format!("{}-{partition}", topic.name);
    let batch = crate::validate::one_batch(version, records, &name)?;
    let validated = producer.validate(vec![batch], producer.limits(), name).await?;
    let log_append_time = validated.iter().any(|b| b.header.timestamp_type == 1);
    Ok((producer.submit_all(topic.id, partition, validated).await?, log_append_time))
}

// ---------------------------------------------------------------- Metadata

async fn metadata(l: &Listener, header: &RequestHeader, req: MetadataRequest) -> Reply {
    let v = header.request_api_version;
    let all = match l.shim.coordinators.refresh_topics().await {
        Ok(t) => t,
        Err(s) => {
            tracing::warn!(status = %s, "metadata: coordinators unavailable");
            vec![]
        }
    };
    let wanted: Option<Vec<String>> = match &req.topics {
        None => None,
        Some(list) if list.is_empty() && v == 0 => None,
        Some(list) => Some(list.iter().filter_map(|t| t.name.as_ref().map(|n| n.as_str().to_string())).collect()),
    };
    // Every live broker; each partition led by its rendezvous owner among them (all serve it),
    // the others listed as replicas so clients know them (a preferred read replica is one).
    let me = kafka_protocol::messages::BrokerId(l.broker_id);
    let live = l.shim.registry.brokers();
    let describe = |t: &TopicMeta| {
        let partitions = (0..t.partitions)
            .map(|p| {
                let leader = crate::registry::owner(&diskless_proto::partition_key(&t.id, p), &live)
                    .map_or(l.broker_id, |b| b.id);
                let mut replicas = vec![kafka_protocol::messages::BrokerId(leader)];
                replicas
                    .extend(live.iter().filter(|b| b.id != leader).map(|b| kafka_protocol::messages::BrokerId(b.id)));
                metadata_response::MetadataResponsePartition::default()
                    .with_partition_index(p)
                    .with_leader_id(kafka_protocol::messages::BrokerId(leader))
                    .with_leader_epoch(0)
                    .with_replica_nodes(replicas.clone())
                    .with_isr_nodes(replicas)
            })
            .collect();
        let mut topic = metadata_response::MetadataResponseTopic::default()
            .with_name(Some(name(&t.name)))
            .with_partitions(partitions);
        if v >= 10 {
            topic = topic.with_topic_id(uuid::Uuid::from_bytes(t.id));
        }
        topic
    };
    let topics: Vec<_> = match wanted {
        None => all.iter().map(describe).collect(),
        Some(names) => names
            .iter()
            .map(|n| match all.iter().find(|t| &t.name == n) {
                Some(t) => describe(t),
                None => metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(name(n)))
                    .with_error_code(ErrorCode::UnknownTopicOrPartition.code()),
            })
            .collect(),
    };
    let brokers = live
        .iter()
        .map(|b| {
            let (host, port) = l.advertised_of(b);
            let mut m = metadata_response::MetadataResponseBroker::default()
                .with_node_id(kafka_protocol::messages::BrokerId(b.id))
                .with_host(StrBytes::from_string(host))
                .with_port(port);
            if v >= 1 {
                m = m.with_rack(b.rack.clone().map(StrBytes::from_string));
            }
            m
        })
        .collect();
    let mut body = MetadataResponse::default().with_brokers(brokers).with_topics(topics);
    if v >= 1 {
        body = body.with_controller_id(me);
    }
    if v >= 2 {
        body = body.with_cluster_id(Some(StrBytes::from_string(l.config.cluster_id.clone())));
    }
    encode(ApiKey::Metadata, header, v, &body)
}

// ---------------------------------------------------------------- Fetch

/// The longest a fetch waits for data.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

async fn fetch(l: &Listener, header: &RequestHeader, req: FetchRequest) -> Reply {
    let v = header.request_api_version;
    // Resolve names once; remember unknown ones.
    struct Want {
        topic: TopicName,
        partition: i32,
        resolved: Result<FetchPartition, KafkaError>,
    }
    let mut wants = vec![];
    for t in &req.topics {
        let topic = l.topic(t.topic.as_str()).await;
        for p in &t.partitions {
            let resolved = topic.clone().and_then(|tm| {
                l.partition(&tm, p.partition)?;
                Ok(FetchPartition {
                    topic_id: tm.id,
                    partition: p.partition,
                    offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                })
            });
            wants.push(Want { topic: t.topic.clone(), partition: p.partition, resolved });
        }
    }
    // KIP-392: a client in another rack than this broker's is pointed at a live broker of its own
    // rack, when there is one (`preferred_read_replica`, no records); the others are served here.
    let client_rack = if v >= 11 { req.rack_id.to_string() } else { String::new() };
    let (me, live) = (l.shim.registry.me(), l.shim.registry.brokers());
    let mut preferred: Vec<Option<i32>> = vec![];
    for w in &wants {
        let p = match &w.resolved {
            Ok(f) => crate::registry::preferred_replica(&me, &live, &client_rack, &f.topic_id, f.partition),
            Err(_) => None,
        };
        preferred.push(p);
    }
    let asks: Vec<FetchPartition> = wants
        .iter()
        .zip(&preferred)
        .filter(|(_, p)| p.is_none())
        .filter_map(|(w, _)| w.resolved.as_ref().ok().copied())
        .collect();
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_FETCH_WAIT);
    let max_bytes = if req.max_bytes <= 0 { i32::MAX } else { req.max_bytes };
    let fetched = loop {
        let r = if asks.is_empty() { Ok(vec![]) } else { l.shim.fetcher.fetch(&asks, max_bytes).await };
        let done = match &r {
            Err(_) => true,
            Ok(v) => {
                let bytes: usize = v.iter().map(|f| f.records.len()).sum();
                bytes >= req.min_bytes.max(1) as usize
                    || v.iter().any(|f| f.error.is_some())
                    || preferred.iter().any(Option::is_some)
            }
        };
        if done || Instant::now() >= deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(25).min(deadline.saturating_duration_since(Instant::now()))).await;
    };
    let mut fetched = match fetched {
        Ok(v) => v.into_iter(),
        Err(e) => {
            // The coordinators are unreachable: every partition gets the retriable error.
            let f = crate::fetch::Fetched {
                error: Some(e),
                high_watermark: -1,
                log_start_offset: -1,
                records: Bytes::new(),
            };
            vec![f; asks.len()].into_iter()
        }
    };
    let mut responses: Vec<fetch_response::FetchableTopicResponse> = vec![];
    for (w, preferred) in wants.into_iter().zip(preferred) {
        let data = match w.resolved {
            Ok(_) if preferred.is_some() => fetch_response::PartitionData::default()
                .with_partition_index(w.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_preferred_read_replica(kafka_protocol::messages::BrokerId(preferred.unwrap_or(-1)))
                .with_records(Some(Bytes::new())),
            Err(e) => fetch_response::PartitionData::default()
                .with_partition_index(w.partition)
                .with_error_code(e.code.code())
                .with_high_watermark(-1),
            Ok(_) => {
                let f = fetched.next().expect("one answer per resolved partition");
                let mut d = fetch_response::PartitionData::default()
                    .with_partition_index(w.partition)
                    .with_error_code(f.error.as_ref().map_or(NONE, |e| e.code.code()))
                    .with_high_watermark(f.high_watermark)
                    .with_last_stable_offset(f.high_watermark)
                    .with_records(Some(f.records));
                if v >= 5 {
                    d = d.with_log_start_offset(f.log_start_offset);
                }
                if v >= 11 {
                    d = d.with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1));
                }
                d
            }
        };
        match responses.last_mut() {
            Some(last) if last.topic == w.topic => last.partitions.push(data),
            _ => responses.push(
                fetch_response::FetchableTopicResponse::default().with_topic(w.topic).with_partitions(vec![data]),
            ),
        }
    }
    encode(ApiKey::Fetch, header, v, &FetchResponse::default().with_responses(responses))
}

// ---------------------------------------------------------------- ListOffsets, DeleteRecords

async fn list_offsets(l: &Listener, header: &RequestHeader, req: ListOffsetsRequest) -> Reply {
    let v = header.request_api_version;
    let mut topics = vec![];
    for t in req.topics {
        let topic = l.topic(t.name.as_str()).await;
        let mut parts = vec![];
        for p in t.partitions {
            let r = async {
                let tm = topic.clone()?;
                l.partition(&tm, p.partition_index)?;
                l.shim.coordinators.list_offset(tm.id, p.partition_index, p.timestamp).await
            }
            .await;
            let mut resp =
                list_offsets_response::ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            resp = match r {
                Ok((ts, off)) => resp.with_timestamp(ts).with_offset(off),
                Err(e) => resp.with_error_code(e.code.code()).with_timestamp(-1).with_offset(-1),
            };
            if v >= 4 {
                resp = resp.with_leader_epoch(0);
            }
            parts.push(resp);
        }
        topics
            .push(list_offsets_response::ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(parts));
    }
    encode(ApiKey::ListOffsets, header, v, &ListOffsetsResponse::default().with_topics(topics))
}

async fn delete_records(l: &Listener, header: &RequestHeader, req: DeleteRecordsRequest) -> Reply {
    let v = header.request_api_version;
    let mut topics = vec![];
    for t in req.topics {
        let topic = l.topic(t.name.as_str()).await;
        let mut parts = vec![];
        for p in t.partitions {
            let r = async {
                let tm = topic.clone()?;
                l.partition(&tm, p.partition_index)?;
                l.shim.coordinators.delete_records_before(tm.id, p.partition_index, p.offset, req.timeout_ms).await
            }
            .await;
            let resp = delete_records_response::DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index);
            parts.push(match r {
                Ok(lw) => resp.with_low_watermark(lw),
                Err(e) => resp.with_error_code(e.code.code()).with_low_watermark(-1),
            });
        }
        topics.push(
            delete_records_response::DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(parts),
        );
    }
    encode(ApiKey::DeleteRecords, header, v, &DeleteRecordsResponse::default().with_topics(topics))
}

// ---------------------------------------------------------------- CreateTopics, DeleteTopics

/// Topic settings a CreateTopics request may carry; `diskless.enable=true` is required.
fn topic_configs(t: &create_topics_request::CreatableTopic) -> Result<coord::TopicConfigs, KafkaError> {
    let bad = |m: String| KafkaError::new(ErrorCode::InvalidConfig, m);
    let mut diskless = false;
    let mut out = coord::TopicConfigs::default();
    for c in &t.configs {
        let value = c.value.as_ref().map(|v| v.as_str().to_string()).unwrap_or_default();
        match c.name.as_str() {
            "diskless.enable" => diskless = value.eq_ignore_ascii_case("true"),
            "retention.ms" => {
                out.retention_ms =
                    Some(value.parse().map_err(|_| bad(format!("retention.ms {value:?} is not a number")))?)
            }
            "retention.bytes" => {
                out.retention_bytes =
                    Some(value.parse().map_err(|_| bad(format!("retention.bytes {value:?} is not a number")))?)
            }
            other => tracing::debug!(config = other, "topic config ignored by diskless topics"),
        }
    }
    if !diskless {
        return Err(bad(
            "this cluster serves diskless topics only: create the topic with the config diskless.enable=true".into(),
        ));
    }
    Ok(out)
}

async fn create_topics(l: &Listener, header: &RequestHeader, req: CreateTopicsRequest) -> Reply {
    let v = header.request_api_version;
    let mut results = vec![];
    for t in &req.topics {
        let partitions = if t.num_partitions == -1 { 1 } else { t.num_partitions };
        let id = uuid::Uuid::new_v4();
        let r: Result<(), KafkaError> = async {
            let configs = topic_configs(t)?;
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
                timeout_ms: req.timeout_ms.max(1000),
            };
            let resp = l
                .shim
                .coordinators
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
                    res = res.with_error_message(msg(e.message));
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

async fn delete_topics(l: &Listener, header: &RequestHeader, req: DeleteTopicsRequest) -> Reply {
    let v = header.request_api_version;
    let names: Vec<String> = if v >= 6 {
        req.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.as_str().to_string())).collect()
    } else {
        req.topic_names.iter().map(|n| n.as_str().to_string()).collect()
    };
    let mut results = vec![];
    for n in names {
        let r: Result<(), KafkaError> = async {
            let tm = l.topic(&n).await?;
            let q = coord::DeleteTopicsRequest {
                topics: vec![coord::delete_topics_request::DeletableTopicState { topic_id: tm.id.to_vec() }],
                timeout_ms: req.timeout_ms.max(1000),
            };
            l.shim.coordinators.forget_topic(&n);
            let resp = l
                .shim
                .coordinators
                .call_once(|mut c| async move { c.delete_topics(q).await })
                .await
                .map_err(|s| KafkaError::unavailable("delete topic", &s))?;
            match resp.responses.into_iter().next() {
                Some(r) => KafkaError::from_wire(r.error_code, r.error_message).map_or(Ok(()), Err),
                None => Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")),
            }
        }
        .await;
        let mut res = delete_topics_response::DeletableTopicResult::default().with_name(Some(name(&n)));
        if let Err(e) = r {
            res = res.with_error_code(e.code.code());
            if v >= 5 {
                res = res.with_error_message(msg(e.message));
            }
        }
        results.push(res);
    }
    encode(ApiKey::DeleteTopics, header, v, &DeleteTopicsResponse::default().with_responses(results))
}

// ---------------------------------------------------------------- InitProducerId, FindCoordinator

async fn init_producer_id(l: &Listener, header: &RequestHeader, req: InitProducerIdRequest) -> Reply {
    let v = header.request_api_version;
    let refused = |code: i16| {
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let body = if req.transactional_id.is_some() {
        refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else {
        // Idempotence only: a fresh id, epoch 0, every time (a restarted producer is a new one).
        match l.shim.producer_ids.next().await {
            Ok(id) => InitProducerIdResponse::default()
                .with_producer_id(kafka_protocol::messages::ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::info!(error = %e, "InitProducerId: no producer id");
                // Clients retry COORDINATOR_NOT_AVAILABLE.
                refused(COORDINATOR_NOT_AVAILABLE)
            }
        }
    };
    encode(ApiKey::InitProducerId, header, v, &body)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::{BufMut, BytesMut};

    use super::*;
    use crate::config::ProduceConfig;
    use crate::produce::testing::producer;
    use crate::wal::record_batch::tests::fake_batch;

    #[tokio::test]
    async fn a_partition_gets_exactly_one_whole_batch_or_nothing_of_it_is_committed() {
        let config = ProduceConfig { commit_interval_ms: 1, ..ProduceConfig::default() };
        let (p, tasks, fake, storage) = producer(config, true, Duration::from_secs(600));
        let topic = TopicMeta { id: [1; 16], name: "t".into(), partitions: 1 };
        let mut damaged = fake_batch(2, -1, -1);
        damaged[30] ^= 1; // breaks the CRC
        let two = [fake_batch(3, -1, -1), fake_batch(2, -1, -1)].concat();
        let cut = fake_batch(2, -1, -1)[..40].to_vec();
        let partial_second = [fake_batch(3, -1, -1), cut.clone()].concat();
        for (records, code) in [
            (damaged, ErrorCode::CorruptMessage),
            (two, ErrorCode::InvalidRecord),
            (partial_second, ErrorCode::InvalidRecord),
            (cut, ErrorCode::CorruptMessage),
            (vec![], ErrorCode::InvalidRecord),
        ] {
            let mut b = BytesMut::new();
            b.put_slice(&records);
            let r = submit_partition(&p, 9, &topic, 0, b.freeze()).await;
            assert_eq!(r.err().map(|e| e.code), Some(code));
        }
        // zstd needs Produce v7.
        let mut zstd = fake_batch(1, -1, -1);
        zstd[22] |= 4;
        let r = submit_partition(&p, 6, &topic, 0, Bytes::from(zstd)).await;
        assert_eq!(r.err().map(|e| e.code), Some(ErrorCode::UnsupportedCompressionType));
        // A good request goes through.
        let (waits, lat) = submit_partition(&p, 9, &topic, 0, Bytes::from(fake_batch(3, -1, -1))).await.unwrap();
        assert!(!lat);
        for w in waits {
            w.await.unwrap();
        }
        drop(p);
        tasks.join().await;
        let commits = fake.commits();
        assert_eq!(commits.len(), 1, "only the good request was committed");
        assert_eq!(commits[0].batches.len(), 1);
        assert_eq!(storage.list("").await.unwrap().len(), 1);
    }
}
