//! The gRPC server of a node: `CoordinatorService` (brokers), `AdminService` (operators) and
//! `RaftService` (peers), all on one listener, with gRPC health checking (`health`) and server
//! reflection (so `grpcurl -plaintext host:port list` works).
//!
//! Owns: serving, request size limits, graceful shutdown; every request passes the metrics layer
//! (`metrics::grpc`). Routing and forwarding live in
//! `coordinator_service` (consumer groups' calls in `groups`); wire-type checks in `convert`; the topic reconciler (which routes like
//! a client) in `reconciler`.

mod admin_service;
mod convert;
pub mod coordinator_service;
mod groups;
pub mod health;
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
    let health = health::start(&node).await;
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
        .context("reflection service")?;
    // grpcurl before 1.8.8 and other older clients ask the v1alpha service.
    let reflection_v1alpha = reflection(tonic_reflection::server::Builder::configure())
        .with_service_name("grpc.reflection.v1alpha.ServerReflection")
        .build_v1alpha()
        .context("reflection service")?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .layer(crate::metrics::grpc::GrpcMetricsLayer)
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
