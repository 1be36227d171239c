//! The Kafka listeners' security settings (`[kafka]` `security_protocol`, `[[kafka.listeners]]`,
//! `[kafka.tls]`, `[kafka.sasl]`), as Kafka brokers have them: one listener per address, each with
//! its security protocol, and the TLS and SASL settings the SSL and SASL listeners share. Parsing
//! and validation only; the listeners are built in `security::ListenerSecurity`.

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

/// One more Kafka listener (`[[kafka.listeners]]`): its own address, advertised address (what
/// Metadata tells the clients that connected to it) and security protocol.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// A name for logs (Kafka's listener name); default: the security protocol.
    #[serde(default)]
    pub name: Option<String>,
    /// `host:port` to listen on.
    pub listen: String,
    #[serde(default)]
    pub advertised_host: Option<String>,
    #[serde(default)]
    pub advertised_port: Option<u16>,
    #[serde(default)]
    pub security_protocol: SecurityProtocol,
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

impl crate::config::KafkaConfig {
    /// Every listener: the `listen` one first, then `listeners`, as (name, listen, advertised
    /// host, advertised port, protocol).
    pub fn all_listeners(&self) -> Vec<ListenerConfig> {
        let first = ListenerConfig {
            name: None,
            listen: self.listen.clone(),
            advertised_host: self.advertised_host.clone(),
            advertised_port: self.advertised_port,
            security_protocol: self.security_protocol,
        };
        std::iter::once(first).chain(self.listeners.iter().cloned()).collect()
    }

    /// Every listener has what its protocol needs, and no two share an address.
    pub fn validate_security(&self) -> anyhow::Result<()> {
        let all = self.all_listeners();
        let mut seen = std::collections::BTreeSet::new();
        for l in &all {
            let p = l.security_protocol;
            anyhow::ensure!(seen.insert(l.listen.clone()), "two Kafka listeners on {}", l.listen);
            anyhow::ensure!(
                !p.tls() || self.tls.is_some(),
                "the {} listener on {} needs [kafka.tls]",
                p.name(),
                l.listen
            );
            anyhow::ensure!(
                !p.sasl() || self.sasl.is_some(),
                "the {} listener on {} needs [kafka.sasl]",
                p.name(),
                l.listen
            );
            if p == SecurityProtocol::SaslPlaintext
                && self.sasl.as_ref().is_some_and(|s| s.mechanisms.contains(&Mechanism::Plain))
            {
                tracing::warn!(listen = %l.listen, "SASL PLAIN on a SASL_PLAINTEXT listener: passwords cross the network in the clear");
            }
        }
        if let Some(s) = &self.sasl {
            anyhow::ensure!(!s.mechanisms.is_empty(), "[kafka.sasl] mechanisms is empty");
        }
        if let Some(t) = &self.tls {
            anyhow::ensure!(t.ca.is_some() || !t.require_client_cert, "[kafka.tls] require_client_cert needs a ca");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ShimConfig;

    fn parse(kafka: &str) -> anyhow::Result<ShimConfig> {
        let c: ShimConfig =
            toml::from_str(&format!("coordinators = [\"a:1\"]\n[storage]\nkind = \"memory\"\n{kafka}"))?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn listeners_per_security_protocol_parse_and_need_their_settings() {
        let c = parse(
            "[kafka]\nlisten = \"127.0.0.1:9092\"\n\
             [[kafka.listeners]]\nname = \"EXTERNAL\"\nlisten = \"0.0.0.0:9094\"\nsecurity_protocol = \"SASL_SSL\"\nadvertised_host = \"kafka.example.com\"\n\
             [kafka.tls]\ncert = \"b.pem\"\nkey = \"b.key\"\n\
             [kafka.sasl]\ncredentials = \"users.toml\"\nmechanisms = [\"SCRAM-SHA-512\"]\n",
        )
        .unwrap();
        let k = c.kafka.unwrap();
        let all = k.all_listeners();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].security_protocol, super::SecurityProtocol::Plaintext);
        assert_eq!(all[1].security_protocol, super::SecurityProtocol::SaslSsl);
        assert_eq!(k.sasl.unwrap().mechanisms, vec![super::Mechanism::ScramSha512]);

        let e = parse("[kafka]\nlisten = \"127.0.0.1:9092\"\nsecurity_protocol = \"SSL\"\n").unwrap_err();
        assert!(e.to_string().contains("[kafka.tls]"), "{e}");
        let e = parse("[kafka]\nlisten = \"127.0.0.1:9092\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\n").unwrap_err();
        assert!(e.to_string().contains("[kafka.sasl]"), "{e}");
        let e = parse("[kafka]\nlisten = \"127.0.0.1:9092\"\n[[kafka.listeners]]\nlisten = \"127.0.0.1:9092\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("two Kafka listeners"), "{e}");
    }
}
