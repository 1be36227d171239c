//! The `/metrics` HTTP listener (`metrics_addr`): Prometheus scrapes the broker's instruments here.
//! It must not touch the broker's state.

use std::net::SocketAddr;

use anyhow::Context;

/// Binds `addr` and serves `GET /metrics` until `stop` fires; returns the bound address.
pub async fn serve(addr: &str, mut stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("metrics listener on {addr}"))?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async {
            ([(axum::http::header::CONTENT_TYPE, super::CONTENT_TYPE)], super::get().encode())
        }),
    );
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::warn!(error = %e, "metrics listener stopped");
        }
    });
    tracing::info!(%bound, "metrics served at /metrics");
    Ok(bound)
}
