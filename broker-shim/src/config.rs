//! The broker shim's configuration: a TOML file (flags override the important keys).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
    /// Where to serve Prometheus metrics over HTTP (`GET /metrics`), `host:port`; none when unset.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The Kafka protocol listener (off when absent).
    #[serde(default)]
    pub kafka: Option<KafkaConfig>,
    /// The consumer-group coordinator (`[groups]`).
    #[serde(default)]
    pub groups: crate::groups::GroupConfig,
    /// This broker in the coordinator cluster's broker registry (`[registry]`: rack, lease).
    #[serde(default)]
    pub registry: crate::registry::RegistryConfig,
    /// Accept `BrokerService.InjectStorageFault` (tests only): object storage goes through a
    /// wrapper that can delay, fail or hang its operations.
    #[serde(default)]
    pub allow_fault_injection: bool,
}

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
    pub security_protocol: crate::kafka::security::SecurityProtocol,
    /// More listeners (`[[kafka.listeners]]`), each its own address, advertised address and
    /// security protocol, as Kafka's `listeners`.
    #[serde(default)]
    pub listeners: Vec<crate::kafka::security::ListenerConfig>,
    /// The certificate of the SSL and SASL_SSL listeners (`[kafka.tls]`).
    #[serde(default)]
    pub tls: Option<crate::kafka::security::KafkaTlsConfig>,
    /// SASL mechanisms and credentials of the SASL_PLAINTEXT and SASL_SSL listeners (`[kafka.sasl]`).
    #[serde(default)]
    pub sasl: Option<crate::kafka::security::SaslConfig>,
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

/// Where WAL segments go.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "lowercase")]
pub enum StorageConfig {
    /// A local directory (the default for local setups).
    Local { path: PathBuf },
    /// In memory (tests).
    Memory,
    /// S3 or an S3-compatible server.
    S3 {
        bucket: String,
        #[serde(default)]
        endpoint: Option<String>,
        #[serde(default = "default_region")]
        region: String,
        #[serde(default)]
        access_key_id: Option<String>,
        #[serde(default)]
        secret_access_key: Option<String>,
        /// Path-style requests (`endpoint/bucket/key`), what MinIO-like servers expect.
        #[serde(default = "yes")]
        path_style: bool,
        #[serde(default)]
        allow_http: bool,
    },
    /// Any store `object_store` can build from a URL (`gs://bucket`, `az://container`, ...),
    /// with its options (credentials and so on).
    Url {
        url: String,
        #[serde(default)]
        options: BTreeMap<String, String>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProduceConfig {
    /// `diskless.append.commit.interval.ms`: how long a segment stays open.
    pub commit_interval_ms: u64,
    /// `diskless.append.buffer.max.bytes`: a segment is closed when it reaches this size.
    pub buffer_max_bytes: usize,
    /// Uploads in flight at once (each holds one segment in memory).
    pub max_parallel_uploads: usize,
    /// Prefix of object keys (`<prefix><uuid>`).
    pub key_prefix: String,
    /// `message.max.bytes`: the largest record batch a producer may send (Kafka's default, 1 MiB
    /// plus the 12-byte log overhead); at most `buffer_max_bytes - 1`.
    pub max_message_bytes: usize,
    /// The most bytes a compressed batch's records may decompress to (Kafka has no such bound;
    /// it stops zip bombs). A batch past it is refused with MESSAGE_TOO_LARGE, which makes a Java
    /// producer split it.
    pub max_uncompressed_batch_bytes: usize,
}

impl Default for ProduceConfig {
    fn default() -> Self {
        ProduceConfig {
            commit_interval_ms: 250,
            buffer_max_bytes: 8 << 20,
            max_parallel_uploads: 8,
            key_prefix: "wal/".into(),
            max_message_bytes: crate::validate::DEFAULT_MAX_MESSAGE_BYTES,
            max_uncompressed_batch_bytes: crate::validate::DEFAULT_MAX_UNCOMPRESSED_BYTES,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchConfig {
    /// Bytes of raw batches kept in the byte-range cache.
    pub cache_bytes: usize,
    /// Ranges of one object closer than this are read with one GET.
    pub coalesce_gap_bytes: u64,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig { cache_bytes: 64 << 20, coalesce_gap_bytes: 64 << 10 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanupConfig {
    /// How often released files are deleted.
    pub interval_ms: u64,
    /// How long a file waits after its last release before it is deleted (readers in flight may
    /// still be fetching from it).
    pub delete_grace_ms: u64,
    /// `diskless.coordinator.orphan.scan.interval.ms` (0: no orphan scans).
    pub orphan_scan_interval_ms: u64,
    /// `diskless.coordinator.orphan.scan.grace.period.ms`: an unknown object younger than this may
    /// still be waiting for its commit, and is left alone. The produce path sends no commit of a
    /// segment later than this (less a margin, see `produce::commit_deadline`) after its upload.
    pub orphan_grace_ms: u64,
}

impl Default for CleanupConfig {
    fn default() -> Self {
        CleanupConfig {
            interval_ms: 30_000,
            delete_grace_ms: 60_000,
            orphan_scan_interval_ms: 600_000,
            orphan_grace_ms: 600_000,
        }
    }
}

/// The largest `produce.buffer_max_bytes`: a WAL segment never exceeds it, and batch positions in
/// a segment are `int32` in the commit.
pub const MAX_BUFFER_BYTES: usize = 1 << 30;

/// Clock difference between brokers and coordinator nodes the grace periods allow for.
const CLOCK_SKEW_MARGIN_MS: u64 = 15_000;

fn one() -> i32 {
    1
}
fn yes() -> bool {
    true
}
fn default_listen() -> String {
    "127.0.0.1:9192".into()
}
fn default_region() -> String {
    "us-east-1".into()
}

impl ShimConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.coordinators.is_empty(), "coordinators lists no node");
        self.registry.validate()?;
        anyhow::ensure!(
            (1024..=MAX_BUFFER_BYTES).contains(&self.produce.buffer_max_bytes),
            "produce.buffer_max_bytes must be 1024 to {MAX_BUFFER_BYTES} (a segment's byte offsets travel as int32), not {}",
            self.produce.buffer_max_bytes
        );
        anyhow::ensure!(
            (crate::wal::record_batch::HEADER_LEN..self.produce.buffer_max_bytes).contains(&self.produce.max_message_bytes),
            "produce.max_message_bytes must be {} to produce.buffer_max_bytes - 1 ({}): a batch fits one WAL segment, not {}",
            crate::wal::record_batch::HEADER_LEN,
            self.produce.buffer_max_bytes - 1,
            self.produce.max_message_bytes
        );
        anyhow::ensure!(
            self.produce.max_uncompressed_batch_bytes >= self.produce.max_message_bytes,
            "produce.max_uncompressed_batch_bytes ({}) must be at least produce.max_message_bytes ({})",
            self.produce.max_uncompressed_batch_bytes,
            self.produce.max_message_bytes
        );
        anyhow::ensure!(self.produce.max_parallel_uploads >= 1, "produce.max_parallel_uploads must be at least 1");
        anyhow::ensure!(self.produce.commit_interval_ms >= 1, "produce.commit_interval_ms must be at least 1");
        if let Some(k) = &self.kafka {
            k.validate_security()?;
        }
        // Safety does not depend on the grace periods (an object is fenced through the
        // coordinators' logs before it is deleted); they decide who is inconvenienced.
        let reader_bound = 15_000 + CLOCK_SKEW_MARGIN_MS;
        if self.cleanup.delete_grace_ms < reader_bound {
            tracing::warn!(
                grace_ms = self.cleanup.delete_grace_ms,
                "cleanup.delete_grace_ms is under {reader_bound} ms: a consumer that looked batches up just before \
                 they were released may find their object deleted (a retriable storage error)"
            );
        }
        if self.cleanup.orphan_grace_ms < 60_000 {
            tracing::warn!(
                grace_ms = self.cleanup.orphan_grace_ms,
                "cleanup.orphan_grace_ms is under a minute: a segment not committed within it (less a margin) is \
                 abandoned and its producers must retry"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
