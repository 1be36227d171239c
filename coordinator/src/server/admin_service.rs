//! `AdminService`: what operators and smart clients need: the topology and Raft progress of every
//! metadata partition, leadership moves and membership changes (each run on the partition's leader
//! through `node::route`, as a `Change`), snapshots on demand, consistent copies of a partition's
//! state for backups (streamed by its leader only: a follower refuses, naming the leader), replica
//! moves between data directories, per-partition figures, and the fault-injection test hook.
//!
//! Owns these calls' wire conversions; what a `RouteError` becomes is `convert`'s table. It must
//! not forward on its own (that is `node::route`) nor change anything but through `node`.

use std::sync::Arc;
use std::time::Duration;

use diskless_proto::admin::admin_service_server::AdminService;
use diskless_proto::admin::*;
use openraft::ServerState;
use tonic::{Request, Response, Status};

use super::convert::route_status;
use crate::node::{Change, Node};

pub struct AdminApi {
    node: Arc<Node>,
}

impl AdminApi {
    pub fn new(node: Arc<Node>) -> AdminApi {
        AdminApi { node }
    }

    /// Makes the change `change(g)` of every metadata partition (or the one named), one after the
    /// other (each waits for a learner to catch up), each on its leader; the lines of progress.
    async fn for_each_partition(
        &self,
        only: Option<u32>,
        change: impl Fn(u32) -> Change,
    ) -> Result<Response<MembershipResponse>, Status> {
        let partitions: Vec<u32> = match only {
            Some(g) => {
                self.node.raft(g).map_err(|e| route_status(&e))?;
                vec![g]
            }
            None => (0..self.node.num_partitions()).collect(),
        };
        let mut progress = vec![];
        for g in partitions {
            progress.push(self.node.change_on_leader(g, change(g)).await.map_err(|e| route_status(&e))?);
        }
        Ok(Response::new(MembershipResponse { progress }))
    }
}

fn state_name(s: ServerState) -> &'static str {
    match s {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// Figures of `partitions` of `topic` from this node's replicas (blocking: counts batches).
fn describe_partitions(node: &Node, topic: [u8; 16], partitions: &[i32]) -> Vec<PartitionFigures> {
    let tp_topic = uuid::Uuid::from_bytes(topic);
    partitions
        .iter()
        .map(|&p| {
            let g = diskless_proto::metadata_partition_for(&topic, p, node.num_partitions());
            let mut out =
                PartitionFigures { partition: p, metadata_partition: g, node_id: node.id, ..Default::default() };
            let placed = match node.placed(g) {
                Ok(p) => p,
                Err(e) => {
                    out.error_code = 9;
                    out.error_message = e.to_string();
                    return out;
                }
            };
            let view = placed.db.read();
            let answer = node.check_readable(g, &view).map_err(|e| (9, e.to_string())).and_then(|()| {
                let sm = node.state_machine(g).map_err(|e| (9, e.to_string()))?;
                let tp = crate::state_machine::TopicPartition { topic_id: tp_topic, partition: p };
                match sm.describe_partition(&view, &tp) {
                    Ok(Ok(f)) => Ok(f),
                    Ok(Err(failure)) => Err((failure.code as i32, failure.message)),
                    Err(e) => Err((-1, e.to_string())),
                }
            });
            match answer {
                Ok(f) => {
                    out.log_start_offset = f.log_start_offset;
                    out.high_watermark = f.high_watermark;
                    out.bytes = f.byte_size;
                    out.batches = f.batches;
                    out.applied_index = node.applied(g);
                }
                Err((code, message)) => {
                    out.error_code = code;
                    out.error_message = message;
                }
            }
            out
        })
        .collect()
}

/// The bytes of a snapshot file on their way to a `StreamSnapshot` caller: gathered into chunks of
/// [`CHUNK_BYTES`], each sent (waiting while the caller is slow) as one message.
struct ChunkSender {
    tx: tokio::sync::mpsc::Sender<Result<SnapshotChunk, Status>>,
    buf: Vec<u8>,
    sent: u64,
}

const CHUNK_BYTES: usize = 1 << 20;

impl ChunkSender {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.sent += data.len() as u64;
        self.tx
            .blocking_send(Ok(SnapshotChunk { data, summary: None }))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the caller went away"))
    }
}

impl std::io::Write for ChunkSender {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    type StreamSnapshotStream =
        std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<SnapshotChunk, Status>> + Send + 'static>>;

    async fn describe_partitions(
        &self,
        request: Request<DescribePartitionsRequest>,
    ) -> Result<Response<DescribePartitionsResponse>, Status> {
        let r = request.into_inner();
        let topic: [u8; 16] =
            r.topic_id.as_slice().try_into().map_err(|_| Status::invalid_argument("a topic id is 16 bytes"))?;
        let node = self.node.clone();
        let partitions = tokio::task::spawn_blocking(move || describe_partitions(&node, topic, &r.partitions))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(DescribePartitionsResponse { partitions }))
    }

    async fn describe_dirs(&self, _: Request<DescribeDirsRequest>) -> Result<Response<DescribeDirsResponse>, Status> {
        let node = self.node.clone();
        let dirs = tokio::task::spawn_blocking(move || node.describe_dirs())
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(DescribeDirsResponse {
            node_id: self.node.id,
            dirs,
            throttled_rate: self.node.moves().rate(),
        }))
    }

    async fn alter_replica_dir(
        &self,
        request: Request<AlterReplicaDirRequest>,
    ) -> Result<Response<AlterReplicaDirResponse>, Status> {
        use crate::node::mover::MoveError;
        let r = request.into_inner();
        let answer = if r.cancel {
            self.node.cancel_replica_move(r.metadata_partition)
        } else {
            self.node.alter_replica_dir(r.metadata_partition, &r.dir)
        };
        match answer {
            Ok(message) => Ok(Response::new(AlterReplicaDirResponse { message })),
            Err(e @ (MoveError::UnknownDir(..) | MoveError::UnknownPartition(_))) => {
                Err(Status::invalid_argument(e.to_string()))
            }
            Err(e @ MoveError::AlreadyThere { .. }) => Err(Status::already_exists(e.to_string())),
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        }
    }

    async fn set_dir_throttle(
        &self,
        request: Request<SetDirThrottleRequest>,
    ) -> Result<Response<SetDirThrottleResponse>, Status> {
        let rate = request.into_inner().bytes_per_second;
        self.node.moves().set_rate(rate);
        tracing::info!(bytes_per_second = rate, "replica move throttle set");
        Ok(Response::new(SetDirThrottleResponse { bytes_per_second: self.node.moves().rate() }))
    }

    async fn stream_snapshot(
        &self,
        request: Request<StreamSnapshotRequest>,
    ) -> Result<Response<Self::StreamSnapshotStream>, Status> {
        let g = request.into_inner().metadata_partition;
        let node = self.node.clone();
        // Not routed: the stream is this leader's own state, read where it runs (a follower
        // refuses, naming the leader, and the caller asks it).
        if !node.raft(g).map_err(|e| route_status(&e))?.is_leader() {
            let leader = node.leader(g).map_or("unknown".to_string(), |(id, addr)| format!("node {id} at {addr}"));
            return Err(Status::failed_precondition(format!(
                "this node is not the leader of metadata partition {g} (leader: {leader})"
            )));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let out = ChunkSender { tx: tx.clone(), buf: Vec::with_capacity(CHUNK_BYTES), sent: 0 };
            let started = std::time::Instant::now();
            let last = match node.copy_state(g, out) {
                Ok((out, copy)) => {
                    let (index, term, leader) =
                        copy.applied.map_or((0, 0, 0), |l| (l.index, l.leader_id.term, l.leader_id.node_id));
                    tracing::info!(
                        metadata_partition = g,
                        applied = index,
                        bytes = out.sent,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "state copy streamed for a backup"
                    );
                    Ok(SnapshotChunk {
                        data: vec![],
                        summary: Some(SnapshotSummary {
                            metadata_partition: g,
                            applied_index: index,
                            applied_term: term,
                            applied_leader: leader,
                            digest: copy.digest.iter().map(|b| format!("{b:02x}")).collect(),
                            bytes: out.sent,
                            node_id: node.id,
                            cluster_id: node
                                .identity()
                                .cluster_id()
                                .map(|c| crate::raft::identity::cluster_id_hex(&c))
                                .unwrap_or_default(),
                            num_metadata_partitions: node.num_partitions(),
                        }),
                    })
                }
                Err(e) => {
                    tracing::warn!(metadata_partition = g, error = %format!("{e:#}"), "state copy for a backup failed");
                    Err(Status::internal(format!("copy of metadata partition {g}: {e:#}")))
                }
            };
            let _ = tx.blocking_send(last);
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn status(&self, request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        if request.get_ref().with_digest {
            // Hashing every state costs a full scan: an operator's call.
            super::authz::require(&request, super::authz::Role::Admin)?;
        }
        let req = request.into_inner();
        let with_digest = req.with_digest;
        let node = &self.node;
        let mut partitions = vec![];
        let mut nodes: std::collections::BTreeMap<u64, (String, bool)> = Default::default();
        for g in 0..node.num_partitions() {
            let m = node.metrics(g).map_err(|e| route_status(&e))?;
            let membership = m.membership_config.membership();
            let voters: Vec<u64> = membership.voter_ids().collect();
            let learners: Vec<u64> = membership.learner_ids().collect();
            for (id, n) in membership.nodes() {
                let e = nodes.entry(*id).or_insert((n.addr.clone(), true));
                e.1 &= voters.contains(id);
            }
            let last = m.last_log_index.unwrap_or(0);
            let followers = m
                .replication
                .as_ref()
                .map(|r| {
                    r.iter()
                        .filter(|(id, _)| **id != node.id)
                        .map(|(id, matched)| {
                            let matched_index = matched.as_ref().map_or(0, |l| l.index);
                            FollowerProgress { node_id: *id, matched_index, lag: last.saturating_sub(matched_index) }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let (digest, digest_applied_index) = if with_digest {
                let node = node.clone();
                tokio::task::spawn_blocking(move || node.digest(g))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(|e| Status::internal(e.to_string()))?
            } else {
                (String::new(), 0)
            };
            partitions.push(GroupStatus {
                metadata_partition: g,
                leader: m.current_leader.unwrap_or(0),
                term: m.current_term,
                last_log_index: last,
                applied_index: m.last_applied.map_or(0, |l| l.index),
                snapshot_index: m.snapshot.map_or(0, |l| l.index),
                purged_index: m.purged.map_or(0, |l| l.index),
                state: state_name(m.state).to_string(),
                followers,
                voters,
                learners,
                digest,
                digest_applied_index,
                incarnation: node.identity().incarnation(g).unwrap_or_default(),
                member: node.is_member(g),
                data_dir: node.placed(g).map(|p| p.path.display().to_string()).unwrap_or_default(),
                dir_offline: node.placed(g).is_ok_and(|p| p.is_offline()),
            });
        }
        let listed: Vec<(u64, String)> = nodes.iter().map(|(id, (a, _))| (*id, a.clone())).collect();
        let clients = node.client_addresses(&listed).await;
        let stats = node.log_sync_stats();
        Ok(Response::new(StatusResponse {
            node_id: node.id,
            num_metadata_partitions: node.num_partitions(),
            nodes: nodes
                .into_iter()
                .map(|(node_id, (peer_address, voter))| NodeInfo {
                    node_id,
                    address: clients.get(&node_id).cloned().unwrap_or_else(|| peer_address.clone()),
                    voter,
                    peer_address,
                })
                .collect(),
            groups: partitions,
            wal_syncs: stats.syncs.load(std::sync::atomic::Ordering::Relaxed),
            wal_synced_appends: stats.appends.load(std::sync::atomic::Ordering::Relaxed),
            stages: {
                let figures = node.stages().figures();
                if req.reset_stages {
                    node.stages().reset();
                }
                figures
                    .into_iter()
                    .map(|f| StageLatency {
                        name: f.name.to_string(),
                        count: f.count,
                        p50_us: f.p50_us,
                        p99_us: f.p99_us,
                        max_us: f.max_us,
                    })
                    .collect()
            },
            cluster_id: node
                .identity()
                .cluster_id()
                .map(|c| crate::raft::identity::cluster_id_hex(&c))
                .unwrap_or_default(),
        }))
    }

    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderResponse>, Status> {
        let r = request.into_inner();
        let g = r.metadata_partition;
        let raft = self.node.raft(g).map_err(|e| route_status(&e))?;
        let to = r.to_node_id;
        self.node.change_on_leader(g, Change::TransferLeader { to }).await.map_err(|e| route_status(&e))?;
        // The new leader took over (the change waits for it); wait until this node knows it too
        // (bounded), so the caller's next call here sees it.
        let _ = raft.wait(Some(Duration::from_secs(3))).metrics(|m| m.current_leader == Some(to), "leader moved").await;
        Ok(Response::new(TransferLeaderResponse {}))
    }

    async fn add_node(&self, request: Request<AddNodeRequest>) -> Result<Response<MembershipResponse>, Status> {
        let r = request.into_inner();
        if r.node_id == 0 || r.address.is_empty() {
            return Err(Status::invalid_argument("a node needs a non-zero id and an address"));
        }
        let (id, addr) = (r.node_id, r.address);
        self.for_each_partition(r.metadata_partition, |_| Change::AddNode { id, addr: addr.clone() }).await
    }

    async fn remove_node(&self, request: Request<RemoveNodeRequest>) -> Result<Response<MembershipResponse>, Status> {
        let r = request.into_inner();
        let id = r.node_id;
        self.for_each_partition(r.metadata_partition, |_| Change::RemoveNode { id }).await
    }

    async fn trigger_snapshot(
        &self,
        _request: Request<TriggerSnapshotRequest>,
    ) -> Result<Response<TriggerSnapshotResponse>, Status> {
        let snapshot_index = self.node.snapshot_all(Duration::from_secs(30)).await;
        Ok(Response::new(TriggerSnapshotResponse { snapshot_index }))
    }

    async fn inject_fault(&self, request: Request<FaultRequest>) -> Result<Response<FaultResponse>, Status> {
        if !self.node.config.allow_fault_injection {
            return Err(Status::permission_denied("fault injection is off (allow_fault_injection = false)"));
        }
        let r = request.into_inner();
        let faults = &self.node.peers.faults;
        if !r.keep_blocks {
            faults.set_blocked(r.block_node_ids.iter().copied());
        }
        if let Some(ms) = r.fsync_stall_ms {
            faults.stall_fsyncs(Duration::from_millis(ms));
        }
        if let Some(fail) = r.fsync_fail {
            faults.fail_next_fsync(fail);
        }
        if let Some(ms) = r.clock_offset_ms {
            faults.set_clock_offset_ms(ms);
        }
        if r.set_topic_changes_only {
            faults.set_topic_changes_only((!r.topic_changes_only.is_empty()).then(|| r.topic_changes_only.clone()));
        }
        if let Some(dir) = &r.fail_dir {
            self.node.fail_dir(dir).map_err(|e| Status::invalid_argument(e.to_string()))?;
        }
        tracing::warn!(?r, "fault injected");
        Ok(Response::new(FaultResponse {}))
    }
}
