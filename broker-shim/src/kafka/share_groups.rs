//! The Kafka APIs of KIP-932 share groups' membership and administration: ShareGroupHeartbeat
//! (v1), ShareGroupDescribe (v1), DescribeShareGroupOffsets, AlterShareGroupOffsets and
//! DeleteShareGroupOffsets (v0), over `groups::share`.
//!
//! Follows Kafka 4.1's `KafkaApis.handleShareGroupHeartbeat`, `handleShareGroupDescribe` and the
//! share-group offset handlers (docs/research/kip-932-kafka-rules.md): READ on the group
//! (GROUP_AUTHORIZATION_FAILED), DESCRIBE on every subscribed topic; NOT_COORDINATOR from a broker
//! that does not coordinate the group; a group of another kind is GROUP_ID_NOT_FOUND; altering or
//! deleting offsets needs an empty group (NON_EMPTY_GROUP).

use std::collections::BTreeMap;
use std::sync::Arc;

use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::consumer_groups::catalog;
use super::group_access::{may, owned};
use super::response::{encode, text as s, Reply};
use super::session::Session;
use crate::authz::{Operation, Resource};
use crate::coordinators::groups::share::group::{self, Assignment, Catalog, Heartbeat, Refused};
use crate::coordinators::groups::GroupKind;

fn code(code: ErrorCode) -> Refused {
    Refused { code, message: code.name().to_string() }
}

pub(super) async fn share_group_heartbeat(
    l: &Session,
    header: &RequestHeader,
    req: ShareGroupHeartbeatRequest,
) -> Reply {
    let v = header.request_api_version;
    let group_id = req.group_id.to_string();
    let hb = Heartbeat {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        rack_id: req.rack_id.as_ref().map(|x| x.to_string()),
        subscribed_names: req.subscribed_topic_names.as_ref().map(|ns| ns.iter().map(|n| n.to_string()).collect()),
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: l.client_host(),
    };
    let r = heartbeat(l, &group_id, &hb).await;
    tracing::debug!(group = group_id, member = hb.member_id, epoch = hb.member_epoch, answer = ?r, "share group heartbeat");
    let body = match r {
        Ok(a) => ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&a.member_id)))
            .with_member_epoch(a.member_epoch)
            .with_heartbeat_interval_ms(if a.member_epoch < 0 {
                0
            } else {
                l.shim.share_groups.heartbeat_interval_ms()
            })
            .with_assignment(a.assignment.map(|asg| {
                share_group_heartbeat_response::Assignment::default().with_topic_partitions(
                    asg.into_iter()
                        .map(|(t, ps)| {
                            share_group_heartbeat_response::TopicPartitions::default()
                                .with_topic_id(uuid::Uuid::from_bytes(t))
                                .with_partitions(ps.into_iter().collect())
                        })
                        .collect(),
                )
            })),
        Err(e) => {
            tracing::debug!(group = group_id, member = hb.member_id, code = %e.code, message = e.message, "share group heartbeat refused");
            ShareGroupHeartbeatResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(s(&e.message)))
        }
    };
    encode(ApiKey::ShareGroupHeartbeat, header, v, &body)
}

async fn heartbeat(l: &Session, group_id: &str, hb: &Heartbeat) -> Result<group::Answer, Refused> {
    let access = l.access().await;
    may(&access, Operation::Read, group_id).map_err(code)?;
    if let Some(names) = &hb.subscribed_names {
        if names.len() > 10_000 {
            return Err(Refused { code: ErrorCode::InvalidRequest, message: "too many subscribed topics".into() });
        }
        if names.iter().any(|n| !access.allowed(Operation::Describe, Resource::Topic, n)) {
            return Err(code(ErrorCode::TopicAuthorizationFailed));
        }
    }
    group::validate(group_id, hb)?;
    owned(l, group_id).map_err(code)?;
    l.shim.held.admit(group_id, GroupKind::Share).await?;
    let catalog = catalog(l).await?;
    let answer = l.shim.share_groups.heartbeat(group_id, hb, Arc::new(catalog)).await?;
    if answer.member_epoch < 0 {
        // A member that leaves gives back what it holds (its sessions end with it).
        super::share_fetch::close_sessions(l, group_id, &hb.member_id).await;
    }
    Ok(answer)
}

pub(super) async fn share_group_describe(l: &Session, header: &RequestHeader, req: ShareGroupDescribeRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let catalog = catalog(l).await.unwrap_or_default();
    let names: BTreeMap<[u8; 16], String> = catalog.iter().map(|(n, (id, _))| (*id, n.clone())).collect();
    let topics = |a: &Assignment| {
        share_group_describe_response::Assignment::default().with_topic_partitions(
            a.iter()
                .filter_map(|(t, ps)| {
                    Some(
                        share_group_describe_response::TopicPartitions::default()
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
        let out = share_group_describe_response::DescribedGroup::default().with_group_id(id.clone());
        let r = match may(&access, Operation::Describe, &group_id).and_then(|()| owned(l, &group_id)) {
            Err(c) => Err(code(c)),
            Ok(()) if group_id.is_empty() => {
                Err(Refused { code: ErrorCode::InvalidGroupId, message: "GroupId can't be empty.".into() })
            }
            Ok(()) => l.shim.share_groups.describe(&group_id, &catalog).await,
        };
        groups.push(match r {
            Err(e) => out.with_error_code(e.code.code()).with_error_message(Some(s(&e.message))),
            Ok(d) => out
                .with_group_state(s(d.state))
                .with_group_epoch(d.epoch)
                .with_assignment_epoch(d.epoch)
                .with_assignor_name(s("simple"))
                .with_authorized_operations(i32::MIN)
                .with_members(
                    d.members
                        .iter()
                        .map(|m| {
                            share_group_describe_response::Member::default()
                                .with_member_id(s(&m.member_id))
                                .with_rack_id(m.rack_id.as_deref().map(s))
                                .with_member_epoch(m.epoch)
                                .with_client_id(s(&m.client_id))
                                .with_client_host(s(&m.client_host))
                                .with_subscribed_topic_names(
                                    m.subscribed_names.iter().map(|n| TopicName(s(n))).collect(),
                                )
                                .with_assignment(topics(&m.assigned))
                        })
                        .collect(),
                ),
        });
    }
    encode(ApiKey::ShareGroupDescribe, header, v, &ShareGroupDescribeResponse::default().with_groups(groups))
}

pub(super) async fn describe_share_group_offsets(
    l: &Session,
    header: &RequestHeader,
    req: DescribeShareGroupOffsetsRequest,
) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let catalog = catalog(l).await.unwrap_or_default();
    let names: BTreeMap<[u8; 16], String> = catalog.iter().map(|(n, (id, _))| (*id, n.clone())).collect();
    let mut groups = vec![];
    for g in &req.groups {
        let group_id = g.group_id.to_string();
        let out = describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default()
            .with_group_id(g.group_id.clone());
        if let Err(c) = may(&access, Operation::Describe, &group_id).and_then(|()| owned(l, &group_id)) {
            groups.push(out.with_error_code(c.code()).with_error_message(Some(s(c.name()))));
            continue;
        }
        let stored = match l.shim.share_states.stored(&group_id).await {
            Ok(v) => v,
            Err(e) => {
                groups.push(out.with_error_code(e.code.code()).with_error_message(Some(s(&e.message))));
                continue;
            }
        };
        let start_of = |id: &[u8; 16], p: i32| {
            stored.iter().find(|st| st.topic_id == id.as_slice() && st.partition_index == p).map(|st| st.start_offset)
        };
        let partition = |p: i32, start: Option<i64>, error: ErrorCode| {
            describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition::default()
                .with_partition_index(p)
                .with_start_offset(start.unwrap_or(-1))
                .with_leader_epoch(if start.is_some() { 0 } else { -1 })
                .with_error_code(error.code())
        };
        let mut topics = vec![];
        match &g.topics {
            None => {
                // Every partition the group has a state for.
                let mut by_topic: BTreeMap<[u8; 16], Vec<(i32, i64)>> = BTreeMap::new();
                for st in &stored {
                    if let Ok(id) = <[u8; 16]>::try_from(st.topic_id.as_slice()) {
                        by_topic.entry(id).or_default().push((st.partition_index, st.start_offset));
                    }
                }
                for (id, ps) in by_topic {
                    let Some(name) = names.get(&id) else { continue };
                    if !access.allowed(Operation::Describe, Resource::Topic, name) {
                        continue;
                    }
                    topics.push(
                        describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseTopic::default()
                            .with_topic_name(TopicName(s(name)))
                            .with_topic_id(uuid::Uuid::from_bytes(id))
                            .with_partitions(
                                ps.into_iter().map(|(p, o)| partition(p, Some(o), ErrorCode::None)).collect(),
                            ),
                    );
                }
            }
            Some(asked) => {
                for t in asked {
                    let name = t.topic_name.to_string();
                    let (id, error) = match catalog.get(&name) {
                        _ if !access.allowed(Operation::Describe, Resource::Topic, &name) => {
                            ([0; 16], ErrorCode::TopicAuthorizationFailed)
                        }
                        Some((id, _)) => (*id, ErrorCode::None),
                        None => ([0; 16], ErrorCode::None),
                    };
                    topics.push(
                        describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseTopic::default()
                            .with_topic_name(t.topic_name.clone())
                            .with_topic_id(uuid::Uuid::from_bytes(id))
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|&p| {
                                        let start = if error == ErrorCode::None { start_of(&id, p) } else { None };
                                        partition(p, start, error)
                                    })
                                    .collect(),
                            ),
                    );
                }
            }
        }
        groups.push(out.with_topics(topics));
    }
    encode(
        ApiKey::DescribeShareGroupOffsets,
        header,
        v,
        &DescribeShareGroupOffsetsResponse::default().with_groups(groups),
    )
}

/// The share group `group_id` must exist, be held or stored as a share group and have no members.
async fn check_empty(l: &Session, group_id: &str, catalog: &Catalog) -> Result<(), Refused> {
    if group_id.is_empty() {
        return Err(Refused { code: ErrorCode::InvalidGroupId, message: "GroupId can't be empty.".into() });
    }
    owned(l, group_id).map_err(code)?;
    match l.shim.share_groups.stored_members(group_id, catalog).await? {
        None => Err(Refused {
            code: ErrorCode::GroupIdNotFound,
            message: format!("Group {group_id} is not a share group."),
        }),
        Some(n) if n > 0 => Err(Refused {
            code: ErrorCode::NonEmptyGroup,
            message: format!("The group {group_id} has active members."),
        }),
        Some(_) => Ok(()),
    }
}

pub(super) async fn alter_share_group_offsets(
    l: &Session,
    header: &RequestHeader,
    req: AlterShareGroupOffsetsRequest,
) -> Reply {
    let v = header.request_api_version;
    let group_id = req.group_id.to_string();
    let access = l.access().await;
    let catalog = catalog(l).await.unwrap_or_default();
    let top = match may(&access, Operation::Read, &group_id).map_err(code) {
        Err(e) => Err(e),
        Ok(()) => check_empty(l, &group_id, &catalog).await,
    };
    if let Err(e) = top {
        let body = AlterShareGroupOffsetsResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(s(&e.message)));
        return encode(ApiKey::AlterShareGroupOffsets, header, v, &body);
    }
    let mut responses = vec![];
    for t in &req.topics {
        let name = t.topic_name.to_string();
        let topic = match catalog.get(&name) {
            _ if !access.allowed(Operation::Read, Resource::Topic, &name) => Err(ErrorCode::TopicAuthorizationFailed),
            Some(&(id, n)) => Ok((id, n)),
            None => Err(ErrorCode::UnknownTopicOrPartition),
        };
        let mut partitions = vec![];
        for p in &t.partitions {
            let r = match topic {
                Err(c) => Err(c),
                Ok((_, n)) if p.partition_index < 0 || p.partition_index >= n => {
                    Err(ErrorCode::UnknownTopicOrPartition)
                }
                Ok(_) if p.start_offset < 0 => Err(ErrorCode::InvalidRequest),
                Ok((id, _)) => l
                    .shim
                    .share_states
                    .reset(&(group_id.clone(), id, p.partition_index), p.start_offset)
                    .await
                    .map_err(|e| e.code),
            };
            partitions.push(
                alter_share_group_offsets_response::AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(r.err().unwrap_or(ErrorCode::None).code()),
            );
        }
        responses.push(
            alter_share_group_offsets_response::AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name.clone())
                .with_topic_id(uuid::Uuid::from_bytes(topic.map(|(id, _)| id).unwrap_or([0; 16])))
                .with_partitions(partitions),
        );
    }
    encode(
        ApiKey::AlterShareGroupOffsets,
        header,
        v,
        &AlterShareGroupOffsetsResponse::default().with_responses(responses),
    )
}

pub(super) async fn delete_share_group_offsets(
    l: &Session,
    header: &RequestHeader,
    req: DeleteShareGroupOffsetsRequest,
) -> Reply {
    let v = header.request_api_version;
    let group_id = req.group_id.to_string();
    let access = l.access().await;
    let catalog = catalog(l).await.unwrap_or_default();
    let top = match may(&access, Operation::Delete, &group_id).map_err(code) {
        Err(e) => Err(e),
        Ok(()) => check_empty(l, &group_id, &catalog).await,
    };
    let stored = match top {
        Ok(()) => l.shim.share_states.stored(&group_id).await.map_err(|e| Refused { code: e.code, message: e.message }),
        Err(e) => Err(e),
    };
    let stored = match stored {
        Ok(v) => v,
        Err(e) => {
            let body = DeleteShareGroupOffsetsResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(s(&e.message)));
            return encode(ApiKey::DeleteShareGroupOffsets, header, v, &body);
        }
    };
    let mut responses = vec![];
    for t in &req.topics {
        let name = t.topic_name.to_string();
        let r = match catalog.get(&name) {
            _ if !access.allowed(Operation::Read, Resource::Topic, &name) => {
                Err((ErrorCode::TopicAuthorizationFailed, [0; 16]))
            }
            Some(&(id, _)) if stored.iter().any(|st| st.topic_id == id.as_slice()) => {
                match l.shim.share_states.delete(&group_id, vec![id]).await {
                    Ok(()) => Ok(id),
                    Err(e) => Err((e.code, id)),
                }
            }
            Some(&(id, _)) => Err((ErrorCode::UnknownTopicOrPartition, id)),
            None => Err((ErrorCode::UnknownTopicOrPartition, [0; 16])),
        };
        let (error, id) = match r {
            Ok(id) => (ErrorCode::None, id),
            Err((c, id)) => (c, id),
        };
        responses.push(
            delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name.clone())
                .with_topic_id(uuid::Uuid::from_bytes(id))
                .with_error_code(error.code())
                .with_error_message(
                    (error == ErrorCode::UnknownTopicOrPartition)
                        .then(|| s("There is no offset information to delete.")),
                ),
        );
    }
    encode(
        ApiKey::DeleteShareGroupOffsets,
        header,
        v,
        &DeleteShareGroupOffsetsResponse::default().with_responses(responses),
    )
}
