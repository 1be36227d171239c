//! A listener's connections: the accept loop, TLS and SASL first (`security`), then requests read
//! in order and answered in order. A connection may have up to `max_in_flight_per_connection`
//! requests in flight: the reader decodes and *starts* each request in order (a produce enqueues
//! its batches before the next request is read, so a pipelining producer keeps its order), the
//! writer sends the answers in order. A malformed frame, an unknown API or an unsupported version
//! closes the connection (what Kafka brokers do); nothing of such a request is committed.
//!
//! Owns the bytes on the socket and the order of answers; what a request means is `dispatch`'s.

use std::sync::Arc;

use anyhow::Context;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesOrdered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::listener::Listener;
use super::response::Reply;
use super::session::Session;
use super::{dispatch, frame};

impl Listener {
    /// Accepts connections until `stop` fires.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let me = self.clone();
                        let mut stop = stop.clone();
                        tokio::spawn(async move {
                            tokio::select! {
                                r = me.accept(stream) => {
                                    if let Err(e) = r {
                                        closed(peer, e);
                                    }
                                }
                                _ = stop.changed() => {}
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                },
                _ = stop.changed() => return,
            }
        }
    }

    /// A new connection: TLS and SASL as the listener's security protocol says (SASL answers
    /// ApiVersions from the same table as the listener), then requests.
    async fn accept(self: Arc<Self>, stream: TcpStream) -> anyhow::Result<()> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?.ip();
        let security = self.security.clone();
        security
            .secure(stream, dispatch::api_versions, |stream, principal| {
                let session = Arc::new(Session::new(self, &principal, peer));
                session.connection(stream)
            })
            .await
    }
}

impl Session {
    async fn connection<S: AsyncRead + AsyncWrite + Send + 'static>(self: Arc<Self>, stream: S) -> anyhow::Result<()> {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let limit = self.config.max_in_flight_per_connection.max(1);
        // Frames are read by their own task: a read must never be cancelled half-way (a select!
        // that dropped `read_exact` would lose the bytes it had read). The channel's bound makes
        // the reader wait while `limit` requests are in flight.
        let (frames_tx, mut frames) = tokio::sync::mpsc::channel::<anyhow::Result<Bytes>>(1);
        let max = self.config.max_request_bytes;
        let reader = tokio::spawn(async move {
            loop {
                let r = frame::read_frame(&mut rd, max).await.transpose();
                let Some(r) = r else { return };
                let stop = r.is_err();
                if frames_tx.send(r).await.is_err() || stop {
                    return;
                }
            }
        });
        let _abort_reader = AbortOnDrop(reader);
        let mut pending: FuturesOrdered<BoxFuture<'static, (i32, Reply)>> = FuturesOrdered::new();
        loop {
            tokio::select! {
                frame = frames.recv(), if pending.len() < limit => {
                    match frame {
                        // The client closed the connection: its answers have nowhere to go, so
                        // what is pending is dropped, as Kafka's broker drops the responses of a
                        // closed channel (a produce already enqueued still commits). A fetch
                        // parked for its max_wait_ms must not outlive its client.
                        None => return Ok(()),
                        Some(frame) => {
                            let fut = self.clone().start(frame?).await?;
                            pending.push_back(fut);
                        }
                    }
                }
                Some((correlation, reply)) = pending.next() => {
                    if let Some(body) = reply.with_context(|| format!("request {correlation}"))? {
                        let mut out = BytesMut::with_capacity(4 + body.len());
                        out.put_i32(body.len() as i32);
                        out.extend_from_slice(&body);
                        wr.write_all(&out).await?;
                    }
                }
                else => return Ok(()),
            }
        }
    }

    /// Decodes a request's header and starts it; the returned future gives its encoded answer. A
    /// frame that does not parse is a [`frame::Malformed`] error: the connection is closed.
    async fn start(self: Arc<Self>, mut frame: Bytes) -> anyhow::Result<BoxFuture<'static, (i32, Reply)>> {
        let (api, header) = frame::decode_header(&mut frame)?;
        let correlation = header.correlation_id;
        tracing::trace!(?api, version = header.request_api_version, correlation, "request");
        let fut = dispatch::start(self, api, header, frame).await?;
        Ok(Box::pin(async move { (correlation, fut.await) }))
    }
}

/// Stops the connection's reader task when the connection ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a connection's end is handled: a malformed frame is counted and logged at debug level
/// (a client's mistake or an attack, not the broker's trouble), anything else at info.
fn closed(peer: std::net::SocketAddr, e: anyhow::Error) {
    match e.downcast_ref::<frame::Malformed>() {
        Some(m) => {
            m.count();
            tracing::debug!(%peer, error = %format!("{e:#}"), "Kafka connection closed: malformed request");
        }
        None => tracing::info!(%peer, error = %format!("{e:#}"), "Kafka connection closed"),
    }
}
