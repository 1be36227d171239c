//! The Kafka APIs of KIP-848 consumer groups: ConsumerGroupHeartbeat (v0–v1) and
//! ConsumerGroupDescribe (v0–v1), over the broker's `groups::consumer::ConsumerGroups`.
//!
//! Follows Kafka's `KafkaApis.handleConsumerGroupHeartbeat` and `handleConsumerGroupDescribe`:
//! READ on the group (GROUP_AUTHORIZATION_FAILED), DESCRIBE on each topic subscribed by name
//! (TOPIC_AUTHORIZATION_FAILED), DESCRIBE on a described group; NOT_COORDINATOR from a broker that
//! does not coordinate the group. Topics are named by id in assignments, as the protocol does.

use std::collections::BTreeMap;
use std::sync::Arc;

use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::group_access::{may, owned};
use super::response::{encode, text as s, Reply};
use super::session::Session;
use crate::authz::{Operation, Resource};
use crate::coordinators::groups::consumer::assignor::Assignment;
use crate::coordinators::groups::consumer::group::{self, Catalog, Heartbeat, Refused};
use crate::coordinators::groups::GroupKind;

/// Every topic of the catalog, by name: what subscriptions are matched against (share groups'
/// too).
pub(super) async fn catalog(l: &Session) -> Result<Catalog, Refused> {
    let topics = l.shim.cluster.all_topics().await.map_err(|e| {
        tracing::info!(error = %e, "reading the topic catalog failed");
        Refused { code: ErrorCode::CoordinatorNotAvailable, message: "the topic catalog could not be read".into() }
    })?;
    Ok(topics.into_iter().map(|t| (t.name, (t.id, t.partitions))).collect())
}

fn owned_partitions(tps: &[consumer_group_heartbeat_request::TopicPartitions]) -> Assignment {
    let mut a = Assignment::new();
    for tp in tps {
        a.entry(tp.topic_id.into_bytes()).or_default().extend(tp.partitions.iter().copied());
    }
    a
}

pub(super) async fn consumer_group_heartbeat(
    l: &Session,
    header: &RequestHeader,
    req: ConsumerGroupHeartbeatRequest,
) -> Reply {
    let v = header.request_api_version;
    let group_id = req.group_id.to_string();
    // v0 joins may leave the member id to the coordinator (Kafka's: a random uuid).
    let member_id = match req.member_id.to_string() {
        m if m.is_empty() && v == 0 && req.member_epoch == 0 => uuid::Uuid::new_v4().simple().to_string(),
        m => m,
    };
    let hb = Heartbeat {
        version: v,
        member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|x| x.to_string()),
        rack_id: req.rack_id.as_ref().map(|x| x.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_names: req.subscribed_topic_names.as_ref().map(|ns| ns.iter().map(|n| n.to_string()).collect()),
        subscribed_regex: req.subscribed_topic_regex.as_ref().map(|x| x.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|x| x.to_string()),
        owned: req.topic_partitions.as_deref().map(owned_partitions),
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: l.client_host(),
    };
    let r = answer(l, &group_id, &hb).await;
    let body = match r {
        Ok(a) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&a.member_id)))
            .with_member_epoch(a.member_epoch)
            .with_heartbeat_interval_ms(if a.member_epoch < 0 {
                0
            } else {
                l.shim.consumer_groups.heartbeat_interval_ms()
            })
            .with_assignment(a.assignment.map(|asg| {
                consumer_group_heartbeat_response::Assignment::default().with_topic_partitions(
                    asg.into_iter()
                        .map(|(t, ps)| {
                            consumer_group_heartbeat_response::TopicPartitions::default()
                                .with_topic_id(uuid::Uuid::from_bytes(t))
                                .with_partitions(ps.into_iter().collect())
                        })
                        .collect(),
                )
            })),
        Err(e) => ConsumerGroupHeartbeatResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(s(&e.message))),
    };
    encode(ApiKey::ConsumerGroupHeartbeat, header, v, &body)
}

async fn answer(l: &Session, group_id: &str, hb: &Heartbeat) -> Result<group::Answer, Refused> {
    let access = l.access().await;
    let code = |code: ErrorCode| Refused { code, message: code.name().to_string() };
    may(&access, Operation::Read, group_id).map_err(code)?;
    if let Some(names) = &hb.subscribed_names {
        if names.iter().any(|n| !access.allowed(Operation::Describe, Resource::Topic, n)) {
            return Err(code(ErrorCode::TopicAuthorizationFailed));
        }
    }
    group::validate(hb)?;
    if group_id.trim().is_empty() {
        return Err(Refused { code: ErrorCode::InvalidRequest, message: "GroupId can't be empty.".into() });
    }
    owned(l, group_id).map_err(code)?;
    l.shim.held.admit(group_id, GroupKind::Consumer).await?;
    let catalog = catalog(l).await?;
    l.shim.consumer_groups.heartbeat(group_id, hb, Arc::new(catalog)).await
}

pub(super) async fn consumer_group_describe(
    l: &Session,
    header: &RequestHeader,
    req: ConsumerGroupDescribeRequest,
) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let catalog = catalog(l).await.unwrap_or_default();
    let names: BTreeMap<[u8; 16], String> = catalog.iter().map(|(n, (id, _))| (*id, n.clone())).collect();
    let topics = |a: &Assignment| {
        consumer_group_describe_response::Assignment::default().with_topic_partitions(
            a.iter()
                .filter_map(|(t, ps)| {
                    Some(
                        consumer_group_describe_response::TopicPartitions::default()
                            .with_topic_id(uuid::Uuid::from_bytes(*t))
                            .with_topic_name(TopicName(s(names.get(t)?)))
                            .with_partitions(ps.iter().copied().collect()),
                    )
                })
                .collect(),
        )
    };
    let mut groups = vec![];
    for id in &req.group_ids {
        let group_id = id.to_string();
        let out = consumer_group_describe_response::DescribedGroup::default().with_group_id(id.clone());
        let r = match may(&access, Operation::Describe, &group_id).and_then(|()| owned(l, &group_id)) {
            Err(code) => Err(Refused { code, message: code.name().to_string() }),
            Ok(()) if group_id.is_empty() => {
                Err(Refused { code: ErrorCode::InvalidGroupId, message: "GroupId can't be empty.".into() })
            }
            Ok(()) => l.shim.consumer_groups.describe(&group_id).await,
        };
        groups.push(match r {
            Err(e) => out.with_error_code(e.code.code()).with_error_message(Some(s(&e.message))),
            Ok(d) => out
                .with_group_state(s(d.state))
                .with_group_epoch(d.epoch)
                .with_assignment_epoch(d.epoch)
                .with_assignor_name(s(d.assignor))
                .with_members(
                    d.members
                        .iter()
                        .map(|m| {
                            consumer_group_describe_response::Member::default()
                                .with_member_id(s(&m.member_id))
                                .with_instance_id(m.instance_id.as_deref().map(s))
                                .with_rack_id(m.rack_id.as_deref().map(s))
                                .with_member_epoch(m.current.epoch)
                                .with_client_id(s(&m.client_id))
                                .with_client_host(s(&m.client_host))
                                .with_subscribed_topic_names(
                                    m.subscribed_names.iter().map(|n| TopicName(s(n))).collect(),
                                )
                                .with_subscribed_topic_regex(
                                    (!m.subscribed_regex.is_empty()).then(|| s(&m.subscribed_regex)),
                                )
                                .with_assignment(topics(&m.current.assigned))
                                .with_target_assignment(topics(&m.target))
                                .with_member_type(1)
                        })
                        .collect(),
                ),
        });
    }
    encode(ApiKey::ConsumerGroupDescribe, header, v, &ConsumerGroupDescribeResponse::default().with_groups(groups))
}
