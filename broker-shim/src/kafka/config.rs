//! `[kafka]`: the Kafka listeners' settings, as Kafka brokers have them: the `listen` listener and
//! more in `[[kafka.listeners]]`, each with its own address, advertised address and security
//! protocol, plus the limits of a connection. Parsing and validation only; the security settings
//! (`[kafka.tls]`, `[kafka.sasl]`) are `security::config`'s, the authorizer's (`[kafka.authorizer]`)
//! `crate::authz::config`'s.

use serde::{Deserialize, Serialize};

use super::security::config::{self as security, KafkaTlsConfig, SaslConfig, SecurityProtocol};
use crate::authz::AuthorizerConfig;

/// The Kafka listener: what clients connect to, and how this broker describes itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `host:port` to listen on (9092 by convention).
    pub listen: String,
    /// The host clients should connect to (default: the listen host).
    #[serde(default)]
    pub advertised_host: Option<String>,
    /// The port clients should connect to (default: the listen port).
    #[serde(default)]
    pub advertised_port: Option<u16>,
    /// Reported in Metadata responses.
    #[serde(default = "default_cluster_id")]
    pub cluster_id: String,
    /// The largest request frame accepted (Kafka's socket.request.max.bytes).
    #[serde(default = "default_kafka_max_request")]
    pub max_request_bytes: usize,
    /// Requests a connection may have in flight (answered in order).
    #[serde(default = "default_inflight")]
    pub max_in_flight_per_connection: usize,
    /// The security protocol of the `listen` listener (default PLAINTEXT).
    #[serde(default)]
    pub security_protocol: SecurityProtocol,
    /// More listeners (`[[kafka.listeners]]`), each its own address, advertised address and
    /// security protocol, as Kafka's `listeners`.
    #[serde(default)]
    pub listeners: Vec<ListenerConfig>,
    /// The certificate of the SSL and SASL_SSL listeners (`[kafka.tls]`).
    #[serde(default)]
    pub tls: Option<KafkaTlsConfig>,
    /// SASL mechanisms and credentials of the SASL_PLAINTEXT and SASL_SSL listeners (`[kafka.sasl]`).
    #[serde(default)]
    pub sasl: Option<SaslConfig>,
    /// Authorization by ACLs (`[kafka.authorizer]`); without it every client may do everything.
    #[serde(default)]
    pub authorizer: Option<AuthorizerConfig>,
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

fn default_cluster_id() -> String {
    "diskless-cluster".into()
}
fn default_kafka_max_request() -> usize {
    100 << 20
}
fn default_inflight() -> usize {
    16
}

impl KafkaConfig {
    /// Every listener: the `listen` one first, then `listeners`.
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
    pub fn validate(&self) -> anyhow::Result<()> {
        let mut seen = std::collections::BTreeSet::new();
        for l in &self.all_listeners() {
            anyhow::ensure!(seen.insert(l.listen.clone()), "two Kafka listeners on {}", l.listen);
            security::check_listener(&l.listen, l.security_protocol, self.tls.as_ref(), self.sasl.as_ref())?;
        }
        if let Some(a) = &self.authorizer {
            a.validate()?;
        }
        security::check_settings(self.tls.as_ref(), self.sasl.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ShimConfig;
    use crate::kafka::security::{Mechanism, SecurityProtocol};

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
        assert_eq!(all[0].security_protocol, SecurityProtocol::Plaintext);
        assert_eq!(all[1].security_protocol, SecurityProtocol::SaslSsl);
        assert_eq!(k.sasl.unwrap().mechanisms, vec![Mechanism::ScramSha512]);

        let e = parse("[kafka]\nlisten = \"127.0.0.1:9092\"\nsecurity_protocol = \"SSL\"\n").unwrap_err();
        assert!(e.to_string().contains("[kafka.tls]"), "{e}");
        let e = parse("[kafka]\nlisten = \"127.0.0.1:9092\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\n").unwrap_err();
        assert!(e.to_string().contains("[kafka.sasl]"), "{e}");
        let e = parse("[kafka]\nlisten = \"127.0.0.1:9092\"\n[[kafka.listeners]]\nlisten = \"127.0.0.1:9092\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("two Kafka listeners"), "{e}");
    }
}
