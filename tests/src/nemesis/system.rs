//! The system under test, as the nemesis and the workload reach it: a coordinator cluster of real
//! node processes, broker processes that reach every node through a [`Proxy`] of their own, an
//! object store (a local directory, or a moto S3 server), and the process controls the faults
//! need (kill -9, restart, SIGSTOP/SIGCONT, admin calls with deadlines).
//!
//! It must not choose faults (that is `faults`) nor judge results (that is `checker`).

use std::collections::BTreeMap;
use std::time::Duration;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::{FaultRequest, StatusRequest, StatusResponse};
use diskless_proto::broker::broker_service_client::BrokerServiceClient;
use diskless_proto::broker::StorageFaultRequest;
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use tokio::sync::Mutex;
use tonic::transport::{Channel, Endpoint};

use super::proxy::Proxy;
use crate::{BrokerOptions, BrokerProc, Cluster, Options, S3Server, TestStorage};

/// The shape of the system a run starts.
#[derive(Debug, Clone)]
pub struct Shape {
    pub nodes: u64,
    pub brokers: usize,
    pub metadata_partitions: u32,
    /// moto S3 instead of a local directory.
    pub s3: bool,
}

/// A broker process, its addresses, and its proxies to every node.
pub struct Broker {
    pub number: usize,
    pub process: Mutex<BrokerProc>,
    pub addr: String,
    pub kafka_addr: String,
    /// Node id → the proxy this broker reaches that node through.
    pub proxies: BTreeMap<u64, Proxy>,
}

pub struct System {
    pub cluster: Mutex<Cluster>,
    /// Node id → address (fixed for the run: a re-added node keeps its address).
    pub nodes: BTreeMap<u64, String>,
    pub brokers: Vec<Broker>,
    pub storage: TestStorage,
    pub shape: Shape,
    /// Where every process's files are (kept when a run fails).
    pub root: std::path::PathBuf,
    _s3: Option<S3Server>,
}

/// A channel that connects on first use and gives up connecting quickly (paused and killed
/// processes are the normal case here).
pub fn lazy_channel(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a host:port address")
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .connect_lazy()
}

pub type CoordinatorClient = CoordinatorServiceClient<Channel>;
pub type BrokerClient = BrokerServiceClient<Channel>;
pub type AdminClient = AdminServiceClient<Channel>;

impl System {
    /// Starts the cluster, the object store and the brokers (with proxies); waits until every
    /// metadata partition has a leader and every broker answers.
    pub async fn start(shape: Shape, options: Options) -> anyhow::Result<System> {
        let s3 = if shape.s3 {
            Some(S3Server::start("nemesis").ok_or_else(|| anyhow::anyhow!("moto_server is not installed"))?)
        } else {
            None
        };
        let cluster = Cluster::start(shape.nodes, options).await;
        let root = cluster.root().to_path_buf();
        let storage = match &s3 {
            Some(s) => TestStorage::S3 { endpoint: s.endpoint.clone(), bucket: "nemesis".into() },
            None => TestStorage::Local(cluster.path("objects")),
        };
        let nodes: BTreeMap<u64, String> =
            cluster.ids().into_iter().map(|id| (id, cluster.addr(id).to_string())).collect();
        let mut brokers = vec![];
        for number in 0..shape.brokers {
            let mut proxies = BTreeMap::new();
            for (id, addr) in &nodes {
                proxies.insert(*id, Proxy::start(addr).await?);
            }
            let map: Vec<String> = proxies.values().map(|p| format!("\"{}\" = \"{}\"", p.upstream, p.addr)).collect();
            let o = BrokerOptions {
                kafka: true,
                broker_id: number as i32 + 1,
                coordinators: Some(proxies.values().map(|p| p.addr.clone()).collect()),
                // Transactions the stopped workload left open are aborted soon after their timeout.
                // Consolidation runs as background work under every fault: batches a few seconds
                // old are rewritten, so readers and the checker see moved batches throughout.
                extra_toml: format!(
                    "coordinator_address_map = {{ {} }}\nallow_fault_injection = true\n\n[transactions]\n\
                     abort_check_interval_ms = 1000\n\n[groups]\nshare_record_lock_duration_ms = 5000\n\
                     share_auto_offset_reset = \"earliest\"\n\n[consolidation]\nenabled = true\n\
                     interval_ms = 2000\nmin_age_ms = 4000\nmin_batches = 2\nexpiry_margin_ms = 0\n",
                    map.join(", ")
                ),
                commit_interval_ms: 50,
                cleanup_interval_ms: 1_000,
                // The least the broker accepts without a warning: a commit's timeout plus the
                // clock skew margin (delete grace), a minute (orphans).
                delete_grace_ms: 45_000,
                orphan_scan_interval_ms: 5_000,
                orphan_grace_ms: 60_000,
                lease_ms: 3_000,
                rack: None,
                kafka_toml: String::new(),
            };
            let process = BrokerProc::start(&cluster, &format!("b{number}"), &storage, &o).await;
            let (addr, kafka_addr) = (process.addr.clone(), process.kafka_addr.clone().expect("a Kafka listener"));
            brokers.push(Broker { number, process: Mutex::new(process), addr, kafka_addr, proxies });
        }
        Ok(System { cluster: Mutex::new(cluster), nodes, brokers, storage, shape, root, _s3: s3 })
    }

    pub fn node_ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    pub fn coordinator(&self, id: u64) -> CoordinatorClient {
        CoordinatorServiceClient::new(lazy_channel(&self.nodes[&id])).max_decoding_message_size(256 << 20)
    }

    pub fn admin(&self, id: u64) -> AdminClient {
        AdminServiceClient::new(lazy_channel(&self.nodes[&id]))
    }

    pub fn broker(&self, n: usize) -> BrokerClient {
        BrokerServiceClient::new(lazy_channel(&self.brokers[n].addr)).max_decoding_message_size(256 << 20)
    }

    /// Node `id`'s status, or `None` if it does not answer within `within`.
    pub async fn status(&self, id: u64, with_digest: bool, within: Duration) -> Option<StatusResponse> {
        let mut a = self.admin(id);
        match tokio::time::timeout(within, a.status(StatusRequest { with_digest, ..Default::default() })).await {
            Ok(Ok(s)) => Some(s.into_inner()),
            _ => None,
        }
    }

    /// Sends a fault request to node `id` (bounded: a paused node does not answer).
    pub async fn inject(&self, id: u64, req: FaultRequest) -> Result<(), String> {
        let mut a = self.admin(id);
        match tokio::time::timeout(Duration::from_secs(3), a.inject_fault(req)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(s)) => Err(s.to_string()),
            Err(_) => Err("no answer within 3 s".into()),
        }
    }

    /// Sends an object storage fault request to broker `b` (bounded: a paused broker does not
    /// answer).
    pub async fn inject_storage(&self, b: usize, req: StorageFaultRequest) -> Result<(), String> {
        let mut client = self.broker(b);
        match tokio::time::timeout(Duration::from_secs(3), client.inject_storage_fault(req)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(s)) => Err(s.to_string()),
            Err(_) => Err("no answer within 3 s".into()),
        }
    }

    /// The node leading the most metadata partitions, as the first answering node sees it.
    pub async fn busiest_leader(&self, candidates: &[u64]) -> Option<u64> {
        for id in candidates {
            if let Some(s) = self.status(*id, false, Duration::from_secs(1)).await {
                let mut count: BTreeMap<u64, usize> = BTreeMap::new();
                for g in s.groups.iter().filter(|g| g.leader != 0) {
                    *count.entry(g.leader).or_default() += 1;
                }
                return count
                    .into_iter()
                    .filter(|(id, _)| candidates.contains(id))
                    .max_by_key(|(_, n)| *n)
                    .map(|(id, _)| id);
            }
        }
        None
    }
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) has no memory effects; a process that is gone gives ESRCH, which is fine.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}
