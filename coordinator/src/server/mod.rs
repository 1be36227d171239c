//! The gRPC servers of a node: the client listener (`CoordinatorService` for brokers,
//! `AdminService` for operators, gRPC health checking (`health`) and server reflection, so
//! `grpcurl host:port list` works) and, when configured, a separate peer listener
//! (`RaftService`, with the requests other nodes forward over its `Execute`); without one, the
//! client listener serves the peers too. Each listener may use TLS (`diskless_tls`); `authz`
//! decides who may call what.
//!
//! Owns: serving, request size limits, graceful shutdown; every request passes the metrics layer
//! (`metrics::grpc`) and the authorization layer. The KIP-1164 API's wire ↔ domain conversions
//! live in `coordinator` (a file per family of calls), which runs each part through
//! `node::route`; the operators' API in `admin_service`, the peers' in `raft_service`; wire-type
//! checks and the one table of what a `RouteError` becomes on the wire in `convert`, which every
//! service uses; the topic reconciler (which routes like a client) in `reconciler`. It must not
//! decide where a request runs (that is `node::route`) nor apply rules of the domain.

mod admin_service;
pub mod authz;
pub(crate) mod convert;
pub mod coordinator;
pub mod health;
pub mod metrics_listener;
mod raft_service;
mod reconciler;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use diskless_proto::admin::admin_service_server::AdminServiceServer;
use diskless_proto::internal::raft_service_server::RaftServiceServer;
use diskless_proto::v1::coordinator_service_server::CoordinatorServiceServer;
use diskless_tls::ServerTls;

use crate::node::Node;

/// A node's bound listeners.
pub struct Listeners {
    pub client: tokio::net::TcpListener,
    /// The peer listener, when the node has a separate one.
    pub peer: Option<tokio::net::TcpListener>,
}

impl Listeners {
    /// Binds the listen addresses of `config`.
    pub async fn bind(config: &crate::node::NodeConfig) -> anyhow::Result<Listeners> {
        let client = bind(&config.listen).await?;
        let peer = match &config.peer_listen {
            Some(p) => Some(bind(p).await?),
            None => None,
        };
        Ok(Listeners { client, peer })
    }
}

/// Serves every service of `node` on its listeners until `shutdown` resolves.
pub async fn serve(
    node: Arc<Node>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if node.config.topic_reconcile_ms > 0 {
        let every = std::time::Duration::from_millis(node.config.topic_reconcile_ms);
        tokio::spawn(reconciler::run(Arc::downgrade(&node), every));
    }
    metrics_listener::watch_leaders(&node);
    let health = health::start(&node).await;
    let client_tls = match &node.config.tls {
        Some(f) => Some(ServerTls::new(f).context("TLS settings of the client listener")?),
        None => None,
    };
    let (stop, _) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let client_gate =
        authz::Gate::Client { roles: node.config.roles.clone().map(Arc::new), raft_here: listeners.peer.is_none() };
    let client = serve_one(
        &node,
        diskless_tls::server::incoming(listeners.client, client_tls, "client"),
        client_gate,
        health.clone(),
        stopped(stop.subscribe()),
    );
    let peer = match listeners.peer {
        Some(l) => {
            let tls = match &node.config.peer_tls {
                Some(f) => Some(ServerTls::new(f).context("TLS settings of the peer listener")?),
                None => None,
            };
            let gate = authz::Gate::Peer { node: Arc::downgrade(&node), tls: tls.is_some() };
            let incoming = diskless_tls::server::incoming(l, tls, "peer");
            Some(serve_one(&node, incoming, gate, health, stopped(stop.subscribe())))
        }
        None => None,
    };
    let peer = async move {
        match peer {
            Some(p) => p.await,
            None => Ok(()),
        }
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    tokio::try_join!(client, peer)?;
    Ok(())
}

/// The largest Raft message (a batch of log entries, a snapshot chunk) or forwarded request.
pub const MAX_RAFT_MESSAGE_BYTES: usize = 256 << 20;
/// The largest answer any service sends.
const MAX_ANSWER_BYTES: usize = 256 << 20;
/// The largest AdminService request (membership changes, moves: small messages).
const MAX_ADMIN_REQUEST_BYTES: usize = 4 << 20;
/// Health checks and reflection queries.
const SMALL_REQUEST_BYTES: usize = 64 << 10;
/// A call's headers, all together.
const MAX_HEADER_LIST_BYTES: u32 = 64 << 10;
/// HTTP/2 streams (calls) one connection may have open at once; a peer's channel carries every
/// metadata partition's Raft traffic, a broker's its commits and reads.
const MAX_STREAMS_PER_CONNECTION: u32 = 1024;

/// One listener's server: every service (the gate decides who reaches which).
async fn serve_one<H>(
    node: &Arc<Node>,
    incoming: tokio_stream::wrappers::ReceiverStream<Result<diskless_tls::server::ServerConn, std::io::Error>>,
    gate: authz::Gate,
    health: tonic_health::pb::health_server::HealthServer<H>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()>
where
    H: tonic_health::pb::health_server::Health,
{
    // Every service's message sizes are set here, none left to tonic's defaults (4 MiB in,
    // unbounded out): what a request may carry bounds what decoding it can cost.
    let limit = node.config.max_request_bytes;
    let coordinator = CoordinatorServiceServer::new(coordinator::CoordinatorApi::new(node.clone()))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(MAX_ANSWER_BYTES);
    let admin = AdminServiceServer::new(admin_service::AdminApi::new(node.clone()))
        .max_decoding_message_size(MAX_ADMIN_REQUEST_BYTES)
        .max_encoding_message_size(MAX_ANSWER_BYTES);
    let raft = RaftServiceServer::new(raft_service::RaftApi::new(node.clone()))
        .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_ANSWER_BYTES);
    let health = health.max_decoding_message_size(SMALL_REQUEST_BYTES).max_encoding_message_size(SMALL_REQUEST_BYTES);
    let reflection = |b: tonic_reflection::server::Builder<'static>| {
        b.register_encoded_file_descriptor_set(diskless_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(health::COORDINATOR)
            .with_service_name(health::ADMIN)
            .with_service_name(health::RAFT)
            .with_service_name("grpc.health.v1.Health")
    };
    let reflection_v1 = reflection(tonic_reflection::server::Builder::configure())
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .build_v1()
        .context("reflection service")?
        .max_decoding_message_size(SMALL_REQUEST_BYTES)
        .max_encoding_message_size(MAX_ANSWER_BYTES);
    // grpcurl before 1.8.8 and other older clients ask the v1alpha service.
    let reflection_v1alpha = reflection(tonic_reflection::server::Builder::configure())
        .with_service_name("grpc.reflection.v1alpha.ServerReflection")
        .build_v1alpha()
        .context("reflection service")?
        .max_decoding_message_size(SMALL_REQUEST_BYTES)
        .max_encoding_message_size(MAX_ANSWER_BYTES);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        // HTTP/2 itself: headers (the metadata of a call) and streams in flight per connection.
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .layer(crate::metrics::grpc::GrpcMetricsLayer)
        .layer(authz::AuthzLayer(gate))
        .add_service(coordinator)
        .add_service(admin)
        .add_service(raft)
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .context("gRPC server")
}

/// Binds the node's listen address.
pub async fn bind(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let sock: SocketAddr = tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("resolve listen address {addr}"))?
        .next()
        .with_context(|| format!("listen address {addr} resolves to nothing"))?;
    tokio::net::TcpListener::bind(sock).await.with_context(|| format!("listen on {addr}"))
}
