//! The Raft network: every metadata partition's messages to a peer share one gRPC (HTTP/2)
//! connection.
//!
//! [`Peers`] keeps one lazily connected channel per peer address (TLS with the node's certificate
//! when `peer_tls` is set); [`NetworkFactory`] (one per metadata partition) hands openraft cheap
//! per-target clients ([`Conn`]) that tag each message with the metadata partition. Requests are
//! bincode-encoded openraft messages, each naming the replica it is for (node id and incarnation,
//! see [`identity`](super::identity)) and the sender's cluster. Each call is bounded by openraft's
//! time limit; an unreachable peer is reported as such so openraft backs off, a slow one as a
//! network error so it retries. Snapshots stream from their file in 1 MiB chunks.
//!
//! [`Faults`] (see `faults`) is a test hook in the spirit of TiKV's transport filters: it can cut
//! this node off from chosen peers (this machine's kernel has no netem).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use diskless_proto::internal::raft_service_client::RaftServiceClient;
use diskless_proto::internal::{RaftReply, RaftRequest, SnapshotChunk};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use openraft::OptionalSend;
use serde::{de::DeserializeOwned, Serialize};
use tokio::io::AsyncReadExt;
use tonic::transport::{Channel, Endpoint};

pub use super::faults::Faults;
use super::identity::Identity;
use super::progress::Progress;
use super::snapshot::SnapshotFile;
use super::{NodeId, Replica, Snapshot, TypeConfig, Vote};
use crate::storage::codec;

/// The least time an AppendEntries carrying entries is given.
const APPEND_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes per snapshot chunk.
const SNAPSHOT_CHUNK: usize = 1 << 20;
/// How long a snapshot transfer may go without progress (a chunk) before it is abandoned, on
/// either side. There is no limit on the whole transfer: a large snapshot on a slow link arrives.
pub const SNAPSHOT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the receiver may take to install a snapshot it received whole.
const SNAPSHOT_INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// One gRPC channel per peer address, shared by every metadata partition.
pub struct Peers {
    channels: Mutex<HashMap<String, Channel>>,
    pub faults: Arc<Faults>,
    /// This node's identity: the cluster id its messages carry.
    pub identity: Arc<Identity>,
    /// TLS to peers (the node's certificate, the cluster's CA), when configured.
    tls: Option<Arc<diskless_tls::ClientTls>>,
}

impl Peers {
    /// Peers sharing `faults` with the node's storage (the fsync threads of its directories).
    pub fn new(identity: Arc<Identity>, faults: Arc<Faults>, tls: Option<Arc<diskless_tls::ClientTls>>) -> Peers {
        Peers { channels: Mutex::new(HashMap::new()), faults, identity, tls }
    }

    /// A client for the node at `addr` (`host:port`), connecting on first use.
    pub fn client(&self, addr: &str) -> Result<RaftServiceClient<Channel>, String> {
        Ok(RaftServiceClient::new(self.channel(addr)?).max_decoding_message_size(256 << 20))
    }

    /// The shared channel to `addr`.
    pub fn channel(&self, addr: &str) -> Result<Channel, String> {
        let mut map = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(addr) {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("bad peer address {addr:?}: {e}"))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5));
        let channel = diskless_tls::client::channel(endpoint, self.tls.clone());
        map.insert(addr.to_string(), channel.clone());
        Ok(channel)
    }
}

/// Makes openraft's clients for one metadata partition.
#[derive(Clone)]
pub struct NetworkFactory {
    pub partition: u32,
    pub peers: Arc<Peers>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, node: &Replica) -> Conn {
        Conn {
            partition: self.partition,
            target,
            addr: node.addr.clone(),
            incarnation: node.incarnation,
            peers: self.peers.clone(),
        }
    }
}

/// A client of one metadata partition's messages to one peer's replica.
pub struct Conn {
    partition: u32,
    target: NodeId,
    addr: String,
    /// The incarnation of the target's replica this metadata partition knows.
    incarnation: u64,
    peers: Arc<Peers>,
}

fn unreachable<E: std::fmt::Display>(e: E) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::from_string(e.to_string()))
}

fn network<E: std::fmt::Display>(e: E) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(e.to_string()))
}

/// Maps a transport error: a peer that cannot be connected to is unreachable (back off); anything
/// else is a network error (retry).
fn transport(status: tonic::Status) -> RPCError<TypeConfig> {
    if status.code() == tonic::Code::Unavailable {
        unreachable(format!("peer unavailable: {}", status.message()))
    } else {
        network(format!("rpc failed: {status}"))
    }
}

impl Conn {
    async fn call<Req, Resp, F, Fut>(&self, req: &Req, ttl: Duration, send: F) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        F: FnOnce(RaftServiceClient<Channel>, RaftRequest) -> Fut,
        Fut: Future<Output = Result<tonic::Response<RaftReply>, tonic::Status>>,
    {
        if self.peers.faults.is_blocked(self.target) {
            return Err(unreachable(format!("fault injection: node {} is cut off", self.target)));
        }
        let client = self.peers.client(&self.addr).map_err(unreachable)?;
        let payload = codec::encode(req).map_err(network)?;
        let to = Some(self.peers.identity.addressee(self.target, self.incarnation));
        let reply = tokio::time::timeout(ttl, send(client, RaftRequest { group: self.partition, payload, to }))
            .await
            .map_err(|_| network(format!("no answer from node {} within {ttl:?}", self.target)))?
            .map_err(transport)?
            .into_inner();
        if !reply.error.is_empty() {
            return Err(unreachable(format!("node {}: {}", self.target, reply.error)));
        }
        codec::decode(b"raft reply", &reply.payload).map_err(network)
    }

    async fn send_snapshot(
        &self,
        vote: Vote,
        snapshot: Snapshot,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let mut client =
            self.peers.client(&self.addr).map_err(|e| StreamingError::Unreachable(Unreachable::from_string(e)))?;
        let header = codec::encode(&(vote, snapshot.meta.clone())).map_err(|e| StreamingError::from(network(e)))?;
        let file = tokio::fs::File::open(&snapshot.snapshot.path)
            .await
            .map_err(|e| StreamingError::from(network(format!("open snapshot: {e}"))))?;
        let partition = self.partition;
        let progress = Progress::default();
        let sent = progress.clone();
        let to = self.peers.identity.addressee(self.target, self.incarnation);
        // Chunks are read as the transport asks for them: the file is never in memory whole.
        let chunks = futures_util::stream::unfold((file, Some((header, to))), move |(mut file, first)| {
            let sent = sent.clone();
            async move {
                let mut buf = vec![0u8; SNAPSHOT_CHUNK];
                let mut filled = 0;
                while filled < buf.len() {
                    match file.read(&mut buf[filled..]).await {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) => {
                            tracing::warn!(error = %e, "reading a snapshot to send failed");
                            return None;
                        }
                    }
                }
                if filled == 0 && first.is_none() {
                    sent.finish();
                    return None;
                }
                buf.truncate(filled);
                sent.advance();
                let (header, to) = first.map_or((vec![], None), |(h, t)| (h, Some(t)));
                let chunk = SnapshotChunk { group: partition, header, data: buf, to };
                Some((chunk, (file, None)))
            }
        });
        let reply = tokio::select! {
            r = client.install_snapshot(tonic::Request::new(chunks)) => r.map_err(|s| StreamingError::from(transport(s)))?,
            _ = progress.stalled(SNAPSHOT_IDLE_TIMEOUT, SNAPSHOT_INSTALL_TIMEOUT) => {
                return Err(StreamingError::from(network(format!(
                    "snapshot transfer to node {} stalled (no chunk taken for {SNAPSHOT_IDLE_TIMEOUT:?}, or not installed within {SNAPSHOT_INSTALL_TIMEOUT:?})",
                    self.target
                ))));
            }
        }
        .into_inner();
        if !reply.error.is_empty() {
            return Err(StreamingError::Unreachable(Unreachable::from_string(reply.error)));
        }
        codec::decode(b"snapshot reply", &reply.payload).map_err(|e| StreamingError::from(network(e)))
    }
}

impl RaftNetworkV2<TypeConfig> for Conn {
    type SnapshotData = SnapshotFile;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        // openraft's limit is the heartbeat interval, right for heartbeats; entries get time to
        // travel (a full request's entries are megabytes), never less than that limit.
        let ttl = if rpc.entries.is_empty() { option.hard_ttl() } else { option.hard_ttl().max(APPEND_TIMEOUT) };
        self.call(&rpc, ttl, |mut c, r| async move { c.append_entries(r).await }).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move { c.vote(r).await }).await
    }

    /// Raft's Pre-Vote: an unreachable target is an error, never a grant (so a replica that cannot
    /// send reaches no quorum and keeps its term).
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move { c.pre_vote(r).await }).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        if self.peers.faults.is_blocked(self.target) {
            return Err(StreamingError::Unreachable(Unreachable::from_string("fault injection")));
        }
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            r = self.send_snapshot(vote, snapshot) => r,
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&req, option.hard_ttl(), |mut c, r| async move { c.transfer_leader(r).await }).await
    }
}
