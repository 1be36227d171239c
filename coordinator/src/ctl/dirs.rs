//! `coordctl dirs`: a node's data directories (KIP-113's DescribeLogDirs), moving a replica of a
//! metadata partition between them (AlterReplicaLogDirs) with a progress bar on stderr, cancelling
//! a move, and the copy throttle (`recover` is `add-node` for the node, in `mod.rs`). It only calls
//! the nodes' AdminService.

use std::io::Write;
use std::time::Duration;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::*;
use serde_json::json;
use tonic::transport::Channel;

use super::{connect, Report};

/// The address of node `node` (from the membership `addr` knows), or `addr` itself.
pub(super) async fn node_addr(addr: &str, node: Option<u64>) -> anyhow::Result<String> {
    let Some(id) = node else { return Ok(addr.to_string()) };
    let mut c = AdminServiceClient::new(connect(addr, Duration::from_secs(5)).await?);
    let s = c.status(StatusRequest::default()).await?.into_inner();
    if s.node_id == id {
        return Ok(addr.to_string());
    }
    s.nodes
        .iter()
        .find(|n| n.node_id == id)
        .map(|n| n.address.clone())
        .ok_or_else(|| anyhow::anyhow!("node {id} is not a member the node at {addr} knows"))
}

async fn client(addr: &str, node: Option<u64>) -> anyhow::Result<AdminServiceClient<Channel>> {
    Ok(AdminServiceClient::new(connect(&node_addr(addr, node).await?, Duration::from_secs(5)).await?))
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

/// `dirs describe`.
pub async fn describe(addr: &str, node: Option<u64>) -> anyhow::Result<Report> {
    let r = client(addr, node).await?.describe_dirs(DescribeDirsRequest {}).await?.into_inner();
    let mut text = format!(
        "node {}  move throttle: {}\n",
        r.node_id,
        if r.throttled_rate == 0 { "none".to_string() } else { format!("{}/s", mib(r.throttled_rate)) }
    );
    for d in &r.dirs {
        text.push_str(&format!(
            "\n{}  id {}  {}  total {}  usable {}\n",
            d.path,
            d.dir_id,
            if d.error_code == 0 { "online".to_string() } else { format!("OFFLINE ({})", d.error) },
            mib(d.total_bytes),
            mib(d.usable_bytes)
        ));
        text.push_str(&format!("  {:>9}  {:>12}  {:>10}  {:<7}  {}\n", "partition", "size", "lag", "future", "move"));
        for rep in &d.replicas {
            let mv = if rep.is_future {
                format!("{} ({} copied)", rep.move_phase, mib(rep.copied_bytes))
            } else {
                rep.last_move.clone()
            };
            text.push_str(&format!(
                "  {:>9}  {:>12}  {:>10}  {:<7}  {}\n",
                rep.metadata_partition,
                mib(rep.size_bytes),
                rep.offset_lag,
                rep.is_future,
                mv
            ));
        }
    }
    let ok = r.dirs.iter().all(|d| d.error_code == 0);
    Ok(Report { json: serde_json::to_value(&r)?, text, ok })
}

/// `dirs move` (and `--cancel`): starts the move, then follows it to the end with a progress bar
/// on stderr unless `no_wait`.
pub async fn alter(
    addr: &str,
    node: Option<u64>,
    partition: u32,
    to: Option<&str>,
    cancel: bool,
    no_wait: bool,
) -> anyhow::Result<Report> {
    let mut c = client(addr, node).await?;
    anyhow::ensure!(cancel || to.is_some(), "give --to DIR (or --cancel)");
    let req = AlterReplicaDirRequest { metadata_partition: partition, dir: to.unwrap_or_default().to_string(), cancel };
    let started = c.alter_replica_dir(req).await.map_err(|s| anyhow::anyhow!("{}", s.message()))?.into_inner();
    if cancel || no_wait {
        return Ok(Report::ok(json!({ "message": started.message }), format!("{}\n", started.message)));
    }
    eprintln!("{}", started.message);
    let begun = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = c.describe_dirs(DescribeDirsRequest {}).await?.into_inner();
        let find = |future: bool| {
            r.dirs.iter().find_map(|d| {
                d.replicas
                    .iter()
                    .find(|x| x.metadata_partition == partition && x.is_future == future)
                    .map(|x| (d.clone(), x.clone()))
            })
        };
        match find(true) {
            Some((_, f)) => {
                let total = find(false).map_or(0, |(_, cur)| cur.size_bytes).max(1);
                let done = (f.copied_bytes.min(total) * 30 / total) as usize;
                eprint!(
                    "\r[{}{}] {:<11} {} copied of ~{}, {} entries behind   ",
                    "#".repeat(done),
                    " ".repeat(30 - done),
                    f.move_phase,
                    mib(f.copied_bytes),
                    mib(total),
                    f.offset_lag
                );
                let _ = std::io::stderr().flush();
            }
            None => {
                eprintln!();
                let (dir, cur) =
                    find(false).ok_or_else(|| anyhow::anyhow!("metadata partition {partition} not found"))?;
                let moved = to.is_some_and(|t| t == dir.path || t == dir.dir_id);
                let elapsed = begun.elapsed().as_secs_f64();
                let text = format!(
                    "metadata partition {partition}: in {} ({}); {:.1} s\n",
                    dir.path,
                    if cur.last_move.is_empty() { "no move recorded".into() } else { cur.last_move.clone() },
                    elapsed
                );
                return Ok(Report {
                    json: json!({ "metadata_partition": partition, "dir": dir.path, "dir_id": dir.dir_id,
                                   "outcome": cur.last_move, "seconds": elapsed }),
                    text,
                    ok: moved,
                });
            }
        }
    }
}

/// `dirs throttle`.
pub async fn throttle(addr: &str, node: Option<u64>, rate: u64) -> anyhow::Result<Report> {
    let r = client(addr, node).await?.set_dir_throttle(SetDirThrottleRequest { bytes_per_second: rate }).await?;
    let rate = r.into_inner().bytes_per_second;
    Ok(Report::ok(
        json!({ "bytes_per_second": rate }),
        format!("move throttle: {}\n", if rate == 0 { "none".into() } else { format!("{rate} bytes/s") }),
    ))
}
