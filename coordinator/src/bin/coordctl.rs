//! Operator CLI for a coordinator cluster.

use anyhow::Context;
use clap::{Parser, Subcommand};
use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::*;

#[derive(Debug, Parser)]
#[command(name = "coordctl", version, about = "Operate a diskless coordinator cluster")]
struct Args {
    /// Any node of the cluster, host:port.
    #[arg(long, env = "DISKLESS_ADDR", default_value = "127.0.0.1:7001")]
    addr: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Nodes, and per metadata partition: leader, term, log and applied indexes, followers' lag.
    Status {
        /// Print JSON-like raw output (the protobuf debug form) instead of tables.
        #[arg(long)]
        raw: bool,
        /// Start the stage timings (where log entries' time goes) afresh after printing them.
        #[arg(long)]
        reset_stages: bool,
    },
    /// Move a metadata partition's leadership.
    TransferLeader {
        #[arg(long)]
        group: u32,
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
    /// Snapshot every metadata partition on the node now (purging the log behind).
    Snapshot,
    /// Wait until the node answers and every metadata partition has a leader.
    WaitReady {
        #[arg(long, default_value_t = 60)]
        timeout_secs: u64,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if let Cmd::WaitReady { timeout_secs } = args.cmd {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout_secs);
        loop {
            if let Ok(mut c) = AdminServiceClient::connect(format!("http://{}", args.addr)).await {
                if let Ok(s) = c.status(StatusRequest { with_digest: false, ..Default::default() }).await {
                    if s.get_ref().groups.iter().all(|g| g.leader != 0) {
                        println!("ready: every metadata partition has a leader");
                        return Ok(());
                    }
                }
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "not ready after {timeout_secs} s");
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
    let mut c = AdminServiceClient::connect(format!("http://{}", args.addr))
        .await
        .with_context(|| format!("connect to {}", args.addr))?;
    match args.cmd {
        Cmd::WaitReady { .. } => unreachable!("handled above"),
        Cmd::Status { raw, reset_stages } => {
            let s = c.status(StatusRequest { with_digest: false, reset_stages }).await?.into_inner();
            if raw {
                println!("{s:#?}");
            } else {
                print_status(&s);
            }
        }
        Cmd::TransferLeader { group, to } => {
            c.transfer_leader(TransferLeaderRequest { metadata_partition: group, to_node_id: to }).await?;
            println!("metadata partition {group}: leadership moved to node {to}");
        }
        Cmd::AddNode { id, address } => {
            let r = c.add_node(AddNodeRequest { node_id: id, address, metadata_partition: None }).await?.into_inner();
            r.progress.iter().for_each(|l| println!("{l}"));
        }
        Cmd::RemoveNode { id } => {
            let r = c.remove_node(RemoveNodeRequest { node_id: id, metadata_partition: None }).await?.into_inner();
            r.progress.iter().for_each(|l| println!("{l}"));
        }
        Cmd::Snapshot => {
            let r = c.trigger_snapshot(TriggerSnapshotRequest {}).await?.into_inner();
            for (g, i) in r.snapshot_index.iter().enumerate() {
                println!("metadata partition {g}: snapshot at index {i}");
            }
        }
    }
    Ok(())
}

fn print_status(s: &StatusResponse) {
    println!("answered by node {} ({} metadata partitions)", s.node_id, s.num_metadata_partitions);
    if s.cluster_id.is_empty() {
        println!("cluster: none yet (bootstrapping, or waiting to be added)");
    } else {
        println!("cluster: {}", s.cluster_id);
    }
    let outside: Vec<u32> = s.groups.iter().filter(|g| !g.member).map(|g| g.metadata_partition).collect();
    if !outside.is_empty() {
        println!(
            "this node's replicas of metadata partitions {outside:?} are not members: it takes no part in them \
             (new node, or a replaced data directory: `coordctl add-node --id {} --address <its address>`)",
            s.node_id
        );
    }
    println!("WAL fsyncs: {} covering {} log appends", s.wal_syncs, s.wal_synced_appends);
    println!("\n{:>6}  {:<22} role", "node", "address");
    for n in &s.nodes {
        println!("{:>6}  {:<22} {}", n.node_id, n.address, if n.voter { "voter" } else { "learner" });
    }
    if s.stages.iter().any(|st| st.count > 0) {
        println!("\nwhere log entries' time goes on this node (µs since the last reset):");
        println!("{:<18} {:>9} {:>9} {:>9} {:>9}", "stage", "count", "p50", "p99", "max");
        for st in &s.stages {
            println!("{:<18} {:>9} {:>9} {:>9} {:>9}", st.name, st.count, st.p50_us, st.p99_us, st.max_us);
        }
    }
    println!(
        "\n{:>5} {:>7} {:>6} {:>10} {:>10} {:>10} {:<10} followers (node:matched/lag)",
        "group", "leader", "term", "last log", "applied", "snapshot", "this node"
    );
    for g in &s.groups {
        let followers: Vec<String> =
            g.followers.iter().map(|f| format!("{}:{}/{}", f.node_id, f.matched_index, f.lag)).collect();
        println!(
            "{:>5} {:>7} {:>6} {:>10} {:>10} {:>10} {:<10} {}",
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
}
