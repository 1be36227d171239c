//! Metadata: the topics of the catalog (all, or those asked for), every live broker of the registry
//! at the address of the listener asked, and each partition led by its rendezvous owner among them
//! (any broker serves any partition: this only spreads clients over the brokers), at the leader
//! epoch of the registry's generation (`Registry::leader_epoch`). A topic the
//! client may not DESCRIBE is left out of an all-topics answer and answered
//! TOPIC_AUTHORIZATION_FAILED when named; the KIP-430 authorized operations are filled when asked
//! (Kafka's `KafkaApis.handleTopicMetadataRequest`). Reads only; it must not create topics
//! (auto-creation is off).

use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::response::{encode, topic_name, Reply};
use super::session::{refused, Session};
use crate::authz::{Operation, Resource};
use crate::cluster::TopicMeta;

pub(super) async fn metadata(l: &Session, header: &RequestHeader, req: MetadataRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let may_describe = |name: &str| access.allowed(Operation::Describe, Resource::Topic, name);
    let all = match l.shim.cluster.refresh_topics().await {
        Ok(t) => t,
        Err(s) => {
            tracing::warn!(status = %s, "metadata: coordinator cluster unavailable");
            vec![]
        }
    };
    // Topics named, or from v10 given by id without a name (KIP-516: a KIP-848 consumer learns
    // its assignment by topic id and asks for those).
    let wanted: Option<Vec<Result<String, uuid::Uuid>>> = match &req.topics {
        None => None,
        Some(list) if list.is_empty() && v == 0 => None,
        Some(list) => Some(
            list.iter()
                .filter_map(|t| match &t.name {
                    Some(n) => Some(Ok(n.as_str().to_string())),
                    None if v >= 10 && !t.topic_id.is_nil() => Some(Err(t.topic_id)),
                    None => None,
                })
                .collect(),
        ),
    };
    // Every live broker; each partition led by its rendezvous owner among them (all serve it),
    // the others listed as replicas so clients know them (a preferred read replica is one).
    let me = kafka_protocol::messages::BrokerId(l.broker_id);
    let live = l.shim.registry.brokers();
    let epoch = l.shim.registry.leader_epoch();
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
                    .with_leader_epoch(epoch)
                    .with_replica_nodes(replicas.clone())
                    .with_isr_nodes(replicas)
            })
            .collect();
        let mut topic = metadata_response::MetadataResponseTopic::default()
            .with_name(Some(topic_name(&t.name)))
            .with_partitions(partitions);
        if v >= 10 {
            topic = topic.with_topic_id(uuid::Uuid::from_bytes(t.id));
        }
        if v >= 8 && req.include_topic_authorized_operations {
            topic = topic.with_topic_authorized_operations(access.operations(Resource::Topic, &t.name));
        }
        topic
    };
    let topics: Vec<_> = match wanted {
        // All topics: those the client may describe (Kafka leaves the others out).
        None => all.iter().filter(|t| may_describe(&t.name)).map(describe).collect(),
        Some(names) => names
            .iter()
            .map(|want| match want {
                Ok(n) => match all.iter().find(|t| &t.name == n) {
                    _ if !may_describe(n) => metadata_response::MetadataResponseTopic::default()
                        .with_name(Some(topic_name(n)))
                        .with_error_code(refused(Resource::Topic, Operation::Describe, n).code.code()),
                    Some(t) => describe(t),
                    None => metadata_response::MetadataResponseTopic::default()
                        .with_name(Some(topic_name(n)))
                        .with_error_code(ErrorCode::UnknownTopicOrPartition.code()),
                },
                // By id, answered with the id and no name when refused (Kafka's rule).
                Err(id) => match all.iter().find(|t| t.id == *id.as_bytes()) {
                    Some(t) if may_describe(&t.name) => describe(t),
                    found => metadata_response::MetadataResponseTopic::default().with_topic_id(*id).with_error_code(
                        match found {
                            Some(_) => ErrorCode::TopicAuthorizationFailed,
                            None => ErrorCode::UnknownTopicId,
                        }
                        .code(),
                    ),
                },
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
    // KIP-430: the cluster's operations this client may do, if it asked (v8 to v10), 0 when it may
    // not describe the cluster, as Kafka answers.
    if (8..=10).contains(&v) && req.include_cluster_authorized_operations {
        let ops = if access.on_cluster(Operation::Describe) {
            access.operations(Resource::Cluster, crate::authz::CLUSTER_NAME)
        } else {
            0
        };
        body = body.with_cluster_authorized_operations(ops);
    }
    encode(ApiKey::Metadata, header, v, &body)
}
