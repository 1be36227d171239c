//! CreatePartitions, DeleteTopics, AlterTopicConfigs and ListTopics: topic-level changes go to
//! metadata partition 0 (the catalog's authority) first, then to every other partition; a part
//! that failed is reported as a retriable error, and repeating the request converges (the
//! operations are idempotent; the reconciler completes what the catalog decided meanwhile).
//! ListTopics reads the catalog on partition 0's leader.
//!
//! Owns these calls' wire conversions and the catalog-first order. The rules (what a topic may be)
//! are the state machine's (`state_machine::create_partitions`, `delete_topics`,
//! `alter_configs`).

use std::collections::BTreeSet;
use std::time::Duration;

use diskless_proto::merge_part;
use diskless_proto::v1::*;
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::request::hop_of;
use super::request::timeout_of;
use super::CoordinatorApi;
use crate::node::{Answer, Hop, Read, RouteError, DELETE_BUDGET};
use crate::server::convert::{self, part_failure, result_fields, route_status};
use crate::state_machine::topic_settings::{parse_timestamp_type, timestamp_type_name};
use crate::state_machine::{
    AlterTopic, CreateTopic, ErrorCode, Failure, Op, Outcome, SettingChange, TopicInfo, TopicSettings, TopicToAlter,
    TopicToCreate,
};

/// The broker-enforced settings a request's configs set.
fn settings_of(c: &TopicConfigs) -> Result<TopicSettings, Failure> {
    Ok(TopicSettings {
        max_message_bytes: c.max_message_bytes,
        timestamp_type: c.message_timestamp_type.as_deref().map(parse_timestamp_type).transpose()?,
        timestamp_before_max_ms: c.message_timestamp_before_max_ms,
        timestamp_after_max_ms: c.message_timestamp_after_max_ms,
    })
}

/// The setting changes of an alteration: those its configs set, then those it resets.
fn changes_of(c: &TopicConfigs, reset: &[String]) -> Result<Vec<SettingChange>, Failure> {
    let set = settings_of(c)?;
    let mut changes: Vec<SettingChange> = set
        .as_changes()
        .into_iter()
        .zip([
            set.max_message_bytes.is_some(),
            set.timestamp_type.is_some(),
            set.timestamp_before_max_ms.is_some(),
            set.timestamp_after_max_ms.is_some(),
        ])
        .filter_map(|(c, given)| given.then_some(c))
        .collect();
    for name in reset {
        let Some(r) = SettingChange::reset(name) else {
            return Err(Failure::new(ErrorCode::InvalidConfig, format!("{name:?} is not a setting that can be reset")));
        };
        if changes.iter().any(|c| c.name() == r.name()) {
            return Err(Failure::new(ErrorCode::InvalidConfig, format!("{name} is both set and reset")));
        }
        changes.push(r);
    }
    Ok(changes)
}

/// A topic's configs as ListTopics shows them.
fn configs_of(t: &TopicInfo) -> TopicConfigs {
    TopicConfigs {
        retention_ms: Some(t.retention_ms),
        retention_bytes: Some(t.retention_bytes),
        max_message_bytes: t.settings.max_message_bytes,
        message_timestamp_type: t.settings.timestamp_type.map(|t| timestamp_type_name(t).to_string()),
        message_timestamp_before_max_ms: t.settings.timestamp_before_max_ms,
        message_timestamp_after_max_ms: t.settings.timestamp_after_max_ms,
    }
}

impl CoordinatorApi {
    /// Runs a topic-level operation: on metadata partition 0 (the catalog's authority) first, then
    /// on the rest, each topic only where every earlier stage took it. `items` are the request's
    /// topics (already converted); returns a result per item.
    async fn topic_op<T: Clone>(
        &self,
        items: Vec<Result<T, Failure>>,
        timeout: Duration,
        make_op: impl Fn(Vec<T>) -> Op,
    ) -> Vec<Result<(), Failure>> {
        let mut results: Vec<Result<(), Failure>> =
            items.iter().map(|i| i.as_ref().map(|_| ()).map_err(Clone::clone)).collect();
        let mut pending: Vec<(usize, T)> =
            items.into_iter().enumerate().filter_map(|(i, t)| t.ok().map(|t| (i, t))).collect();
        // The catalog's authority first, unless a test cut the change short (`raft::faults`).
        let stages = match self.node.peers.faults.topic_changes_only() {
            Some(only) => vec![only],
            None => vec![vec![0u32], (1..self.node.num_partitions()).collect()],
        };
        for stage in stages {
            if pending.is_empty() {
                break;
            }
            let ts: Vec<T> = pending.iter().map(|(_, t)| t.clone()).collect();
            let op = |g: u32| (g, make_op(ts.clone()));
            let outs = join_all(stage.iter().map(|&g| op(g)).map(|(g, op)| async move {
                match self.write(g, op, timeout, Hop::Leader).await? {
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

    pub(super) async fn serve_create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let items: Vec<Result<TopicToCreate, Failure>> = req
            .topics
            .iter()
            .map(|t| {
                let configs = t.configs.clone().unwrap_or_default();
                Ok(TopicToCreate {
                    topic: CreateTopic {
                        topic_id: convert::topic_id(&t.topic_id)?,
                        name: t.name.clone(),
                        num_partitions: t.num_partitions,
                        retention_ms: configs.retention_ms,
                        retention_bytes: configs.retention_bytes,
                    },
                    settings: settings_of(&configs)?,
                })
            })
            .collect();
        let results = self.topic_op(items, timeout, Op::CreatePartitions).await;
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

    pub(super) async fn serve_delete_topics(
        &self,
        request: Request<DeleteTopicsRequest>,
    ) -> Result<Response<DeleteTopicsResponse>, Status> {
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let items: Vec<Result<uuid::Uuid, Failure>> =
            req.topics.iter().map(|t| convert::topic_id(&t.topic_id)).collect();
        let make = |topic_ids| Op::DeleteTopics { topic_ids, budget: DELETE_BUDGET };
        let results = self.topic_op(items, timeout, make).await;
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

    pub(super) async fn serve_alter_topic_configs(
        &self,
        request: Request<AlterTopicConfigsRequest>,
    ) -> Result<Response<AlterTopicConfigsResponse>, Status> {
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let items: Vec<Result<TopicToAlter, Failure>> = req
            .topics
            .iter()
            .map(|t| {
                let c = t.configs.clone().unwrap_or_default();
                Ok(TopicToAlter {
                    topic: AlterTopic {
                        topic_id: convert::topic_id(&t.topic_id)?,
                        retention_ms: c.retention_ms,
                        retention_bytes: c.retention_bytes,
                    },
                    settings: changes_of(&c, &t.reset_configs)?,
                })
            })
            .collect();
        let results = self.topic_op(items, timeout, Op::AlterTopicConfigs).await;
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

    pub(super) async fn serve_list_topics(
        &self,
        request: Request<ListTopicsRequest>,
    ) -> Result<Response<ListTopicsResponse>, Status> {
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
                configs: Some(configs_of(&t)),
                name: t.name,
                num_partitions: t.num_partitions,
            })
            .collect();
        Ok(Response::new(ListTopicsResponse { topics }))
    }
}
