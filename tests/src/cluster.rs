//! Real coordinator nodes: a cluster of `coordinator-node` processes on loopback ports, each with
//! its own data directory under one temporary folder; kills (SIGKILL), restarts and adds nodes,
//! blocks links between them, and gives gRPC clients. Each node's log goes to
//! `<tmp>/node-<id>.log`; when a test fails, the tail of every log is printed.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::{StatusRequest, StatusResponse};
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use tonic::transport::Channel;

pub type Client = CoordinatorServiceClient<Channel>;
pub type Admin = AdminServiceClient<Channel>;

/// Settings every test cluster shares; tests change what they need.
#[derive(Debug, Clone)]
pub struct Options {
    pub metadata_partitions: u32,
    pub snapshot_after_entries: u64,
    pub entries_kept_after_snapshot: u64,
    pub leader_balance_ms: u64,
    /// Every snapshot install pauses this long, twice (see the node's
    /// `test_snapshot_install_pause_ms`).
    pub snapshot_install_pause_ms: u64,
    /// How often metadata partition leaders run retention (`retention_check_ms`; an hour:
    /// practically never).
    pub retention_check_ms: u64,
    /// Serve Prometheus metrics on a free port per node (`metrics_addr`; see
    /// [`Cluster::metrics_addr`]).
    pub metrics: bool,
    /// Data directories per node: 1 is the `data_dir` form; more are `data_dirs` (see
    /// [`Cluster::data_dirs`]).
    pub data_dirs: u32,
    /// Secure nodes: a separate peer listener, mutual TLS on both listeners with certificates of a
    /// CA made for the cluster (see [`Cluster::tls_files`]), and roles (admin `operator`, broker
    /// `broker-1`, reader `reader-1`). The harness's own calls present `operator`.
    pub tls: bool,
    /// Lines added to every node's configuration before its tables (`max_snapshot_bytes = ...`).
    pub extra_config: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            metadata_partitions: 4,
            snapshot_after_entries: 20_000,
            entries_kept_after_snapshot: 1_000,
            leader_balance_ms: 2_000,
            snapshot_install_pause_ms: 0,
            retention_check_ms: 3_600_000,
            metrics: false,
            data_dirs: 1,
            tls: false,
            extra_config: String::new(),
        }
    }
}

struct NodeProc {
    addr: String,
    /// The peer listener's address (the member address), with `Options::tls`.
    peer_addr: Option<String>,
    child: Option<Child>,
    bootstrap: bool,
    /// Where the node serves metrics (kept across restarts), when `Options::metrics`.
    metrics_addr: Option<String>,
}

pub struct Cluster {
    pub(crate) dir: tempfile::TempDir,
    nodes: BTreeMap<u64, NodeProc>,
    members: Vec<(u64, String)>,
    pub options: Options,
    keep: bool,
    /// What the harness's own calls present, with `Options::tls` (the `operator` certificate).
    client_tls: Option<std::sync::Arc<diskless_tls::ClientTls>>,
}

/// The `coordinator-node` binary cargo built next to the running executable: a test's
/// (`target/<profile>/deps/<test>`) or the `nemesis` binary's (`target/<profile>/nemesis`).
pub(crate) fn node_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().expect("the executable's folder");
    let bin = [dir.join("coordinator-node"), dir.parent().unwrap_or(dir).join("coordinator-node")]
        .into_iter()
        .find(|p| p.exists());
    bin.unwrap_or_else(|| {
        panic!("coordinator-node is missing next to {}: build it with `cargo build --workspace`", exe.display())
    })
}

/// `coordctl` (the same code, built in this package as `coordctl-test`) aimed at `addr`.
pub fn coordctl(addr: &str) -> Command {
    let mut c = Command::new(node_binary().with_file_name("coordctl-test"));
    c.arg("--addr").arg(addr);
    c
}

/// A loopback port free at the time of the call, for a server a test starts later.
///
/// Taken below Linux's ephemeral range (32768-60999): an ephemeral port asked of the kernel
/// (`bind :0`) is also what every outgoing connection of every client in a concurrent test may be
/// given between this call and the server's bind, which made a node fail to start with "address
/// in use" now and then. Ports here are handed out once per test process (a counter starting at a
/// place chosen by the process id, so two test processes rarely walk the same ports) and probed.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 12_000;
    const SPAN: u32 = 20_000; // 12000..32000
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(u32::MAX, (std::process::id() * 997) % SPAN, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN)
}

impl Cluster {
    /// Starts `n` bootstrapping nodes (ids 1..=n) and waits until every metadata partition has a
    /// leader.
    pub async fn start(n: u64, options: Options) -> Cluster {
        let c = Cluster::launch(n, options);
        c.wait_for_leaders(Duration::from_secs(60)).await;
        c
    }

    /// Starts `n` bootstrapping nodes (ids 1..=n) without waiting for anything.
    pub fn launch(n: u64, options: Options) -> Cluster {
        let mut c = Cluster::prepare(n, options);
        for id in c.ids() {
            c.spawn(id);
        }
        c
    }

    /// A cluster of `n` bootstrapping nodes (ids 1..=n), none started: `spawn` each when wanted.
    pub fn prepare(n: u64, options: Options) -> Cluster {
        let dir = tempfile::Builder::new().prefix("diskless-cluster-").tempdir().expect("temp dir");
        let tls = options.tls;
        let mut c = Cluster { dir, nodes: BTreeMap::new(), members: vec![], options, keep: false, client_tls: None };
        if tls {
            c.make_certs((1..=n).map(|id| format!("node-{id}")).collect());
        }
        for id in 1..=n {
            let addr = format!("127.0.0.1:{}", free_port());
            let peer_addr = tls.then(|| format!("127.0.0.1:{}", free_port()));
            c.members.push((id, peer_addr.clone().unwrap_or_else(|| addr.clone())));
            let metrics_addr = c.options.metrics.then(|| format!("127.0.0.1:{}", free_port()));
            c.nodes.insert(id, NodeProc { addr, peer_addr, child: None, bootstrap: true, metrics_addr });
        }
        c
    }

    /// The CA, the nodes' certificates (`names`), `operator`, `broker-1`, `reader-1`, and
    /// `intruder` (same CA, names no member), in `<root>/certs`.
    fn make_certs(&mut self, names: Vec<String>) {
        let dir = self.certs_dir();
        let ca = diskless_tls::certs::Ca::new("test cluster CA").expect("CA");
        ca.write(&dir).expect("write the CA");
        for n in names {
            ca.issue(&n, &["127.0.0.1", "localhost"]).and_then(|c| c.write(&dir, &n)).expect("node certificate");
        }
        for n in ["operator", "broker-1", "reader-1", "intruder"] {
            ca.issue(n, &[]).and_then(|c| c.write(&dir, n)).expect("client certificate");
        }
        self.client_tls = Some(diskless_tls::ClientTls::new(&self.tls_files("operator")).expect("operator TLS"));
    }

    /// Where the test CA and certificates are (`ca.pem`, `<name>.pem`, `<name>.key`).
    pub fn certs_dir(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// The files of certificate `name` with the cluster's CA.
    pub fn tls_files(&self, name: &str) -> diskless_tls::TlsFiles {
        let d = self.certs_dir();
        diskless_tls::TlsFiles::new(d.join(format!("{name}.pem")), d.join(format!("{name}.key")), d.join("ca.pem"))
    }

    /// `coordctl` aimed at `addr`, presenting certificate `name` (with `Options::tls`).
    pub fn coordctl_as(&self, addr: &str, name: &str) -> Command {
        let mut c = coordctl(addr);
        let f = self.tls_files(name);
        c.arg("--cacert").arg(&f.ca).arg("--cert").arg(&f.cert).arg("--key").arg(&f.key);
        c
    }

    /// Node `id`'s peer listener (its member address), with `Options::tls`.
    pub fn peer_addr(&self, id: u64) -> Option<&str> {
        self.nodes[&id].peer_addr.as_deref()
    }

    fn config(&self, id: u64) -> String {
        let node = &self.nodes[&id];
        let o = &self.options;
        let dirs = if o.data_dirs <= 1 {
            format!("data_dir = \"{}\"", self.data_dir(id).display())
        } else {
            let list: Vec<String> = self.data_dirs(id).iter().map(|d| format!("\"{}\"", d.display())).collect();
            format!("data_dirs = [{}]", list.join(", "))
        };
        let mut s = format!(
            "node_id = {id}\nlisten = \"{}\"\n{dirs}\nnum_metadata_partitions = {}\n\
             leader_balance_ms = {}\nretention_check_ms = {}\nallow_fault_injection = true\n\
             test_snapshot_install_pause_ms = {}\n{}\n{}\n{}\n\
             [raft]\nsnapshot_after_entries = {}\nentries_kept_after_snapshot = {}\n",
            node.addr,
            o.metadata_partitions,
            o.leader_balance_ms,
            o.retention_check_ms,
            o.snapshot_install_pause_ms,
            node.metrics_addr.as_ref().map_or(String::new(), |m| format!("metrics_addr = \"{m}\"\n")),
            node.peer_addr.as_ref().map_or(String::new(), |p| format!("peer_listen = \"{p}\"\n")),
            o.extra_config,
            o.snapshot_after_entries,
            o.entries_kept_after_snapshot,
        );
        if node.bootstrap {
            for (mid, addr) in &self.members {
                s.push_str(&format!("\n[[members]]\nid = {mid}\naddr = \"{addr}\"\n"));
            }
        }
        if o.tls {
            let f = self.tls_files(&format!("node-{id}"));
            let files = format!(
                "cert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
                f.cert.display(),
                f.key.display(),
                f.ca.display()
            );
            s.push_str(&format!(
                "\n[tls]\n{files}\n[peer_tls]\n{files}\n[roles]\nadmin = [\"operator\"]\nbroker = [\"broker-1\"]\n\
                 reader = [\"reader-1\"]\n"
            ));
        }
        s
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    /// Node `id`'s data directories when `Options::data_dirs` > 1: `node-<id>/dir-<k>`.
    pub fn data_dirs(&self, id: u64) -> Vec<PathBuf> {
        (0..self.options.data_dirs.max(1)).map(|k| self.data_dir(id).join(format!("dir-{k}"))).collect()
    }

    fn log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}.log"))
    }

    /// Starts (or restarts) node `id`'s process.
    pub fn spawn(&mut self, id: u64) {
        let config_path = self.dir.path().join(format!("node-{id}.toml"));
        std::fs::write(&config_path, self.config(id)).expect("write node config");
        let log = File::options().create(true).append(true).open(self.log_path(id)).expect("open node log");
        let child = Command::new(node_binary())
            .arg("--config")
            .arg(&config_path)
            .env(
                "RUST_LOG",
                std::env::var("DISKLESS_NODE_LOG")
                    .unwrap_or_else(|_| "info,openraft=warn,openraft::core::heartbeat=error".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start coordinator-node");
        self.nodes.get_mut(&id).expect("known node").child = Some(child);
    }

    /// SIGKILLs node `id` (a crash: nothing is flushed, nothing is shut down).
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Deletes node `id`'s data directory (a replaced disk); the node must be stopped.
    pub fn wipe(&mut self, id: u64) {
        assert!(self.nodes[&id].child.is_none(), "wipe node {id} after stopping it");
        std::fs::remove_dir_all(self.data_dir(id)).expect("remove the data directory");
    }

    /// Adds a process for a new node `id` that does not bootstrap (it waits to be added).
    /// Returns its member address (the peer listener's, with `Options::tls`).
    pub fn spawn_new_node(&mut self, id: u64) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        let peer_addr = self.options.tls.then(|| format!("127.0.0.1:{}", free_port()));
        if self.options.tls {
            let ca = diskless_tls::certs::Ca::load(&self.certs_dir().join("ca.pem"), &self.certs_dir().join("ca.key"))
                .expect("the test CA");
            let name = format!("node-{id}");
            ca.issue(&name, &["127.0.0.1", "localhost"]).and_then(|c| c.write(&self.certs_dir(), &name)).expect("cert");
        }
        let metrics_addr = self.options.metrics.then(|| format!("127.0.0.1:{}", free_port()));
        let member = peer_addr.clone().unwrap_or_else(|| addr.clone());
        self.nodes.insert(id, NodeProc { addr, peer_addr, child: None, bootstrap: false, metrics_addr });
        self.spawn(id);
        member
    }

    pub fn addr(&self, id: u64) -> &str {
        &self.nodes[&id].addr
    }

    /// Where node `id` serves Prometheus metrics (with `Options::metrics`).
    pub fn metrics_addr(&self, id: u64) -> Option<&str> {
        self.nodes[&id].metrics_addr.as_deref()
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    pub fn running(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| n.child.is_some()).map(|(id, _)| *id).collect()
    }

    /// The process id of node `id`, while it runs (for SIGSTOP/SIGCONT).
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.nodes.get(&id)?.child.as_ref().map(|c| c.id())
    }

    /// Whether node `id`'s process ended by itself (a crash, an abort); its exit status is
    /// collected and the node counts as not running.
    pub fn exited(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        let node = self.nodes.get_mut(&id)?;
        let status = node.child.as_mut()?.try_wait().ok().flatten()?;
        node.child = None;
        Some(status)
    }

    /// Whether node `id` bootstraps from `[[members]]` when (re)started. A node whose data
    /// directory was wiped must not: it joins as a new node and is added (learner, then voter).
    pub fn set_bootstrap(&mut self, id: u64, bootstrap: bool) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.bootstrap = bootstrap;
        }
    }

    /// The folder holding every node's data, configuration and log.
    pub fn root(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Keeps the cluster's folder after the cluster is dropped (for a failing run's evidence).
    pub fn keep_files(&mut self) {
        self.keep = true;
    }

    /// A channel to node `id` (waits up to 30 s for it to accept connections); over TLS as
    /// `operator` with `Options::tls`.
    pub async fn channel(&self, id: u64) -> Channel {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr(id)))
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(2));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match diskless_tls::client::connect(endpoint.clone(), self.client_tls.clone()).await {
                Ok(c) => return c,
                Err(e) if Instant::now() > deadline => panic!("node {id} does not accept connections: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub async fn client(&self, id: u64) -> Client {
        CoordinatorServiceClient::new(self.channel(id).await).max_decoding_message_size(256 << 20)
    }

    pub async fn admin(&self, id: u64) -> Admin {
        AdminServiceClient::new(self.channel(id).await)
    }

    /// Node `on` sends nothing to the nodes `to`, neither Raft messages nor forwarded requests
    /// (an empty `to` heals it).
    pub async fn block(&self, on: u64, to: &[u64]) {
        self.admin(on)
            .await
            .inject_fault(diskless_proto::admin::FaultRequest { block_node_ids: to.to_vec(), ..Default::default() })
            .await
            .expect("inject fault");
    }

    pub async fn status(&self, id: u64, with_digest: bool) -> StatusResponse {
        self.admin(id)
            .await
            .status(StatusRequest { with_digest, ..Default::default() })
            .await
            .expect("status")
            .into_inner()
    }

    /// Waits until node `via` sees a leader for every metadata partition, agreed by all running
    /// nodes.
    pub async fn wait_for_leaders(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut ok = true;
            let mut leaders: Option<Vec<u64>> = None;
            for id in self.running() {
                let s =
                    match self.admin(id).await.status(StatusRequest { with_digest: false, ..Default::default() }).await
                    {
                        Ok(s) => s.into_inner(),
                        Err(_) => {
                            ok = false;
                            break;
                        }
                    };
                let l: Vec<u64> = s.groups.iter().map(|g| g.leader).collect();
                if l.contains(&0) || leaders.as_ref().is_some_and(|x| *x != l) {
                    ok = false;
                }
                leaders = Some(l);
            }
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "metadata partitions have no agreed leader after {timeout:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The leader of each metadata partition as node `via` sees it.
    pub async fn leaders(&self, via: u64) -> Vec<u64> {
        self.status(via, false).await.groups.iter().map(|g| g.leader).collect()
    }

    /// Waits until every running node has applied at least what `via`'s leaders have, then returns
    /// each metadata partition's digest per node (all must agree).
    pub async fn converged_digests(&self, timeout: Duration) -> Vec<BTreeMap<u64, String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut per_partition: Vec<BTreeMap<u64, (u64, String)>> =
                vec![BTreeMap::new(); self.options.metadata_partitions as usize];
            for id in self.running() {
                let s = self.status(id, true).await;
                for g in s.groups {
                    per_partition[g.metadata_partition as usize].insert(id, (g.digest_applied_index, g.digest));
                }
            }
            let same_index = per_partition.iter().all(|m| {
                let idx: Vec<u64> = m.values().map(|(i, _)| *i).collect();
                idx.windows(2).all(|w| w[0] == w[1])
            });
            if same_index || Instant::now() > deadline {
                return per_partition
                    .into_iter()
                    .map(|m| m.into_iter().map(|(id, (_, d))| (id, d)).collect())
                    .collect();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Prints the tail of every node's log (for failing tests).
    pub fn dump_logs(&self) {
        for id in self.ids() {
            let text = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            // A node that failed to start ends with a long backtrace: its error line comes first.
            if let Some(e) = lines.iter().find(|l| l.starts_with("Error:") || l.contains("panicked at")) {
                eprintln!("----- node {id} failed: {e}");
            }
            eprintln!("----- node {id} log (last 40 lines) -----");
            for l in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{l}");
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs();
        }
        for id in self.ids() {
            self.kill(id);
        }
        if self.keep || std::env::var_os("DISKLESS_KEEP_TEST_DIRS").is_some() {
            let path = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir")).keep();
            eprintln!("test cluster files kept in {}", path.display());
        }
    }
}
