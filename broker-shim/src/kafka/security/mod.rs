//! Security of the Kafka listeners, as Kafka brokers have it: one listener per address, each with
//! a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); TLS with rustls (certificate
//! files reloaded when they change, client certificates optional or required); SASL PLAIN and
//! SCRAM-SHA-256/512 against a file of salted credentials.
//!
//! Owns: the listeners' settings (`config`), what a listener does to a new connection before it
//! serves requests (`ListenerSecurity::secure`: TLS handshake, then SASL authentication), the
//! SASL exchange (`sasl`), the mechanisms (`mechanism`, `scram`) and the credentials
//! (`credentials`). It must not look at requests once a connection is authenticated: there are no
//! ACLs, an authenticated client may do what any client may.

pub mod config;
pub mod credentials;
pub mod mechanism;
pub mod sasl;
pub mod scram;

use std::sync::Arc;

use anyhow::Context;
use diskless_tls::{PlainServerTls, ServerTls};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

pub use config::{KafkaTlsConfig, ListenerConfig, SaslConfig, SecurityProtocol};
pub use mechanism::Mechanism;
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
    pub fn new(k: &crate::config::KafkaConfig) -> anyhow::Result<Shared> {
        k.validate_security()?;
        let all = k.all_listeners();
        let tls = match &k.tls {
            Some(t) if all.iter().any(|l| l.security_protocol.tls()) => Some(
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
        let sasl = match &k.sasl {
            Some(s) if all.iter().any(|l| l.security_protocol.sasl()) => Some(Arc::new(SaslServer::new(s)?)),
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
    /// listeners authenticate the client first.
    pub async fn secure<F, Fut>(&self, tcp: TcpStream, serve: F) -> anyhow::Result<()>
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
            let user = sasl::authenticate(sasl, &mut stream).await?;
            tracing::debug!(%user, protocol = self.protocol.name(), "Kafka client authenticated");
            principal.user = Some(user);
        }
        serve(stream, principal).await
    }
}

/// A connection's stream: TCP, or TLS over TCP.
pub trait KafkaStreamDyn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> KafkaStreamDyn for S {}
