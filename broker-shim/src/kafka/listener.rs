//! One Kafka listener as its handlers see it: the shim it serves, its settings, the address it
//! advertises, the security of its connections, its authorizer, and the lookups every handler shares (a topic by
//! name through the catalog cache, a partition's range). Owns no connection and answers no
//! request: `connection` reads and writes the bytes, `dispatch` starts the handlers.

use std::sync::Arc;

use diskless_proto::ErrorCode;

use super::config::KafkaConfig;
use super::security::ListenerSecurity;
use crate::authz::Authorizer;
use crate::cluster::TopicMeta;
use crate::error::KafkaError;
use crate::shim::Shim;

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
    pub security: ListenerSecurity,
    /// Who may do what (`[kafka.authorizer]`; `None`: everyone everything), shared by the listeners.
    pub authorizer: Option<Arc<Authorizer>>,
}

impl Listener {
    pub fn new(shim: Arc<Shim>, name: String, config: KafkaConfig, bound: std::net::SocketAddr) -> Listener {
        let host = config.advertised_host.clone().unwrap_or_else(|| bound.ip().to_string());
        let port = i32::from(config.advertised_port.unwrap_or(bound.port()));
        let broker_id = shim.broker_id;
        super::frame::Malformed::register_metrics();
        Listener { shim, config, name, host, port, broker_id, security: ListenerSecurity::default(), authorizer: None }
    }

    /// Where a client of this listener reaches broker `b`: this listener's own address for this
    /// broker; for another, its listener of the same name, else its first one (a broker that
    /// registered without that listener).
    pub(crate) fn advertised_of(&self, b: &crate::registry::LiveBroker) -> (String, i32) {
        if b.id == self.broker_id {
            return (self.host.clone(), self.port);
        }
        b.address_on(&self.name)
    }

    /// The topic named `name`, from the catalog cache (read again on a miss). Not authorized:
    /// handlers look topics up through `Session::topic`, which is.
    pub(super) async fn find_topic(&self, name: &str) -> Result<TopicMeta, KafkaError> {
        match self.shim.cluster.topic(name).await {
            Ok(Some(t)) => Ok(t),
            Ok(None) => Err(KafkaError::new(ErrorCode::UnknownTopicOrPartition, format!("no topic named {name:?}"))),
            Err(s) => Err(KafkaError::unavailable("list topics", &s)),
        }
    }

    /// Every partition's leader epoch as this broker knows it, if the client's `current` (−1: not
    /// given) is that epoch: an older one is FENCED_LEADER_EPOCH (the client refreshes its
    /// metadata), a newer one UNKNOWN_LEADER_EPOCH (this broker is behind; the client retries), as
    /// Kafka's `Partition.checkCurrentLeaderEpoch`.
    pub(super) fn leader_epoch(&self, current: i32) -> Result<i32, KafkaError> {
        let ours = self.shim.registry.leader_epoch();
        match current {
            c if c < 0 || c == ours => Ok(ours),
            c if c < ours => Err(KafkaError::new(
                ErrorCode::FencedLeaderEpoch,
                format!("leader epoch {c} is older than the current {ours}"),
            )),
            c => Err(KafkaError::new(
                ErrorCode::UnknownLeaderEpoch,
                format!("leader epoch {c} is newer than this broker's {ours}"),
            )),
        }
    }

    /// UNKNOWN_TOPIC_OR_PARTITION unless `t` has partition `p`.
    pub(super) fn partition(&self, t: &TopicMeta, p: i32) -> Result<(), KafkaError> {
        if p < 0 || p >= t.partitions {
            return Err(KafkaError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("{} has no partition {p}", t.name),
            ));
        }
        Ok(())
    }
}
