//! The Kafka listeners' security settings, as Kafka brokers have them: a listener's security
//! protocol (`security_protocol`), and the TLS (`[kafka.tls]`) and SASL (`[kafka.sasl]`) settings
//! the SSL and SASL listeners share; what each protocol needs of them. Parsing and validation
//! only; the listeners' security is built in `security::Shared`. It knows nothing of the rest of
//! `[kafka]` (`kafka::config` composes it).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::mechanism::Mechanism;

/// Kafka's `security.protocol` of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SecurityProtocol {
    /// Plain TCP, no authentication.
    #[default]
    Plaintext,
    /// TLS (with client certificates when `[kafka.tls]` requires them).
    Ssl,
    /// SASL authentication over plain TCP: passwords (PLAIN) cross the network in the clear.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// The certificate of the SSL and SASL_SSL listeners (`[kafka.tls]`). Files are reloaded when
/// they change (new connections use the new certificate).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaTlsConfig {
    /// The broker's certificate chain (PEM), leaf first; it must name the advertised host.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to; only with client certificates.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Refuse clients without a certificate of `ca` (Kafka's `ssl.client.auth=required`).
    #[serde(default)]
    pub require_client_cert: bool,
}

/// SASL on the SASL_PLAINTEXT and SASL_SSL listeners (`[kafka.sasl]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// Mechanisms offered (default: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN).
    #[serde(default = "all_mechanisms")]
    pub mechanisms: Vec<Mechanism>,
    /// The users' salted SCRAM credentials (`diskless-broker scram-credential` writes them); read
    /// again when the file changes.
    pub credentials: PathBuf,
}

fn all_mechanisms() -> Vec<Mechanism> {
    vec![Mechanism::ScramSha256, Mechanism::ScramSha512, Mechanism::Plain]
}

/// What one listener's protocol needs: `[kafka.tls]` for SSL and SASL_SSL, `[kafka.sasl]` for
/// the SASL protocols (a warning for PLAIN passwords in the clear).
pub fn check_listener(
    listen: &str,
    p: SecurityProtocol,
    tls: Option<&KafkaTlsConfig>,
    sasl: Option<&SaslConfig>,
) -> anyhow::Result<()> {
    anyhow::ensure!(!p.tls() || tls.is_some(), "the {} listener on {} needs [kafka.tls]", p.name(), listen);
    anyhow::ensure!(!p.sasl() || sasl.is_some(), "the {} listener on {} needs [kafka.sasl]", p.name(), listen);
    if p == SecurityProtocol::SaslPlaintext && sasl.is_some_and(|s| s.mechanisms.contains(&Mechanism::Plain)) {
        tracing::warn!(%listen, "SASL PLAIN on a SASL_PLAINTEXT listener: passwords cross the network in the clear");
    }
    Ok(())
}

/// The TLS and SASL settings hold together: some mechanism, a CA when client certificates are
/// required.
pub fn check_settings(tls: Option<&KafkaTlsConfig>, sasl: Option<&SaslConfig>) -> anyhow::Result<()> {
    if let Some(s) = sasl {
        anyhow::ensure!(!s.mechanisms.is_empty(), "[kafka.sasl] mechanisms is empty");
    }
    if let Some(t) = tls {
        anyhow::ensure!(t.ca.is_some() || !t.require_client_cert, "[kafka.tls] require_client_cert needs a ca");
    }
    Ok(())
}
