//! Committed offsets over the Kafka protocol: OffsetCommit (a Raft entry in the group's metadata
//! partition, fenced there by generation; the live group checks the member first) and OffsetFetch
//! (by name, the catalog mapping names to ids), after Kafka's `KafkaApis.handleOffsetCommitRequest`
//! and `handleOffsetFetchRequest`: READ on the group and the topic to commit, DESCRIBE to fetch
//! (GROUP_ / TOPIC_AUTHORIZATION_FAILED; an all-topics fetch leaves out what the client may not
//! describe). OffsetFetch v7+ with `require_stable` answers UNSTABLE_OFFSET_COMMIT for a
//! partition whose offset a transaction not ended yet will commit (KIP-447, Kafka's
//! `OffsetMetadataManager.fetchOffsets`), from the transactions the cluster keeps. OffsetDelete is
//! with the group admin APIs (`groups`). It must not keep offsets: the coordinator cluster does.

use std::collections::{BTreeMap, HashMap};

use diskless_proto::v1 as coord;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::group_access::{cluster_code, may, metadata_fits, owned, TIMEOUT_MS};
use super::listener::Listener;
use super::response::{encode, text as s, topic_name, Reply};
use super::session::Session;
use crate::authz::{Access, Operation, Resource};
use crate::coordinators::groups::offsets::Committer;

pub(super) async fn offset_commit(l: &Session, header: &RequestHeader, req: OffsetCommitRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let group_id = req.group_id.0.to_string();
    // Any negative generation is "none", as Kafka reads it (and never the transaction
    // coordinator's own, `TXN_OFFSETS_GENERATION`, which skips the fence).
    let generation = req.generation_id_or_member_epoch.max(-1);
    let member_id = req.member_id.to_string();
    // Per topic: its id, or the error for all its partitions.
    let mut answers: Vec<(String, Vec<(i32, ErrorCode)>)> = vec![];
    let mut sent: Vec<(usize, usize)> = vec![];
    let mut offsets = vec![];
    let check = match may(&access, Operation::Read, &group_id).and_then(|()| owned(l, &group_id)) {
        Ok(()) => {
            let by = Committer::Member { version: v };
            l.shim.held.check_commit(&group_id, &member_id, req.generation_id_or_member_epoch, by).await
        }
        Err(code) => Err(code),
    };
    for (ti, t) in req.topics.iter().enumerate() {
        let name = t.name.0.to_string();
        let meta = l.topic(&access, Operation::Read, &name).await;
        let mut parts = vec![];
        for (pi, p) in t.partitions.iter().enumerate() {
            let code = match (&check, &meta) {
                (Err(code), _) => *code,
                (_, Err(e)) if e.code == ErrorCode::TopicAuthorizationFailed => e.code,
                (_, Err(_)) => ErrorCode::UnknownTopicOrPartition,
                (Ok(()), Ok(m)) if p.partition_index < 0 || p.partition_index >= m.partitions => {
                    ErrorCode::UnknownTopicOrPartition
                }
                _ if !metadata_fits(p.committed_metadata.as_deref()) => ErrorCode::OffsetMetadataTooLarge,
                (Ok(()), Ok(m)) => {
                    offsets.push(coord::GroupOffset {
                        topic_id: m.id.to_vec(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        ..Default::default()
                    });
                    sent.push((ti, pi));
                    ErrorCode::None
                }
            };
            parts.push((p.partition_index, code));
        }
        answers.push((name, parts));
    }
    if !offsets.is_empty() {
        let codes = l.shim.cluster.commit_group_offsets(&group_id, generation, &member_id, offsets).await;
        for ((ti, pi), code) in sent.into_iter().zip(codes) {
            answers[ti].1[pi].1 = code;
        }
    }
    let topics = answers
        .into_iter()
        .map(|(name, parts)| {
            offset_commit_response::OffsetCommitResponseTopic::default().with_name(topic_name(&name)).with_partitions(
                parts
                    .into_iter()
                    .map(|(p, code)| {
                        offset_commit_response::OffsetCommitResponsePartition::default()
                            .with_partition_index(p)
                            .with_error_code(code.code())
                    })
                    .collect(),
            )
        })
        .collect();
    encode(ApiKey::OffsetCommit, header, v, &OffsetCommitResponse::default().with_topics(topics))
}

/// One group's committed offsets: (topic name, partition, offset, leader epoch, metadata, code) in
/// topic and partition order; or a group-level error.
type Fetched = Result<Vec<(String, i32, i64, i32, Option<String>, ErrorCode)>, ErrorCode>;

/// Topics the client may not DESCRIBE are TOPIC_AUTHORIZATION_FAILED when asked for by name and
/// left out of an all-topics answer (Kafka's `KafkaApis.handleOffsetFetchRequest`).
pub(super) async fn fetch_group(
    l: &Listener,
    access: &Access,
    group_id: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Fetched {
    may(access, Operation::Describe, group_id)?;
    owned(l, group_id)?;
    let may_describe = |name: &str| access.allowed(Operation::Describe, Resource::Topic, name);
    let catalog = l.shim.cluster.refresh_topics().await.map_err(|_| ErrorCode::CoordinatorLoadInProgress)?;
    let by_name: HashMap<&str, &crate::cluster::TopicMeta> = catalog.iter().map(|t| (t.name.as_str(), t)).collect();
    let by_id: HashMap<[u8; 16], &str> = catalog.iter().map(|t| (t.id, t.name.as_str())).collect();
    let mut partitions = vec![];
    let mut unknown = vec![];
    let mut refused = vec![];
    if let Some(w) = &wanted {
        for (name, ps) in w {
            for &p in ps {
                if !may_describe(name) {
                    refused.push((name.clone(), p));
                    continue;
                }
                match by_name.get(name.as_str()) {
                    Some(t) => partitions.push(coord::GroupOffset {
                        topic_id: t.id.to_vec(),
                        partition: p,
                        ..Default::default()
                    }),
                    None => unknown.push((name.clone(), p)),
                }
            }
        }
    }
    let refused_rows =
        refused.into_iter().map(|(n, p)| (n, p, -1, -1, Some(String::new()), ErrorCode::TopicAuthorizationFailed));
    let unknown_rows = unknown.into_iter().map(|(n, p)| (n, p, -1, -1, Some(String::new()), ErrorCode::None));
    if wanted.is_some() && partitions.is_empty() {
        let mut out: Vec<_> = unknown_rows.chain(refused_rows).collect();
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        return Ok(out);
    }
    let request = coord::FetchOffsetsRequest { group_id: group_id.to_string(), partitions, timeout_ms: TIMEOUT_MS };
    let resp = l
        .shim
        .cluster
        .call(|mut c| {
            let request = request.clone();
            async move { c.fetch_offsets(request).await }
        })
        .await
        .map_err(|_| ErrorCode::CoordinatorNotAvailable)?;
    if resp.error_code != 0 {
        return Err(match cluster_code(resp.error_code) {
            ErrorCode::CoordinatorNotAvailable => ErrorCode::CoordinatorLoadInProgress,
            c => c,
        });
    }
    let mut out: Vec<(String, i32, i64, i32, Option<String>, ErrorCode)> = resp
        .offsets
        .into_iter()
        .filter_map(|o| {
            let id: [u8; 16] = o.topic_id.as_slice().try_into().ok()?;
            let name = by_id.get(&id)?;
            Some((
                name.to_string(),
                o.partition,
                o.offset,
                o.leader_epoch,
                Some(o.metadata.unwrap_or_default()),
                ErrorCode::None,
            ))
        })
        .filter(|r| wanted.is_some() || (r.2 >= 0 && may_describe(&r.0)))
        .collect();
    if require_stable {
        // KIP-447: a partition whose offset a transaction not ended yet will commit is
        // UNSTABLE_OFFSET_COMMIT (the consumer asks again), as Kafka's `fetchOffsets` answers.
        let pending = l.shim.transactions.pending_offsets(group_id).await?;
        let by_name: HashMap<&str, [u8; 16]> = by_id.iter().map(|(id, name)| (*name, *id)).collect();
        for row in &mut out {
            if by_name.get(row.0.as_str()).is_some_and(|id| pending.contains(&(*id, row.1))) {
                *row = (row.0.clone(), row.1, -1, -1, Some(String::new()), ErrorCode::UnstableOffsetCommit);
            }
        }
    }
    out.extend(unknown_rows.chain(refused_rows));
    out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    Ok(out)
}

pub(super) async fn offset_fetch(l: &Session, header: &RequestHeader, req: OffsetFetchRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    if v >= 8 {
        let mut groups = vec![];
        for g in &req.groups {
            let wanted = g
                .topics
                .as_ref()
                .map(|ts| ts.iter().map(|t| (t.name.0.to_string(), t.partition_indexes.clone())).collect::<Vec<_>>());
            let group = match fetch_group(l, &access, &g.group_id.0, wanted, req.require_stable).await {
                Err(code) => offset_fetch_response::OffsetFetchResponseGroup::default().with_error_code(code.code()),
                Ok(rows) => {
                    let mut topics: BTreeMap<String, Vec<offset_fetch_response::OffsetFetchResponsePartitions>> =
                        BTreeMap::new();
                    for (name, p, offset, epoch, metadata, code) in rows {
                        topics.entry(name).or_default().push(
                            offset_fetch_response::OffsetFetchResponsePartitions::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(metadata.map(|m| s(&m)))
                                .with_error_code(code.code()),
                        );
                    }
                    offset_fetch_response::OffsetFetchResponseGroup::default().with_topics(
                        topics
                            .into_iter()
                            .map(|(name, partitions)| {
                                offset_fetch_response::OffsetFetchResponseTopics::default()
                                    .with_name(topic_name(&name))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    )
                }
            };
            groups.push(group.with_group_id(g.group_id.clone()));
        }
        return encode(ApiKey::OffsetFetch, header, v, &OffsetFetchResponse::default().with_groups(groups));
    }
    let wanted = req
        .topics
        .as_ref()
        .map(|ts| ts.iter().map(|t| (t.name.0.to_string(), t.partition_indexes.clone())).collect::<Vec<_>>());
    let body = match fetch_group(l, &access, &req.group_id.0, wanted, v >= 7 && req.require_stable).await {
        Err(code) if v >= 2 => OffsetFetchResponse::default().with_error_code(code.code()),
        Err(code) => {
            // v1 has no group-level error: every partition asked for carries it.
            let topics = req
                .topics
                .iter()
                .flatten()
                .map(|t| {
                    offset_fetch_response::OffsetFetchResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partition_indexes
                                .iter()
                                .map(|&p| {
                                    offset_fetch_response::OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(-1)
                                        .with_metadata(Some(s("")))
                                        .with_error_code(code.code())
                                })
                                .collect(),
                        )
                })
                .collect();
            OffsetFetchResponse::default().with_topics(topics)
        }
        Ok(rows) => {
            let mut topics: BTreeMap<String, Vec<offset_fetch_response::OffsetFetchResponsePartition>> =
                BTreeMap::new();
            for (name, p, offset, epoch, metadata, code) in rows {
                let mut part = offset_fetch_response::OffsetFetchResponsePartition::default()
                    .with_partition_index(p)
                    .with_committed_offset(offset)
                    .with_metadata(metadata.map(|m| s(&m)))
                    .with_error_code(code.code());
                if v >= 5 {
                    part = part.with_committed_leader_epoch(epoch);
                }
                topics.entry(name).or_default().push(part);
            }
            OffsetFetchResponse::default().with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        offset_fetch_response::OffsetFetchResponseTopic::default()
                            .with_name(topic_name(&name))
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
        }
    };
    encode(ApiKey::OffsetFetch, header, v, &body)
}
