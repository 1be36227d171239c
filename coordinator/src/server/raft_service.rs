//! `RaftService`: the receiving end of the Raft network. Decodes each message, hands it to the
//! named group's Raft, encodes the answer. Snapshots arrive as a stream of chunks written straight
//! to a file in the group's snapshot directory, checked, then installed.

use std::sync::Arc;

use diskless_proto::internal::raft_service_server::RaftService;
use diskless_proto::internal::{RaftReply, RaftRequest, SnapshotChunk};
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

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

    fn raft(&self, group: u32) -> Result<&Raft, Status> {
        self.node.raft(group).map_err(|e| Status::not_found(e.to_string()))
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
        let raft = self.raft(r.group)?;
        reply(raft.append_entries(decode(&r.payload)?).await)
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let r = request.into_inner();
        let raft = self.raft(r.group)?;
        reply(raft.vote(decode(&r.payload)?).await)
    }

    async fn transfer_leader(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let r = request.into_inner();
        let raft = self.raft(r.group)?;
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
        let group = first.group;
        let raft = self.raft(group)?.clone();
        let (vote, meta): (Vote, SnapshotMeta) = decode(&first.header)?;
        let dir = snapshot::group_dir(&self.node.config.data_dir, group);
        tokio::fs::create_dir_all(&dir).await.map_err(|e| Status::internal(e.to_string()))?;
        let path = dir.join(format!("receiving-{}.part", uuid::Uuid::new_v4()));
        // However this ends (error, cancelled transfer, or adopted under its final name), the
        // partial file does not stay behind.
        let _cleanup = RemoveOnDrop(path.clone());
        let result = async {
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
                file.write_all(&chunk.data).await?;
            }
            file.sync_all().await?;
            let check = path.clone();
            tokio::task::spawn_blocking(move || snapshot::verify(&check)).await.map_err(std::io::Error::other)??;
            Ok::<_, std::io::Error>(())
        }
        .await;
        if let Err(e) = result {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(Status::data_loss(format!("receiving a snapshot of metadata partition {group}: {e}")));
        }
        let r =
            raft.install_full_snapshot(vote, Snapshot { meta, snapshot: SnapshotFile { path: path.clone() } }).await;
        if tokio::fs::metadata(&path).await.is_ok() {
            // Not adopted (an older snapshot than the state, or an error): do not leave it behind.
            let _ = tokio::fs::remove_file(&path).await;
        }
        reply(r)
    }
}

/// Deletes a file when dropped (if it is still there).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
