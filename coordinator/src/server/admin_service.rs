//! `AdminService`: what operators and smart clients need: the topology and Raft progress of every
//! metadata partition, leadership moves, membership changes (forwarded to each group's leader),
//! snapshots on demand, consistent copies of a group's state for backups (streamed by its leader),
//! and the fault-injection test hook.

use std::sync::Arc;
use std::time::Duration;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::admin_service_server::AdminService;
use diskless_proto::admin::*;
use openraft::ServerState;
use tonic::{Request, Response, Status};

use crate::node::{Node, RouteError};

pub struct AdminApi {
    node: Arc<Node>,
}

impl AdminApi {
    pub fn new(node: Arc<Node>) -> AdminApi {
        AdminApi { node }
    }

    fn client(&self, addr: &str) -> Result<AdminServiceClient<tonic::transport::Channel>, Status> {
        Ok(AdminServiceClient::new(self.node.peers.channel(addr).map_err(Status::unavailable)?))
    }

    /// Runs a membership change on every group (or the one named), each on its leader.
    async fn for_each_group<'a>(
        &'a self,
        only: Option<u32>,
        local: impl Fn(u32) -> futures_util::future::BoxFuture<'a, Result<String, RouteError>>,
        forward_to: impl Fn(
            &str,
            u32,
        )
            -> Result<futures_util::future::BoxFuture<'static, Result<MembershipResponse, Status>>, Status>,
    ) -> Result<Response<MembershipResponse>, Status> {
        let groups: Vec<u32> = only.map_or_else(|| (0..self.node.num_groups()).collect(), |g| vec![g]);
        let mut progress = vec![];
        for g in groups {
            // One group at a time: each change waits for the learner to catch up.
            let mut attempt = 0;
            loop {
                attempt += 1;
                let r = if self.node.raft(g).map_err(|e| Status::not_found(e.to_string()))?.is_leader() {
                    local(g).await
                } else {
                    match self.node.leader(g).filter(|(id, _)| *id != self.node.id) {
                        Some((_, addr)) => match forward_to(&addr, g)?.await {
                            Ok(r) => Ok(r.progress.join("; ")),
                            Err(s) => Err(RouteError::Failed { group: g, message: s.message().to_string() }),
                        },
                        None => Err(RouteError::NotLeader { group: g, leader: None }),
                    }
                };
                match r {
                    Ok(line) => {
                        progress.push(line);
                        break;
                    }
                    Err(RouteError::NotLeader { .. }) if attempt < 50 => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(Status::unavailable(e.to_string())),
                }
            }
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
            let g = diskless_proto::metadata_partition_for(&topic, p, node.num_groups());
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
            Err(e @ (MoveError::UnknownDir(..) | MoveError::UnknownGroup(_))) => {
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
        if !node.raft(g).map_err(|e| Status::not_found(e.to_string()))?.is_leader() {
            let leader = node.leader(g).map_or("unknown".to_string(), |(id, addr)| format!("node {id} at {addr}"));
            return Err(Status::failed_precondition(format!(
                "this node is not the leader of metadata partition {g} (leader: {leader})"
            )));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let out = ChunkSender { tx: tx.clone(), buf: Vec::with_capacity(CHUNK_BYTES), sent: 0 };
            let started = std::time::Instant::now();
            let last = match node.copy_group(g, out) {
                Ok((out, copy)) => {
                    let (index, term, leader) =
                        copy.applied.map_or((0, 0, 0), |l| (l.index, l.leader_id.term, l.leader_id.node_id));
                    tracing::info!(
                        group = g,
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
                            num_metadata_partitions: node.num_groups(),
                        }),
                    })
                }
                Err(e) => {
                    tracing::warn!(group = g, error = %format!("{e:#}"), "state copy for a backup failed");
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
        let mut groups = vec![];
        let mut nodes: std::collections::BTreeMap<u64, (String, bool)> = Default::default();
        for g in 0..node.num_groups() {
            let m = node.metrics(g).map_err(|e| Status::internal(e.to_string()))?;
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
            groups.push(GroupStatus {
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
        let stats = node.wal_stats();
        Ok(Response::new(StatusResponse {
            node_id: node.id,
            num_metadata_partitions: node.num_groups(),
            nodes: nodes
                .into_iter()
                .map(|(node_id, (peer_address, voter))| NodeInfo {
                    node_id,
                    address: clients.get(&node_id).cloned().unwrap_or_else(|| peer_address.clone()),
                    voter,
                    peer_address,
                })
                .collect(),
            groups,
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
        if self.node.raft(g).map_err(|e| Status::not_found(e.to_string()))?.is_leader() {
            self.node.transfer_leader(g, r.to_node_id).await.map_err(|e| Status::failed_precondition(e.to_string()))?;
        } else {
            let Some((_, addr)) = self.node.leader(g).filter(|(id, _)| *id != self.node.id) else {
                return Err(Status::unavailable(format!("metadata partition {g} has no known leader")));
            };
            self.client(&addr)?.transfer_leader(r).await?;
        }
        // Wait until the new leader is in place (bounded), so the caller sees the result.
        let _ = self
            .node
            .raft(g)
            .map_err(|e| Status::not_found(e.to_string()))?
            .wait(Some(Duration::from_secs(10)))
            .metrics(|m| m.current_leader == Some(r.to_node_id), "leader moved")
            .await;
        Ok(Response::new(TransferLeaderResponse {}))
    }

    async fn add_node(&self, request: Request<AddNodeRequest>) -> Result<Response<MembershipResponse>, Status> {
        let r = request.into_inner();
        if r.node_id == 0 || r.address.is_empty() {
            return Err(Status::invalid_argument("a node needs a non-zero id and an address"));
        }
        let (id, addr) = (r.node_id, r.address.clone());
        let node = self.node.clone();
        let channels = self.node.peers.clone();
        self.for_each_group(
            r.metadata_partition,
            |g| {
                let (node, addr) = (node.clone(), addr.clone());
                Box::pin(async move { node.add_to_group(g, id, &addr).await })
            },
            |leader_addr, g| {
                let channel = channels.channel(leader_addr).map_err(Status::unavailable)?;
                let req = AddNodeRequest { node_id: id, address: addr.clone(), metadata_partition: Some(g) };
                Ok(Box::pin(async move { Ok(AdminServiceClient::new(channel).add_node(req).await?.into_inner()) }))
            },
        )
        .await
    }

    async fn remove_node(&self, request: Request<RemoveNodeRequest>) -> Result<Response<MembershipResponse>, Status> {
        let r = request.into_inner();
        let id = r.node_id;
        let node = self.node.clone();
        let channels = self.node.peers.clone();
        self.for_each_group(
            r.metadata_partition,
            |g| {
                let node = node.clone();
                Box::pin(async move { node.remove_from_group(g, id).await })
            },
            |leader_addr, g| {
                let channel = channels.channel(leader_addr).map_err(Status::unavailable)?;
                let req = RemoveNodeRequest { node_id: id, metadata_partition: Some(g) };
                Ok(Box::pin(async move { Ok(AdminServiceClient::new(channel).remove_node(req).await?.into_inner()) }))
            },
        )
        .await
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
        if let Some(dir) = &r.fail_dir {
            self.node.fail_dir(dir).map_err(|e| Status::invalid_argument(e.to_string()))?;
        }
        tracing::warn!(?r, "fault injected");
        Ok(Response::new(FaultResponse {}))
    }
}
