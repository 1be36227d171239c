//! Security of the Kafka listeners, as Kafka brokers have it: one listener per address, each with
//! a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); TLS with rustls (certificate
//! files reloaded when they change, client certificates optional or required); SASL PLAIN and
//! SCRAM-SHA-256/512 against a file of salted credentials.
//!
//! Owns: the security settings (`config`), what a listener does to a new connection before it
//! serves requests (`ListenerSecurity::secure`: TLS handshake, then SASL authentication), the
//! SASL exchange (`sasl`), the mechanisms' vocabulary (`mechanism`) and the mechanisms (`plain`,
//! `scram`), the salted credentials (`salted`) and the file of users (`credentials`). It must not
//! look at requests once a connection is authenticated: there are no ACLs, an authenticated client
//! may do what any client may. It knows no API table and no handler: the listener hands SASL its
//! ApiVersions answer.

pub mod config;
pub mod credentials;
pub mod mechanism;
pub mod plain;
pub mod salted;
pub mod sasl;
pub mod scram;

use std::sync::Arc;

use anyhow::Context;
use diskless_tls::{PlainServerTls, ServerTls};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

pub use config::{KafkaTlsConfig, SaslConfig, SecurityProtocol};
pub use mechanism::Mechanism;
pub use sasl::ApiVersions;
use sasl::SaslServer;

/// What one listener does to its connections before serving them.
#[derive(Clone, Default)]
pub struct ListenerSecurity {
    pub protocol: SecurityProtocol,
    tls: Option<Arc<ServerTls>>,
    sasl: Option<Arc<SaslServer>>,
}

/// Who a connection authenticated as.
#[derive(Debug, Clone, Default)]
pub struct Principal {
    /// The SASL user.
    pub user: Option<String>,
    /// The client certificate's common name (SSL listeners with client certificates).
    pub certificate: Option<String>,
}

/// The TLS and SASL settings shared by the listeners that use them, built once.
pub struct Shared {
    tls: Option<Arc<ServerTls>>,
    sasl: Option<Arc<SaslServer>>,
}

impl Shared {
    /// The settings that the listeners of these `protocols` need (validated by
    /// `kafka::KafkaConfig::validate`).
    pub fn new(
        protocols: &[SecurityProtocol],
        tls: Option<&KafkaTlsConfig>,
        sasl: Option<&SaslConfig>,
    ) -> anyhow::Result<Shared> {
        let tls = match tls {
            Some(t) if protocols.iter().any(|p| p.tls()) => Some(
                ServerTls::without_alpn(&PlainServerTls {
                    cert: t.cert.clone(),
                    key: t.key.clone(),
                    ca: t.ca.clone(),
                    require_client_cert: t.require_client_cert,
                })
                .context("[kafka.tls]")?,
            ),
            _ => None,
        };
        let sasl = match sasl {
            Some(s) if protocols.iter().any(|p| p.sasl()) => Some(Arc::new(SaslServer::new(s)?)),
            _ => None,
        };
        Ok(Shared { tls, sasl })
    }

    pub fn for_protocol(&self, protocol: SecurityProtocol) -> ListenerSecurity {
        ListenerSecurity {
            protocol,
            tls: if protocol.tls() { self.tls.clone() } else { None },
            sasl: if protocol.sasl() { self.sasl.clone() } else { None },
        }
    }
}

impl ListenerSecurity {
    /// Runs the TLS handshake (SSL, SASL_SSL), then calls `serve` with the stream; SASL
    /// listeners authenticate the client first, answering its ApiVersions with `api_versions`
    /// (the listener's own answer: this module knows no API table).
    pub async fn secure<F, Fut>(&self, tcp: TcpStream, api_versions: ApiVersions, serve: F) -> anyhow::Result<()>
    where
        F: FnOnce(Box<dyn KafkaStreamDyn>, Principal) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let mut principal = Principal::default();
        let mut stream: Box<dyn KafkaStreamDyn> = match &self.tls {
            Some(tls) => {
                let (s, identity) = tls.accept(tcp).await?;
                principal.certificate = identity.and_then(|i| i.common_name);
                Box::new(s)
            }
            None => Box::new(tcp),
        };
        if let Some(sasl) = &self.sasl {
            let user = match sasl::authenticate(sasl, &mut stream, api_versions).await {
                Ok(user) => user,
                Err(e) => {
                    close_gracefully(&mut stream).await;
                    return Err(e);
                }
            };
            tracing::debug!(%user, protocol = self.protocol.name(), "Kafka client authenticated");
            principal.user = Some(user);
        }
        serve(stream, principal).await
    }
}

/// How long a refused client is given to read the failure answer and hang up itself before the
/// connection is closed (Kafka's `connection.failed.authentication.delay.ms` plays this part).
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Ends a connection whose authentication failed without losing the failure answer already
/// written: waits (at most [`CLOSE_GRACE`]) for the client to read it and hang up, dropping what it
/// still sends, and only then closes. Closing at once — even cleanly, with TLS's close_notify —
/// makes some clients (kafka-python) see the end of the stream before they parse the answer and
/// report a lost connection instead of SASL_AUTHENTICATION_FAILED.
async fn close_gracefully<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let hang_up = async {
        let mut sink = [0u8; 1024];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, hang_up).await;
    let _ = tokio::time::timeout(CLOSE_GRACE, stream.shutdown()).await;
}

/// A connection's stream: TCP, or TLS over TCP.
pub trait KafkaStreamDyn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> KafkaStreamDyn for S {}
