//! The Kafka APIs of consumer groups: FindCoordinator, the classic protocol (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup) over the broker's `groups::GroupCoordinator`, and the admin APIs
//! (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete); OffsetCommit and OffsetFetch are
//! `group_offsets`'. What is not built is refused with the error a Kafka broker gives when the feature
//! is off, so that clients report it at once rather than retry: ConsumerGroupHeartbeat (KIP-848)
//! UNSUPPORTED_VERSION (Kafka's `KafkaApis.handleConsumerGroupHeartbeat` with the consumer protocol
//! disabled). Topic names are mapped to ids here, through the catalog cache. Authorized as Kafka's
//! `KafkaApis`: the classic protocol READ on the group, FindCoordinator and DescribeGroups
//! DESCRIBE, DeleteGroups and OffsetDelete DELETE (GROUP_AUTHORIZATION_FAILED), OffsetDelete READ
//! on each topic (TOPIC_AUTHORIZATION_FAILED); ListGroups lists every group with DESCRIBE on the cluster, else
//! the groups the client may DESCRIBE.

use std::collections::BTreeMap;

use diskless_proto::v1 as coord;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::listener::Listener;
use super::response::{encode, text as s, Reply};
use super::session::Session;
use crate::authz::{Access, Operation, Resource};
use crate::coordinators::groups::kinds;
use crate::coordinators::groups::{GroupKind, JoinRequest};

use super::group_access::{cluster_code, may, owned, TIMEOUT_MS};

/// Whether `group_id` exists as Kafka counts groups: it has members or a stored generation, or
/// committed offsets. LeaveGroup and OffsetDelete of a group that does not are refused whole
/// (UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND), as Kafka's `GroupMetadataManager` refuses them.
async fn group_exists(l: &Listener, access: &Access, group_id: &str) -> bool {
    match l.shim.groups.describe(group_id).await {
        Ok(d) if d.protocol_type.is_empty() && d.members.is_empty() => {
            matches!(super::group_offsets::fetch_group(l, access, group_id, None, false).await, Ok(rows) if !rows.is_empty())
        }
        // A stored or live group; or this broker cannot tell, and the request goes on.
        _ => true,
    }
}

// ---------------------------------------------------------------- FindCoordinator

/// Groups and transactional ids: the live broker with the highest rendezvous score for the id
/// (the same answer from every broker that sees the same live brokers; `registry`). A group the
/// client may not DESCRIBE is GROUP_AUTHORIZATION_FAILED, a transactional id
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED; another key type INVALID_REQUEST.
pub(super) async fn find_coordinator(l: &Session, header: &RequestHeader, req: FindCoordinatorRequest) -> Reply {
    let v = header.request_api_version;
    let why = "no such coordinator type (0: group, 1: transaction)";
    let access = l.access().await;
    let answer = |key_type: i8, key: &str| -> (ErrorCode, BrokerId, String, i32, Option<StrBytes>) {
        if key_type == 0 && may(&access, Operation::Describe, key).is_err() {
            (ErrorCode::GroupAuthorizationFailed, BrokerId(-1), String::new(), -1, Some(s("not authorized")))
        } else if key_type == 0 {
            let b = l.shim.registry.group_coordinator(key);
            let (host, port) = l.advertised_of(&b);
            (ErrorCode::None, BrokerId(b.id), host, port, None)
        } else if key_type == 1 && !access.allowed(Operation::Describe, Resource::TransactionalId, key) {
            (ErrorCode::TransactionalIdAuthorizationFailed, BrokerId(-1), String::new(), -1, Some(s("not authorized")))
        } else if key_type == 1 {
            // Transactional ids are owned as groups are (rendezvous over the live brokers).
            let b = l.shim.registry.group_coordinator(key);
            let (host, port) = l.advertised_of(&b);
            (ErrorCode::None, BrokerId(b.id), host, port, None)
        } else {
            (ErrorCode::InvalidRequest, BrokerId(-1), String::new(), -1, Some(s(why)))
        }
    };
    let body = if v >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| {
                let (code, node, host, port, message) = answer(req.key_type, k);
                find_coordinator_response::Coordinator::default()
                    .with_key(k.clone())
                    .with_node_id(node)
                    .with_host(s(&host))
                    .with_port(port)
                    .with_error_code(code.code())
                    .with_error_message(message)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let (code, node, host, port, message) = answer(if v >= 1 { req.key_type } else { 0 }, &req.key);
        let mut body = FindCoordinatorResponse::default()
            .with_error_code(code.code())
            .with_node_id(node)
            .with_host(s(&host))
            .with_port(port);
        if v >= 1 {
            body = body.with_error_message(message);
        }
        body
    };
    encode(ApiKey::FindCoordinator, header, v, &body)
}

// ---------------------------------------------------------------- the classic protocol

pub(super) async fn join_group(l: &Session, header: &RequestHeader, req: JoinGroupRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let join = JoinRequest {
        group_id: req.group_id.0.to_string(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: l.client_host(),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout serves.
        rebalance_timeout_ms: if v >= 1 { req.rebalance_timeout_ms } else { req.session_timeout_ms },
        protocol_type: req.protocol_type.to_string(),
        protocols: req.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
        require_known_member_id: v >= 4,
    };
    let checked = match may(&access, Operation::Read, &join.group_id).and_then(|()| owned(l, &join.group_id)) {
        // A group of another kind with members takes no classic member.
        Ok(()) => l.shim.held.admit(&join.group_id, GroupKind::Classic).await.map_err(|e| e.code),
        Err(error) => Err(error),
    };
    let out = match checked {
        Ok(()) => l.shim.groups.join(join).await,
        Err(error) => {
            crate::coordinators::groups::JoinOutcome { error, member_id: join.member_id, ..Default::default() }
        }
    };
    let members = out
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            join_group_response::JoinGroupResponseMember::default()
                .with_member_id(s(&id))
                .with_group_instance_id(if v >= 5 { instance.map(|i| s(&i)) } else { None })
                .with_metadata(metadata)
        })
        .collect();
    let mut body = JoinGroupResponse::default()
        .with_error_code(out.error.code())
        .with_generation_id(if out.error == ErrorCode::None { out.generation } else { -1 })
        .with_protocol_name(Some(s(out.protocol.as_deref().unwrap_or_default())))
        .with_leader(s(&out.leader))
        .with_member_id(s(&out.member_id))
        .with_members(members);
    if v >= 7 {
        body = body.with_protocol_type(out.protocol_type.map(|p| s(&p)));
    }
    encode(ApiKey::JoinGroup, header, v, &body)
}

pub(super) async fn sync_group(l: &Session, header: &RequestHeader, req: SyncGroupRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let assignments = req.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect();
    let out = match may(&access, Operation::Read, &req.group_id.0).and_then(|()| owned(l, &req.group_id.0)) {
        Ok(()) => l.shim.groups.sync(&req.group_id.0, req.generation_id, &req.member_id, assignments).await,
        Err(error) => crate::coordinators::groups::SyncOutcome { error, ..Default::default() },
    };
    let mut body = SyncGroupResponse::default().with_error_code(out.error.code()).with_assignment(out.assignment);
    if v >= 5 {
        body =
            body.with_protocol_type(out.protocol_type.map(|p| s(&p))).with_protocol_name(out.protocol.map(|p| s(&p)));
    }
    encode(ApiKey::SyncGroup, header, v, &body)
}

pub(super) async fn heartbeat(l: &Session, header: &RequestHeader, req: HeartbeatRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let code = match may(&access, Operation::Read, &req.group_id.0).and_then(|()| owned(l, &req.group_id.0)) {
        Ok(()) => l.shim.groups.heartbeat(&req.group_id.0, req.generation_id, &req.member_id).await,
        Err(code) => code,
    };
    encode(ApiKey::Heartbeat, header, v, &HeartbeatResponse::default().with_error_code(code.code()))
}

pub(super) async fn leave_group(l: &Session, header: &RequestHeader, req: LeaveGroupRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let who: Vec<(String, Option<String>)> = if v >= 3 {
        req.members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|i| i.to_string())))
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let left = match may(&access, Operation::Read, &req.group_id.0).and_then(|()| owned(l, &req.group_id.0)) {
        Ok(()) if !group_exists(l, &access, &req.group_id.0).await => Err(ErrorCode::UnknownMemberId),
        Ok(()) => l.shim.groups.leave(&req.group_id.0, &who).await,
        Err(code) => Err(code),
    };
    let body = match left {
        Err(code) => LeaveGroupResponse::default().with_error_code(code.code()),
        Ok(codes) if v >= 3 => LeaveGroupResponse::default().with_members(
            who.iter()
                .zip(codes)
                .map(|((id, instance), code)| {
                    leave_group_response::MemberResponse::default()
                        .with_member_id(s(id))
                        .with_group_instance_id(instance.as_ref().map(|i| s(i)))
                        .with_error_code(code.code())
                })
                .collect(),
        ),
        Ok(codes) => {
            LeaveGroupResponse::default().with_error_code(codes.first().copied().unwrap_or(ErrorCode::None).code())
        }
    };
    encode(ApiKey::LeaveGroup, header, v, &body)
}

// ---------------------------------------------------------------- admin

pub(super) async fn list_groups(l: &Session, header: &RequestHeader, req: ListGroupsRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    // DESCRIBE on the cluster lists every group; else those the client may DESCRIBE (Kafka's rule).
    let every = access.on_cluster(Operation::Describe);
    let listed = l
        .shim
        .cluster
        .call(|mut c| async move { c.list_groups(coord::ListGroupsRequest { timeout_ms: TIMEOUT_MS }).await })
        .await;
    let (mut code, stored) = match listed {
        Ok(r) => (cluster_code(r.error_code), r.groups),
        Err(_) => (ErrorCode::CoordinatorNotAvailable, vec![]),
    };
    if code == ErrorCode::UnknownTopicOrPartition {
        code = ErrorCode::None;
    }
    let live = l.shim.groups.states();
    // Per group: protocol type, state, and type (v5: "classic", "consumer" for KIP-848's, "share").
    let mut all: BTreeMap<String, (String, &'static str, &'static str)> = BTreeMap::new();
    for e in stored {
        let kind = e.group.as_ref().map_or("classic", |g| kinds::kind_of(g).name());
        let (protocol_type, state) = match &e.group {
            Some(g) if g.members.is_empty() => (g.protocol_type.clone(), "Empty"),
            Some(g) => (g.protocol_type.clone(), "Stable"),
            None => (String::new(), "Empty"),
        };
        all.insert(e.group_id, (protocol_type, state, kind));
    }
    all.extend(live.into_iter().filter(|(_, (t, _))| !t.is_empty()).map(|(id, (t, st))| (id, (t, st, "classic"))));
    // As Kafka: each broker lists the groups it coordinates (admin clients ask every broker).
    all.retain(|id, _| l.shim.registry.owns_group(id));
    all.retain(|id, _| every || access.allowed(Operation::Describe, Resource::Group, id));
    let filter: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let groups = all
        .into_iter()
        .filter(|(_, (_, state, _))| v < 4 || filter.is_empty() || filter.contains(&state.to_lowercase()))
        .filter(|(_, (_, _, kind))| v < 5 || types.is_empty() || types.iter().any(|t| t == kind))
        .map(|(id, (protocol_type, state, kind))| {
            let mut g = list_groups_response::ListedGroup::default()
                .with_group_id(GroupId(s(&id)))
                .with_protocol_type(s(&protocol_type));
            if v >= 4 {
                g = g.with_group_state(s(state));
            }
            if v >= 5 {
                g = g.with_group_type(s(kind));
            }
            g
        })
        .collect();
    encode(
        ApiKey::ListGroups,
        header,
        v,
        &ListGroupsResponse::default().with_error_code(code.code()).with_groups(groups),
    )
}

pub(super) async fn describe_groups(l: &Session, header: &RequestHeader, req: DescribeGroupsRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let mut groups = vec![];
    for id in &req.groups {
        let mut g = describe_groups_response::DescribedGroup::default().with_group_id(id.clone());
        let described = match may(&access, Operation::Describe, &id.0).and_then(|()| owned(l, &id.0)) {
            Ok(()) => l.shim.groups.describe(&id.0).await,
            Err(code) => Err(code),
        };
        match described {
            Err(code) => g = g.with_error_code(code.code()),
            Ok(d) => {
                if v >= 3 && req.include_authorized_operations {
                    g = g.with_authorized_operations(access.operations(Resource::Group, &id.0));
                }
                let dead = d.protocol_type.is_empty() && d.members.is_empty();
                g = g
                    .with_group_state(s(if dead { "Dead" } else { d.state }))
                    .with_protocol_type(s(&d.protocol_type))
                    .with_protocol_data(s(&d.protocol))
                    .with_members(
                        d.members
                            .into_iter()
                            .map(|(id, instance, client_id, host, metadata, assignment)| {
                                describe_groups_response::DescribedGroupMember::default()
                                    .with_member_id(s(&id))
                                    .with_group_instance_id(if v >= 4 { instance.map(|i| s(&i)) } else { None })
                                    .with_client_id(s(&client_id))
                                    .with_client_host(s(&host))
                                    .with_member_metadata(metadata)
                                    .with_member_assignment(assignment)
                            })
                            .collect(),
                    );
            }
        }
        groups.push(g);
    }
    encode(ApiKey::DescribeGroups, header, v, &DescribeGroupsResponse::default().with_groups(groups))
}

pub(super) async fn delete_groups(l: &Session, header: &RequestHeader, req: DeleteGroupsRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let mut results: BTreeMap<String, ErrorCode> = BTreeMap::new();
    let mut ask = vec![];
    for id in &req.groups_names {
        let id = id.0.to_string();
        if let Err(code) = may(&access, Operation::Delete, &id).and_then(|()| owned(l, &id)) {
            results.insert(id, code);
        } else if l.shim.held.with_members(&id).await.is_some() {
            results.insert(id, ErrorCode::NonEmptyGroup);
        } else {
            ask.push(id);
        }
    }
    if !ask.is_empty() {
        let request = coord::DeleteGroupsRequest { group_ids: ask.clone(), timeout_ms: TIMEOUT_MS };
        match l
            .shim
            .cluster
            .call(|mut c| {
                let request = request.clone();
                async move { c.delete_groups(request).await }
            })
            .await
        {
            Ok(r) => {
                for e in r.results {
                    let code = cluster_code(e.error_code);
                    if code == ErrorCode::None {
                        l.shim.groups.forget(&e.group_id);
                        l.shim.share_groups.release(&e.group_id);
                        l.shim.share_states.forget(&e.group_id, &[]);
                    }
                    results.insert(e.group_id, code);
                }
            }
            Err(_) => ask.into_iter().for_each(|id| {
                results.insert(id, ErrorCode::CoordinatorNotAvailable);
            }),
        }
    }
    let results = req
        .groups_names
        .iter()
        .map(|id| {
            delete_groups_response::DeletableGroupResult::default()
                .with_group_id(id.clone())
                .with_error_code(results.get(id.0.as_str()).copied().unwrap_or(ErrorCode::GroupIdNotFound).code())
        })
        .collect();
    encode(ApiKey::DeleteGroups, header, v, &DeleteGroupsResponse::default().with_results(results))
}

pub(super) async fn offset_delete(l: &Session, header: &RequestHeader, req: OffsetDeleteRequest) -> Reply {
    let v = header.request_api_version;
    let group_id = req.group_id.0.to_string();
    let access = l.access().await;
    let refused = match may(&access, Operation::Delete, &group_id).and_then(|()| owned(l, &group_id)) {
        Ok(()) if !group_exists(l, &access, &group_id).await => Err(ErrorCode::GroupIdNotFound),
        r => r,
    };
    if let Err(code) = refused {
        return encode(ApiKey::OffsetDelete, header, v, &OffsetDeleteResponse::default().with_error_code(code.code()));
    }
    let busy = l.shim.groups.has_members(&group_id);
    let mut answers: Vec<(TopicName, Vec<(i32, ErrorCode)>)> = vec![];
    let mut sent = vec![];
    let mut partitions = vec![];
    for (ti, t) in req.topics.iter().enumerate() {
        let meta = l.topic(&access, Operation::Read, &t.name.0).await;
        let mut parts = vec![];
        for (pi, p) in t.partitions.iter().enumerate() {
            let code = match &meta {
                Err(e) if e.code == ErrorCode::TopicAuthorizationFailed => e.code,
                _ if busy => ErrorCode::GroupSubscribedToTopic,
                Err(_) => ErrorCode::UnknownTopicOrPartition,
                Ok(m) => {
                    partitions.push(coord::GroupOffset {
                        topic_id: m.id.to_vec(),
                        partition: p.partition_index,
                        ..Default::default()
                    });
                    sent.push((ti, pi));
                    ErrorCode::None
                }
            };
            parts.push((p.partition_index, code));
        }
        answers.push((t.name.clone(), parts));
    }
    if !partitions.is_empty() {
        let n = partitions.len();
        let request = coord::DeleteOffsetsRequest { group_id, partitions, timeout_ms: TIMEOUT_MS };
        let codes = match l
            .shim
            .cluster
            .call(|mut c| {
                let request = request.clone();
                async move { c.delete_offsets(request).await }
            })
            .await
        {
            Ok(r) if r.partitions.len() == n => r.partitions.iter().map(|o| cluster_code(o.error_code)).collect(),
            _ => vec![ErrorCode::CoordinatorNotAvailable; n],
        };
        for ((ti, pi), code) in sent.into_iter().zip(codes) {
            answers[ti].1[pi].1 = code;
        }
    }
    let topics = answers
        .into_iter()
        .map(|(name, parts)| {
            offset_delete_response::OffsetDeleteResponseTopic::default().with_name(name).with_partitions(
                parts
                    .into_iter()
                    .map(|(p, code)| {
                        offset_delete_response::OffsetDeleteResponsePartition::default()
                            .with_partition_index(p)
                            .with_error_code(code.code())
                    })
                    .collect(),
            )
        })
        .collect();
    encode(ApiKey::OffsetDelete, header, v, &OffsetDeleteResponse::default().with_topics(topics))
}
