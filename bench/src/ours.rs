//! Our system under test: a local 3-node coordinator cluster with fsync on (the bench re-executes
//! itself as each node), stopped when dropped. It must not run workloads.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::StatusRequest;

pub struct LocalCluster {
    _dir: tempfile::TempDir,
    children: Vec<Child>,
    pub addrs: Vec<String>,
    /// Each node's Prometheus listener.
    pub metrics: Vec<String>,
    /// With TLS: the certificate clients present (`bench`, of the run's CA).
    pub client_tls: Option<std::sync::Arc<diskless_tls::ClientTls>>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalCluster {
    /// Starts 3 nodes with `metadata_partitions` metadata partitions under a temporary directory
    /// (or `base`); with `tls`, every node's listener requires mutual TLS (a CA made for the run;
    /// the nodes present their own certificates to each other).
    pub async fn start(metadata_partitions: u32, base: Option<PathBuf>, tls: bool) -> anyhow::Result<LocalCluster> {
        let dir = match base {
            Some(b) => tempfile::Builder::new().prefix("diskless-bench-").tempdir_in(b)?,
            None => tempfile::Builder::new().prefix("diskless-bench-").tempdir()?,
        };
        let addrs: Vec<String> =
            (0..3).map(|_| free_port().map(|p| format!("127.0.0.1:{p}"))).collect::<Result<_, _>>()?;
        let metrics: Vec<String> =
            (0..3).map(|_| free_port().map(|p| format!("127.0.0.1:{p}"))).collect::<Result<_, _>>()?;
        let members = addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",");
        let exe = std::env::current_exe()?;
        let certs = dir.path().join("certs");
        let client_tls = if tls {
            std::fs::create_dir_all(&certs)?;
            let ca = diskless_tls::certs::Ca::new("bench CA")?;
            ca.write(&certs)?;
            for i in 1..=addrs.len() {
                ca.issue(&format!("node-{i}"), &["127.0.0.1", "localhost"])?.write(&certs, &format!("node-{i}"))?;
            }
            let files = ca.issue("bench", &[])?.write(&certs, "bench")?;
            Some(diskless_tls::ClientTls::new(&files)?)
        } else {
            None
        };
        let mut children = vec![];
        for (i, a) in addrs.iter().enumerate() {
            let log = std::fs::File::create(dir.path().join(format!("node-{}.log", i + 1)))?;
            let mut cmd = Command::new(&exe);
            cmd.args(["node", "--node-id", &(i + 1).to_string(), "--listen", a, "--members", &members]);
            cmd.args(["--metrics-addr", &metrics[i]]);
            if tls {
                let config = dir.path().join(format!("node-{}.toml", i + 1));
                let file = |ext: &str| certs.join(format!("node-{}.{ext}", i + 1)).display().to_string();
                std::fs::write(
                    &config,
                    format!(
                        "[tls]\ncert = {:?}\nkey = {:?}\nca = {:?}\nrequire_client_cert = true\n",
                        file("pem"),
                        file("key"),
                        certs.join("ca.pem").display().to_string()
                    ),
                )?;
                cmd.arg("--config").arg(config);
            }
            let child = cmd
                .arg("--data-dir")
                .arg(dir.path().join(format!("node-{}", i + 1)))
                .args(["--metadata-partitions", &metadata_partitions.to_string()])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("start a coordinator node")?;
            children.push(child);
        }
        let c = LocalCluster { _dir: dir, children, addrs, metrics, client_tls };
        c.wait_ready(Duration::from_secs(120)).await?;
        Ok(c)
    }

    /// The node processes' ids (for their CPU use).
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }

    async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut ok = true;
            for a in &self.addrs {
                let leaders = async {
                    let mut c = AdminServiceClient::new(crate::system::channel(a, &self.client_tls).ok()?);
                    let s =
                        c.status(StatusRequest { with_digest: false, ..Default::default() }).await.ok()?.into_inner();
                    Some(s.groups.iter().all(|g| g.leader != 0))
                }
                .await;
                ok &= leaders == Some(true);
            }
            if ok {
                // Let leadership balancing settle before measuring.
                tokio::time::sleep(Duration::from_secs(4)).await;
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the local cluster did not elect leaders in {timeout:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}
