//! `CoordinatorService`: the KIP-1164 API on every node, as conversions between the wire and the
//! domain.
//!
//! Each handler checks and converts its request (`convert`), splits it by metadata partition
//! (`diskless_proto::split_by_partition`), runs each part where it must run, and merges the parts'
//! answers back in request order (`diskless_proto::merge_part`). Mutations and strict reads
//! (ListOffsets, DescribeFiles, the file lists) run on the group's leader through `node::route`:
//! locally when this node leads the group, otherwise forwarded once as the typed command to the
//! leader. Clients may therefore send any request to any node; clients that know the topology
//! (AdminService.Status) save the hop by sending each part to its leader with the `x-diskless-local`
//! header (served here, never forwarded). A request carrying `x-diskless-group` (forwarded by a
//! node of an older release) is served here for that one group. Topic-level changes (create,
//! delete, alter) go to metadata partition 0 first, which holds the authoritative topic catalog,
//! and then to every other partition; a partial failure is reported as a retriable error, and
//! repeating the request converges (the operations are idempotent). FindBatches is served by this
//! node's own replicas, after waiting (bounded) until they have applied the indexes the caller
//! asked for; a replica that cannot vouch for its state (no word from a leader lately, not a
//! member, stopped, or caught mid-install) answers REPLICA_NOT_AVAILABLE for its partitions, and the
//! caller asks another node.
//!
//! Per-item problems are Kafka error codes in the response; a part that could not be routed gets
//! what `convert::route_failure` says (NOT_LEADER_OR_FOLLOWER, retriable, or REQUEST_TIMED_OUT when
//! the outcome is unknown) for its items.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use diskless_proto::v1::coordinator_service_server::CoordinatorService;
use diskless_proto::v1::*;
use diskless_proto::{merge_part, metadata_partition_for, split_by_partition, ErrorCode};
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::convert::{self, failure_fields, part_failure, result_fields, route_failure, route_status};
use crate::node::{Answer, Hop, Node, Read, RouteError, Write, DELETE_BUDGET};
use crate::state_machine::{
    AlterTopic, CommitBatch, CommitFile, CommittedBatch, CreateTopic, DeleteRecordsPartition, Failure, FenceAnswer,
    FetchBudget, Op, Outcome, TopicPartition, PRODUCER_ID_AUTHORITY,
};

/// The header naming the single metadata partition a forwarded request is for.
pub const GROUP_HEADER: &str = "x-diskless-group";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_TIMEOUT: Duration = Duration::from_secs(120);

pub struct CoordinatorApi {
    node: Arc<Node>,
}

pub(super) fn timeout_of(ms: i32) -> Duration {
    if ms <= 0 {
        DEFAULT_TIMEOUT
    } else {
        Duration::from_millis(ms as u64).min(MAX_TIMEOUT)
    }
}

pub(super) fn forwarded_group<T>(r: &Request<T>) -> Option<u32> {
    r.metadata().get(GROUP_HEADER)?.to_str().ok()?.parse().ok()
}

/// The header asking a node to serve every part of a request itself, never forwarding one: a part
/// whose metadata partition this node does not lead is answered NOT_LEADER_OR_FOLLOWER (nothing
/// applied). Smart clients send each node the parts of every partition it leads, in one request.
pub const LOCAL_HEADER: &str = "x-diskless-local";

/// Where a request's parts run: here only with either header, else on their leaders.
pub(super) fn hop_of<T>(r: &Request<T>) -> Hop {
    if forwarded_group(r).is_some() || r.metadata().get(LOCAL_HEADER).is_some() {
        Hop::Here
    } else {
        Hop::Leader
    }
}

impl CoordinatorApi {
    pub fn new(node: Arc<Node>) -> CoordinatorApi {
        CoordinatorApi { node }
    }

    pub(super) fn node(&self) -> &Arc<Node> {
        &self.node
    }

    fn owner(&self, tp: &TopicPartition) -> u32 {
        if tp.partition < 0 {
            // Nobody owns it; group 0 answers UNKNOWN_TOPIC_OR_PARTITION like any other.
            return 0;
        }
        metadata_partition_for(tp.topic_id.as_bytes(), tp.partition, self.node.num_groups())
    }

    /// Serves per-partition items: the valid ones split by the metadata partition owning them (or
    /// all on `forwarded`), each part run by `run` on its group at once, the answers put back in
    /// request order; an invalid item keeps its failure, a part that failed fails its items.
    async fn per_partition<T, R, Fut>(
        &self,
        flat: &[Result<T, Failure>],
        tp: impl Fn(&T) -> &TopicPartition,
        forwarded: Option<u32>,
        run: impl Fn(u32, Vec<T>) -> Fut,
    ) -> Vec<Result<R, Failure>>
    where
        T: Clone,
        Fut: std::future::Future<Output = Result<Vec<Result<R, Failure>>, RouteError>>,
    {
        let mut results: Vec<Option<Result<R, Failure>>> =
            flat.iter().map(|r| r.as_ref().err().map(|f| Err(f.clone()))).collect();
        let parts =
            split_by_partition(flat, |r| r.as_ref().ok().map(|t| forwarded.unwrap_or_else(|| self.owner(tp(t)))));
        let outs = join_all(
            parts.iter().map(|(&g, ks)| run(g, ks.iter().filter_map(|&k| flat[k].as_ref().ok().cloned()).collect())),
        )
        .await;
        for ((_, ks), out) in parts.iter().zip(outs) {
            merge_part(&mut results, ks, out, |f| Err(part_failure(f)));
        }
        results.into_iter().map(|r| r.unwrap_or_else(no_result)).collect()
    }

    /// Every metadata partition, or only the one a forwarded request names.
    pub(super) fn groups(&self, forwarded: Option<u32>) -> Vec<u32> {
        forwarded.map_or_else(|| (0..self.node.num_groups()).collect(), |g| vec![g])
    }

    /// Proposes `op` on `g`'s leader.
    pub(super) async fn write(
        &self,
        g: u32,
        op: Op,
        timeout: Duration,
        hop: Hop,
    ) -> Result<(Outcome, u64), RouteError> {
        self.node.on_leader(g, Write::Propose(op), timeout, hop).await
    }

    /// Serves `r` on `g`'s leader.
    pub(super) async fn read(&self, g: u32, r: Read, timeout: Duration, hop: Hop) -> Result<Answer, RouteError> {
        self.node.read_on_leader(g, r, timeout, hop).await
    }

    /// Runs a topic-level operation: on `g` only when forwarded, else on group 0 then the rest.
    /// `items` are the request's topics (already converted); returns a result per item.
    async fn topic_op<T: Clone>(
        &self,
        forwarded: Option<u32>,
        items: Vec<Result<T, Failure>>,
        timeout: Duration,
        make_op: impl Fn(Vec<T>) -> Op,
    ) -> Vec<Result<(), Failure>> {
        let mut results: Vec<Result<(), Failure>> =
            items.iter().map(|i| i.as_ref().map(|_| ()).map_err(Clone::clone)).collect();
        let mut pending: Vec<(usize, T)> =
            items.into_iter().enumerate().filter_map(|(i, t)| t.ok().map(|t| (i, t))).collect();
        // The catalog's authority first.
        let stages = match forwarded {
            Some(g) => vec![vec![g]],
            None => vec![vec![0u32], (1..self.node.num_groups()).collect()],
        };
        let hop = if forwarded.is_some() { Hop::Here } else { Hop::Leader };
        for stage in stages {
            if pending.is_empty() {
                break;
            }
            let ts: Vec<T> = pending.iter().map(|(_, t)| t.clone()).collect();
            let op = |g: u32| (g, make_op(ts.clone()));
            let outs = join_all(stage.iter().map(|&g| op(g)).map(|(g, op)| async move {
                match self.write(g, op, timeout, hop).await? {
                    (Outcome::Topics(v), _) => Ok(v.into_iter().map(|(_, r)| r).collect::<Vec<_>>()),
                    (other, _) => Err(RouteError::unexpected(g, &other)),
                }
            }))
            .await;
            let mut answers: Vec<Option<Result<(), Failure>>> = vec![None; pending.len()];
            let all: Vec<usize> = (0..pending.len()).collect();
            let mut failed = vec![false; pending.len()];
            for out in outs {
                merge_part(&mut answers, &all, out, |f| Err(part_failure(f)));
                for (k, a) in answers.iter_mut().enumerate() {
                    if let (Some(Err(f)), false) = (a.take(), failed[k]) {
                        results[pending[k].0] = Err(f);
                        failed[k] = true;
                    }
                }
            }
            pending = pending.into_iter().zip(failed).filter(|(_, f)| !f).map(|(p, _)| p).collect();
        }
        results
    }
}

fn commit_error(f: &Failure) -> commit_file_response::CommitBatchResult {
    let (error_code, error_message) = failure_fields(f);
    commit_file_response::CommitBatchResult {
        error_code,
        error_message,
        assigned_base_offset: -1,
        log_append_time: -1,
        log_start_offset: -1,
        is_duplicate: false,
    }
}

fn commit_result(r: &Result<CommittedBatch, Failure>) -> commit_file_response::CommitBatchResult {
    match r {
        Ok(c) => commit_file_response::CommitBatchResult {
            error_code: 0,
            error_message: None,
            assigned_base_offset: c.assigned_base_offset,
            log_append_time: c.log_append_time,
            log_start_offset: c.log_start_offset,
            is_duplicate: c.is_duplicate,
        },
        Err(f) => commit_error(f),
    }
}

/// The answers of every metadata partition named for one object, merged: live anywhere is live
/// (a definite answer, whatever the others said); otherwise every partition must have answered;
/// released anywhere is released, at the latest release.
#[derive(Debug, Clone, Default)]
struct FenceMerge {
    live: bool,
    released_at: Option<i64>,
    error: Option<Failure>,
}

impl FenceMerge {
    fn failed(&mut self, f: Failure) {
        self.error.get_or_insert(f);
    }

    fn add(&mut self, r: Result<FenceAnswer, Failure>) {
        match r {
            Err(f) => self.failed(f),
            Ok(FenceAnswer::Live) => self.live = true,
            Ok(FenceAnswer::Released { marked_at }) => {
                self.released_at = Some(self.released_at.map_or(marked_at, |t| t.max(marked_at)))
            }
            Ok(FenceAnswer::Fenced { .. }) => {}
        }
    }

    fn result(self, object_key: String) -> fence_objects_response::FenceObjectResult {
        let (state, released_at, error) = match (self.live, self.error, self.released_at) {
            (true, _, _) => (ObjectState::Live, -1, None),
            (false, Some(e), _) => (ObjectState::Unspecified, -1, Some(e)),
            (false, None, Some(at)) => (ObjectState::Released, at, None),
            (false, None, None) => (ObjectState::Fenced, -1, None),
        };
        let (error_code, error_message) = error.as_ref().map_or_else(convert::ok_fields, failure_fields);
        fence_objects_response::FenceObjectResult {
            object_key,
            error_code,
            error_message,
            state: state.into(),
            released_at,
        }
    }
}

#[tonic::async_trait]
impl CoordinatorService for CoordinatorApi {
    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let items: Vec<Result<CreateTopic, Failure>> = req
            .topics
            .iter()
            .map(|t| {
                let configs = t.configs.unwrap_or_default();
                Ok(CreateTopic {
                    topic_id: convert::topic_id(&t.topic_id)?,
                    name: t.name.clone(),
                    num_partitions: t.num_partitions,
                    retention_ms: configs.retention_ms,
                    retention_bytes: configs.retention_bytes,
                })
            })
            .collect();
        let results = self.topic_op(fwd, items, timeout, Op::CreatePartitions).await;
        let topics = req
            .topics
            .iter()
            .zip(results)
            .map(|(t, r)| {
                let (error_code, error_message) = result_fields(&r);
                create_partitions_response::CreatablePartitionsResult {
                    topic_id: t.topic_id.clone(),
                    error_code,
                    error_message,
                }
            })
            .collect();
        Ok(Response::new(CreatePartitionsResponse { throttle_time_ms: 0, topics }))
    }

    async fn delete_topics(
        &self,
        request: Request<DeleteTopicsRequest>,
    ) -> Result<Response<DeleteTopicsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let items: Vec<Result<uuid::Uuid, Failure>> =
            req.topics.iter().map(|t| convert::topic_id(&t.topic_id)).collect();
        let make = |topic_ids| Op::DeleteTopics { topic_ids, budget: DELETE_BUDGET };
        let results = self.topic_op(fwd, items, timeout, make).await;
        let responses = req
            .topics
            .iter()
            .zip(results)
            .map(|(t, r)| {
                let (error_code, error_message) = result_fields(&r);
                delete_topics_response::DeletableTopicResult { topic_id: t.topic_id.clone(), error_code, error_message }
            })
            .collect();
        Ok(Response::new(DeleteTopicsResponse { throttle_time_ms: 0, responses }))
    }

    async fn alter_topic_configs(
        &self,
        request: Request<AlterTopicConfigsRequest>,
    ) -> Result<Response<AlterTopicConfigsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let items: Vec<Result<AlterTopic, Failure>> = req
            .topics
            .iter()
            .map(|t| {
                let c = t.configs.unwrap_or_default();
                Ok(AlterTopic {
                    topic_id: convert::topic_id(&t.topic_id)?,
                    retention_ms: c.retention_ms,
                    retention_bytes: c.retention_bytes,
                })
            })
            .collect();
        let results = self.topic_op(fwd, items, timeout, Op::AlterTopicConfigs).await;
        let topics = req
            .topics
            .iter()
            .zip(results)
            .map(|(t, r)| {
                let (error_code, error_message) = result_fields(&r);
                alter_topic_configs_response::AlterableTopicResult {
                    topic_id: t.topic_id.clone(),
                    error_code,
                    error_message,
                }
            })
            .collect();
        Ok(Response::new(AlterTopicConfigsResponse { topics }))
    }

    async fn commit_file(&self, request: Request<CommitFileRequest>) -> Result<Response<CommitFileResponse>, Status> {
        let fwd = forwarded_group(&request);
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let object_format = match convert::commit_size(req.batches.len(), req.file_size)
            .and_then(|()| convert::int8(req.object_format, "object format"))
        {
            Ok(f) => f,
            Err(f) => {
                let batches = req.batches.iter().map(|_| commit_error(&f)).collect();
                return Ok(Response::new(CommitFileResponse { throttle_time_ms: 0, batches, applied: vec![] }));
            }
        };
        let batches: Vec<Result<CommitBatch, Failure>> = req.batches.iter().map(convert::commit_batch).collect();
        let mut results: Vec<Option<commit_file_response::CommitBatchResult>> =
            batches.iter().map(|b| b.as_ref().err().map(commit_error)).collect();
        let mut parts =
            split_by_partition(&batches, |b| b.as_ref().ok().map(|b| fwd.unwrap_or_else(|| self.owner(&b.tp))));
        let mut owner_ids = req.owner_ids;
        if fwd.is_none() && owner_ids.is_empty() {
            // Not split by the client: the owners are the groups its batches go to.
            owner_ids = parts.keys().map(|&g| g as i32).collect();
            if owner_ids.is_empty() {
                owner_ids = vec![0];
            }
        }
        if parts.is_empty() {
            // Record the file anyway (it is garbage at once), so the cleaner deletes the object; in
            // a metadata partition it names as an owner, which alone may accept it.
            let owner = owner_ids.iter().find(|&&o| o >= 0 && (o as u32) < self.node.num_groups());
            parts.insert(fwd.unwrap_or_else(|| owner.map_or(0, |&o| o as u32)), vec![]);
        }
        let outs = join_all(parts.iter().map(|(&g, idxs)| {
            let file = CommitFile {
                deadline_ms: None, // set by Node::commit
                object_key: req.object_key.clone(),
                object_format,
                file_size: req.file_size,
                uploader_broker_id: req.uploader_broker_id,
                owner_ids: owner_ids.clone(),
                batches: idxs.iter().filter_map(|&i| batches[i].clone().ok()).collect(),
            };
            self.node.on_leader(g, Write::Commit(file), timeout, hop)
        }))
        .await;
        let mut applied = vec![];
        for ((&g, idxs), out) in parts.iter().zip(outs) {
            let answer = out.and_then(|(outcome, index)| match outcome {
                Outcome::CommitFile(rs) => {
                    applied.push(GroupIndex { metadata_partition: g, index });
                    Ok(rs.iter().map(commit_result).collect())
                }
                other => Err(RouteError::unexpected(g, &other)),
            });
            merge_part(&mut results, idxs, answer, |f| commit_error(&part_failure(f)));
        }
        let batches = results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| commit_error(&Failure::new(ErrorCode::UnknownServerError, "no result"))))
            .collect();
        Ok(Response::new(CommitFileResponse { throttle_time_ms: 0, batches, applied }))
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        // Flattened in request order.
        let flat: Vec<Result<DeleteRecordsPartition, Failure>> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    convert::tp(&t.topic_id, p.partition_index)
                        .map(|tp| DeleteRecordsPartition { tp, offset: p.offset })
                })
            })
            .collect();
        let results = self
            .per_partition(
                &flat,
                |p| &p.tp,
                fwd,
                |g, partitions| async move {
                    match self.write(g, Op::DeleteRecords { partitions, budget: DELETE_BUDGET }, timeout, hop).await? {
                        (Outcome::DeleteRecords(rs), _) => Ok(rs.into_iter().map(|(_, r)| r).collect()),
                        (other, _) => Err(RouteError::unexpected(g, &other)),
                    }
                },
            )
            .await;
        let mut results = results.into_iter();
        let topics = req
            .topics
            .iter()
            .map(|t| delete_records_response::DeleteRecordsTopicResult {
                topic_id: t.topic_id.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let r = results.next().unwrap_or_else(no_result);
                        let (error_code, error_message) = result_fields(&r);
                        delete_records_response::DeleteRecordsPartitionResult {
                            partition_index: p.partition_index,
                            low_watermark: *r.as_ref().unwrap_or(&-1),
                            error_code,
                            error_message,
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(DeleteRecordsResponse { throttle_time_ms: 0, topics }))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let flat: Vec<Result<(TopicPartition, i64), Failure>> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| convert::tp(&t.topic_id, p.partition_index).map(|tp| (tp, p.timestamp)))
            })
            .collect();
        let results = self
            .per_partition(
                &flat,
                |(tp, _)| tp,
                fwd,
                |g, items| async move {
                    match self.read(g, Read::ListOffsets(items), timeout, hop).await? {
                        Answer::ListOffsets(rs) => {
                            Ok(rs.into_iter().map(|r| r.map(|o| (o.timestamp, o.offset))).collect())
                        }
                        other => Err(RouteError::unexpected(g, &other)),
                    }
                },
            )
            .await;
        let mut results = results.into_iter();
        let topics = req
            .topics
            .iter()
            .map(|t| list_offsets_response::ListOffsetsTopicResponse {
                topic_id: t.topic_id.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let r = results.next().unwrap_or_else(no_result);
                        let (error_code, error_message) = result_fields(&r);
                        let (timestamp, offset) = *r.as_ref().unwrap_or(&(-1, -1));
                        list_offsets_response::ListOffsetsPartitionResponse {
                            partition_index: p.partition_index,
                            error_code,
                            error_message,
                            timestamp,
                            offset,
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(ListOffsetsResponse { throttle_time_ms: 0, topics }))
    }

    async fn find_batches(
        &self,
        request: Request<FindBatchesRequest>,
    ) -> Result<Response<FindBatchesResponse>, Status> {
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let node = &self.node;
        // Wait (bounded) for the replicas this request reads to reach the indexes the caller saw
        // (not the others: a lagging group the request does not touch must not delay it).
        let read: std::collections::BTreeSet<u32> = req
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().filter_map(|p| convert::tp(&t.topic_id, p.partition_index).ok()))
            .map(|tp| self.owner(&tp))
            .collect();
        let mut lagging: BTreeMap<u32, RouteError> = BTreeMap::new();
        let waits =
            join_all(req.min_applied.iter().filter(|gi| read.contains(&gi.metadata_partition)).map(|gi| async move {
                (gi.metadata_partition, node.wait_applied(gi.metadata_partition, gi.index, timeout).await)
            }))
            .await;
        for (g, r) in waits {
            if let Err(e) = r {
                lagging.insert(g, e);
            }
        }
        // Each group's replica read from one RocksDB snapshot of its directory.
        let mut placed = BTreeMap::new();
        for &g in &read {
            placed.insert(g, node.placed(g).map_err(|e| Status::internal(e.to_string()))?);
        }
        let views: BTreeMap<u32, crate::storage::ReadView<'_>> =
            placed.iter().map(|(g, p)| (*g, p.db.read())).collect();
        let mut budget = FetchBudget::new(req.fetch_max_bytes, req.max_batches_per_partition);
        let mut involved = std::collections::BTreeSet::new();
        // A replica that is stale, not a member, stopped, or caught mid-install answers nothing
        // from its state (retriable: another node's replica may serve).
        let mut checked: BTreeMap<u32, Result<(), RouteError>> = BTreeMap::new();
        let mut topics = vec![];
        for t in &req.topics {
            let mut partitions = vec![];
            for p in &t.partitions {
                let answer = match convert::tp(&t.topic_id, p.partition_index) {
                    Err(f) => Err(f),
                    Ok(tp) => {
                        let g = self.owner(&tp);
                        involved.insert(g);
                        let Some(view) = views.get(&g) else {
                            return Err(Status::internal(format!("metadata partition {g} was not read")));
                        };
                        let readable = checked.entry(g).or_insert_with(|| node.check_readable(g, view));
                        match lagging.get(&g).or(readable.as_ref().err()) {
                            Some(e) => Err(route_failure(e)),
                            None => {
                                let sm = node.state_machine(g).map_err(|e| Status::internal(e.to_string()))?;
                                Ok(sm
                                    .find_batches(view, &tp, p.offset, p.max_partition_fetch_bytes, &mut budget)
                                    .map_err(|e| Status::internal(format!("reading metadata partition {g}: {e}")))?)
                            }
                        }
                    }
                };
                partitions.push(match answer {
                    Err(f) => find_batches_response::FindBatchesPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: f.code.wire(),
                        error_message: Some(f.message),
                        log_start_offset: -1,
                        high_watermark: -1,
                        batches: vec![],
                    },
                    Ok(pb) => find_batches_response::FindBatchesPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: pb.error.as_ref().map_or(0, |f| f.code.wire()),
                        error_message: pb.error.map(|f| f.message),
                        log_start_offset: pb.log_start_offset,
                        high_watermark: pb.high_watermark,
                        batches: pb
                            .batches
                            .into_iter()
                            .map(|b| find_batches_response::BatchInfo {
                                batch_id: b.batch_id,
                                object_key: b.object_key,
                                magic: i32::from(b.magic),
                                byte_offset: i64::from(b.byte_offset),
                                byte_size: i64::from(b.byte_size),
                                base_offset: b.base_offset,
                                last_offset: b.last_offset,
                                log_append_timestamp: b.log_append_time,
                                batch_max_timestamp: b.batch_max_timestamp,
                                timestamp_type: i32::from(b.timestamp_type),
                            })
                            .collect(),
                    },
                });
            }
            topics.push(find_batches_response::FindBatchesTopicResponse { topic_id: t.topic_id.clone(), partitions });
        }
        let applied =
            involved.into_iter().map(|g| GroupIndex { metadata_partition: g, index: node.applied(g) }).collect();
        Ok(Response::new(FindBatchesResponse { throttle_time_ms: 0, topics, applied }))
    }

    async fn describe_files(
        &self,
        request: Request<DescribeFilesRequest>,
    ) -> Result<Response<DescribeFilesResponse>, Status> {
        let fwd = forwarded_group(&request);
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let keys: Vec<String> = req.files.iter().map(|f| f.object_key.clone()).collect();
        let groups = self.groups(fwd);
        let outs = join_all(groups.iter().map(|&g| {
            let keys = keys.clone();
            async move {
                match self.read(g, Read::DescribeFiles(keys), timeout, hop).await? {
                    Answer::DescribeFiles(states) => Ok(states),
                    other => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        let mut files: Vec<describe_files_response::DescribeFileResult> = keys
            .into_iter()
            .map(|object_key| describe_files_response::DescribeFileResult {
                object_key,
                error_code: 0,
                error_message: None,
                has_live_batches: false,
                known: false,
            })
            .collect();
        let mut errors: Vec<Option<Failure>> = vec![None; files.len()];
        for out in outs {
            match out {
                Ok(states) => {
                    for (f, s) in files.iter_mut().zip(states) {
                        f.has_live_batches |= s.has_live_batches;
                        f.known |= s.known;
                    }
                }
                Err(e) => errors.iter_mut().for_each(|slot| *slot = Some(route_failure(&e))),
            }
        }
        for (f, e) in files.iter_mut().zip(errors) {
            // A live batch anywhere is a definite answer; otherwise every group must have answered.
            if let (Some(e), false) = (e, f.has_live_batches) {
                (f.error_code, f.error_message) = failure_fields(&e);
            }
        }
        Ok(Response::new(DescribeFilesResponse { throttle_time_ms: 0, files }))
    }

    async fn list_files_to_delete(
        &self,
        request: Request<ListFilesToDeleteRequest>,
    ) -> Result<Response<ListFilesToDeleteResponse>, Status> {
        let fwd = forwarded_group(&request);
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let limit = req.limit.max(0) as usize;
        let groups = self.groups(fwd);
        let outs = join_all(groups.iter().map(|&g| async move {
            match self.read(g, Read::FilesToDelete { limit: limit as u64 }, timeout, hop).await? {
                Answer::FilesToDelete(files) => Ok(files),
                other => Err(RouteError::unexpected(g, &other)),
            }
        }))
        .await;
        // The groups that answered are served even when others did not: one unavailable metadata
        // partition must not stop the cleanup of every other one's files.
        let mut files = vec![];
        let mut unavailable = vec![];
        let mut last_error = None;
        for (&g, out) in groups.iter().zip(outs) {
            match out {
                Ok(fs) => files.extend(fs.into_iter().map(|f| list_files_to_delete_response::FileToDelete {
                    object_key: f.object_key,
                    marked_for_deletion_at: f.marked_for_deletion_at,
                    file_size: f.file_size,
                    owner_ids: f.owner_ids,
                    metadata_partition: g,
                })),
                Err(e) => {
                    tracing::debug!(group = g, error = %e, "files to delete: metadata partition did not answer");
                    unavailable.push(g);
                    last_error = Some(e);
                }
            }
        }
        if unavailable.len() == groups.len() {
            return Err(
                last_error.map_or_else(|| Status::unavailable("no metadata partition answered"), |e| route_status(&e))
            );
        }
        files.sort_by(|a, b| (a.marked_for_deletion_at, &a.object_key).cmp(&(b.marked_for_deletion_at, &b.object_key)));
        files.truncate(limit);
        Ok(Response::new(ListFilesToDeleteResponse { files, unavailable_metadata_partitions: unavailable }))
    }

    async fn confirm_files_deleted(
        &self,
        request: Request<ConfirmFilesDeletedRequest>,
    ) -> Result<Response<ConfirmFilesDeletedResponse>, Status> {
        let fwd = forwarded_group(&request);
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let groups = self.groups(fwd);
        let outs = join_all(groups.iter().map(|&g| {
            let object_keys = req.object_keys.clone();
            async move {
                match self.write(g, Op::ConfirmFilesDeleted { object_keys }, timeout, hop).await? {
                    (Outcome::ConfirmFilesDeleted(rs), _) => Ok(rs),
                    (other, _) => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        // The first error any metadata partition gave a key is the key's answer.
        let mut errors: Vec<Option<Failure>> = vec![None; req.object_keys.len()];
        for out in outs {
            match out {
                Ok(rs) => {
                    for (slot, (_, r)) in errors.iter_mut().zip(rs) {
                        if let (None, Err(f)) = (&slot, r) {
                            *slot = Some(f);
                        }
                    }
                }
                Err(e) => errors.iter_mut().filter(|s| s.is_none()).for_each(|s| *s = Some(route_failure(&e))),
            }
        }
        let files = req
            .object_keys
            .into_iter()
            .zip(errors)
            .map(|(object_key, e)| {
                let (error_code, error_message) = e.as_ref().map_or_else(convert::ok_fields, failure_fields);
                confirm_files_deleted_response::ConfirmFileResult { object_key, error_code, error_message }
            })
            .collect();
        Ok(Response::new(ConfirmFilesDeletedResponse { files }))
    }

    async fn allocate_producer_ids(
        &self,
        request: Request<AllocateProducerIdsRequest>,
    ) -> Result<Response<AllocateProducerIdsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = PRODUCER_ID_AUTHORITY;
        let refused = |f: Failure| {
            let (error_code, error_message) = failure_fields(&f);
            AllocateProducerIdsResponse { error_code, error_message, producer_id_start: -1, producer_id_len: 0 }
        };
        let Ok(count) = u32::try_from(req.count) else {
            let f = Failure::new(ErrorCode::InvalidRequest, format!("count {} is negative", req.count));
            return Ok(Response::new(refused(f)));
        };
        let op = Op::AllocateProducerIds { broker_id: req.broker_id, count };
        Ok(Response::new(match self.write(g, op, timeout, hop).await {
            Ok((Outcome::ProducerIds(Ok(b)), _)) => AllocateProducerIdsResponse {
                error_code: 0,
                error_message: None,
                producer_id_start: b.first,
                producer_id_len: b.len as i32,
            },
            Ok((Outcome::ProducerIds(Err(f)), _)) => refused(f),
            Ok((other, _)) => refused(route_failure(&RouteError::unexpected(g, &other))),
            Err(e) => refused(route_failure(&e)),
        }))
    }

    async fn fence_objects(
        &self,
        request: Request<FenceObjectsRequest>,
    ) -> Result<Response<FenceObjectsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let n = self.node.num_groups();
        // Which objects each metadata partition fences (an object is in every part it names).
        let mut per_group: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut merged: Vec<FenceMerge> = vec![FenceMerge::default(); req.objects.len()];
        for (i, o) in req.objects.iter().enumerate() {
            let named: BTreeSet<u32> = match fwd {
                Some(g) => [g].into(),
                None if o.metadata_partitions.is_empty() => self.groups(None).into_iter().collect(),
                None => o.metadata_partitions.iter().copied().collect(),
            };
            for g in named {
                if g < n {
                    per_group.entry(g).or_default().push(i);
                } else {
                    merged[i]
                        .failed(Failure::new(ErrorCode::InvalidRequest, format!("there is no metadata partition {g}")));
                }
            }
        }
        let outs = join_all(per_group.iter().map(|(&g, idxs)| {
            let object_keys: Vec<String> = idxs.iter().map(|&i| req.objects[i].object_key.clone()).collect();
            async move {
                match self.write(g, Op::FenceObjects { object_keys }, timeout, hop).await? {
                    (Outcome::FenceObjects(rs), _) => Ok(rs.into_iter().map(|(_, r)| r).collect()),
                    (other, _) => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        for ((_, idxs), out) in per_group.iter().zip(outs) {
            let mut answers: Vec<Option<Result<FenceAnswer, Failure>>> = vec![None; idxs.len()];
            let all: Vec<usize> = (0..idxs.len()).collect();
            merge_part(&mut answers, &all, out, |f| Err(part_failure(f)));
            for (&i, a) in idxs.iter().zip(answers) {
                merged[i].add(a.unwrap_or_else(no_result));
            }
        }
        let objects = req.objects.iter().zip(merged).map(|(o, m)| m.result(o.object_key.clone())).collect();
        Ok(Response::new(FenceObjectsResponse { objects }))
    }

    async fn store_group(&self, r: Request<StoreGroupRequest>) -> Result<Response<StoreGroupResponse>, Status> {
        self.serve_store_group(r).await
    }

    async fn commit_offsets(
        &self,
        r: Request<CommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        self.serve_commit_offsets(r).await
    }

    async fn fetch_offsets(&self, r: Request<FetchOffsetsRequest>) -> Result<Response<FetchOffsetsResponse>, Status> {
        self.serve_fetch_offsets(r).await
    }

    async fn list_groups(&self, r: Request<ListGroupsRequest>) -> Result<Response<ListGroupsResponse>, Status> {
        self.serve_list_groups(r).await
    }

    async fn delete_groups(&self, r: Request<DeleteGroupsRequest>) -> Result<Response<DeleteGroupsResponse>, Status> {
        self.serve_delete_groups(r).await
    }

    async fn delete_offsets(
        &self,
        r: Request<DeleteOffsetsRequest>,
    ) -> Result<Response<DeleteOffsetsResponse>, Status> {
        self.serve_delete_offsets(r).await
    }

    async fn register_broker(
        &self,
        r: Request<RegisterBrokerRequest>,
    ) -> Result<Response<RegisterBrokerResponse>, Status> {
        self.serve_register_broker(r).await
    }

    async fn broker_heartbeat(
        &self,
        r: Request<BrokerHeartbeatRequest>,
    ) -> Result<Response<BrokerHeartbeatResponse>, Status> {
        self.serve_broker_heartbeat(r).await
    }

    async fn unregister_broker(
        &self,
        r: Request<UnregisterBrokerRequest>,
    ) -> Result<Response<UnregisterBrokerResponse>, Status> {
        self.serve_unregister_broker(r).await
    }

    async fn list_brokers(&self, r: Request<ListBrokersRequest>) -> Result<Response<ListBrokersResponse>, Status> {
        self.serve_list_brokers(r).await
    }

    async fn list_topics(&self, request: Request<ListTopicsRequest>) -> Result<Response<ListTopicsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let names: BTreeSet<String> = req.names.into_iter().collect();
        let topics = match self.read(0, Read::Topics, timeout, hop).await {
            Ok(Answer::Topics(topics)) => topics,
            Ok(other) => return Err(route_status(&RouteError::unexpected(0, &other))),
            Err(e) => return Err(route_status(&e)),
        };
        let topics = topics
            .into_iter()
            .filter(|t| names.is_empty() || names.contains(&t.name))
            .map(|t| list_topics_response::Topic {
                topic_id: t.topic_id.as_bytes().to_vec(),
                name: t.name,
                num_partitions: t.num_partitions,
                configs: Some(TopicConfigs {
                    retention_ms: Some(t.retention_ms),
                    retention_bytes: Some(t.retention_bytes),
                }),
            })
            .collect();
        Ok(Response::new(ListTopicsResponse { topics }))
    }
}

/// The answer of an item that got none (a bug: every item is answered).
fn no_result<T>() -> Result<T, Failure> {
    Err(Failure::new(ErrorCode::UnknownServerError, "no result"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(answers: Vec<Result<FenceAnswer, Failure>>, route_error: bool) -> (ObjectState, i64, i32) {
        let mut m = FenceMerge::default();
        for a in answers {
            m.add(a);
        }
        if route_error {
            m.failed(route_failure(&RouteError::Timeout { group: 3 }));
        }
        let r = m.result("k".into());
        (r.state(), r.released_at, r.error_code)
    }

    #[test]
    fn fence_answers_merge_live_first_then_all_must_answer_then_the_latest_release() {
        use FenceAnswer::*;
        let timeout = ErrorCode::RequestTimedOut.wire();
        // Live anywhere is a definite answer, even when another partition did not answer.
        assert_eq!(merged(vec![Ok(Fenced { fenced_at: 1 }), Ok(Live)], true), (ObjectState::Live, -1, 0));
        // Otherwise one silent partition leaves the state unknown: nothing may be deleted.
        assert_eq!(merged(vec![Ok(Released { marked_at: 5 })], true), (ObjectState::Unspecified, -1, timeout));
        let bad = Failure::new(ErrorCode::InvalidRequest, "bad key");
        assert_eq!(
            merged(vec![Ok(Fenced { fenced_at: 1 }), Err(bad)], false).0,
            ObjectState::Unspecified,
            "a refused key is not fenced"
        );
        // Released anywhere: released, at the latest release.
        assert_eq!(
            merged(
                vec![Ok(Released { marked_at: 9 }), Ok(Fenced { fenced_at: 1 }), Ok(Released { marked_at: 4 })],
                false
            ),
            (ObjectState::Released, 9, 0)
        );
        assert_eq!(
            merged(vec![Ok(Fenced { fenced_at: 1 }), Ok(Fenced { fenced_at: 2 })], false),
            (ObjectState::Fenced, -1, 0)
        );
    }
}
