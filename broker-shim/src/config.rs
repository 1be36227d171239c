//! The broker shim's configuration: a TOML file (flags override the important keys).
//!
//! Only composes: each section is defined and checked by the module that owns it — `[storage]`
//! (`storage::config`), `[produce]` (`produce::config`), `[fetch]` (`fetch::config`),
//! `[cleanup]` (`cleanup::config`), `[kafka]` (`kafka::config`, with `kafka::security::config`),
//! `[groups]` (`groups::config`), `[transactions]` (`transactions::config`), `[registry]` (`registry`) — beside the broker's own keys
//! (identity, listen address, the coordinator cluster's addresses and TLS). No module below
//! imports this one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cleanup::CleanupConfig;
use crate::consolidate::ConsolidationConfig;
use crate::coordinators::groups::GroupConfig;
use crate::coordinators::transactions::TxnConfig;
use crate::fetch::FetchConfig;
use crate::kafka::KafkaConfig;
use crate::produce::ProduceConfig;
use crate::registry::RegistryConfig;
use crate::shim::ShimSettings;
use crate::storage::StorageConfig;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShimConfig {
    /// This broker's id (KIP-1164's UploaderBrokerId).
    #[serde(default = "one")]
    pub broker_id: i32,
    /// Where the broker's own API listens, `host:port`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// TLS on the broker's own gRPC API (`listen`): its certificate, key, the CA client
    /// certificates must chain to, and whether clients must present one (default true), as the
    /// coordinator's `[tls]`.
    #[serde(default)]
    pub tls: Option<diskless_tls::TlsFiles>,
    /// Coordinator nodes, `host:port` (any of them serves any request).
    pub coordinators: Vec<String>,
    /// Reach a node that advertises the key address through the value address instead (address
    /// translation: NAT, a proxy per node; the fault suite puts its proxies here).
    #[serde(default)]
    pub coordinator_address_map: BTreeMap<String, String>,
    /// TLS to the coordinator nodes' client listeners: the broker's certificate (its identity,
    /// which the nodes' `roles.broker` must name), key, and the cluster's CA.
    #[serde(default)]
    pub coordinator_tls: Option<diskless_tls::TlsFiles>,
    pub storage: StorageConfig,
    #[serde(default)]
    pub produce: ProduceConfig,
    #[serde(default)]
    pub fetch: FetchConfig,
    #[serde(default)]
    pub cleanup: CleanupConfig,
    /// Object consolidation (`[consolidation]`).
    #[serde(default)]
    pub consolidation: ConsolidationConfig,
    /// Where to serve Prometheus metrics over HTTP (`GET /metrics`), `host:port`; none when unset.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The Kafka protocol listener (off when absent).
    #[serde(default)]
    pub kafka: Option<KafkaConfig>,
    /// The consumer-group coordinator (`[groups]`).
    #[serde(default)]
    pub groups: GroupConfig,
    /// This broker in the coordinator cluster's broker registry (`[registry]`: rack, lease).
    #[serde(default)]
    pub registry: RegistryConfig,
    /// The transaction coordinator (`[transactions]`).
    #[serde(default)]
    pub transactions: TxnConfig,
    /// Accept `BrokerService.InjectStorageFault` (tests only): object storage goes through a
    /// wrapper that can delay, fail or hang its operations.
    #[serde(default)]
    pub allow_fault_injection: bool,
}

fn one() -> i32 {
    1
}
fn default_listen() -> String {
    "127.0.0.1:9192".into()
}

impl ShimConfig {
    /// What the broker's parts start from, once the configuration is checked.
    pub fn settings(&self) -> anyhow::Result<ShimSettings> {
        self.validate()?;
        Ok(ShimSettings {
            broker_id: self.broker_id,
            coordinators: self.coordinators.clone(),
            coordinator_address_map: self.coordinator_address_map.clone(),
            coordinator_tls: self.coordinator_tls.clone(),
            storage: self.storage.clone(),
            produce: self.produce.clone(),
            fetch: self.fetch.clone(),
            cleanup: self.cleanup.clone(),
            consolidation: self.consolidation.clone(),
            groups: self.groups.clone(),
            registry: self.registry.clone(),
            transactions: self.transactions.clone(),
            allow_fault_injection: self.allow_fault_injection,
            advertised: self.kafka.is_some(),
        })
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.coordinators.is_empty(), "coordinators lists no node");
        self.registry.validate()?;
        self.produce.validate()?;
        self.groups.validate()?;
        if let Some(k) = &self.kafka {
            k.validate()?;
        }
        self.cleanup.validate();
        self.consolidation.validate()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::produce::config::MAX_BUFFER_BYTES;

    #[test]
    fn storage_kinds_parse() {
        let c: ShimConfig = toml::from_str(
            "coordinators = [\"127.0.0.1:7001\"]\n[storage]\nkind = \"s3\"\nbucket = \"b\"\nendpoint = \"http://127.0.0.1:9000\"\nallow_http = true\n",
        )
        .unwrap();
        assert!(matches!(c.storage, StorageConfig::S3 { path_style: true, .. }));
        assert_eq!(c.produce.commit_interval_ms, 250);
        let c: ShimConfig =
            toml::from_str("coordinators = [\"a:1\"]\n[storage]\nkind = \"local\"\npath = \"/tmp/x\"\n").unwrap();
        assert!(matches!(c.storage, StorageConfig::Local { .. }));
        c.validate().unwrap();
    }

    #[test]
    fn a_buffer_whose_offsets_would_not_fit_in_int32_is_refused() {
        let mut c: ShimConfig = toml::from_str("coordinators = [\"a:1\"]\n[storage]\nkind = \"memory\"\n").unwrap();
        c.produce.buffer_max_bytes = MAX_BUFFER_BYTES;
        c.validate().unwrap();
        c.produce.buffer_max_bytes = MAX_BUFFER_BYTES + 1;
        assert!(c.validate().unwrap_err().to_string().contains("int32"));
        c.produce.buffer_max_bytes = 1 << 20;
        assert!(c.validate().unwrap_err().to_string().contains("max_message_bytes"), "a batch must fit a segment");
        c.produce.max_message_bytes = 1000;
        c.validate().unwrap();
        assert!(MAX_BUFFER_BYTES < i32::MAX as usize);
    }
}
