//! The operator CLI (`coordctl`): one node's status, cluster-wide status and health, membership,
//! leadership moves, snapshots, backups and restores, and the offline `inspect`. In the library so
//! test harnesses build the same binary.
//!
//! Every command prints tables for people, or with `--json` exactly one JSON document on stdout
//! (an error too: `{"error": "..."}`). A command that finds the cluster unhealthy (`status
//! --cluster`, `health`) or fails exits with status 1. It only calls the nodes' gRPC services;
//! it must not hold cluster logic of its own beyond comparing what the nodes answer. `inspect`
//! prints JSON lines (one object per line) with or without `--json`.

mod brokers;
mod cluster;
mod dirs;
mod groups;
mod snapshot;
mod topics;

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::*;
use serde_json::json;
use tonic::transport::Channel;

#[derive(Debug, Parser)]
#[command(name = "coordctl", version, about = "Operate a diskless coordinator cluster")]
pub struct Args {
    /// Any node of the cluster, host:port.
    #[arg(long, env = "DISKLESS_ADDR", default_value = "127.0.0.1:7001", global = true)]
    pub addr: String,
    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// TLS: the CA certificate (PEM) the nodes' certificates must chain to; with --cert and --key.
    #[arg(long, env = "DISKLESS_CACERT", global = true)]
    pub cacert: Option<std::path::PathBuf>,
    /// TLS: this client's certificate (PEM), the identity the nodes' roles name.
    #[arg(long, env = "DISKLESS_CERT", global = true)]
    pub cert: Option<std::path::PathBuf>,
    /// TLS: this client's private key (PEM).
    #[arg(long, env = "DISKLESS_KEY", global = true)]
    pub key: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The TLS settings of every connection this process makes (set once by `run`).
static TLS: std::sync::OnceLock<Option<std::sync::Arc<diskless_tls::ClientTls>>> = std::sync::OnceLock::new();

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Makes certificates for a local or test setup: a CA in DIR (ca.pem, ca.key; made if
    /// missing, else reused) and per SPEC `NAME[:ALTNAME,...]` a certificate NAME.pem/NAME.key
    /// with common name NAME and those alternative names (DNS names or IP addresses), for server
    /// and client use. Production clusters bring certificates from their own PKI.
    Certs {
        #[arg(long)]
        dir: std::path::PathBuf,
        specs: Vec<String>,
    },
    /// Nodes, and per metadata partition: leader, term, log and applied indexes, followers' lag.
    Status {
        /// Print JSON-like raw output (the protobuf debug form) instead of tables.
        #[arg(long)]
        raw: bool,
        /// Start the stage timings (where log entries' time goes) afresh after printing them.
        #[arg(long)]
        reset_stages: bool,
        /// Ask every node of the membership; exit 1 if one does not answer or sees a metadata
        /// partition without a leader.
        #[arg(long)]
        cluster: bool,
    },
    /// gRPC health of the node (`--cluster`: of every node); exit 1 unless all are SERVING.
    Health {
        #[arg(long)]
        cluster: bool,
    },
    /// Compare the replicas of every metadata partition across the nodes (state digests at the
    /// same applied index); exit 1 if two differ or a node does not answer.
    Check,
    /// The cluster's members.
    Members {
        #[command(subcommand)]
        cmd: MembersCmd,
    },
    /// Move a metadata partition's leadership.
    TransferLeader {
        /// The metadata partition.
        // The flag keeps its name, `--group`: scripts and operators use it.
        #[arg(long = "group", value_name = "METADATA_PARTITION")]
        partition: u32,
        #[arg(long)]
        to: u64,
    },
    /// Add a node to every metadata partition (learner, caught up, then voter). Also how a node
    /// whose data directory was replaced rejoins: its old replicas are removed first.
    AddNode {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        address: String,
    },
    /// Remove a node from every metadata partition.
    RemoveNode {
        #[arg(long)]
        id: u64,
    },
    /// Without a subcommand: snapshot every metadata partition on the node now (purging the log
    /// behind). `save`, `restore`, `status`: backups.
    Snapshot {
        #[command(subcommand)]
        cmd: Option<SnapshotCmd>,
    },
    /// The topics of the catalog, and one topic's partitions.
    Topics {
        #[command(subcommand)]
        cmd: TopicsCmd,
    },
    /// The live brokers of the broker registry: id, Kafka address, rack, lease.
    Brokers,
    /// Consumer groups as the cluster holds them: generations, members, committed offsets.
    Groups {
        #[command(subcommand)]
        cmd: GroupsCmd,
    },
    /// Objects as the coordinators know them.
    Files {
        #[command(subcommand)]
        cmd: FilesCmd,
    },
    /// Dump a stopped node's data directory as JSON lines (offline): identity, per metadata
    /// partition its Raft state and a summary of its keys; `--keys`: every key, decoded.
    Inspect {
        data_dir: std::path::PathBuf,
        #[arg(long)]
        keys: bool,
    },
    /// A node's data directories (KIP-113): describe them, move a replica between them, throttle.
    Dirs {
        #[command(subcommand)]
        cmd: DirsCmd,
    },
    /// Wait until the node answers and every metadata partition has a leader.
    WaitReady {
        #[arg(long, default_value_t = 60)]
        timeout_secs: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Back up every metadata partition, each streamed from its leader, into FILE (a header, each
    /// partition's state at its applied log id with its digest, an end checksum).
    Save { file: std::path::PathBuf },
    /// Offline: build a node's data directory for a NEW cluster from a backup (run it for every
    /// node of the new cluster, with the same file, members and token; then start the nodes).
    Restore {
        file: std::path::PathBuf,
        /// The data directory to create (must not exist, or be empty).
        #[arg(long)]
        data_dir: std::path::PathBuf,
        /// This node's id in the new cluster.
        #[arg(long)]
        node_id: u64,
        /// Every node of the new cluster, `id=host:port,...` (as the nodes' `--members`).
        #[arg(long)]
        members: String,
        /// Names this restore: the same on every node of the new cluster, a new one for every
        /// restore (the new cluster id and replica incarnations derive from it).
        #[arg(long)]
        cluster_token: String,
    },
    /// Offline: check a backup file whole and show its header.
    Status { file: std::path::PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum TopicsCmd {
    /// Every topic: name, id, partitions, retention settings.
    List,
    /// One topic: per partition its log start, high watermark, batches, bytes and metadata
    /// partition, each from the leader of its metadata partition (batches are counted).
    Describe { name: String },
}

/// `coordctl certs`: a CA in `dir` (made if missing), and one certificate per spec.
fn certs(dir: &std::path::Path, specs: &[String]) -> anyhow::Result<Report> {
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let ca = if ca_cert.exists() {
        diskless_tls::certs::Ca::load(&ca_cert, &ca_key)?
    } else {
        let ca = diskless_tls::certs::Ca::new("diskless local CA")?;
        ca.write(dir)?;
        ca
    };
    let mut text = format!("CA: {}\n", ca_cert.display());
    let mut issued = vec![];
    for spec in specs {
        let (name, sans) = spec.split_once(':').unwrap_or((spec, ""));
        anyhow::ensure!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "certificate name {name:?}: letters, digits, '-', '_' and '.' only"
        );
        let sans: Vec<&str> = sans.split(',').filter(|s| !s.is_empty()).collect();
        let files = ca.issue(name, &sans)?.write(dir, name)?;
        text += &format!(
            "{name}: {} {} (alternative names: {})\n",
            files.cert.display(),
            files.key.display(),
            sans.join(", ")
        );
        issued.push(json!({ "name": name, "cert": files.cert, "key": files.key, "alt_names": sans }));
    }
    Ok(Report::ok(json!({ "ca": ca_cert, "issued": issued }), text))
}

#[derive(Debug, Subcommand)]
pub enum GroupsCmd {
    /// Every group: state, protocol, generation, members (of its last completed generation).
    List,
    /// One group: its members and committed offsets.
    Describe { group_id: String },
}

#[derive(Debug, Subcommand)]
pub enum FilesCmd {
    /// Whether objects are known to the coordinators and still hold live batches (DescribeFiles).
    Describe {
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DirsCmd {
    /// Each data directory of the node: path, id, online or offline, total and usable bytes, and
    /// its replicas (size, lag, future replicas of moves under way). Exit 1 if one is offline.
    Describe {
        /// Ask this node (by id, from the membership) instead of `--addr`.
        #[arg(long)]
        node: Option<u64>,
    },
    /// Move the node's replica of a metadata partition to another data directory, online; follows
    /// it with a progress bar on stderr.
    Move {
        /// The metadata partition.
        // The flag keeps its name, `--group`: scripts and operators use it.
        #[arg(long = "group", value_name = "METADATA_PARTITION")]
        partition: u32,
        /// The destination directory: its path or id.
        #[arg(long, required_unless_present = "cancel")]
        to: Option<String>,
        #[arg(long)]
        node: Option<u64>,
        /// Cancel the metadata partition's move under way (before it switches).
        #[arg(long)]
        cancel: bool,
        /// Start the move and return.
        #[arg(long)]
        no_wait: bool,
    },
    /// After a directory failure: once node N restarted with the failed directory replaced or
    /// removed, add its new replicas back through membership (each lost metadata partition: the old
    /// replica removed, the new one added as a learner, caught up, promoted; other metadata
    /// partitions unchanged).
    Recover {
        #[arg(long)]
        node: u64,
    },
    /// Set the node's copy rate for moves, bytes per second (0: unthrottled).
    Throttle {
        #[arg(long)]
        rate: u64,
        #[arg(long)]
        node: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
pub enum MembersCmd {
    /// Every node some metadata partition knows, with its address and role.
    List,
}

/// What a command found: its JSON document, its table, and whether all is well (exit status).
pub struct Report {
    pub json: serde_json::Value,
    pub text: String,
    pub ok: bool,
}

impl Report {
    fn ok(json: serde_json::Value, text: impl Into<String>) -> Report {
        Report { json, text: text.into(), ok: true }
    }
}

/// The binary's `main`: runs the command, prints, and returns the exit status.
pub fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let json = args.json;
    if let Cmd::Inspect { data_dir, keys } = &args.cmd {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let r = crate::backup::inspect::inspect(data_dir, *keys, &mut out);
        let r = r.and_then(|()| Ok(std::io::Write::flush(&mut out)?));
        let closed = |e: &anyhow::Error| {
            e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        };
        return match r {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) if closed(&e) => std::process::ExitCode::SUCCESS,
            Err(e) => fail(json, &e),
        };
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(json, &anyhow::anyhow!(e)),
    };
    match rt.block_on(run(args)) {
        Ok(r) => {
            if json {
                out(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&r.json).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
                ));
            } else {
                out(&r.text);
            }
            if r.ok {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => fail(json, &e),
    }
}

/// Prints to stdout; a reader that went away (`coordctl ... | head`) is not an error.
fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn fail(json: bool, e: &anyhow::Error) -> std::process::ExitCode {
    if json {
        out(&format!("{}\n", json!({ "error": format!("{e:#}") })));
    } else {
        eprintln!("Error: {e:#}");
    }
    std::process::ExitCode::FAILURE
}

/// A channel to `addr`, giving up after `timeout`; over TLS with `--cacert/--cert/--key`.
pub(crate) async fn connect(addr: &str, timeout: Duration) -> anyhow::Result<Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .with_context(|| format!("address {addr}"))?
        .connect_timeout(timeout)
        .timeout(Duration::from_secs(30).max(timeout));
    diskless_tls::client::connect(endpoint, TLS.get().cloned().flatten())
        .await
        .with_context(|| format!("connect to {addr}"))
}

pub async fn run(args: Args) -> anyhow::Result<Report> {
    if let Cmd::Certs { dir, specs } = &args.cmd {
        return certs(dir, specs);
    }
    let tls = diskless_tls::client::from_args(args.cacert.as_deref(), args.cert.as_deref(), args.key.as_deref())?;
    let _ = TLS.set(tls);
    if let Cmd::WaitReady { timeout_secs } = args.cmd {
        let deadline = std::time::Instant::now() + Duration::from_secs(timeout_secs);
        loop {
            if let Ok(ch) = connect(&args.addr, Duration::from_secs(2)).await {
                let mut c = AdminServiceClient::new(ch);
                if let Ok(s) = c.status(StatusRequest { with_digest: false, ..Default::default() }).await {
                    if s.get_ref().groups.iter().all(|g| g.leader != 0) {
                        return Ok(Report::ok(
                            json!({ "ready": true }),
                            "ready: every metadata partition has a leader\n",
                        ));
                    }
                }
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "not ready after {timeout_secs} s");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    match &args.cmd {
        Cmd::Snapshot { cmd: Some(SnapshotCmd::Save { file }) } => return snapshot::save(&args.addr, file).await,
        Cmd::Snapshot { cmd: Some(SnapshotCmd::Status { file }) } => return snapshot::file_status(file),
        Cmd::Snapshot { cmd: Some(SnapshotCmd::Restore { file, data_dir, node_id, members, cluster_token }) } => {
            return snapshot::restore(&crate::backup::restore::RestoreRequest {
                backup: file.clone(),
                data_dir: data_dir.clone(),
                node_id: *node_id,
                members: crate::cli::parse_members(members)?,
                cluster_token: cluster_token.clone(),
            })
        }
        Cmd::Inspect { .. } => anyhow::bail!("inspect prints JSON lines itself"),
        Cmd::Certs { .. } => unreachable!("handled above"),
        Cmd::Topics { cmd: TopicsCmd::List } => return topics::list(&args.addr).await,
        Cmd::Topics { cmd: TopicsCmd::Describe { name } } => return topics::describe(&args.addr, name).await,
        Cmd::Files { cmd: FilesCmd::Describe { keys } } => return topics::describe_files(&args.addr, keys).await,
        Cmd::Dirs { cmd: DirsCmd::Describe { node } } => return dirs::describe(&args.addr, *node).await,
        Cmd::Dirs { cmd: DirsCmd::Move { partition, to, node, cancel, no_wait } } => {
            return dirs::alter(&args.addr, *node, *partition, to.as_deref(), *cancel, *no_wait).await
        }
        Cmd::Dirs { cmd: DirsCmd::Throttle { rate, node } } => return dirs::throttle(&args.addr, *node, *rate).await,
        Cmd::Dirs { cmd: DirsCmd::Recover { node } } => {
            let address = dirs::node_addr(&args.addr, Some(*node)).await?;
            let mut c = AdminServiceClient::new(connect(&args.addr, Duration::from_secs(5)).await?);
            let call = c.add_node(AddNodeRequest { node_id: *node, address, metadata_partition: None });
            let r = add_node_with_progress(&args.addr, *node, call).await?;
            return Ok(Report::ok(serde_json::to_value(&r)?, lines(&r.progress)));
        }
        Cmd::Groups { cmd: GroupsCmd::List } => return groups::list(&args.addr).await,
        Cmd::Brokers => return brokers::list(&args.addr).await,
        Cmd::Groups { cmd: GroupsCmd::Describe { group_id } } => return groups::describe(&args.addr, group_id).await,
        _ => {}
    }
    match args.cmd {
        Cmd::Status { cluster: true, .. } => return cluster::status(&args.addr).await,
        Cmd::Health { cluster } => return cluster::health(&args.addr, cluster).await,
        Cmd::Check => return cluster::check(&args.addr).await,
        _ => {}
    }
    let mut c = AdminServiceClient::new(connect(&args.addr, Duration::from_secs(5)).await?);
    Ok(match args.cmd {
        Cmd::WaitReady { .. }
        | Cmd::Health { .. }
        | Cmd::Check
        | Cmd::Inspect { .. }
        | Cmd::Certs { .. }
        | Cmd::Topics { .. }
        | Cmd::Groups { .. }
        | Cmd::Brokers
        | Cmd::Files { .. }
        | Cmd::Dirs { .. }
        | Cmd::Snapshot { cmd: Some(_) } => unreachable!("handled above"),
        Cmd::Status { raw, reset_stages, cluster: _ } => {
            let s = c.status(StatusRequest { with_digest: false, reset_stages }).await?.into_inner();
            let text = if raw { format!("{s:#?}\n") } else { status_text(&s) };
            Report::ok(serde_json::to_value(&s)?, text)
        }
        Cmd::Members { cmd: MembersCmd::List } => {
            let s = c.status(StatusRequest::default()).await?.into_inner();
            let mut text = format!("{:>6}  {:<22} role\n", "node", "address");
            for n in &s.nodes {
                text += &format!("{:>6}  {:<22} {}\n", n.node_id, n.address, role(n));
            }
            let members: Vec<_> = s
                .nodes
                .iter()
                .map(|n| json!({ "node_id": n.node_id, "address": n.address, "role": role(n) }))
                .collect();
            Report::ok(json!({ "cluster_id": s.cluster_id, "members": members }), text)
        }
        Cmd::TransferLeader { partition, to } => {
            c.transfer_leader(TransferLeaderRequest { metadata_partition: partition, to_node_id: to }).await?;
            Report::ok(
                json!({ "metadata_partition": partition, "leader": to }),
                format!("metadata partition {partition}: leadership moved to node {to}\n"),
            )
        }
        Cmd::AddNode { id, address } => {
            let call = c.add_node(AddNodeRequest { node_id: id, address, metadata_partition: None });
            let r = add_node_with_progress(&args.addr, id, call).await?;
            Report::ok(serde_json::to_value(&r)?, lines(&r.progress))
        }
        Cmd::RemoveNode { id } => {
            let r = c.remove_node(RemoveNodeRequest { node_id: id, metadata_partition: None }).await?.into_inner();
            Report::ok(serde_json::to_value(&r)?, lines(&r.progress))
        }
        Cmd::Snapshot { cmd: None } => {
            let r = c.trigger_snapshot(TriggerSnapshotRequest {}).await?.into_inner();
            let text = r
                .snapshot_index
                .iter()
                .enumerate()
                .map(|(g, i)| format!("metadata partition {g}: snapshot at index {i}\n"))
                .collect::<String>();
            Report::ok(serde_json::to_value(&r)?, text)
        }
    })
}

/// Runs an AddNode call, printing on stderr every two seconds how far the new node's replicas are
/// behind their leaders (from every node's Status: a leader reports its followers' progress), so a
/// long catch-up shows it is moving.
async fn add_node_with_progress(
    addr: &str,
    id: u64,
    call: impl std::future::Future<Output = Result<tonic::Response<MembershipResponse>, tonic::Status>>,
) -> anyhow::Result<MembershipResponse> {
    tokio::pin!(call);
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    tick.tick().await;
    loop {
        tokio::select! {
            r = &mut call => return Ok(r?.into_inner()),
            _ = tick.tick() => {
                if let Some(line) = catch_up_progress(addr, id).await {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// "node N: metadata partition g matched/last ..." from the leaders' view, or `None` if the
/// cluster cannot be asked right now.
async fn catch_up_progress(addr: &str, id: u64) -> Option<String> {
    let ch = connect(addr, Duration::from_secs(2)).await.ok()?;
    let first = AdminServiceClient::new(ch).status(StatusRequest::default()).await.ok()?.into_inner();
    let mut parts = std::collections::BTreeMap::new();
    for n in &first.nodes {
        let Ok(ch) = connect(&n.address, Duration::from_secs(2)).await else { continue };
        let Ok(s) = AdminServiceClient::new(ch).status(StatusRequest::default()).await else { continue };
        for g in s.into_inner().groups.iter().filter(|g| g.state == "leader") {
            if let Some(f) = g.followers.iter().find(|f| f.node_id == id) {
                parts.insert(
                    g.metadata_partition,
                    format!("{}:{}/{}", g.metadata_partition, f.matched_index, g.last_log_index),
                );
            }
        }
    }
    let total = first.groups.len();
    Some(format!(
        "node {id} catching up (metadata partition:matched/leader's last index): {} [{} of {total} partitions replicating]",
        parts.values().cloned().collect::<Vec<_>>().join(" "),
        parts.len()
    ))
}

fn role(n: &NodeInfo) -> &'static str {
    if n.voter {
        "voter"
    } else {
        "learner"
    }
}

fn lines(v: &[String]) -> String {
    v.iter().map(|l| format!("{l}\n")).collect()
}

/// One node's status as tables.
pub(crate) fn status_text(s: &StatusResponse) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "answered by node {} ({} metadata partitions)", s.node_id, s.num_metadata_partitions);
    if s.cluster_id.is_empty() {
        let _ = writeln!(o, "cluster: none yet (bootstrapping, or waiting to be added)");
    } else {
        let _ = writeln!(o, "cluster: {}", s.cluster_id);
    }
    let outside: Vec<u32> = s.groups.iter().filter(|g| !g.member).map(|g| g.metadata_partition).collect();
    if !outside.is_empty() {
        let _ = writeln!(
            o,
            "this node's replicas of metadata partitions {outside:?} are not members: it takes no part in them \
             (new node, or a replaced data directory: `coordctl add-node --id {} --address <its address>`)",
            s.node_id
        );
    }
    let _ = writeln!(o, "log fsyncs: {} covering {} log appends", s.wal_syncs, s.wal_synced_appends);
    let _ = writeln!(o, "\n{:>6}  {:<22} role", "node", "address");
    for n in &s.nodes {
        let _ = writeln!(o, "{:>6}  {:<22} {}", n.node_id, n.address, role(n));
    }
    if s.stages.iter().any(|st| st.count > 0) {
        let _ = writeln!(o, "\nwhere log entries' time goes on this node (µs since the last reset):");
        let _ = writeln!(o, "{:<18} {:>9} {:>9} {:>9} {:>9}", "stage", "count", "p50", "p99", "max");
        for st in &s.stages {
            let _ = writeln!(o, "{:<18} {:>9} {:>9} {:>9} {:>9}", st.name, st.count, st.p50_us, st.p99_us, st.max_us);
        }
    }
    let _ = writeln!(
        o,
        "\n{:>9} {:>7} {:>6} {:>10} {:>10} {:>10} {:<10} followers (node:matched/lag)",
        "partition", "leader", "term", "last log", "applied", "snapshot", "this node"
    );
    for g in &s.groups {
        let followers: Vec<String> =
            g.followers.iter().map(|f| format!("{}:{}/{}", f.node_id, f.matched_index, f.lag)).collect();
        let _ = writeln!(
            o,
            "{:>9} {:>7} {:>6} {:>10} {:>10} {:>10} {:<10} {}",
            g.metadata_partition,
            if g.leader == 0 { "-".to_string() } else { g.leader.to_string() },
            g.term,
            g.last_log_index,
            g.applied_index,
            g.snapshot_index,
            g.state,
            if followers.is_empty() { "(ask the leader)".to_string() } else { followers.join(" ") }
        );
    }
    o
}
