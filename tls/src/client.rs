//! The client side: tonic channels that connect over TLS, presenting this side's certificate and
//! trusting only the configured CA, or plain TCP without TLS settings. The certificate, key and CA
//! are reloaded when their files change: new connections use them (an open HTTP/2 connection
//! keeps the certificate it was made with).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

use crate::reload::Reloading;
use crate::server::{load_certs, load_key, load_roots};
use crate::TlsFiles;

/// A client's TLS settings, reloaded when the files change.
pub struct ClientTls {
    config: Reloading<ClientConfig>,
}

impl ClientTls {
    pub fn new(files: &TlsFiles) -> anyhow::Result<Arc<ClientTls>> {
        crate::install_crypto_provider();
        let f = files.clone();
        let config = Reloading::new("client certificate", files.paths(), move || {
            let mut c = ClientConfig::builder()
                .with_root_certificates(load_roots(&f.ca)?)
                .with_client_auth_cert(load_certs(&f.cert)?, load_key(&f.key)?)
                .with_context(|| format!("certificate {} with key {}", f.cert.display(), f.key.display()))?;
            c.alpn_protocols = vec![b"h2".to_vec()];
            Ok(c)
        })?;
        Ok(Arc::new(ClientTls { config }))
    }

    /// A client that trusts `ca` and presents no certificate (servers requiring one refuse it).
    pub fn anonymous(ca: &std::path::Path) -> anyhow::Result<Arc<ClientTls>> {
        crate::install_crypto_provider();
        let ca = ca.to_path_buf();
        let config = Reloading::new("CA certificate", vec![ca.clone()], move || {
            let mut c = ClientConfig::builder().with_root_certificates(load_roots(&ca)?).with_no_client_auth();
            c.alpn_protocols = vec![b"h2".to_vec()];
            Ok(c)
        })?;
        Ok(Arc::new(ClientTls { config }))
    }

    /// The rustls settings for the files as they are now.
    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.get()
    }
}

/// A lazily connecting channel to `endpoint` (built from `http://host:port`; its timeouts and
/// keep-alive settings apply), over TLS when `tls` is set. The server's certificate must name
/// `host` (a DNS name or an IP address).
pub fn channel(endpoint: Endpoint, tls: Option<Arc<ClientTls>>) -> Channel {
    endpoint.connect_with_connector_lazy(Connector { tls })
}

/// Like [`channel`], connected now.
pub async fn connect(endpoint: Endpoint, tls: Option<Arc<ClientTls>>) -> Result<Channel, tonic::transport::Error> {
    endpoint.connect_with_connector(Connector { tls }).await
}

#[derive(Clone)]
struct Connector {
    tls: Option<Arc<ClientTls>>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<ClientConn>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("address without a host")?.trim_matches(|c| c == '[' || c == ']').to_string();
            let port = uri.port_u16().ok_or("address without a port")?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let Some(tls) = tls else { return Ok(TokioIo::new(ClientConn::Plain(tcp))) };
            let name = ServerName::try_from(host.clone()).map_err(|e| format!("server name {host:?}: {e}"))?;
            let s = tokio_rustls::TlsConnector::from(tls.config.get()).connect(name, tcp).await?;
            Ok(TokioIo::new(ClientConn::Tls(Box::new(s))))
        })
    }
}

/// A client connection, plain or TLS.
pub enum ClientConn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for ClientConn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The TLS settings from optional `--cacert/--cert/--key` style arguments: none when all three are
/// absent, an error when only some are given.
pub fn from_args(
    ca: Option<&std::path::Path>,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> anyhow::Result<Option<Arc<ClientTls>>> {
    match (ca, cert, key) {
        (None, None, None) => Ok(None),
        (Some(ca), Some(cert), Some(key)) => Ok(Some(ClientTls::new(&TlsFiles::new(cert, key, ca))?)),
        _ => anyhow::bail!("TLS needs all three of --cacert, --cert and --key"),
    }
}
