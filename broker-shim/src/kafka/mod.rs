//! The Kafka protocol listener (KIP-1163: diskless topics look like classic ones to clients).
//!
//! Owns: connections, framing (`i32` size + request), header and body decoding with the
//! `kafka-protocol` crate, dispatch to the handlers, responses in request order. A connection may
//! have up to `max_in_flight_per_connection` requests in flight: the reader decodes and *starts*
//! each request in order (a produce enqueues its batches before the next request is read, so a
//! pipelining producer keeps its order), the writer sends the answers in order. A malformed frame,
//! an unknown API or an unsupported version closes the connection (what Kafka brokers do); nothing
//! of such a request is committed.
//!
//! Metadata lists the live brokers of the registry (`crate::registry`) and names each partition's
//! rendezvous owner among them its leader; any broker can serve any partition (the coordinators
//! order everything), so this only spreads clients over the brokers.

pub mod frame;
mod groups;
mod handlers;
pub mod security;
mod versions;

use std::sync::Arc;

use anyhow::Context;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesOrdered, StreamExt};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::KafkaConfig;
use crate::Shim;

/// What the listener knows about itself.
pub struct Listener {
    pub shim: Arc<Shim>,
    pub config: KafkaConfig,
    /// Its name (`[[kafka.listeners]] name`, else its security protocol's): Metadata and
    /// FindCoordinator name the other brokers by their listener of the same name.
    pub name: String,
    pub host: String,
    pub port: i32,
    pub broker_id: i32,
    /// TLS and SASL of this listener's connections (see `security`).
    pub security: security::ListenerSecurity,
}

/// An encoded response (header and body, without the size prefix), or none (acks=0 produce).
type Reply = anyhow::Result<Option<BytesMut>>;

impl Listener {
    pub fn new(shim: Arc<Shim>, name: String, config: KafkaConfig, bound: std::net::SocketAddr) -> Listener {
        let host = config.advertised_host.clone().unwrap_or_else(|| bound.ip().to_string());
        let port = i32::from(config.advertised_port.unwrap_or(bound.port()));
        let broker_id = shim.config.broker_id;
        frame::Malformed::register_metrics();
        Listener { shim, config, name, host, port, broker_id, security: security::ListenerSecurity::default() }
    }

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

    /// A new connection: TLS and SASL as the listener's security protocol says, then requests.
    async fn accept(self: Arc<Self>, stream: TcpStream) -> anyhow::Result<()> {
        stream.set_nodelay(true)?;
        let security = self.security.clone();
        security.secure(stream, |stream, _principal| self.connection(stream)).await
    }

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

    /// Decodes a request and starts it; the returned future gives its encoded answer. A frame
    /// that does not parse is a [`frame::Malformed`] error: the connection is closed.
    async fn start(self: Arc<Self>, mut frame: Bytes) -> anyhow::Result<BoxFuture<'static, (i32, Reply)>> {
        let (api, header) = frame::decode_header(&mut frame)?;
        let version = header.request_api_version;
        let correlation = header.correlation_id;
        if matches!(api, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
            // Authentication happens before the first request (`security`), never again.
            let reply = security::sasl::illegal_state(api, &header);
            return Ok(Box::pin(async move { (correlation, reply) }));
        }
        if api == ApiKey::ApiVersions {
            // Answered even for versions we do not speak, so the client can pick one.
            let reply = handlers::api_versions(&header);
            return Ok(Box::pin(async move { (correlation, reply) }));
        }
        let unsupported = |why: String| frame::Malformed::new(frame::Reason::UnsupportedVersion, why);
        let range = versions::supported(api).ok_or_else(|| unsupported(format!("API {api:?} is not served")))?;
        if !(range.min..=range.max).contains(&version) {
            return Err(unsupported(format!(
                "API {api:?} version {version} is not spoken (only {}..={})",
                range.min, range.max
            ))
            .into());
        }
        tracing::trace!(?api, version, correlation, "request");
        let fut = handlers::dispatch(self, api, header, frame).await?;
        Ok(Box::pin(async move { (correlation, fut.await) }))
    }
}

impl Listener {
    /// Where clients of this listener reach broker `b`: this broker at this listener's address
    /// (each listener advertises itself), another at its registered address (its first listener).
    /// Where a client of this listener reaches broker `b`: this listener's own address for this
    /// broker; for another, its listener of the same name, else its first one (a broker that
    /// registered without that listener).
    pub(crate) fn advertised_of(&self, b: &crate::registry::LiveBroker) -> (String, i32) {
        if b.id == self.broker_id {
            return (self.host.clone(), self.port);
        }
        b.address_on(&self.name)
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

/// Encodes a response header and body for `api` at `version`.
pub(crate) fn encode<R: Encodable>(api: ApiKey, header: &RequestHeader, version: i16, body: &R) -> Reply {
    let response_header = ResponseHeader::default().with_correlation_id(header.correlation_id);
    let hv = api.response_header_version(version);
    let mut out = BytesMut::with_capacity(response_header.compute_size(hv)? + body.compute_size(version)?);
    response_header.encode(&mut out, hv)?;
    body.encode(&mut out, version)?;
    Ok(Some(out))
}
