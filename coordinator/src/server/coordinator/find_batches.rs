//! FindBatches: served by this node's own replicas, never forwarded. It waits (bounded) until
//! each replica the request reads has applied the index the caller saw (`min_applied`), then
//! reads every metadata partition involved from one RocksDB snapshot, sharing one fetch budget. A
//! replica that cannot vouch for its state (no word from a leader lately, not a member, stopped,
//! or caught mid-install: `Node::check_readable`) answers REPLICA_NOT_AVAILABLE for its
//! partitions, and the caller asks another node.
//!
//! Owns the call's wire conversions and the waits. The rules (the fetch budget, the min-one rule)
//! are the state machine's (`state_machine::queries`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use diskless_proto::v1::*;
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::request::timeout_of;
use super::CoordinatorApi;
use crate::node::RouteError;
use crate::server::convert::{self, route_failure, route_status};
use crate::state_machine::{BatchRecord, FetchBudget, MarkerRecord};

/// Kafka's `IsolationLevel.READ_COMMITTED`.
pub const READ_COMMITTED: i32 = 1;

/// A transaction marker on the wire.
pub fn marker_info(m: &MarkerRecord) -> TxnMarker {
    TxnMarker {
        producer_id: m.producer_id,
        producer_epoch: i32::from(m.producer_epoch),
        commit: m.commit,
        coordinator_epoch: m.coordinator_epoch,
    }
}

fn batch_info(b: BatchRecord, markers: &[(i64, MarkerRecord)]) -> find_batches_response::BatchInfo {
    let marker = if b.is_marker() {
        markers.iter().find(|(at, _)| *at == b.base_offset).map(|(_, m)| marker_info(m))
    } else {
        None
    };
    find_batches_response::BatchInfo {
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
        marker,
    }
}

impl CoordinatorApi {
    pub(super) async fn serve_find_batches(
        &self,
        request: Request<FindBatchesRequest>,
    ) -> Result<Response<FindBatchesResponse>, Status> {
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let node = &self.node;
        // Wait (bounded) for the replicas this request reads to reach the indexes the caller saw
        // (not the others: a lagging partition the request does not touch must not delay it).
        let read: BTreeSet<u32> = req
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().filter_map(|p| convert::tp(&t.topic_id, p.partition_index).ok()))
            .map(|tp| self.owner(&tp))
            .collect();
        let mut lagging: BTreeMap<u32, RouteError> = BTreeMap::new();
        // A replica that cannot vouch for its state answers at once. One that is behind what the
        // caller saw must also have heard from its leader within an election timeout (else it
        // will not catch up soon: it may be cut off), and then waits; either failure is
        // REPLICA_NOT_AVAILABLE, and the caller asks another node.
        let in_touch = Duration::from_millis(node.config.raft.election_timeout_max_ms);
        for &g in &read {
            let behind = req.min_applied.iter().any(|gi| gi.metadata_partition == g && gi.index > node.applied(g));
            let check = if behind { node.check_in_touch(g, in_touch) } else { node.check_serving(g) };
            if let Err(e) = check {
                lagging.insert(g, e);
            }
        }
        let waits = join_all(
            req.min_applied
                .iter()
                .filter(|gi| read.contains(&gi.metadata_partition) && !lagging.contains_key(&gi.metadata_partition))
                .map(|gi| async move {
                    (gi.metadata_partition, gi.index, node.wait_applied(gi.metadata_partition, gi.index, timeout).await)
                }),
        )
        .await;
        for (g, index, r) in waits {
            if r.is_err() {
                let reason = format!("it has not applied index {index} yet");
                lagging.insert(g, RouteError::ReplicaUnavailable { partition: g, reason });
            }
        }
        // Each metadata partition's replica read from one RocksDB snapshot of its directory.
        let mut placed = BTreeMap::new();
        for &g in &read {
            placed.insert(g, node.placed(g).map_err(|e| route_status(&e))?);
        }
        // The applied indexes answered are read before the views: each view holds at least that
        // much (a broker trusts a read as complete from its index on).
        let applied_before: BTreeMap<u32, u64> = read.iter().map(|&g| (g, node.applied(g))).collect();
        let views: BTreeMap<u32, crate::storage::ReadView<'_>> =
            placed.iter().map(|(g, p)| (*g, p.db.read())).collect();
        let mut budget = FetchBudget::new(req.fetch_max_bytes, req.max_batches_per_partition);
        let read_committed = req.isolation_level == READ_COMMITTED;
        let mut involved = BTreeSet::new();
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
                                let sm = node.state_machine(g).map_err(|e| route_status(&e))?;
                                Ok(sm
                                    .find_batches(
                                        view,
                                        &tp,
                                        p.offset,
                                        p.max_partition_fetch_bytes,
                                        &mut budget,
                                        read_committed,
                                    )
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
                        last_stable_offset: -1,
                        aborted_transactions: vec![],
                    },
                    Ok(pb) => find_batches_response::FindBatchesPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: pb.error.as_ref().map_or(0, |f| f.code.wire()),
                        error_message: pb.error.map(|f| f.message),
                        log_start_offset: pb.log_start_offset,
                        high_watermark: pb.high_watermark,
                        last_stable_offset: pb.last_stable_offset,
                        aborted_transactions: pb
                            .aborted
                            .iter()
                            .map(|a| find_batches_response::AbortedTransaction {
                                producer_id: a.producer_id,
                                first_offset: a.first_offset,
                            })
                            .collect(),
                        batches: pb.batches.into_iter().map(|b| batch_info(b, &pb.markers)).collect(),
                    },
                });
            }
            topics.push(find_batches_response::FindBatchesTopicResponse { topic_id: t.topic_id.clone(), partitions });
        }
        let applied = involved
            .into_iter()
            .map(|g| AppliedIndex { metadata_partition: g, index: applied_before.get(&g).copied().unwrap_or(0) })
            .collect();
        Ok(Response::new(FindBatchesResponse { throttle_time_ms: 0, topics, applied }))
    }
}
