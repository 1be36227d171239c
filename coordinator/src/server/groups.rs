//! `CoordinatorService`'s consumer-group calls: group metadata and committed offsets, routed to
//! the metadata partition a group id maps to (`metadata_partition_for_group`) and served on its
//! leader like every other mutation and strict read (forwarded once otherwise).
//!
//! Owns the wire conversions of groups and offsets and the routing of these six calls; the rules
//! (fencing at apply, what deletes what) are the state machine's (`state_machine::groups`). Member
//! liveness and rebalancing are the brokers' (`diskless-broker-shim`'s `groups`), not here.

use std::collections::BTreeMap;

use diskless_proto::metadata_partition_for_group;
use diskless_proto::v1::*;
use diskless_proto::ErrorCode;
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::convert::{self, failure_fields, result_fields, route_failure};
use super::coordinator_service::{forwarded_group, timeout_of, CoordinatorApi};
use crate::node::RouteError;
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
            })
            .collect(),
        updated_ms: g.updated_ms,
        coordinator: g.coordinator,
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
            })
            .collect(),
        updated_ms: g.updated_ms,
        coordinator: g.coordinator,
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

fn unexpected(g: u32, o: &Outcome) -> RouteError {
    RouteError::Failed { group: g, message: format!("unexpected outcome {o:?}") }
}

impl CoordinatorApi {
    fn group_partition(&self, group_id: &str) -> u32 {
        metadata_partition_for_group(group_id, self.node().num_groups())
    }

    pub(super) async fn serve_store_group(
        &self,
        request: Request<StoreGroupRequest>,
    ) -> Result<Response<StoreGroupResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.group_partition(&req.group_id);
        let refused = |f: &Failure| {
            let (error_code, error_message) = failure_fields(f);
            StoreGroupResponse { error_code, error_message }
        };
        let op = Op::StoreGroup {
            group_id: req.group_id.clone(),
            group: group_record(req.group.clone().unwrap_or_default()),
        };
        let local = |_r: StoreGroupRequest| async move {
            match self.propose(g, op, timeout).await? {
                (Outcome::Group(r), _) => {
                    let (error_code, error_message) = result_fields(&r);
                    Ok(StoreGroupResponse { error_code, error_message })
                }
                (other, _) => Err(unexpected(g, &other)),
            }
        };
        let out = self.on_group(g, fwd.is_some(), req, local, |mut c, r| async move { c.store_group(r).await }).await;
        Ok(Response::new(out.unwrap_or_else(|e| refused(&route_failure(&e)))))
    }

    pub(super) async fn serve_commit_offsets(
        &self,
        request: Request<CommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.group_partition(&req.group_id);
        // Offsets with malformed topic ids are answered here; the rest go in one entry.
        let mut answers: Vec<Option<GroupOffset>> = vec![None; req.offsets.len()];
        let mut offsets = vec![];
        let mut sent = vec![];
        for (i, o) in req.offsets.iter().enumerate() {
            match convert::tp(&o.topic_id, o.partition) {
                Ok(tp) => {
                    offsets.push(OffsetCommit {
                        tp,
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata.clone(),
                    });
                    sent.push(i);
                }
                Err(f) => answers[i] = Some(with_result(o.clone(), &Err(f))),
            }
        }
        let op = Op::CommitOffsets(CommitOffsets {
            group_id: req.group_id.clone(),
            generation: req.generation_id,
            member_id: req.member_id.clone(),
            offsets,
        });
        let sub =
            CommitOffsetsRequest { offsets: sent.iter().map(|&i| req.offsets[i].clone()).collect(), ..req.clone() };
        let n = sent.len();
        let local = |r: CommitOffsetsRequest| async move {
            match self.propose(g, op, timeout).await? {
                (Outcome::Offsets(rs), _) if rs.len() == n => Ok(CommitOffsetsResponse {
                    offsets: r.offsets.into_iter().zip(rs.iter()).map(|(o, r)| with_result(o, r)).collect(),
                }),
                (other, _) => Err(unexpected(g, &other)),
            }
        };
        let out = if n == 0 {
            Ok(CommitOffsetsResponse::default())
        } else {
            self.on_group(g, fwd.is_some(), sub.clone(), local, |mut c, r| async move { c.commit_offsets(r).await })
                .await
        };
        match out {
            Ok(resp) if resp.offsets.len() == n => {
                for (&i, o) in sent.iter().zip(resp.offsets) {
                    answers[i] = Some(o);
                }
            }
            Ok(resp) => {
                let f = Failure::new(
                    ErrorCode::UnknownServerError,
                    format!("{} answers for {n} offsets", resp.offsets.len()),
                );
                for &i in &sent {
                    answers[i] = Some(with_result(req.offsets[i].clone(), &Err(f.clone())));
                }
            }
            Err(e) => {
                let f = route_failure(&e);
                for &i in &sent {
                    answers[i] = Some(with_result(req.offsets[i].clone(), &Err(f.clone())));
                }
            }
        }
        Ok(Response::new(CommitOffsetsResponse { offsets: answers.into_iter().flatten().collect() }))
    }

    pub(super) async fn serve_fetch_offsets(
        &self,
        request: Request<FetchOffsetsRequest>,
    ) -> Result<Response<FetchOffsetsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.group_partition(&req.group_id);
        let refused = |f: &Failure| {
            let (error_code, error_message) = failure_fields(f);
            FetchOffsetsResponse { error_code, error_message, offsets: vec![], group: None }
        };
        let tps: Result<Vec<TopicPartition>, Failure> =
            req.partitions.iter().map(|o| convert::tp(&o.topic_id, o.partition)).collect();
        let tps = match tps {
            Ok(t) => t,
            Err(f) => return Ok(Response::new(refused(&f))),
        };
        let group_id = req.group_id.clone();
        let local = |_r: FetchOffsetsRequest| async move {
            self.node().linearizable(g, timeout).await?;
            let sm = self.node().state_machine(g)?;
            let placed = self.node().placed(g)?;
            let view = placed.db.read();
            let failed = |e: crate::storage::StorageError| RouteError::Failed { group: g, message: e.to_string() };
            let wanted = (!tps.is_empty()).then_some(tps.as_slice());
            let rows = sm.fetch_offsets(&view, &group_id, wanted).map_err(failed)?;
            let group = sm.consumer_group(&view, &group_id).map_err(failed)?;
            Ok(FetchOffsetsResponse {
                error_code: 0,
                error_message: None,
                offsets: rows.into_iter().map(|(tp, r)| fetched(tp, r)).collect(),
                group: group.map(consumer_group),
            })
        };
        let out = self.on_group(g, fwd.is_some(), req, local, |mut c, r| async move { c.fetch_offsets(r).await }).await;
        Ok(Response::new(out.unwrap_or_else(|e| refused(&route_failure(&e)))))
    }

    pub(super) async fn serve_list_groups(
        &self,
        request: Request<ListGroupsRequest>,
    ) -> Result<Response<ListGroupsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let parts: Vec<u32> = match fwd {
            Some(g) => vec![g],
            None => (0..self.node().num_groups()).collect(),
        };
        let outs = join_all(parts.iter().map(|&g| {
            let local = move |_r: ListGroupsRequest| async move {
                self.node().linearizable(g, timeout).await?;
                let sm = self.node().state_machine(g)?;
                let placed = self.node().placed(g)?;
                let view = placed.db.read();
                let rows =
                    sm.list_groups(&view).map_err(|e| RouteError::Failed { group: g, message: e.to_string() })?;
                Ok(ListGroupsResponse {
                    groups: rows
                        .into_iter()
                        .map(|(group_id, group)| list_groups_response::Entry {
                            group_id,
                            group: group.map(consumer_group),
                        })
                        .collect(),
                    error_code: 0,
                    error_message: None,
                })
            };
            self.on_group(g, fwd.is_some(), req, local, |mut c, r| async move { c.list_groups(r).await })
        }))
        .await;
        let mut all = ListGroupsResponse::default();
        for out in outs {
            match out {
                Ok(r) => {
                    all.groups.extend(r.groups);
                    if r.error_code != 0 {
                        (all.error_code, all.error_message) = (r.error_code, r.error_message);
                    }
                }
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
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let mut per_part: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for id in &req.group_ids {
            per_part.entry(fwd.unwrap_or_else(|| self.group_partition(id))).or_default().push(id.clone());
        }
        let outs = join_all(per_part.iter().map(|(&g, ids)| {
            let sub = DeleteGroupsRequest { group_ids: ids.clone(), timeout_ms: req.timeout_ms };
            let local = move |r: DeleteGroupsRequest| async move {
                let n = r.group_ids.len();
                match self.propose(g, Op::DeleteGroups { group_ids: r.group_ids.clone() }, timeout).await? {
                    (Outcome::Groups(rs), _) if rs.len() == n => Ok(DeleteGroupsResponse {
                        results: r
                            .group_ids
                            .into_iter()
                            .zip(rs.iter())
                            .map(|(group_id, r)| {
                                let (error_code, error_message) = result_fields(r);
                                delete_groups_response::Result { group_id, error_code, error_message }
                            })
                            .collect(),
                    }),
                    (other, _) => Err(unexpected(g, &other)),
                }
            };
            self.on_group(g, fwd.is_some(), sub, local, |mut c, r| async move { c.delete_groups(r).await })
        }))
        .await;
        let mut results = vec![];
        for ((_, ids), out) in per_part.iter().zip(outs) {
            match out {
                Ok(r) if r.results.len() == ids.len() => results.extend(r.results),
                other => {
                    let f = match other {
                        Err(e) => route_failure(&e),
                        Ok(_) => Failure::new(ErrorCode::UnknownServerError, "wrong number of answers"),
                    };
                    let (error_code, error_message) = failure_fields(&f);
                    results.extend(ids.iter().map(|id| delete_groups_response::Result {
                        group_id: id.clone(),
                        error_code,
                        error_message: error_message.clone(),
                    }));
                }
            }
        }
        Ok(Response::new(DeleteGroupsResponse { results }))
    }

    pub(super) async fn serve_delete_offsets(
        &self,
        request: Request<DeleteOffsetsRequest>,
    ) -> Result<Response<DeleteOffsetsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.group_partition(&req.group_id);
        let all_failed = |req: &DeleteOffsetsRequest, f: &Failure| DeleteOffsetsResponse {
            partitions: req.partitions.iter().map(|o| with_result(o.clone(), &Err(f.clone()))).collect(),
        };
        let tps: Result<Vec<TopicPartition>, Failure> =
            req.partitions.iter().map(|o| convert::tp(&o.topic_id, o.partition)).collect();
        let tps = match tps {
            Ok(t) => t,
            Err(f) => return Ok(Response::new(all_failed(&req, &f))),
        };
        let n = tps.len();
        let op = Op::DeleteOffsets { group_id: req.group_id.clone(), partitions: tps };
        let local = |r: DeleteOffsetsRequest| async move {
            match self.propose(g, op, timeout).await? {
                (Outcome::Offsets(rs), _) if rs.len() == n => Ok(DeleteOffsetsResponse {
                    partitions: r.partitions.into_iter().zip(rs.iter()).map(|(o, r)| with_result(o, r)).collect(),
                }),
                (other, _) => Err(unexpected(g, &other)),
            }
        };
        let out = self
            .on_group(g, fwd.is_some(), req.clone(), local, |mut c, r| async move { c.delete_offsets(r).await })
            .await;
        Ok(Response::new(match out {
            Ok(r) if r.partitions.len() == n => r,
            Ok(_) => all_failed(&req, &Failure::new(ErrorCode::UnknownServerError, "wrong number of answers")),
            Err(e) => all_failed(&req, &route_failure(&e)),
        }))
    }
}
