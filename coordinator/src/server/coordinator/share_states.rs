//! `CoordinatorService`'s share-group calls (StoreShareState, ReadShareStates, DeleteShareStates):
//! a share group's state of each partition it consumes, routed to the metadata partition its group
//! id maps to (`metadata_partition_for_group`) and served on its leader.
//!
//! Owns the wire conversions of `ShareState`. The compare-and-set and the shape checks are the
//! state machine's (`state_machine::share_states`); the transitions (acquire, acknowledge, lock
//! expiry) are the brokers' (their `groups::share`), not here.

use diskless_proto::metadata_partition_for_group;
use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Read, RouteError};
use crate::server::convert::{self, failure_fields, result_fields, route_failure};
use crate::state_machine::{Failure, Op, Outcome, ShareRange, ShareStateRecord, TopicPartition};

/// The record a broker sent; a malformed topic id, state or count is refused.
pub fn share_record(s: &ShareState) -> Result<(TopicPartition, ShareStateRecord), Failure> {
    let tp = convert::tp(&s.topic_id, s.partition_index)?;
    let ranges = s
        .ranges
        .iter()
        .map(|r| {
            Ok(ShareRange {
                first: r.first_offset,
                last: r.last_offset,
                state: convert::int8(r.state, "record state")?,
                delivery_count: r.delivery_count,
                member_id: r.member_id.clone(),
                lock_until_ms: r.lock_until_ms,
            })
        })
        .collect::<Result<_, Failure>>()?;
    Ok((
        tp,
        ShareStateRecord {
            state_epoch: s.state_epoch,
            start_offset: s.start_offset,
            ranges,
            version: s.version,
            updated_ms: s.updated_ms,
            owner: s.owner.clone(),
        },
    ))
}

pub fn share_state(tp: &TopicPartition, r: ShareStateRecord) -> ShareState {
    ShareState {
        topic_id: tp.topic_id.as_bytes().to_vec(),
        partition_index: tp.partition,
        state_epoch: r.state_epoch,
        start_offset: r.start_offset,
        ranges: r
            .ranges
            .into_iter()
            .map(|g| share_state::Range {
                first_offset: g.first,
                last_offset: g.last,
                state: i32::from(g.state),
                delivery_count: g.delivery_count,
                member_id: g.member_id,
                lock_until_ms: g.lock_until_ms,
            })
            .collect(),
        version: r.version,
        updated_ms: r.updated_ms,
        owner: r.owner,
    }
}

impl CoordinatorApi {
    fn share_group_partition(&self, group_id: &str) -> u32 {
        metadata_partition_for_group(group_id, self.node.num_partitions())
    }

    pub(super) async fn serve_store_share_state(
        &self,
        request: Request<StoreShareStateRequest>,
    ) -> Result<Response<StoreShareStateResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.share_group_partition(&req.group_id);
        let r = match share_record(&req.state.unwrap_or_default()) {
            Err(f) => Err(f),
            Ok((tp, record)) => {
                let op =
                    Op::StoreShareState { group_id: req.group_id, tp, record, expected_version: req.expected_version };
                match self.write(g, op, timeout, hop).await {
                    Ok((Outcome::ShareState(r), _)) => r.map(|r| share_state(&tp, r)),
                    Ok((other, _)) => Err(route_failure(&RouteError::unexpected(g, &other))),
                    Err(e) => Err(route_failure(&e)),
                }
            }
        };
        let (error_code, error_message) = result_fields(&r);
        Ok(Response::new(StoreShareStateResponse { error_code, error_message, state: r.ok() }))
    }

    pub(super) async fn serve_read_share_states(
        &self,
        request: Request<ReadShareStatesRequest>,
    ) -> Result<Response<ReadShareStatesResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.share_group_partition(&req.group_id);
        let only = match (&req.topic_id, req.partition_index) {
            (Some(t), Some(p)) => match convert::tp(t, p) {
                Ok(tp) => Some(tp),
                Err(f) => {
                    let (error_code, error_message) = failure_fields(&f);
                    return Ok(Response::new(ReadShareStatesResponse { error_code, error_message, states: vec![] }));
                }
            },
            _ => None,
        };
        let out = match self.read(g, Read::ShareStates { group_id: req.group_id, only }, timeout, hop).await {
            Ok(Answer::ShareStates(states)) => Ok(states),
            Ok(other) => Err(RouteError::unexpected(g, &other)),
            Err(e) => Err(e),
        };
        Ok(Response::new(match out {
            Ok(states) => ReadShareStatesResponse {
                error_code: 0,
                error_message: None,
                states: states.into_iter().map(|(tp, r)| share_state(&tp, r)).collect(),
            },
            Err(e) => {
                let (error_code, error_message) = failure_fields(&route_failure(&e));
                ReadShareStatesResponse { error_code, error_message, states: vec![] }
            }
        }))
    }

    pub(super) async fn serve_delete_share_states(
        &self,
        request: Request<DeleteShareStatesRequest>,
    ) -> Result<Response<DeleteShareStatesResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.share_group_partition(&req.group_id);
        let topic_ids: Result<Vec<uuid::Uuid>, Failure> = req.topic_ids.iter().map(|t| convert::topic_id(t)).collect();
        let r = match topic_ids {
            Err(f) => Err(f),
            Ok(topic_ids) => {
                let op = Op::DeleteShareStates { group_id: req.group_id, topic_ids };
                match self.write(g, op, timeout, hop).await {
                    Ok((Outcome::ShareStatesDeleted(r), _)) => r,
                    Ok((other, _)) => Err(route_failure(&RouteError::unexpected(g, &other))),
                    Err(e) => Err(route_failure(&e)),
                }
            }
        };
        let (error_code, error_message) = result_fields(&r);
        Ok(Response::new(DeleteShareStatesResponse { error_code, error_message }))
    }
}
