//! The gRPC server of a node: `CoordinatorService` (brokers), `AdminService` (operators) and
//! `RaftService` (peers), all on one listener.
//!
//! Owns: serving, request size limits, graceful shutdown; every request passes the metrics layer
//! (`metrics::grpc`). Routing and forwarding live in
//! `coordinator_service`; wire-type checks in `convert`; the topic reconciler (which routes like
//! a client) in `reconciler`.

mod admin_service;
mod convert;
pub mod coordinator_service;
mod raft_service;
mod reconciler;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use diskless_proto::admin::admin_service_server::AdminServiceServer;
use diskless_proto::internal::raft_service_server::RaftServiceServer;
use diskless_proto::v1::coordinator_service_server::CoordinatorServiceServer;

use crate::node::Node;

/// Serves every service of `node` on `listener` until `shutdown` resolves.
pub async fn serve(
    node: Arc<Node>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if node.config.topic_reconcile_ms > 0 {
        let every = std::time::Duration::from_millis(node.config.topic_reconcile_ms);
        tokio::spawn(reconciler::run(Arc::downgrade(&node), every));
    }
    let limit = node.config.max_request_bytes;
    let coordinator = CoordinatorServiceServer::new(coordinator_service::CoordinatorApi::new(node.clone()))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(256 << 20);
    crate::metrics::scrape::watch_leaders(&node);
    let admin = AdminServiceServer::new(admin_service::AdminApi::new(node.clone()));
    let raft = RaftServiceServer::new(raft_service::RaftApi::new(node.clone()))
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20);
    // Responses are small and latency-bound: no Nagle on accepted connections (a server that is
    // handed its listener does not apply its own TCP settings to them).
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .layer(crate::metrics::grpc::GrpcMetricsLayer)
        .add_service(coordinator)
        .add_service(admin)
        .add_service(raft)
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
