//! `CoordinatorService`'s consumer-group calls (StoreGroup, CommitOffsets, FetchOffsets,
//! ListGroups, DeleteGroups, DeleteOffsets): a consumer group's stored generation and committed
//! offsets, routed to the metadata partition its group id maps to (`metadata_partition_for_group`)
//! and served on its leader like every other mutation and strict read (`node::route`: forwarded
//! once otherwise).
//!
//! Owns the wire conversions of consumer groups and offsets and which metadata partition each of
//! these six calls goes to; the rules
//! (fencing at apply, what deletes what) are the state machine's (`state_machine::groups`). Member
//! liveness and rebalancing are the brokers' (`diskless-broker-shim`'s `groups`), not here.

use diskless_proto::v1::*;
use diskless_proto::{merge_part, metadata_partition_for_group, split_by_partition};
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::fan_out::no_result;
use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Read, RouteError};
use crate::server::convert::{self, failure_fields, part_failure, result_fields, route_failure};
use crate::state_machine::{
    CommitOffsets, Failure, GroupRecord, MemberRecord, OffsetCommit, OffsetRecord, Op, Outcome, TopicPartition,
};

pub fn group_record(g: ConsumerGroup) -> GroupRecord {
    GroupRecord {
        generation: g.generation_id,
        protocol_type: g.protocol_type,
        protocol: g.protocol,
        leader: g.leader,
        members: g
            .members
            .into_iter()
            .map(|m| MemberRecord {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                subscription: m.subscription,
                assignment: m.assignment,
                member_epoch: m.member_epoch,
            })
            .collect(),
        updated_ms: g.updated_ms,
        coordinator: g.coordinator,
        version: g.version,
    }
}

pub fn consumer_group(g: GroupRecord) -> ConsumerGroup {
    ConsumerGroup {
        generation_id: g.generation,
        protocol_type: g.protocol_type,
        protocol: g.protocol,
        leader: g.leader,
        members: g
            .members
            .into_iter()
            .map(|m| consumer_group::Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                subscription: m.subscription,
                assignment: m.assignment,
                member_epoch: m.member_epoch,
            })
            .collect(),
        updated_ms: g.updated_ms,
        coordinator: g.coordinator,
        version: g.version,
    }
}

fn with_result(mut o: GroupOffset, r: &Result<(), Failure>) -> GroupOffset {
    (o.error_code, o.error_message) = result_fields(r);
    o
}

fn fetched(tp: TopicPartition, r: Option<OffsetRecord>) -> GroupOffset {
    let (offset, leader_epoch, metadata) = match r {
        Some(o) => (o.offset, o.leader_epoch, o.metadata),
        None => (-1, -1, None),
    };
    GroupOffset {
        topic_id: tp.topic_id.as_bytes().to_vec(),
        partition: tp.partition,
        offset,
        leader_epoch,
        metadata,
        error_code: 0,
        error_message: None,
    }
}

impl CoordinatorApi {
    /// The metadata partition that holds consumer group `group_id`.
    fn consumer_group_partition(&self, group_id: &str) -> u32 {
        metadata_partition_for_group(group_id, self.node.num_partitions())
    }

    pub(super) async fn serve_store_group(
        &self,
        request: Request<StoreGroupRequest>,
    ) -> Result<Response<StoreGroupResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.consumer_group_partition(&req.group_id);
        let op = Op::StoreGroup {
            group_id: req.group_id,
            group: group_record(req.group.unwrap_or_default()),
            expected_version: req.expected_version,
        };
        let r = match self.write(g, op, timeout, hop).await {
            Ok((Outcome::Group(r), _)) => r,
            Ok((other, _)) => Err(route_failure(&RouteError::unexpected(g, &other))),
            Err(e) => Err(route_failure(&e)),
        };
        let (error_code, error_message) = result_fields(&r);
        let group = r.ok().map(consumer_group);
        Ok(Response::new(StoreGroupResponse { error_code, error_message, group }))
    }

    pub(super) async fn serve_commit_offsets(
        &self,
        request: Request<CommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.consumer_group_partition(&req.group_id);
        // Offsets with malformed topic ids are answered here; the rest go in one entry.
        let tps: Vec<Result<TopicPartition, Failure>> =
            req.offsets.iter().map(|o| convert::tp(&o.topic_id, o.partition)).collect();
        let mut answers: Vec<Option<Result<(), Failure>>> =
            tps.iter().map(|r| r.as_ref().err().map(|f| Err(f.clone()))).collect();
        let sent: Vec<usize> = (0..tps.len()).filter(|&i| tps[i].is_ok()).collect();
        if !sent.is_empty() {
            let offsets = sent
                .iter()
                .filter_map(|&i| {
                    let o = &req.offsets[i];
                    let tp = *tps[i].as_ref().ok()?;
                    Some(OffsetCommit {
                        tp,
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata.clone(),
                    })
                })
                .collect();
            let op = Op::CommitOffsets(CommitOffsets {
                group_id: req.group_id.clone(),
                generation: req.generation_id,
                member_id: req.member_id.clone(),
                offsets,
            });
            let out = match self.write(g, op, timeout, hop).await {
                Ok((Outcome::Offsets(rs), _)) => Ok(rs),
                Ok((other, _)) => Err(RouteError::unexpected(g, &other)),
                Err(e) => Err(e),
            };
            merge_part(&mut answers, &sent, out, |f| Err(part_failure(f)));
        }
        let offsets =
            req.offsets.into_iter().zip(answers).map(|(o, r)| with_result(o, &r.unwrap_or_else(no_result))).collect();
        Ok(Response::new(CommitOffsetsResponse { offsets }))
    }

    pub(super) async fn serve_fetch_offsets(
        &self,
        request: Request<FetchOffsetsRequest>,
    ) -> Result<Response<FetchOffsetsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.consumer_group_partition(&req.group_id);
        let refused = |f: &Failure| {
            let (error_code, error_message) = failure_fields(f);
            FetchOffsetsResponse { error_code, error_message, offsets: vec![], group: None }
        };
        let tps: Result<Vec<TopicPartition>, Failure> =
            req.partitions.iter().map(|o| convert::tp(&o.topic_id, o.partition)).collect();
        let partitions = match tps {
            Ok(t) => t,
            Err(f) => return Ok(Response::new(refused(&f))),
        };
        let read = Read::FetchOffsets { group_id: req.group_id, partitions };
        Ok(Response::new(match self.read(g, read, timeout, hop).await {
            Ok(Answer::FetchOffsets { offsets, consumer_group: group }) => FetchOffsetsResponse {
                error_code: 0,
                error_message: None,
                offsets: offsets.into_iter().map(|(tp, r)| fetched(tp, r)).collect(),
                group: group.map(consumer_group),
            },
            Ok(other) => refused(&route_failure(&RouteError::unexpected(g, &other))),
            Err(e) => refused(&route_failure(&e)),
        }))
    }

    pub(super) async fn serve_list_groups(
        &self,
        request: Request<ListGroupsRequest>,
    ) -> Result<Response<ListGroupsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let outs = join_all(self.all_partitions().into_iter().map(|g| async move {
            match self.read(g, Read::ListConsumerGroups, timeout, hop).await? {
                Answer::ListConsumerGroups(rows) => Ok(rows),
                other => Err(RouteError::unexpected(g, &other)),
            }
        }))
        .await;
        let mut all = ListGroupsResponse::default();
        for out in outs {
            match out {
                Ok(rows) => all.groups.extend(rows.into_iter().map(|(group_id, group)| list_groups_response::Entry {
                    group_id,
                    group: group.map(consumer_group),
                })),
                Err(e) => (all.error_code, all.error_message) = failure_fields(&route_failure(&e)),
            }
        }
        all.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(Response::new(all))
    }

    pub(super) async fn serve_delete_groups(
        &self,
        request: Request<DeleteGroupsRequest>,
    ) -> Result<Response<DeleteGroupsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let parts = split_by_partition(&req.group_ids, |id| Some(self.consumer_group_partition(id)));
        let outs = join_all(parts.iter().map(|(&g, idxs)| {
            let group_ids = idxs.iter().map(|&i| req.group_ids[i].clone()).collect();
            async move {
                match self.write(g, Op::DeleteGroups { group_ids }, timeout, hop).await? {
                    (Outcome::Groups(rs), _) => Ok(rs),
                    (other, _) => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        let mut answers: Vec<Option<Result<(), Failure>>> = vec![None; req.group_ids.len()];
        for ((_, idxs), out) in parts.iter().zip(outs) {
            merge_part(&mut answers, idxs, out, |f| Err(part_failure(f)));
        }
        // In metadata partition order, as the parts answered.
        let results = parts
            .values()
            .flatten()
            .map(|&i| {
                let (error_code, error_message) = result_fields(&answers[i].clone().unwrap_or_else(no_result));
                delete_groups_response::Result { group_id: req.group_ids[i].clone(), error_code, error_message }
            })
            .collect();
        Ok(Response::new(DeleteGroupsResponse { results }))
    }

    pub(super) async fn serve_delete_offsets(
        &self,
        request: Request<DeleteOffsetsRequest>,
    ) -> Result<Response<DeleteOffsetsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.consumer_group_partition(&req.group_id);
        let tps: Result<Vec<TopicPartition>, Failure> =
            req.partitions.iter().map(|o| convert::tp(&o.topic_id, o.partition)).collect();
        let mut answers: Vec<Option<Result<(), Failure>>> = vec![None; req.partitions.len()];
        let all: Vec<usize> = (0..req.partitions.len()).collect();
        match tps {
            Err(f) => answers.iter_mut().for_each(|a| *a = Some(Err(f.clone()))),
            Ok(partitions) => {
                let op = Op::DeleteOffsets { group_id: req.group_id.clone(), partitions };
                let out = match self.write(g, op, timeout, hop).await {
                    Ok((Outcome::Offsets(rs), _)) => Ok(rs),
                    Ok((other, _)) => Err(RouteError::unexpected(g, &other)),
                    Err(e) => Err(e),
                };
                merge_part(&mut answers, &all, out, |f| Err(part_failure(f)));
            }
        }
        let partitions = req
            .partitions
            .into_iter()
            .zip(answers)
            .map(|(o, r)| with_result(o, &r.unwrap_or_else(no_result)))
            .collect();
        Ok(Response::new(DeleteOffsetsResponse { partitions }))
    }
}
