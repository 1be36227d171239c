//! The server's command line (`diskless-coordinator`; the operator CLI `coordctl` is `ctl`). Kept
//! in the library so test harnesses can build the same server binary.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use crate::node::{Member, Node, NodeConfig};

/// A diskless coordinator node.
#[derive(Debug, Parser)]
#[command(name = "diskless-coordinator", version, about)]
pub struct ServerArgs {
    /// TOML configuration file (see deploy/local/ for an example). Flags and environment override
    /// it.
    #[arg(long, env = "DISKLESS_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, env = "DISKLESS_NODE_ID")]
    pub node_id: Option<u64>,
    /// host:port to listen on.
    #[arg(long, env = "DISKLESS_LISTEN")]
    pub listen: Option<String>,
    /// host:port clients reach this node at (default: --listen).
    #[arg(long, env = "DISKLESS_ADVERTISE")]
    pub advertise: Option<String>,
    /// host:port of a separate peer listener (Raft traffic); unset: peers use --listen.
    #[arg(long, env = "DISKLESS_PEER_LISTEN")]
    pub peer_listen: Option<String>,
    /// host:port peers reach this node at (default: --peer-listen, else --advertise).
    #[arg(long, env = "DISKLESS_PEER_ADVERTISE")]
    pub peer_advertise: Option<String>,
    #[arg(long, env = "DISKLESS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Initial voters, `id=host:port,...` (bootstraps a new cluster; harmless on restart).
    #[arg(long, env = "DISKLESS_MEMBERS")]
    pub members: Option<String>,
    /// Number of metadata partitions of a new cluster.
    #[arg(long, env = "DISKLESS_METADATA_PARTITIONS")]
    pub metadata_partitions: Option<u32>,
    /// host:port to serve Prometheus metrics on (`GET /metrics`; off when unset).
    #[arg(long, env = "DISKLESS_METRICS_ADDR")]
    pub metrics_addr: Option<String>,
    /// Log filter (tracing's EnvFilter syntax), e.g. `info` or `diskless_coordinator=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "info,openraft=warn,openraft::core::heartbeat=error")]
    pub log: String,
}

pub fn parse_members(s: &str) -> anyhow::Result<Vec<Member>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (id, addr) = p.split_once('=').with_context(|| format!("member {p:?} is not id=host:port"))?;
            let id = id.trim().parse().with_context(|| format!("member id {id:?} is not a number"))?;
            Ok(Member { id, addr: addr.trim().to_string() })
        })
        .collect()
}

impl ServerArgs {
    /// The configuration: the file (if any), then environment and flags.
    pub fn config(&self) -> anyhow::Result<NodeConfig> {
        let mut table: toml::Table = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
                text.parse().with_context(|| format!("parse {}", p.display()))?
            }
            None => toml::Table::new(),
        };
        let mut set = |k: &str, v: toml::Value| {
            table.insert(k.to_string(), v);
        };
        if let Some(v) = self.node_id {
            set("node_id", toml::Value::Integer(v as i64));
        }
        if let Some(v) = &self.listen {
            set("listen", v.clone().into());
        }
        if let Some(v) = &self.advertise {
            set("advertise", v.clone().into());
        }
        if let Some(v) = &self.peer_listen {
            set("peer_listen", v.clone().into());
        }
        if let Some(v) = &self.peer_advertise {
            set("peer_advertise", v.clone().into());
        }
        if let Some(v) = &self.data_dir {
            set("data_dir", v.display().to_string().into());
        }
        if let Some(v) = &self.metrics_addr {
            set("metrics_addr", v.clone().into());
        }
        if let Some(v) = self.metadata_partitions {
            set("num_metadata_partitions", toml::Value::Integer(i64::from(v)));
        }
        let mut config: NodeConfig = table.try_into().context("invalid configuration")?;
        if let Some(m) = &self.members {
            config.members = parse_members(m)?;
        }
        config.validate()?;
        Ok(config)
    }
}

/// Runs a node until SIGTERM or SIGINT, then shuts it down cleanly.
pub async fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let listeners = crate::server::Listeners::bind(&config).await?;
    let addr = listeners.client.local_addr()?;
    let peer_addr = listeners.peer.as_ref().map(|l| l.local_addr()).transpose()?;
    let node = Node::start(config).await?;
    tracing::info!(node = node.id, %addr, ?peer_addr, metadata_partitions = node.num_partitions(), "coordinator node serving");
    println!("diskless-coordinator node {} listening on {addr}", node.id);
    if let Some(p) = peer_addr {
        println!("diskless-coordinator node {} peer listener on {p}", node.id);
    }
    if let Some(m) = node.config.metrics_addr.clone() {
        let bound = crate::server::metrics_listener::serve(&node, &m).await?;
        println!("diskless-coordinator node {} metrics on http://{bound}/metrics", node.id);
    }
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("shutting down");
    };
    crate::server::serve(node.clone(), listeners, shutdown).await?;
    node.shutdown().await;
    Ok(())
}

/// Sets up logging to stderr.
pub fn init_logging(filter: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// The server binary's `main`.
pub fn server_main() -> anyhow::Result<()> {
    let args = ServerArgs::parse();
    init_logging(&args.log);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run_server(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_members_parse() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "node_id = 1\nlisten = \"127.0.0.1:1\"\ndata_dir = \"x\"\n").unwrap();
        let args = ServerArgs::parse_from([
            "x",
            "--config",
            f.to_str().unwrap(),
            "--listen",
            "127.0.0.1:2",
            "--members",
            "1=127.0.0.1:2, 2=127.0.0.1:3",
        ]);
        let c = args.config().unwrap();
        assert_eq!(c.listen, "127.0.0.1:2");
        assert_eq!(c.members.len(), 2);
        let bad = ServerArgs::parse_from(["x", "--config", f.to_str().unwrap(), "--members", "1:abc"]);
        assert!(bad.config().unwrap_err().to_string().contains("id=host:port"));
    }
}
