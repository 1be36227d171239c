//! The server side: a listener's connections for tonic, plain or TLS, each carrying the client's
//! identity ([`ConnInfo`], a request extension: `request.extensions().get::<ConnInfo>()`).
//!
//! Handshakes run in tasks of their own with a time limit, so a slow or failing client never holds
//! up the others; a refused handshake (no certificate, another CA, expired) is logged and dropped.
//! The certificate, key and CA are reloaded when their files change: new connections use them.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;

use crate::identity::PeerIdentity;
use crate::reload::Reloading;
use crate::TlsFiles;

/// How long a client has to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener's TLS settings, reloaded when the files change.
pub struct ServerTls {
    config: Reloading<ServerConfig>,
    pub require_client_cert: bool,
}

pub(crate) fn load_certs(path: &std::path::Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("read {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parse {}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{} holds no certificate", path.display());
    Ok(certs)
}

pub(crate) fn load_key(path: &std::path::Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).with_context(|| format!("read a private key from {}", path.display()))
}

pub(crate) fn load_roots(path: &std::path::Path) -> anyhow::Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(path)? {
        roots.add(c).with_context(|| format!("CA certificate in {}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// A TLS listener for another protocol than gRPC (the broker's Kafka listener): the client CA is
/// optional, and no ALPN protocol is offered.
#[derive(Debug, Clone)]
pub struct PlainServerTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// The CA client certificates must chain to; none: clients present no certificate.
    pub ca: Option<std::path::PathBuf>,
    /// Refuse clients without a certificate of `ca`.
    pub require_client_cert: bool,
}

impl ServerTls {
    /// A listener's TLS settings from [`PlainServerTls`], reloaded when the files change.
    pub fn without_alpn(s: &PlainServerTls) -> anyhow::Result<Arc<ServerTls>> {
        crate::install_crypto_provider();
        anyhow::ensure!(s.ca.is_some() || !s.require_client_cert, "require_client_cert needs a ca");
        let f = s.clone();
        let mut paths = vec![s.cert.clone(), s.key.clone()];
        paths.extend(s.ca.clone());
        let config = Reloading::new("server certificate", paths, move || {
            let builder = match &f.ca {
                Some(ca) => {
                    let verifier = WebPkiClientVerifier::builder(load_roots(ca)?);
                    let verifier = if f.require_client_cert { verifier } else { verifier.allow_unauthenticated() };
                    ServerConfig::builder()
                        .with_client_cert_verifier(verifier.build().context("client certificate verifier")?)
                }
                None => ServerConfig::builder().with_no_client_auth(),
            };
            builder
                .with_single_cert(load_certs(&f.cert)?, load_key(&f.key)?)
                .with_context(|| format!("certificate {} with key {}", f.cert.display(), f.key.display()))
        })?;
        Ok(Arc::new(ServerTls { config, require_client_cert: s.require_client_cert }))
    }

    /// Runs the server side of a TLS handshake on `stream` (with the handshake time limit); the
    /// client certificate's identity, if it presented one.
    pub async fn accept(
        &self,
        stream: TcpStream,
    ) -> anyhow::Result<(tokio_rustls::server::TlsStream<TcpStream>, Option<PeerIdentity>)> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.get());
        let s = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
            .await
            .map_err(|_| anyhow::anyhow!("TLS handshake not done in {HANDSHAKE_TIMEOUT:?}"))?
            .context("TLS handshake refused")?;
        let identity =
            s.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| PeerIdentity::from_der(c).ok());
        Ok((s, identity))
    }

    pub fn new(files: &TlsFiles) -> anyhow::Result<Arc<ServerTls>> {
        crate::install_crypto_provider();
        let f = files.clone();
        let config = Reloading::new("server certificate", files.paths(), move || {
            let roots = load_roots(&f.ca)?;
            let verifier = WebPkiClientVerifier::builder(roots);
            let verifier = if f.require_client_cert { verifier } else { verifier.allow_unauthenticated() };
            let mut c = ServerConfig::builder()
                .with_client_cert_verifier(verifier.build().context("client certificate verifier")?)
                .with_single_cert(load_certs(&f.cert)?, load_key(&f.key)?)
                .with_context(|| format!("certificate {} with key {}", f.cert.display(), f.key.display()))?;
            c.alpn_protocols = vec![b"h2".to_vec()];
            Ok(c)
        })?;
        Ok(Arc::new(ServerTls { config, require_client_cert: files.require_client_cert }))
    }
}

/// What tonic knows of a connection (a request extension).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The client certificate's identity (TLS with a client certificate only).
    pub identity: Option<Arc<PeerIdentity>>,
}

/// An accepted connection.
pub enum ServerConn {
    Plain(TcpStream, ConnInfo),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, ConnInfo),
}

impl tonic::transport::server::Connected for ServerConn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            ServerConn::Plain(_, i) | ServerConn::Tls(_, i) => i.clone(),
        }
    }
}

impl AsyncRead for ServerConn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerConn::Plain(s, _) => Pin::new(s).poll_read(cx, buf),
            ServerConn::Tls(s, _) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerConn::Plain(s, _) => Pin::new(s).poll_write(cx, buf),
            ServerConn::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerConn::Plain(s, _) => Pin::new(s).poll_flush(cx),
            ServerConn::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerConn::Plain(s, _) => Pin::new(s).poll_shutdown(cx),
            ServerConn::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerConn::Plain(s, _) => Pin::new(s).poll_write_vectored(cx, bufs),
            ServerConn::Tls(s, _) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerConn::Plain(s, _) => s.is_write_vectored(),
            ServerConn::Tls(s, _) => s.is_write_vectored(),
        }
    }
}

/// The connections of `listener` for `tonic::transport::Server::serve_with_incoming*`: TLS ones
/// once their handshake succeeded when `tls` is set, else plain ones. Accepting stops when the
/// server drops the stream.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    name: &'static str,
) -> ReceiverStream<Result<ServerConn, io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = tx.closed() => return,
            };
            let (stream, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: wait rather than spin.
                    tracing::warn!(listener = name, "accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Responses are small and latency-bound: no Nagle.
            let _ = stream.set_nodelay(true);
            let Some(tls) = tls.clone() else {
                let info = ConnInfo { remote: Some(remote), tls: false, identity: None };
                if tx.send(Ok(ServerConn::Plain(stream, info))).await.is_err() {
                    return;
                }
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.get());
                let s = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::info!(listener = name, %remote, "TLS handshake refused: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::info!(listener = name, %remote, "TLS handshake not done in {HANDSHAKE_TIMEOUT:?}");
                        return;
                    }
                };
                let identity = s
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| PeerIdentity::from_der(c).ok())
                    .map(Arc::new);
                let info = ConnInfo { remote: Some(remote), tls: true, identity };
                let _ = tx.send(Ok(ServerConn::Tls(Box::new(s), info))).await;
            });
        }
    });
    ReceiverStream::new(rx)
}
