//! `RaftService`: the receiving end of the Raft network. Admits each message only if it is meant
//! for this node's replica of the metadata partition (see `raft::identity`), decodes it, hands it
//! to the named metadata partition's Raft, encodes the answer. Snapshots arrive as a stream of
//! chunks written straight to a file in the metadata partition's snapshot directory, checked, then
//! installed by a task of its own, so a sender that goes away mid-install (a leader change) cannot
//! pull the file from under openraft. A stream past `max_snapshot_bytes`, or silent for
//! `SNAPSHOT_IDLE_TIMEOUT`, is refused (its file removed). Who may send at all is decided before
//! (`authz`: members only, with peer TLS). `Identify` tells peers who this node is (bootstrap and
//! AddNode ask it). `Execute` runs a command, strict read or membership change another node
//! forwarded to this metadata partition's leader (`node::route`). It must not decide anything about
//! the messages (openraft does) nor forward them.

use std::sync::Arc;

use diskless_proto::internal::raft_service_server::RaftService;
use diskless_proto::internal::{
    Addressee, ExecuteReply, ExecuteRequest, IdentifyReply, IdentifyRequest, RaftReply, RaftRequest, SnapshotChunk,
};
use openraft::raft::AppendEntriesResponse;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::convert::route_status;
use crate::node::Node;
use crate::raft::network::SNAPSHOT_IDLE_TIMEOUT;
use crate::raft::snapshot::{self, SnapshotFile};
use crate::raft::{Raft, Snapshot, SnapshotMeta, Vote};
use crate::storage::codec;

pub struct RaftApi {
    node: Arc<Node>,
}

impl RaftApi {
    pub fn new(node: Arc<Node>) -> RaftApi {
        RaftApi { node }
    }

    fn raft(&self, partition: u32) -> Result<&Raft, Status> {
        self.node.raft(partition).map_err(|e| route_status(&e))
    }

    /// The metadata partition's Raft if the message is for this node's replica of it; otherwise the
    /// refusal, as an answer the sender treats as "unreachable" (this replica is not the one it
    /// knows).
    fn admit(&self, partition: u32, to: Option<&Addressee>) -> Result<Result<&Raft, RaftReply>, Status> {
        match self.node.admit(partition, to) {
            Ok(()) => Ok(Ok(self.raft(partition)?)),
            Err(e) => {
                Ok(Err(RaftReply { error: format!("refused by node {}: {e}", self.node.id), ..Default::default() }))
            }
        }
    }
}

fn reply<T: Serialize, E: std::fmt::Display>(r: Result<T, E>) -> Result<Response<RaftReply>, Status> {
    Ok(Response::new(match r {
        Ok(v) => {
            RaftReply { payload: codec::encode(&v).map_err(|e| Status::internal(e.to_string()))?, ..Default::default() }
        }
        Err(e) => RaftReply { error: e.to_string(), ..Default::default() },
    }))
}

fn decode<T: serde::de::DeserializeOwned>(payload: &[u8]) -> Result<T, Status> {
    codec::decode(b"raft request", payload).map_err(|e| Status::invalid_argument(e.to_string()))
}

#[tonic::async_trait]
impl RaftService for RaftApi {
    async fn append_entries(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let r = request.into_inner();
        let raft = match self.admit(r.group, r.to.as_ref())? {
            Ok(raft) => raft,
            Err(refused) => return Ok(Response::new(refused)),
        };
        let answer = raft.append_entries(decode(&r.payload)?).await;
        if answer.as_ref().is_ok_and(|a| !matches!(a, AppendEntriesResponse::HigherVote(_))) {
            // A current leader's message: this replica is in touch (see Node::check_serving).
            self.node.heard_from_leader(r.group);
        }
        reply(answer)
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let r = request.into_inner();
        let raft = match self.admit(r.group, r.to.as_ref())? {
            Ok(raft) => raft,
            Err(refused) => return Ok(Response::new(refused)),
        };
        reply(raft.vote(decode(&r.payload)?).await)
    }

    async fn pre_vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let r = request.into_inner();
        let raft = match self.admit(r.group, r.to.as_ref())? {
            Ok(raft) => raft,
            Err(refused) => return Ok(Response::new(refused)),
        };
        reply(raft.pre_vote(decode(&r.payload)?).await)
    }

    async fn transfer_leader(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let r = request.into_inner();
        let raft = match self.admit(r.group, r.to.as_ref())? {
            Ok(raft) => raft,
            Err(refused) => return Ok(Response::new(refused)),
        };
        reply(raft.handle_transfer_leader(decode(&r.payload)?).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftReply>, Status> {
        let mut stream = request.into_inner();
        let first = tokio::time::timeout(SNAPSHOT_IDLE_TIMEOUT, stream.next())
            .await
            .map_err(|_| Status::deadline_exceeded(format!("no snapshot chunk for {SNAPSHOT_IDLE_TIMEOUT:?}")))?
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        let partition = first.group;
        let raft = match self.admit(partition, first.to.as_ref())? {
            Ok(raft) => raft.clone(),
            Err(refused) => return Ok(Response::new(refused)),
        };
        // Only a leader sends snapshots: this replica is in touch (see Node::check_serving).
        self.node.heard_from_leader(partition);
        let (vote, meta): (Vote, SnapshotMeta) = decode(&first.header)?;
        let dir = self.node.placed(partition).map_err(|e| route_status(&e))?.snapshot_dir(partition);
        tokio::fs::create_dir_all(&dir).await.map_err(|e| Status::internal(e.to_string()))?;
        let path = dir.join(format!("receiving-{}.part", uuid::Uuid::new_v4()));
        // However the transfer ends (error, or the sender going away), the partial file does not
        // stay behind.
        let cleanup = RemoveOnDrop(path.clone());
        let limit = self.node.config.max_snapshot_bytes;
        let mut received = first.data.len() as u64;
        let too_large = |n: u64| {
            std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!("the stream passed max_snapshot_bytes ({n} > {limit} bytes): refused"),
            )
        };
        let result = async {
            if received > limit {
                return Err(too_large(received));
            }
            let mut file = tokio::fs::File::create(&path).await?;
            file.write_all(&first.data).await?;
            // No limit on the whole transfer, only on a silence between two chunks.
            loop {
                let next = tokio::time::timeout(SNAPSHOT_IDLE_TIMEOUT, stream.next()).await.map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no snapshot chunk for {SNAPSHOT_IDLE_TIMEOUT:?}"),
                    )
                })?;
                let Some(chunk) = next else { break };
                let chunk = chunk.map_err(std::io::Error::other)?;
                received += chunk.data.len() as u64;
                if received > limit {
                    return Err(too_large(received));
                }
                file.write_all(&chunk.data).await?;
            }
            file.sync_all().await?;
            let check = path.clone();
            tokio::task::spawn_blocking(move || snapshot::verify(&check)).await.map_err(std::io::Error::other)??;
            Ok::<_, std::io::Error>(())
        }
        .await;
        if let Err(e) = result {
            let message = format!("receiving a snapshot of metadata partition {partition}: {e}");
            if e.kind() == std::io::ErrorKind::FileTooLarge {
                tracing::warn!(metadata_partition = partition, "{message}");
                return Err(Status::resource_exhausted(message));
            }
            return Err(Status::data_loss(message));
        }
        // Received whole: openraft installs it from here on, in a task that outlives this request
        // (a cancelled request must not delete the file openraft is adopting), and removes the file
        // afterwards unless it was adopted under its final name.
        let install = tokio::spawn(async move {
            let _cleanup = cleanup;
            raft.install_full_snapshot(vote, Snapshot { meta, snapshot: SnapshotFile { path } }).await
        });
        match install.await {
            Ok(r) => reply(r),
            Err(e) => Err(Status::internal(format!("installing a snapshot of metadata partition {partition}: {e}"))),
        }
    }

    async fn identify(&self, _request: Request<IdentifyRequest>) -> Result<Response<IdentifyReply>, Status> {
        Ok(Response::new(self.node.identify()))
    }

    async fn execute(&self, request: Request<ExecuteRequest>) -> Result<Response<ExecuteReply>, Status> {
        self.node.execute(request.into_inner()).await.map(Response::new)
    }
}

/// Deletes a file when dropped (if it is still there).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
