//! WatchPartitions: one metadata partition's partition changes as this node's replica applies
//! them (`raft::watch`), streamed from the caller's cursor; never forwarded. A message goes out for
//! each run of applied entries with changes, and a heartbeat (the applied index, no changes) at
//! least every second, so the caller knows the stream is alive and how far it reached. The
//! replica's readiness (`Node::check_readable`: a member, not mid-install, and heard from its
//! leader within one election timeout) is checked at the start and with every heartbeat; a replica that cannot vouch ends the stream
//! with UNAVAILABLE and the caller resumes through another node.
//!
//! With `with_batches`, a message also carries the coordinates of the batches its entries appended
//! and of those a replace moved (the broker's batch-coordinate cache is fed from them).
//!
//! Owns the wire form and the pacing; what a change is belongs to `state_machine::changes`.

use std::pin::Pin;
use std::time::Duration;

use diskless_proto::v1::*;
use futures_util::Stream;
use tonic::{Request, Response, Status};

use super::CoordinatorApi;
use crate::node::Node;
use crate::raft::watch::Read;
use crate::server::convert::route_status;
use crate::state_machine::changes::Changes;

pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchPartitionsResponse, Status>> + Send + 'static>>;

/// A heartbeat at least this often.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Partition changes per message, about (whole entries).
const MAX_CHANGES_PER_MESSAGE: usize = 4096;

impl CoordinatorApi {
    pub(super) async fn serve_watch_partitions(
        &self,
        request: Request<WatchPartitionsRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let req = request.into_inner();
        let g = req.metadata_partition;
        let node = self.node.clone();
        let hub = node.watch_hub(g).map_err(|e| route_status(&e))?.clone();
        readable(&node, g)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let m = crate::metrics::get();
            m.watch_streams.inc();
            let mut applied = hub.subscribe();
            let mut stopping = node.stopping();
            let mut cursor = if req.after_index == 0 { hub.applied_index() } else { req.after_index };
            let mut heartbeat_due = tokio::time::Instant::now();
            loop {
                let (msg, more) = match hub.read_after(cursor, MAX_CHANGES_PER_MESSAGE) {
                    Read::Reset { at } => {
                        m.watch_resets.inc();
                        tracing::debug!(metadata_partition = g, cursor, at, "watcher told to reset");
                        cursor = at;
                        (Some(message(at, true, vec![], false)), false)
                    }
                    Read::Changes { upto, entries } => {
                        let more = upto < hub.applied_index();
                        let due = tokio::time::Instant::now() >= heartbeat_due;
                        let msg = (!entries.is_empty() || due).then(|| message(upto, false, entries, req.with_batches));
                        cursor = upto;
                        (msg, more)
                    }
                };
                if let Some(msg) = msg {
                    if tokio::time::Instant::now() >= heartbeat_due {
                        // Vouch for the replica with every heartbeat.
                        if let Err(s) = readable(&node, g) {
                            let _ = tx.send(Err(s)).await;
                            break;
                        }
                    }
                    if tx.send(Ok(msg)).await.is_err() {
                        break;
                    }
                    heartbeat_due = tokio::time::Instant::now() + HEARTBEAT;
                }
                if more {
                    continue;
                }
                tokio::select! {
                    r = applied.wait_for(|&i| i > cursor) => if r.is_err() { break },
                    _ = tokio::time::sleep_until(heartbeat_due) => {}
                    _ = stopping.wait_for(|&s| s) => break,
                    _ = tx.closed() => break,
                }
            }
            m.watch_streams.dec();
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// Whether the replica may stream: readable, and heard from its leader within one election
/// timeout (`Node::check_in_touch`).
fn readable(node: &Node, g: u32) -> Result<(), Status> {
    let placed = node.placed(g).map_err(|e| route_status(&e))?;
    let view = placed.db.read();
    node.check_readable(g, &view).map_err(|e| route_status(&e))?;
    let bound = Duration::from_millis(node.config.raft.election_timeout_max_ms);
    node.check_in_touch(g, bound).map_err(|e| route_status(&e))
}

fn message(index: u64, reset: bool, entries: Vec<(u64, Changes)>, with_batches: bool) -> WatchPartitionsResponse {
    let mut log_starts_moved = false;
    let mut changes = vec![];
    let mut appended: Vec<AppendedBatches> = vec![];
    let mut moved: Vec<MovedBatches> = vec![];
    for (at, c) in entries {
        log_starts_moved |= c.log_starts_moved;
        for p in c.partitions {
            changes.push(PartitionChange {
                topic_id: p.tp.topic_id.as_bytes().to_vec(),
                partition_index: p.tp.partition,
                high_watermark: p.high_watermark.unwrap_or(-1),
                log_start_offset: p.log_start_offset.unwrap_or(-1),
                deleted: p.deleted,
                index: at,
            });
        }
        if !with_batches {
            continue;
        }
        for b in c.moved {
            match moved.last_mut() {
                Some(m)
                    if m.index == at
                        && *m.object_key == *b.object_key
                        && m.topic_id == b.tp.topic_id.as_bytes()
                        && m.partition_index == b.tp.partition =>
                {
                    m.last_offsets.push(b.last_offset);
                    m.byte_offsets.push(i64::from(b.byte_offset));
                }
                _ => moved.push(MovedBatches {
                    object_key: b.object_key.to_string(),
                    index: at,
                    topic_id: b.tp.topic_id.as_bytes().to_vec(),
                    partition_index: b.tp.partition,
                    last_offsets: vec![b.last_offset],
                    byte_offsets: vec![i64::from(b.byte_offset)],
                }),
            }
        }
        for b in c.batches {
            let batch = AppendedBatch {
                topic_id: b.tp.topic_id.as_bytes().to_vec(),
                partition_index: b.tp.partition,
                magic: i32::from(b.magic),
                byte_offset: i64::from(b.byte_offset),
                byte_size: i64::from(b.byte_size),
                base_offset: b.base_offset,
                last_offset: b.last_offset,
                log_append_timestamp: b.log_append_time,
                batch_max_timestamp: b.batch_max_timestamp,
                timestamp_type: i32::from(b.timestamp_type),
                marker: b.marker.as_ref().map(super::find_batches::marker_info),
                is_transactional: b.transactional,
            };
            match appended.last_mut() {
                Some(a) if a.index == at && *a.object_key == *b.object_key => a.batches.push(batch),
                _ => appended.push(AppendedBatches {
                    object_key: b.object_key.to_string(),
                    index: at,
                    batches: vec![batch],
                }),
            }
        }
    }
    WatchPartitionsResponse { index, reset, changes, log_starts_moved, appended, moved }
}
