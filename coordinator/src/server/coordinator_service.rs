//! `CoordinatorService`: the KIP-1164 API on every node.
//!
//! Routing: a request is split by metadata partition (`metadata_partition_for`); each part is
//! served where it must be. Mutations and strict reads (ListOffsets, DescribeFiles, the file
//! lists) run on the group's leader: locally when this node leads the group, otherwise the part is
//! **forwarded** once to the leader's CoordinatorService, tagged with the `x-diskless-group` header
//! so the leader serves exactly that group and never forwards again. Clients may therefore send any
//! request to any node; clients that know the topology (AdminService.Status) save the hop by
//! sending each part to its leader. Topic-level changes (create, delete, alter) go to metadata
//! partition 0 first, which holds the authoritative topic catalog, and then to every other
//! partition; a partial failure is reported as a retriable error, and repeating the request
//! converges (the operations are idempotent). FindBatches is served by this node's own replicas,
//! after waiting (bounded) until they have applied the indexes the caller asked for; a replica that
//! cannot vouch for its state (no word from a leader lately, not a member, stopped, or caught
//! mid-install) answers REPLICA_NOT_AVAILABLE for its partitions, and the caller asks another node.
//!
//! Per-item problems are Kafka error codes in the response; a request that could not be routed gets
//! NOT_LEADER_OR_FOLLOWER (retriable) or REQUEST_TIMED_OUT for the items concerned.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::coordinator_service_server::CoordinatorService;
use diskless_proto::v1::*;
use diskless_proto::{metadata_partition_for, ErrorCode};
use futures_util::future::join_all;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::convert::{self, failure_fields, result_fields, route_failure};
use crate::node::{Node, RouteError, DELETE_BUDGET};
use crate::state_machine::{
    AlterTopic, CommitFile, CreateTopic, DeleteRecordsPartition, Failure, FenceAnswer, FetchBudget, Op, Outcome,
    TopicPartition, PRODUCER_ID_AUTHORITY,
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

fn local_only<T>(r: &Request<T>) -> bool {
    r.metadata().get(LOCAL_HEADER).is_some()
}

type Client = CoordinatorServiceClient<Channel>;

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

    fn groups(&self) -> Vec<u32> {
        (0..self.node.num_groups()).collect()
    }

    /// Serves `req` for group `g`: locally if this node leads `g` (or the request was forwarded
    /// here already), else by forwarding it to the leader.
    pub(super) async fn on_group<Req, Resp, LF, RF>(
        &self,
        g: u32,
        forwarded: bool,
        req: Req,
        local: impl FnOnce(Req) -> LF,
        remote: impl FnOnce(Client, Request<Req>) -> RF,
    ) -> Result<Resp, RouteError>
    where
        LF: Future<Output = Result<Resp, RouteError>>,
        RF: Future<Output = Result<Response<Resp>, Status>>,
    {
        if forwarded || self.node.raft(g)?.is_leader() {
            return local(req).await;
        }
        let Some((leader, addr)) = self.node.leader(g).filter(|(id, _)| *id != self.node.id) else {
            return Err(RouteError::NotLeader { group: g, leader: None });
        };
        if self.node.peers.faults.is_blocked(leader) {
            // A cut network (fault injection): as when the connection cannot be made.
            return Err(RouteError::NotLeader { group: g, leader: Some((leader, addr)) });
        }
        let channel = self
            .node
            .peers
            .channel(&addr)
            .map_err(|_| RouteError::NotLeader { group: g, leader: Some((leader, addr.clone())) })?;
        let client = CoordinatorServiceClient::new(channel).max_decoding_message_size(256 << 20);
        let mut request = Request::new(req);
        request.metadata_mut().insert(GROUP_HEADER, g.into());
        let r = remote(client, request).await;
        let result = if r.is_ok() { "ok" } else { "failed" };
        crate::metrics::get()
            .forwarded
            .get_or_create(&crate::metrics::PartitionResult { metadata_partition: g, result })
            .inc();
        match r {
            Ok(r) => Ok(r.into_inner()),
            // Delivered or not, we cannot tell (gRPC reports a reset or keep-alive failure after
            // delivery as UNAVAILABLE too): the outcome is unknown, as for a timeout.
            Err(s) => {
                tracing::debug!(group = g, leader, status = %s, "forwarded request failed");
                Err(RouteError::Timeout { group: g })
            }
        }
    }

    pub(super) async fn propose(&self, g: u32, op: Op, timeout: Duration) -> Result<(Outcome, u64), RouteError> {
        self.node.propose(g, op, timeout).await
    }

    /// Runs a topic-level operation: on `g` only when forwarded, else on group 0 then the rest.
    /// `items` are the request's topics (already converted); returns a result per item.
    async fn topic_op<T: Clone + Send + 'static>(
        &self,
        forwarded: Option<u32>,
        items: Vec<Result<T, Failure>>,
        timeout: Duration,
        make_op: fn(Vec<T>) -> Op,
        rebuild: impl Fn(Vec<T>) -> TopicRequest,
    ) -> Vec<Result<(), Failure>> {
        let mut results: Vec<Result<(), Failure>> =
            items.iter().map(|i| i.as_ref().map(|_| ()).map_err(Clone::clone)).collect();
        let valid: Vec<(usize, T)> =
            items.into_iter().enumerate().filter_map(|(i, t)| t.ok().map(|t| (i, t))).collect();
        if valid.is_empty() {
            return results;
        }
        if let Some(g) = forwarded {
            let ts: Vec<T> = valid.iter().map(|(_, t)| t.clone()).collect();
            let r = self.topic_op_local(g, make_op(ts), timeout).await;
            for ((i, _), r) in valid.iter().zip(spread(r, valid.len())) {
                results[*i] = r;
            }
            return results;
        }
        // The catalog's authority first.
        let mut pending = valid;
        for stage in [vec![0u32], self.groups().into_iter().filter(|g| *g != 0).collect::<Vec<_>>()] {
            if pending.is_empty() {
                break;
            }
            let ts: Vec<T> = pending.iter().map(|(_, t)| t.clone()).collect();
            let outs = join_all(stage.iter().map(|&g| {
                let req = rebuild(ts.clone());
                let op = make_op(ts.clone());
                self.on_group(g, false, req, move |_| self.topic_op_local(g, op, timeout), forward_topic_request)
            }))
            .await;
            let mut failed = vec![false; pending.len()];
            for out in outs {
                let per_item: Vec<Result<(), Failure>> = match out {
                    Ok(v) => v,
                    Err(e) => vec![Err(route_failure(&e)); pending.len()],
                };
                for (k, r) in per_item.into_iter().enumerate().take(pending.len()) {
                    if let (Err(f), false) = (r, failed[k]) {
                        results[pending[k].0] = Err(f);
                        failed[k] = true;
                    }
                }
            }
            pending = pending.into_iter().zip(failed).filter(|(_, f)| !f).map(|(p, _)| p).collect();
        }
        results
    }

    async fn topic_op_local(&self, g: u32, op: Op, timeout: Duration) -> Result<Vec<Result<(), Failure>>, RouteError> {
        match self.propose(g, op, timeout).await? {
            (Outcome::Topics(v), _) => Ok(v.into_iter().map(|(_, r)| r).collect()),
            (other, _) => Err(RouteError::Failed { group: g, message: format!("unexpected outcome {other:?}") }),
        }
    }
}

/// A request of one of the topic-level RPCs, rebuilt for forwarding.
pub enum TopicRequest {
    Create(CreatePartitionsRequest),
    Delete(DeleteTopicsRequest),
    Alter(AlterTopicConfigsRequest),
}

async fn forward_topic_request(
    mut c: Client,
    r: Request<TopicRequest>,
) -> Result<Response<Vec<Result<(), Failure>>>, Status> {
    let (meta, ext, req) = r.into_parts();
    let to_results = |codes: Vec<(i32, Option<String>)>| {
        codes
            .into_iter()
            .map(|(code, msg)| match ErrorCode::from_code(code as i16) {
                Some(ErrorCode::None) => Ok(()),
                Some(c) => Err(Failure::new(c, msg.unwrap_or_default())),
                None => Err(Failure::new(ErrorCode::UnknownServerError, format!("error code {code}"))),
            })
            .collect::<Vec<_>>()
    };
    let out = match req {
        TopicRequest::Create(q) => {
            let r = c.create_partitions(Request::from_parts(meta, ext, q)).await?.into_inner();
            to_results(r.topics.into_iter().map(|t| (t.error_code, t.error_message)).collect())
        }
        TopicRequest::Delete(q) => {
            let r = c.delete_topics(Request::from_parts(meta, ext, q)).await?.into_inner();
            to_results(r.responses.into_iter().map(|t| (t.error_code, t.error_message)).collect())
        }
        TopicRequest::Alter(q) => {
            let r = c.alter_topic_configs(Request::from_parts(meta, ext, q)).await?.into_inner();
            to_results(r.topics.into_iter().map(|t| (t.error_code, t.error_message)).collect())
        }
    };
    Ok(Response::new(out))
}

/// One group's answer spread over `n` items: its per-item results, or its routing error for all.
fn spread(r: Result<Vec<Result<(), Failure>>, RouteError>, n: usize) -> Vec<Result<(), Failure>> {
    match r {
        Ok(v) if v.len() == n => v,
        Ok(v) => {
            vec![Err(Failure::new(ErrorCode::UnknownServerError, format!("{} results for {n} items", v.len()))); n]
        }
        Err(e) => vec![Err(route_failure(&e)); n],
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

/// One metadata partition's fence answer on the wire.
fn fence_result(object_key: String, r: Result<FenceAnswer, Failure>) -> fence_objects_response::FenceObjectResult {
    let (state, released_at) = match &r {
        Ok(FenceAnswer::Live) => (ObjectState::Live, -1),
        Ok(FenceAnswer::Released { marked_at }) => (ObjectState::Released, *marked_at),
        Ok(FenceAnswer::Fenced { .. }) => (ObjectState::Fenced, -1),
        Err(_) => (ObjectState::Unspecified, -1),
    };
    let (error_code, error_message) = result_fields(&r);
    fence_objects_response::FenceObjectResult {
        object_key,
        error_code,
        error_message,
        state: state.into(),
        released_at,
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

    fn add(&mut self, r: &fence_objects_response::FenceObjectResult) {
        if r.error_code != 0 {
            let code = ErrorCode::from_code(r.error_code as i16).unwrap_or(ErrorCode::UnknownServerError);
            return self.failed(Failure::new(code, r.error_message.clone().unwrap_or_default()));
        }
        match r.state() {
            ObjectState::Live => self.live = true,
            ObjectState::Released => {
                self.released_at = Some(self.released_at.map_or(r.released_at, |t| t.max(r.released_at)))
            }
            ObjectState::Fenced => {}
            ObjectState::Unspecified => self.failed(Failure::new(ErrorCode::UnknownServerError, "no fence state")),
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
        let rebuild = |ts: Vec<CreateTopic>| {
            TopicRequest::Create(CreatePartitionsRequest {
                topics: ts
                    .into_iter()
                    .map(|t| create_partitions_request::CreatablePartitions {
                        topic_id: t.topic_id.as_bytes().to_vec(),
                        name: t.name,
                        num_partitions: t.num_partitions,
                        configs: Some(TopicConfigs {
                            retention_ms: t.retention_ms,
                            retention_bytes: t.retention_bytes,
                        }),
                    })
                    .collect(),
                timeout_ms: req.timeout_ms,
            })
        };
        let results = self.topic_op(fwd, items, timeout, Op::CreatePartitions, rebuild).await;
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
        let rebuild = |ids: Vec<uuid::Uuid>| {
            TopicRequest::Delete(DeleteTopicsRequest {
                topics: ids
                    .into_iter()
                    .map(|id| delete_topics_request::DeletableTopicState { topic_id: id.as_bytes().to_vec() })
                    .collect(),
                timeout_ms: req.timeout_ms,
            })
        };
        let make = |topic_ids| Op::DeleteTopics { topic_ids, budget: DELETE_BUDGET };
        let results = self.topic_op(fwd, items, timeout, make, rebuild).await;
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
        let rebuild = |ts: Vec<AlterTopic>| {
            TopicRequest::Alter(AlterTopicConfigsRequest {
                topics: ts
                    .into_iter()
                    .map(|a| alter_topic_configs_request::AlterableTopic {
                        topic_id: a.topic_id.as_bytes().to_vec(),
                        configs: Some(TopicConfigs {
                            retention_ms: a.retention_ms,
                            retention_bytes: a.retention_bytes,
                        }),
                    })
                    .collect(),
                timeout_ms: req.timeout_ms,
            })
        };
        let results = self.topic_op(fwd, items, timeout, Op::AlterTopicConfigs, rebuild).await;
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
        let here = fwd.is_some() || local_only(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let n = req.batches.len();
        let mut results: Vec<Option<commit_file_response::CommitBatchResult>> = vec![None; n];
        let object_format = match convert::int8(req.object_format, "object format") {
            Ok(f) => f,
            Err(f) => {
                let batches = (0..n).map(|_| commit_error(&f)).collect();
                return Ok(Response::new(CommitFileResponse { throttle_time_ms: 0, batches, applied: vec![] }));
            }
        };
        let mut per_group: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, b) in req.batches.iter().enumerate() {
            match convert::commit_batch(b) {
                Ok(cb) => per_group.entry(fwd.unwrap_or_else(|| self.owner(&cb.tp))).or_default().push(i),
                Err(f) => results[i] = Some(commit_error(&f)),
            }
        }
        let mut req = req;
        if fwd.is_none() && req.owner_ids.is_empty() {
            // Not split by the client: the owners are the groups its batches go to.
            req.owner_ids = per_group.keys().map(|&g| g as i32).collect();
            if req.owner_ids.is_empty() {
                req.owner_ids = vec![0];
            }
        }
        if per_group.is_empty() {
            // Record the file anyway (it is garbage at once), so the cleaner deletes the object; in
            // a metadata partition it names as an owner, which alone may accept it.
            let owner = req.owner_ids.iter().find(|&&o| o >= 0 && (o as u32) < self.node.num_groups());
            per_group.insert(fwd.unwrap_or_else(|| owner.map_or(0, |&o| o as u32)), vec![]);
        }
        let outs = join_all(per_group.iter().map(|(&g, idxs)| {
            let sub =
                CommitFileRequest { batches: idxs.iter().map(|&i| req.batches[i].clone()).collect(), ..req.clone() };
            let local = move |sub: CommitFileRequest| async move {
                let batches = sub
                    .batches
                    .iter()
                    .map(convert::commit_batch)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|f| RouteError::Failed { group: g, message: f.message })?;
                let file = CommitFile {
                    deadline_ms: None, // set by Node::commit
                    object_key: sub.object_key,
                    object_format,
                    file_size: sub.file_size,
                    uploader_broker_id: sub.uploader_broker_id,
                    owner_ids: sub.owner_ids,
                    batches,
                };
                let (rs, index) = self.node.commit(g, file, timeout).await?;
                let batches = rs
                    .iter()
                    .map(|r| match r {
                        Ok(c) => commit_file_response::CommitBatchResult {
                            error_code: 0,
                            error_message: None,
                            assigned_base_offset: c.assigned_base_offset,
                            log_append_time: c.log_append_time,
                            log_start_offset: c.log_start_offset,
                            is_duplicate: c.is_duplicate,
                        },
                        Err(f) => commit_error(f),
                    })
                    .collect();
                Ok(CommitFileResponse {
                    throttle_time_ms: 0,
                    batches,
                    applied: vec![GroupIndex { metadata_partition: g, index }],
                })
            };
            self.on_group(g, here, sub, local, |mut c, r| async move { c.commit_file(r).await })
        }))
        .await;
        let mut applied = vec![];
        for ((g, idxs), out) in per_group.iter().zip(outs) {
            match out {
                Ok(resp) if resp.batches.len() == idxs.len() => {
                    for (&i, r) in idxs.iter().zip(resp.batches) {
                        results[i] = Some(r);
                    }
                    applied.extend(resp.applied);
                }
                Ok(resp) => {
                    let f = Failure::new(
                        ErrorCode::UnknownServerError,
                        format!(
                            "metadata partition {g} answered {} results for {} batches",
                            resp.batches.len(),
                            idxs.len()
                        ),
                    );
                    idxs.iter().for_each(|&i| results[i] = Some(commit_error(&f)));
                }
                Err(e) => {
                    let f = route_failure(&e);
                    idxs.iter().for_each(|&i| results[i] = Some(commit_error(&f)));
                }
            }
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
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        // Flatten to (topic index, partition index) in request order.
        let mut flat: Vec<(usize, usize, Result<DeleteRecordsPartition, Failure>)> = vec![];
        for (ti, t) in req.topics.iter().enumerate() {
            for (pi, p) in t.partitions.iter().enumerate() {
                let item = convert::tp(&t.topic_id, p.partition_index)
                    .map(|tp| DeleteRecordsPartition { tp, offset: p.offset });
                flat.push((ti, pi, item));
            }
        }
        let mut results: Vec<Result<i64, Failure>> =
            flat.iter().map(|(_, _, r)| r.as_ref().map(|_| -1).map_err(Clone::clone)).collect();
        let mut per_group: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (k, (_, _, r)) in flat.iter().enumerate() {
            if let Ok(p) = r {
                per_group.entry(fwd.unwrap_or_else(|| self.owner(&p.tp))).or_default().push(k);
            }
        }
        let outs = join_all(per_group.iter().map(|(&g, ks)| {
            let parts: Vec<DeleteRecordsPartition> = ks.iter().filter_map(|&k| flat[k].2.clone().ok()).collect();
            let sub = DeleteRecordsRequest {
                topics: parts
                    .iter()
                    .map(|p| delete_records_request::DeleteRecordsTopic {
                        topic_id: p.tp.topic_id.as_bytes().to_vec(),
                        partitions: vec![delete_records_request::DeleteRecordsPartition {
                            partition_index: p.tp.partition,
                            offset: p.offset,
                        }],
                    })
                    .collect(),
                timeout_ms: req.timeout_ms,
            };
            let local = move |_sub: DeleteRecordsRequest| async move {
                let (outcome, _) =
                    self.propose(g, Op::DeleteRecords { partitions: parts, budget: DELETE_BUDGET }, timeout).await?;
                let Outcome::DeleteRecords(rs) = outcome else {
                    return Err(RouteError::Failed { group: g, message: "unexpected outcome".into() });
                };
                Ok(DeleteRecordsResponse {
                    throttle_time_ms: 0,
                    topics: rs
                        .into_iter()
                        .map(|(tp, r)| {
                            let (error_code, error_message) = result_fields(&r);
                            delete_records_response::DeleteRecordsTopicResult {
                                topic_id: tp.topic_id.as_bytes().to_vec(),
                                partitions: vec![delete_records_response::DeleteRecordsPartitionResult {
                                    partition_index: tp.partition,
                                    low_watermark: *r.as_ref().unwrap_or(&-1),
                                    error_code,
                                    error_message,
                                }],
                            }
                        })
                        .collect(),
                })
            };
            self.on_group(g, fwd.is_some(), sub, local, |mut c, r| async move { c.delete_records(r).await })
        }))
        .await;
        for ((_, ks), out) in per_group.iter().zip(outs) {
            let flat_out: Vec<Result<i64, Failure>> = match out {
                Ok(resp) => resp
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .map(|p| match ErrorCode::from_code(p.error_code as i16) {
                        Some(ErrorCode::None) => Ok(p.low_watermark),
                        c => Err(Failure::new(
                            c.unwrap_or(ErrorCode::UnknownServerError),
                            p.error_message.unwrap_or_default(),
                        )),
                    })
                    .collect(),
                Err(e) => vec![Err(route_failure(&e)); ks.len()],
            };
            for (&k, r) in ks.iter().zip(flat_out) {
                results[k] = r;
            }
        }
        let mut topics: Vec<delete_records_response::DeleteRecordsTopicResult> = req
            .topics
            .iter()
            .map(|t| delete_records_response::DeleteRecordsTopicResult {
                topic_id: t.topic_id.clone(),
                partitions: vec![],
            })
            .collect();
        for ((ti, pi, _), r) in flat.iter().zip(results) {
            let (error_code, error_message) = result_fields(&r);
            topics[*ti].partitions.push(delete_records_response::DeleteRecordsPartitionResult {
                partition_index: req.topics[*ti].partitions[*pi].partition_index,
                low_watermark: *r.as_ref().unwrap_or(&-1),
                error_code,
                error_message,
            });
        }
        Ok(Response::new(DeleteRecordsResponse { throttle_time_ms: 0, topics }))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let mut flat: Vec<(usize, Result<TopicPartition, Failure>, i64)> = vec![];
        for (ti, t) in req.topics.iter().enumerate() {
            for p in &t.partitions {
                flat.push((ti, convert::tp(&t.topic_id, p.partition_index), p.timestamp));
            }
        }
        let mut results: Vec<Result<(i64, i64), Failure>> =
            flat.iter().map(|(_, r, _)| r.as_ref().map(|_| (-1, -1)).map_err(Clone::clone)).collect();
        let mut per_group: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (k, (_, r, _)) in flat.iter().enumerate() {
            if let Ok(tp) = r {
                per_group.entry(fwd.unwrap_or_else(|| self.owner(tp))).or_default().push(k);
            }
        }
        let outs = join_all(per_group.iter().map(|(&g, ks)| {
            let items: Vec<(TopicPartition, i64)> =
                ks.iter().filter_map(|&k| flat[k].1.as_ref().ok().map(|tp| (*tp, flat[k].2))).collect();
            let sub = ListOffsetsRequest {
                topics: items
                    .iter()
                    .map(|(tp, ts)| list_offsets_request::ListOffsetsTopic {
                        topic_id: tp.topic_id.as_bytes().to_vec(),
                        partitions: vec![list_offsets_request::ListOffsetsPartition {
                            partition_index: tp.partition,
                            timestamp: *ts,
                        }],
                    })
                    .collect(),
                timeout_ms: req.timeout_ms,
            };
            let local = move |_sub: ListOffsetsRequest| async move {
                self.node.linearizable(g, timeout).await?;
                let sm = self.node.state_machine(g)?;
                let placed = self.node.placed(g)?;
                let view = placed.db.read();
                let mut topics = vec![];
                for (tp, ts) in &items {
                    let r = sm
                        .list_offsets(&view, tp, *ts)
                        .map_err(|e| RouteError::Failed { group: g, message: e.to_string() })?;
                    let (error_code, error_message) = result_fields(&r);
                    let found = r.map_or((-1, -1), |o| (o.timestamp, o.offset));
                    topics.push(list_offsets_response::ListOffsetsTopicResponse {
                        topic_id: tp.topic_id.as_bytes().to_vec(),
                        partitions: vec![list_offsets_response::ListOffsetsPartitionResponse {
                            partition_index: tp.partition,
                            error_code,
                            error_message,
                            timestamp: found.0,
                            offset: found.1,
                        }],
                    });
                }
                Ok(ListOffsetsResponse { throttle_time_ms: 0, topics })
            };
            self.on_group(g, fwd.is_some(), sub, local, |mut c, r| async move { c.list_offsets(r).await })
        }))
        .await;
        for ((_, ks), out) in per_group.iter().zip(outs) {
            let flat_out: Vec<Result<(i64, i64), Failure>> = match out {
                Ok(resp) => resp
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .map(|p| match ErrorCode::from_code(p.error_code as i16) {
                        Some(ErrorCode::None) => Ok((p.timestamp, p.offset)),
                        c => Err(Failure::new(
                            c.unwrap_or(ErrorCode::UnknownServerError),
                            p.error_message.unwrap_or_default(),
                        )),
                    })
                    .collect(),
                Err(e) => vec![Err(route_failure(&e)); ks.len()],
            };
            for (&k, r) in ks.iter().zip(flat_out) {
                results[k] = r;
            }
        }
        let mut topics: Vec<list_offsets_response::ListOffsetsTopicResponse> = req
            .topics
            .iter()
            .map(|t| list_offsets_response::ListOffsetsTopicResponse {
                topic_id: t.topic_id.clone(),
                partitions: vec![],
            })
            .collect();
        let mut k = 0;
        for (ti, t) in req.topics.iter().enumerate() {
            for p in &t.partitions {
                let r = &results[k];
                let (error_code, error_message) = result_fields(r);
                let (timestamp, offset) = *r.as_ref().unwrap_or(&(-1, -1));
                topics[ti].partitions.push(list_offsets_response::ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    error_code,
                    error_message,
                    timestamp,
                    offset,
                });
                k += 1;
            }
        }
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
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let groups = fwd.map_or_else(|| self.groups(), |g| vec![g]);
        let outs = join_all(groups.iter().map(|&g| {
            let keys: Vec<String> = req.files.iter().map(|f| f.object_key.clone()).collect();
            let local = move |_r: DescribeFilesRequest| async move {
                self.node.linearizable(g, timeout).await?;
                let sm = self.node.state_machine(g)?;
                let placed = self.node.placed(g)?;
                let view = placed.db.read();
                let mut files = vec![];
                for k in keys {
                    let s = sm
                        .describe_file(&view, &k)
                        .map_err(|e| RouteError::Failed { group: g, message: e.to_string() })?;
                    files.push(describe_files_response::DescribeFileResult {
                        object_key: k,
                        error_code: 0,
                        error_message: None,
                        has_live_batches: s.has_live_batches,
                        known: s.known,
                    });
                }
                Ok(DescribeFilesResponse { throttle_time_ms: 0, files })
            };
            self.on_group(g, fwd.is_some(), req.clone(), local, |mut c, r| async move { c.describe_files(r).await })
        }))
        .await;
        let mut files: Vec<describe_files_response::DescribeFileResult> = req
            .files
            .iter()
            .map(|f| describe_files_response::DescribeFileResult {
                object_key: f.object_key.clone(),
                error_code: 0,
                error_message: None,
                has_live_batches: false,
                known: false,
            })
            .collect();
        let mut errors: Vec<Option<Failure>> = vec![None; files.len()];
        for out in outs {
            match out {
                Ok(resp) => {
                    for (i, r) in resp.files.into_iter().enumerate().take(files.len()) {
                        if r.error_code != 0 {
                            errors[i] = Some(Failure::new(
                                ErrorCode::from_code(r.error_code as i16).unwrap_or(ErrorCode::UnknownServerError),
                                r.error_message.unwrap_or_default(),
                            ));
                        }
                        files[i].has_live_batches |= r.has_live_batches;
                        files[i].known |= r.known;
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
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let limit = req.limit.max(0) as usize;
        let groups = fwd.map_or_else(|| self.groups(), |g| vec![g]);
        let outs = join_all(groups.iter().map(|&g| {
            let local = move |_r: ListFilesToDeleteRequest| async move {
                self.node.linearizable(g, timeout).await?;
                let sm = self.node.state_machine(g)?;
                let placed = self.node.placed(g)?;
                let files = sm
                    .files_to_delete(&placed.db.read(), limit)
                    .map_err(|e| RouteError::Failed { group: g, message: e.to_string() })?;
                Ok(ListFilesToDeleteResponse {
                    files: files
                        .into_iter()
                        .map(|f| list_files_to_delete_response::FileToDelete {
                            object_key: f.object_key,
                            marked_for_deletion_at: f.marked_for_deletion_at,
                            file_size: f.file_size,
                            owner_ids: f.owner_ids,
                            metadata_partition: g,
                        })
                        .collect(),
                    unavailable_metadata_partitions: vec![],
                })
            };
            self.on_group(g, fwd.is_some(), req, local, |mut c, r| async move { c.list_files_to_delete(r).await })
        }))
        .await;
        // The groups that answered are served even when others did not: one unavailable metadata
        // partition must not stop the cleanup of every other one's files.
        let mut files = vec![];
        let mut unavailable = vec![];
        let mut last_error = None;
        for (&g, out) in groups.iter().zip(outs) {
            match out {
                Ok(r) => files.extend(r.files),
                Err(e) => {
                    tracing::debug!(group = g, error = %e, "files to delete: metadata partition did not answer");
                    unavailable.push(g);
                    last_error = Some(format!("metadata partition {g}: {e}"));
                }
            }
        }
        if unavailable.len() == groups.len() {
            return Err(Status::unavailable(last_error.unwrap_or_else(|| "no metadata partition answered".into())));
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
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let groups = fwd.map_or_else(|| self.groups(), |g| vec![g]);
        let n = req.object_keys.len();
        let outs = join_all(groups.iter().map(|&g| {
            let keys = req.object_keys.clone();
            let local = move |_r: ConfirmFilesDeletedRequest| async move {
                let (outcome, _) = self.propose(g, Op::ConfirmFilesDeleted { object_keys: keys }, timeout).await?;
                let Outcome::ConfirmFilesDeleted(rs) = outcome else {
                    return Err(RouteError::Failed { group: g, message: "unexpected outcome".into() });
                };
                Ok(ConfirmFilesDeletedResponse {
                    files: rs
                        .into_iter()
                        .map(|(object_key, r)| {
                            let (error_code, error_message) = result_fields(&r);
                            confirm_files_deleted_response::ConfirmFileResult { object_key, error_code, error_message }
                        })
                        .collect(),
                })
            };
            self.on_group(
                g,
                fwd.is_some(),
                req.clone(),
                local,
                |mut c, r| async move { c.confirm_files_deleted(r).await },
            )
        }))
        .await;
        let mut files: Vec<confirm_files_deleted_response::ConfirmFileResult> = req
            .object_keys
            .iter()
            .map(|k| confirm_files_deleted_response::ConfirmFileResult {
                object_key: k.clone(),
                error_code: 0,
                error_message: None,
            })
            .collect();
        for out in outs {
            match out {
                Ok(resp) => {
                    for (f, r) in files.iter_mut().zip(resp.files).take(n) {
                        if f.error_code == 0 && r.error_code != 0 {
                            (f.error_code, f.error_message) = (r.error_code, r.error_message);
                        }
                    }
                }
                Err(e) => {
                    for f in files.iter_mut().filter(|f| f.error_code == 0) {
                        (f.error_code, f.error_message) = failure_fields(&route_failure(&e));
                    }
                }
            }
        }
        Ok(Response::new(ConfirmFilesDeletedResponse { files }))
    }

    async fn allocate_producer_ids(
        &self,
        request: Request<AllocateProducerIdsRequest>,
    ) -> Result<Response<AllocateProducerIdsResponse>, Status> {
        let fwd = forwarded_group(&request);
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
        let local = |_r: AllocateProducerIdsRequest| async move {
            let op = Op::AllocateProducerIds { broker_id: req.broker_id, count };
            match self.propose(g, op, timeout).await? {
                (Outcome::ProducerIds(Ok(b)), _) => Ok(AllocateProducerIdsResponse {
                    error_code: 0,
                    error_message: None,
                    producer_id_start: b.first,
                    producer_id_len: b.len as i32,
                }),
                (Outcome::ProducerIds(Err(f)), _) => Ok(refused(f)),
                (other, _) => Err(RouteError::Failed { group: g, message: format!("unexpected outcome {other:?}") }),
            }
        };
        let out = self
            .on_group(g, fwd.is_some(), req, local, |mut c, r| async move { c.allocate_producer_ids(r).await })
            .await;
        Ok(Response::new(out.unwrap_or_else(|e| refused(route_failure(&e)))))
    }

    async fn fence_objects(
        &self,
        request: Request<FenceObjectsRequest>,
    ) -> Result<Response<FenceObjectsResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let n = self.node.num_groups();
        // Which objects each metadata partition fences.
        let mut per_group: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut merged: Vec<FenceMerge> = vec![FenceMerge::default(); req.objects.len()];
        for (i, o) in req.objects.iter().enumerate() {
            let named: std::collections::BTreeSet<u32> = match fwd {
                Some(g) => [g].into(),
                None if o.metadata_partitions.is_empty() => self.groups().into_iter().collect(),
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
            let keys: Vec<String> = idxs.iter().map(|&i| req.objects[i].object_key.clone()).collect();
            let sub = FenceObjectsRequest {
                objects: keys
                    .iter()
                    .map(|k| fence_objects_request::FenceObjectEntry {
                        object_key: k.clone(),
                        metadata_partitions: vec![g],
                    })
                    .collect(),
                timeout_ms: req.timeout_ms,
            };
            let local = move |_sub: FenceObjectsRequest| async move {
                let (outcome, _) = self.propose(g, Op::FenceObjects { object_keys: keys }, timeout).await?;
                let Outcome::FenceObjects(rs) = outcome else {
                    return Err(RouteError::Failed { group: g, message: "unexpected outcome".into() });
                };
                Ok(FenceObjectsResponse { objects: rs.into_iter().map(|(k, r)| fence_result(k, r)).collect() })
            };
            self.on_group(g, fwd.is_some(), sub, local, |mut c, r| async move { c.fence_objects(r).await })
        }))
        .await;
        for ((_, idxs), out) in per_group.iter().zip(outs) {
            match out {
                Ok(resp) if resp.objects.len() == idxs.len() => {
                    for (&i, r) in idxs.iter().zip(resp.objects) {
                        merged[i].add(&r);
                    }
                }
                Ok(resp) => {
                    let f = Failure::new(
                        ErrorCode::UnknownServerError,
                        format!("{} answers for {} objects", resp.objects.len(), idxs.len()),
                    );
                    idxs.iter().for_each(|&i| merged[i].failed(f.clone()));
                }
                Err(e) => idxs.iter().for_each(|&i| merged[i].failed(route_failure(&e))),
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
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let names: std::collections::HashSet<String> = req.names.iter().cloned().collect();
        let local = |_r: ListTopicsRequest| async {
            self.node.linearizable(0, timeout).await?;
            let sm = self.node.state_machine(0)?;
            let placed = self.node.placed(0)?;
            let topics =
                sm.topics(&placed.db.read()).map_err(|e| RouteError::Failed { group: 0, message: e.to_string() })?;
            Ok(ListTopicsResponse {
                topics: topics
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
                    .collect(),
            })
        };
        self.on_group(0, fwd.is_some(), req.clone(), local, |mut c, r| async move { c.list_topics(r).await })
            .await
            .map(Response::new)
            .map_err(|e| Status::unavailable(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(r: Result<FenceAnswer, Failure>) -> fence_objects_response::FenceObjectResult {
        fence_result("k".into(), r)
    }

    fn merged(answers: Vec<Result<FenceAnswer, Failure>>, route_error: bool) -> (ObjectState, i64, i32) {
        let mut m = FenceMerge::default();
        for a in answers {
            m.add(&answer(a));
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
