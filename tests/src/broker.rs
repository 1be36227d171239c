//! Real broker shims: `broker-node` processes for a cluster, with their storage and options.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use crate::*;

/// Where a test broker keeps WAL segments.
#[derive(Debug, Clone)]
pub enum TestStorage {
    Local(PathBuf),
    S3 { endpoint: String, bucket: String },
}

impl TestStorage {
    /// The store itself, for tests that look at or damage objects directly.
    pub fn open(&self) -> diskless_broker_shim::storage::Storage {
        use diskless_broker_shim::storage::StorageConfig;
        let config = match self {
            TestStorage::Local(p) => StorageConfig::Local { path: p.clone() },
            TestStorage::S3 { endpoint, bucket } => StorageConfig::S3 {
                bucket: bucket.clone(),
                endpoint: Some(endpoint.clone()),
                region: "us-east-1".into(),
                access_key_id: Some("test".into()),
                secret_access_key: Some("test".into()),
                path_style: true,
                allow_http: true,
            },
        };
        diskless_broker_shim::storage::Storage::new(&config).expect("open test storage")
    }

    fn toml(&self) -> String {
        match self {
            TestStorage::Local(p) => format!("[storage]\nkind = \"local\"\npath = \"{}\"\n", p.display()),
            TestStorage::S3 { endpoint, bucket } => format!(
                "[storage]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\nallow_http = true\n\
                 access_key_id = \"test\"\nsecret_access_key = \"test\"\n"
            ),
        }
    }
}

/// Broker settings tests change.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    pub commit_interval_ms: u64,
    pub cleanup_interval_ms: u64,
    pub delete_grace_ms: u64,
    pub orphan_scan_interval_ms: u64,
    pub orphan_grace_ms: u64,
    /// Also serve the Kafka protocol (on a free port).
    pub kafka: bool,
    /// The broker's id (KIP-1164's uploader broker id; its id in the broker registry, which refuses
    /// two live brokers with one id). [`AUTO_BROKER_ID`]: the next unused id of this test process.
    pub broker_id: i32,
    /// The broker's `[registry]` lease (short, so tests see a killed broker go quickly) and rack.
    pub lease_ms: u64,
    pub rack: Option<String>,
    /// The coordinator addresses the broker is given, instead of the cluster's nodes (proxies).
    pub coordinators: Option<Vec<String>>,
    /// Raw TOML lines appended to the top level of the broker's configuration.
    pub extra_toml: String,
    /// Raw TOML appended after the `[kafka]` section (with `kafka`): e.g. `[[kafka.listeners]]`.
    pub kafka_toml: String,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            kafka: false,
            commit_interval_ms: 50,
            cleanup_interval_ms: 500,
            delete_grace_ms: 1_000,
            orphan_scan_interval_ms: 0,
            orphan_grace_ms: 600_000,
            broker_id: AUTO_BROKER_ID,
            lease_ms: 4_000,
            rack: None,
            coordinators: None,
            extra_toml: String::new(),
            kafka_toml: String::new(),
        }
    }
}

/// [`BrokerOptions::broker_id`]: give the broker an id no other broker of this test process has.
pub const AUTO_BROKER_ID: i32 = -1;
static NEXT_BROKER_ID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);

/// The broker binary (`broker-node`, beside the node binary cargo built).
pub fn broker_binary() -> PathBuf {
    node_binary().with_file_name("broker-node")
}

/// A broker shim process.
pub struct BrokerProc {
    pub addr: String,
    /// The Kafka listener's `host:port`, when asked for.
    pub kafka_addr: Option<String>,
    /// Its broker id.
    pub broker_id: i32,
    child: Option<Child>,
    config: PathBuf,
    log: PathBuf,
}

impl BrokerProc {
    /// Starts a broker for `cluster` (its coordinators), waits until it answers.
    pub async fn start(cluster: &Cluster, name: &str, storage: &TestStorage, o: &BrokerOptions) -> BrokerProc {
        let addr = format!("127.0.0.1:{}", free_port());
        let coordinators: Vec<String> = match &o.coordinators {
            Some(list) => list.iter().map(|a| format!("\"{a}\"")).collect(),
            None => cluster.ids().iter().map(|id| format!("\"{}\"", cluster.addr(*id))).collect(),
        };
        let broker_id = match o.broker_id {
            AUTO_BROKER_ID => NEXT_BROKER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            id => id,
        };
        let rack = o.rack.as_ref().map(|r| format!("rack = \"{r}\"\n")).unwrap_or_default();
        let config = format!(
            "broker_id = {}\nlisten = \"{addr}\"\ncoordinators = [{}]\n{}\n{}\n[produce]\ncommit_interval_ms = {}\n\n\
             [cleanup]\ninterval_ms = {}\ndelete_grace_ms = {}\norphan_scan_interval_ms = {}\norphan_grace_ms = {}\n\n\
             [registry]\nlease_ms = {}\nheartbeat_interval_ms = {}\nrefresh_interval_ms = 250\n{rack}",
            broker_id,
            coordinators.join(", "),
            o.extra_toml,
            storage.toml(),
            o.commit_interval_ms,
            o.cleanup_interval_ms,
            o.delete_grace_ms,
            o.orphan_scan_interval_ms,
            o.orphan_grace_ms,
            o.lease_ms,
            (o.lease_ms / 6).max(1),
        );
        let kafka_addr = o.kafka.then(|| format!("127.0.0.1:{}", free_port()));
        let config = match &kafka_addr {
            Some(k) => format!("{config}\n[kafka]\nlisten = \"{k}\"\n{}", o.kafka_toml),
            None => config,
        };
        let path = cluster.dir.path().join(format!("broker-{name}.toml"));
        std::fs::write(&path, config).expect("write broker config");
        let log = cluster.dir.path().join(format!("broker-{name}.log"));
        let mut b = BrokerProc { addr, kafka_addr, broker_id, child: None, config: path, log };
        b.restart().await;
        b
    }

    /// Starts the broker's process again (same configuration, same ports) after a kill; waits
    /// until it answers.
    pub async fn restart(&mut self) {
        self.spawn();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.client_opt().await.is_none() {
            assert!(Instant::now() < deadline, "broker does not answer: {}", self.log_tail());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The gRPC port is bound before the Kafka listener: wait for that one too.
        if let Some(k) = &self.kafka_addr {
            while tokio::net::TcpStream::connect(k).await.is_err() {
                assert!(Instant::now() < deadline, "the Kafka listener does not accept: {}", self.log_tail());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Starts the broker's process again (same configuration, same ports), without waiting.
    pub fn spawn(&mut self) {
        self.kill();
        let out = File::options().create(true).append(true).open(&self.log).expect("open broker log");
        let child = Command::new(broker_binary())
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", std::env::var("DISKLESS_BROKER_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("start broker-node");
        self.child = Some(child);
    }

    /// Whether the broker's process ended by itself; its status is collected.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// SIGKILLs the broker (a crash: what it buffered is lost, uploads and commits stop mid-way).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The broker's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    async fn client_opt(&self) -> Option<BrokerClient> {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr)).ok()?.connect().await.ok()?;
        Some(BrokerServiceClient::new(ch).max_decoding_message_size(256 << 20))
    }

    pub async fn client(&self) -> BrokerClient {
        self.client_opt().await.expect("broker reachable")
    }

    /// The broker's whole log (stderr).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGTERM and wait: the broker commits what it accepted, then exits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- broker log (last 30 lines) -----\n{}", self.log_tail());
        }
        self.kill();
    }
}

pub type BrokerClient = diskless_proto::broker::broker_service_client::BrokerServiceClient<Channel>;
use diskless_proto::broker::broker_service_client::BrokerServiceClient;

impl Cluster {
    /// A folder inside the cluster's temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}
