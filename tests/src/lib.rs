//! Harness for cluster tests: starts real `coordinator-node` processes on loopback ports, each with
//! its own data directory under one temporary folder; kills (SIGKILL), restarts and adds nodes;
//! gives gRPC clients and request builders.
//!
//! Each node's log goes to `<tmp>/node-<id>.log`; when a test fails, the tail of every log is
//! printed. Set `DISKLESS_KEEP_TEST_DIRS=1` to keep the folder, and `DISKLESS_NODE_LOG` to change the
//! nodes' `RUST_LOG` filter.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod kafka_wire;
pub mod nemesis;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::{StatusRequest, StatusResponse};
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::*;
use tonic::transport::Channel;
use uuid::Uuid;

pub type Client = CoordinatorServiceClient<Channel>;
pub type Admin = AdminServiceClient<Channel>;

/// Settings every test cluster shares; tests change what they need.
#[derive(Debug, Clone)]
pub struct Options {
    pub groups: u32,
    pub snapshot_after_entries: u64,
    pub entries_kept_after_snapshot: u64,
    pub leader_balance_ms: u64,
    /// Every snapshot install pauses this long, twice (see the node's `test_snapshot_install_pause_ms`).
    pub snapshot_install_pause_ms: u64,
    /// How often group leaders run retention (`retention_check_ms`; an hour: practically never).
    pub retention_check_ms: u64,
    /// Serve Prometheus metrics on a free port per node (`metrics_addr`; see [`Cluster::metrics_addr`]).
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
            groups: 4,
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
fn node_binary() -> PathBuf {
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

/// Whether kcat, confluent-kafka and kafka-python are installed; in CI (`DISKLESS_CI`) they must
/// be, elsewhere a test without them prints why it skips.
pub fn kafka_clients_available() -> bool {
    let have = |tool: &str, probe: &[&str]| Command::new(tool).args(probe).output().is_ok_and(|o| o.status.success());
    let ready = have("kcat", &["-V"]) && have("python3", &["-c", "import confluent_kafka, kafka"]);
    if !ready {
        assert!(std::env::var_os("DISKLESS_CI").is_none(), "kcat, confluent-kafka and kafka-python are required in CI");
        eprintln!("SKIPPED: install kcat (apt) and confluent-kafka + kafka-python (pip) to run the client tests");
    }
    ready
}

/// Runs the client script `tests/python/<script>` with `args`; asserts that it exited 0 having
/// printed `passed`, and prints the `FIGURE` lines it reported. Returns its output.
pub async fn run_python_checks(script: &str, args: Vec<String>, passed: &str) -> String {
    let path = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::task::spawn_blocking(move || Command::new("python3").arg(path).args(args).output())
        .await
        .expect("the python3 task")
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_checks_passed(script, out.status.success(), &stdout, &stderr, passed);
    stdout
}

/// Asserts that a client script succeeded (`ok`) and printed `passed`, showing its output and the
/// tail of its stderr otherwise; prints the `FIGURE` lines it reported.
pub fn assert_checks_passed(script: &str, ok: bool, stdout: &str, stderr: &str, passed: &str) {
    for line in stdout.lines().filter(|l| l.starts_with("FIGURE")) {
        println!("{line}");
    }
    let mut from = stderr.len().saturating_sub(3000);
    while !stderr.is_char_boundary(from) {
        from += 1;
    }
    let tail = &stderr[from..];
    assert!(ok && stdout.contains(passed), "{script}: checks failed\n--- stdout\n{stdout}\n--- stderr (tail)\n{tail}");
}

/// A loopback port free at the time of the call.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

impl Cluster {
    /// Starts `n` bootstrapping nodes (ids 1..=n) and waits until every group has a leader.
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
            o.groups,
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

    /// Waits until node `via` sees a leader for every group, agreed by all running nodes.
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
            assert!(Instant::now() < deadline, "groups have no agreed leader after {timeout:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The leader of each group as node `via` sees it.
    pub async fn leaders(&self, via: u64) -> Vec<u64> {
        self.status(via, false).await.groups.iter().map(|g| g.leader).collect()
    }

    /// Waits until every running node has applied at least what `via`'s leaders have, then returns
    /// each group's digest per node (all must agree).
    pub async fn converged_digests(&self, timeout: Duration) -> Vec<BTreeMap<u64, String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut per_group: Vec<BTreeMap<u64, (u64, String)>> = vec![BTreeMap::new(); self.options.groups as usize];
            for id in self.running() {
                let s = self.status(id, true).await;
                for g in s.groups {
                    per_group[g.metadata_partition as usize].insert(id, (g.digest_applied_index, g.digest));
                }
            }
            let same_index = per_group.iter().all(|m| {
                let idx: Vec<u64> = m.values().map(|(i, _)| *i).collect();
                idx.windows(2).all(|w| w[0] == w[1])
            });
            if same_index || Instant::now() > deadline {
                return per_group.into_iter().map(|m| m.into_iter().map(|(id, (_, d))| (id, d)).collect()).collect();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Prints the tail of every node's log (for failing tests).
    pub fn dump_logs(&self) {
        for id in self.ids() {
            let text = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
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

// ---------------------------------------------------------------- metrics

/// `GET /metrics` from `addr` over plain HTTP/1.1: the content type and the body.
pub async fn scrape(addr: &str) -> Result<(String, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8(raw).map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP header end")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("scrape of {addr}: {head}"));
    }
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: ").or_else(|| l.strip_prefix("Content-Type: ")))
        .unwrap_or_default()
        .to_string();
    Ok((content_type, body.to_string()))
}

/// The sum of every series of metric `name` (any labels) in a scrape; `None` if it has none.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The value of the series `series` (name and labels exactly as printed) in a scrape.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

// ---------------------------------------------------------------- request builders

pub fn topic_id(n: u8) -> Vec<u8> {
    Uuid::from_bytes([n; 16]).as_bytes().to_vec()
}

pub fn create_request(topic: &[u8], name: &str, partitions: i32) -> CreatePartitionsRequest {
    CreatePartitionsRequest {
        topics: vec![create_partitions_request::CreatablePartitions {
            topic_id: topic.to_vec(),
            name: name.into(),
            num_partitions: partitions,
            configs: None,
        }],
        timeout_ms: 10_000,
    }
}

/// Creates a topic through `client`, retrying retriable errors (a leader being elected).
pub async fn create_topic(client: &mut Client, topic: &[u8], name: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client.create_partitions(create_request(topic, name, partitions)).await;
        match r.map(|r| r.into_inner().topics[0].error_code) {
            Ok(0) => return,
            other if Instant::now() > deadline => panic!("create topic {name}: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A batch of `records` records for partition `partition` of `topic`, `size` bytes at `at`.
pub fn batch(topic: &[u8], partition: i32, records: i64, at: i32, size: i32) -> commit_file_request::CommitBatch {
    commit_file_request::CommitBatch {
        magic: 2,
        request_id: 0,
        topic_id: topic.to_vec(),
        partition_index: partition,
        byte_offset: at,
        size,
        base_offset: 0,
        last_offset: records - 1,
        batch_max_timestamp: 0,
        timestamp_type: 0,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
    }
}

/// A CommitFile request for `object_key` holding one batch per `(partition, records)`, 100 bytes
/// each, back to back.
pub fn commit_request(object_key: &str, topic: &[u8], parts: &[(i32, i64)]) -> CommitFileRequest {
    let batches: Vec<_> =
        parts.iter().enumerate().map(|(i, &(p, n))| batch(topic, p, n, i as i32 * 100, 100)).collect();
    CommitFileRequest {
        object_key: object_key.into(),
        object_format: 1,
        file_size: 100 * parts.len() as i64,
        owner_ids: vec![],
        batches,
        timeout_ms: 10_000,
        uploader_broker_id: 1,
    }
}

/// Every batch of one partition from offset 0, read from `client`'s node (after it applied `min`).
pub async fn all_batches(
    client: &mut Client,
    topic: &[u8],
    partition: i32,
    min: Vec<GroupIndex>,
) -> Result<Vec<find_batches_response::BatchInfo>, String> {
    let mut out = vec![];
    let mut offset = 0;
    loop {
        let r = client
            .find_batches(FindBatchesRequest {
                fetch_max_bytes: i32::MAX,
                max_batches_per_partition: 10_000,
                topics: vec![find_batches_request::FindBatchesTopic {
                    topic_id: topic.to_vec(),
                    partitions: vec![find_batches_request::FindBatchesPartition {
                        partition_index: partition,
                        offset,
                        max_partition_fetch_bytes: i32::MAX,
                    }],
                }],
                timeout_ms: 10_000,
                min_applied: min.clone(),
            })
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        let p = &r.topics[0].partitions[0];
        if p.error_code != 0 {
            return Err(format!("FindBatches error {}: {:?}", p.error_code, p.error_message));
        }
        if p.batches.is_empty() {
            return Ok(out);
        }
        offset = p.batches.last().map_or(offset, |b| b.last_offset + 1);
        out.extend(p.batches.iter().cloned());
        if offset >= p.high_watermark {
            return Ok(out);
        }
    }
}

/// The high watermark of a partition through a strict ListOffsets.
pub async fn high_watermark(client: &mut Client, topic: &[u8], partition: i32) -> Result<i64, String> {
    let r = client
        .list_offsets(ListOffsetsRequest {
            topics: vec![list_offsets_request::ListOffsetsTopic {
                topic_id: topic.to_vec(),
                partitions: vec![list_offsets_request::ListOffsetsPartition {
                    partition_index: partition,
                    timestamp: -1,
                }],
            }],
            timeout_ms: 10_000,
        })
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    let p = &r.topics[0].partitions[0];
    if p.error_code != 0 {
        return Err(format!("ListOffsets error {}: {:?}", p.error_code, p.error_message));
    }
    Ok(p.offset)
}

/// Commits one batch per `(partition, records)` through `client`, retrying the batches that failed
/// with a retriable error (under a new object key: the first file may be committed in part).
pub async fn commit_all(client: &mut Client, key: &str, topic: &[u8], parts: &[(i32, i64)]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut left: Vec<(i32, i64)> = parts.to_vec();
    let mut attempt = 0;
    while !left.is_empty() {
        attempt += 1;
        let req = commit_request(&format!("{key}#{attempt}"), topic, &left);
        let retry: Vec<(i32, i64)> = match client.commit_file(req).await {
            Ok(r) => r
                .into_inner()
                .batches
                .iter()
                .zip(&left)
                .filter(|(b, _)| {
                    assert!(
                        matches!(b.error_code, 0 | 6 | 7),
                        "commit {key}: error {} {:?}",
                        b.error_code,
                        b.error_message
                    );
                    b.error_code != 0
                })
                .map(|(_, p)| *p)
                .collect(),
            Err(_) => left.clone(),
        };
        left = retry;
        assert!(Instant::now() < deadline, "commit {key} still failing after a minute");
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

// ---------------------------------------------------------------- broker shims and object storage

/// Where a test broker keeps WAL segments.
#[derive(Debug, Clone)]
pub enum TestStorage {
    Local(PathBuf),
    S3 { endpoint: String, bucket: String },
}

impl TestStorage {
    /// The store itself, for tests that look at or damage objects directly.
    pub fn open(&self) -> diskless_broker_shim::storage::Storage {
        use diskless_broker_shim::config::StorageConfig;
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
        let exe = node_binary().with_file_name("broker-node");
        let child = Command::new(exe)
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

/// A moto S3 server on a loopback port with one bucket, if `moto_server` is installed. CI
/// installs it (and sets `DISKLESS_CI=1`, which turns its absence into a failure).
pub struct S3Server {
    child: Child,
    pub endpoint: String,
}

impl S3Server {
    pub fn start(bucket: &str) -> Option<S3Server> {
        let port = free_port();
        let child = match Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                assert!(std::env::var_os("DISKLESS_CI").is_none(), "moto_server is required: {e}");
                eprintln!(
                    "SKIPPED: moto_server not installed (pip install 'moto[server]'); the S3 variant did not run"
                );
                return None;
            }
        };
        let s = S3Server { child, endpoint: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(status) =
                raw_http(port, &format!("PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"))
            {
                assert!(
                    status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200"),
                    "create bucket: {status}"
                );
                return Some(s);
            }
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn raw_http(port: u16, request: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(request.as_bytes())?;
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string())
}

// ---------------------------------------------------------------- producing and consuming through a broker

pub use diskless_broker_shim::records::{self as kafka_records, Idempotence, Message, NOT_IDEMPOTENT};
pub use kafka_protocol::records::Compression;
pub use kafka_wire::{kafka_call, kafka_request};

/// A record batch of `values` (keys `k<value>`), for `BrokerService.Produce`.
pub fn batch_of(values: &[String]) -> Vec<u8> {
    let recs: Vec<_> = values
        .iter()
        .map(|v| (Some(bytes::Bytes::from(format!("k{v}"))), Some(bytes::Bytes::from(v.clone()))))
        .collect();
    kafka_records::encode(&recs, 1_700_000_000_000, Compression::None, NOT_IDEMPOTENT).expect("encode").to_vec()
}

/// An idempotent producer's record batch of `values`.
pub fn idempotent_batch_of(values: &[String], idem: Idempotence) -> Vec<u8> {
    let recs: Vec<_> = values
        .iter()
        .map(|v| (Some(bytes::Bytes::from(format!("k{v}"))), Some(bytes::Bytes::from(v.clone()))))
        .collect();
    kafka_records::encode(&recs, 1_700_000_000_000, Compression::None, idem).expect("encode").to_vec()
}

/// Whether a Kafka error code is worth retrying (leadership moves, timeouts, storage hiccups).
pub fn retriable(code: i32) -> bool {
    matches!(code, 6 | 7 | 9 | 56)
}

/// Produces one batch, retrying retriable errors (the same bytes: for idempotent batches the
/// coordinator recognises a retry of a committed one). Panics on other errors.
pub async fn produce_retrying(
    broker: &mut BrokerClient,
    topic: &str,
    partition: i32,
    records: Vec<u8>,
) -> diskless_proto::broker::ProduceResponse {
    use diskless_proto::broker::ProduceRequest;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let req = ProduceRequest { topic: topic.into(), partition, records: records.clone() };
        let r = broker.produce(req).await.expect("produce rpc").into_inner();
        if r.error_code == 0 {
            return r;
        }
        assert!(retriable(r.error_code), "produce to {topic}/{partition}: {} {:?}", r.error_code, r.error_message);
        assert!(Instant::now() < deadline, "produce still failing after a minute: {:?}", r.error_message);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every message of a partition, fetched from offset 0 through `broker`.
pub async fn consume_all(broker: &mut BrokerClient, topic: &str, partition: i32) -> Result<Vec<Message>, String> {
    use diskless_proto::broker::FetchRequest;
    let mut out = vec![];
    let mut offset = 0;
    loop {
        let r = broker
            .fetch(FetchRequest { topic: topic.into(), partition, offset, max_bytes: 4 << 20 })
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        if r.error_code != 0 {
            return Err(format!("fetch error {}: {:?}", r.error_code, r.error_message));
        }
        if r.records.is_empty() {
            return Ok(out);
        }
        let msgs = kafka_records::decode(bytes::Bytes::from(r.records)).map_err(|e| e.to_string())?;
        offset = msgs.last().map_or(offset, |m| m.offset + 1);
        out.extend(msgs);
        if offset >= r.high_watermark {
            return Ok(out);
        }
    }
}

/// Creates a topic through a broker, retrying while the coordinators elect.
pub async fn create_topic_via(broker: &mut BrokerClient, name: &str, partitions: i32) {
    use diskless_proto::broker::CreateTopicRequest;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut retried = false;
    loop {
        let r = broker
            .create_topic(CreateTopicRequest {
                name: name.into(),
                partitions,
                retention_ms: None,
                retention_bytes: None,
            })
            .await
            .expect("create topic rpc")
            .into_inner();
        // TOPIC_ALREADY_EXISTS after a failed try: that try's creation completed after all.
        if r.error_code == 0 || (r.error_code == 36 && retried) {
            return;
        }
        retried = true;
        assert!(Instant::now() < deadline, "create topic {name}: {:?}", r.error_message);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
