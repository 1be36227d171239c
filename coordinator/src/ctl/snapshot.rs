//! `coordctl snapshot save | restore | status` and `inspect`: backups and the offline tools.
//!
//! `save` asks the node at `--addr` for the topology, then streams each metadata partition's state
//! from its leader (`AdminService.StreamSnapshot`) into one backup file (`backup::file`), with
//! progress on stderr; a stream that breaks (a leader change) is taken again from the new leader.
//! Partition 0 (the topic catalog) is taken last, so the catalog is at least as new as every other
//! partition: a topic change a partition missed is completed by the reconciler after a restore,
//! and no partition holds a topic the catalog never heard of. The offline commands (`restore`,
//! `status`, `inspect`) never connect to a node; the work is in `backup`.

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::{SnapshotSummary, StatusRequest, StatusResponse, StreamSnapshotRequest};
use serde_json::json;

use super::{connect, Report};
use crate::backup::file::{Backup, Header, Partition, Writer};
use crate::backup::restore::{restore as restore_dir, RestoreRequest};

/// Attempts per metadata partition before `save` gives up.
const ATTEMPTS: u32 = 30;

async fn status(addr: &str) -> anyhow::Result<StatusResponse> {
    let mut c = AdminServiceClient::new(connect(addr, Duration::from_secs(5)).await?);
    Ok(c.status(StatusRequest::default()).await?.into_inner())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Progress on stderr: a line rewritten in place on a terminal, a line per partition otherwise.
struct Progress {
    tty: bool,
    total: usize,
    last: Instant,
}

impl Progress {
    fn bytes(&mut self, done: usize, g: u32, bytes: u64) {
        if self.tty && self.last.elapsed() >= Duration::from_millis(100) {
            self.last = Instant::now();
            eprint!("\r\x1b[2Kmetadata partition {g} ({}/{}): {}", done + 1, self.total, mib(bytes));
        }
    }

    fn line(&mut self, text: &str) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{text}");
    }
}

/// Streams metadata partition `g` from its leader (as `addr` knows it) into `w`; returns its
/// summary.
async fn copy_one(
    addr: &str,
    g: u32,
    w: &mut Writer,
    progress: &mut Progress,
    done: usize,
) -> anyhow::Result<SnapshotSummary> {
    let s = status(addr).await?;
    let leader = s.groups.get(g as usize).map_or(0, |x| x.leader);
    anyhow::ensure!(leader != 0, "metadata partition {g} has no leader now");
    let leader_addr =
        s.nodes.iter().find(|n| n.node_id == leader).map(|n| n.address.clone()).ok_or_else(|| {
            anyhow::anyhow!("the leader of metadata partition {g}, node {leader}, has no known address")
        })?;
    let mut c = AdminServiceClient::new(connect(&leader_addr, Duration::from_secs(5)).await?)
        .max_decoding_message_size(64 << 20);
    let mut stream = c.stream_snapshot(StreamSnapshotRequest { metadata_partition: g }).await?.into_inner();
    while let Some(chunk) = stream.message().await? {
        if !chunk.data.is_empty() {
            w.write(&chunk.data)?;
            progress.bytes(done, g, w.section_bytes());
        }
        if let Some(summary) = chunk.summary {
            return Ok(summary);
        }
    }
    anyhow::bail!("the stream of metadata partition {g} ended before its summary")
}

/// `snapshot save FILE`.
pub async fn save(addr: &str, file: &Path) -> anyhow::Result<Report> {
    let started = Instant::now();
    let first = status(addr).await?;
    let n = first.num_metadata_partitions;
    anyhow::ensure!(n > 0 && !first.cluster_id.is_empty(), "the node at {addr} belongs to no cluster yet");
    let mut w = Writer::create(file)?;
    let mut progress = Progress { tty: std::io::stderr().is_terminal(), total: n as usize, last: Instant::now() };
    let order: Vec<u32> = (1..n).chain(std::iter::once(0)).collect();
    for (done, &g) in order.iter().enumerate() {
        let mut attempt = 0;
        let summary = loop {
            attempt += 1;
            match copy_one(addr, g, &mut w, &mut progress, done).await {
                Ok(s) => break s,
                Err(e) if attempt < ATTEMPTS => {
                    w.discard_section()?;
                    progress.line(&format!("metadata partition {g}: {e:#}; taking it again"));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e.context(format!("metadata partition {g}: gave up after {ATTEMPTS} attempts"))),
            }
        };
        anyhow::ensure!(
            summary.cluster_id == first.cluster_id && summary.num_metadata_partitions == n,
            "node {} answers for cluster {} with {} metadata partitions, not {} with {n}",
            summary.node_id,
            summary.cluster_id,
            summary.num_metadata_partitions,
            first.cluster_id
        );
        progress.line(&format!(
            "metadata partition {g} ({}/{n}): {} at applied index {} from node {}",
            done + 1,
            mib(summary.bytes),
            summary.applied_index,
            summary.node_id
        ));
        w.end_section(Partition {
            metadata_partition: g,
            applied_index: summary.applied_index,
            applied_term: summary.applied_term,
            applied_leader: summary.applied_leader,
            digest: summary.digest,
            bytes: summary.bytes,
            node_id: summary.node_id,
        })?;
    }
    let header = Header {
        format: 0,
        cluster_id: first.cluster_id.clone(),
        num_metadata_partitions: n,
        created_at_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        taken_through: addr.to_string(),
        partitions: vec![],
    };
    let size = w.finish(header)?;
    let backup = Backup::open(file)?;
    let secs = started.elapsed().as_secs_f64();
    let text = format!(
        "saved {} ({} bytes, {}) in {secs:.2} s: cluster {}, {n} metadata partitions, checksum {:08x}\n",
        file.display(),
        size,
        mib(size),
        first.cluster_id,
        backup.checksum
    );
    Ok(Report::ok(
        json!({ "file": file, "bytes": size, "seconds": secs, "checksum": format!("{:08x}", backup.checksum), "header": backup.header }),
        text,
    ))
}

/// `snapshot status FILE`: checks a backup file whole and shows its header.
pub fn file_status(file: &Path) -> anyhow::Result<Report> {
    let b = Backup::open(file)?;
    b.verify()?;
    let size = std::fs::metadata(file)?.len();
    let mut text = format!(
        "{}: a whole backup ({size} bytes, checksum {:08x}) of cluster {}, {} metadata partitions\n\n{:>9} {:>12} {:>6} {:>12}  digest\n",
        file.display(),
        b.checksum,
        b.header.cluster_id,
        b.header.num_metadata_partitions,
        "partition",
        "applied",
        "term",
        "bytes"
    );
    let mut parts = b.header.partitions.clone();
    parts.sort_by_key(|p| p.metadata_partition);
    for p in &parts {
        text += &format!(
            "{:>9} {:>12} {:>6} {:>12}  {}\n",
            p.metadata_partition, p.applied_index, p.applied_term, p.bytes, p.digest
        );
    }
    Ok(Report::ok(
        json!({ "file": file, "bytes": size, "checksum": format!("{:08x}", b.checksum), "header": b.header }),
        text,
    ))
}

/// `snapshot restore FILE ...`.
pub fn restore(req: &RestoreRequest) -> anyhow::Result<Report> {
    let started = Instant::now();
    let r = restore_dir(req)?;
    let secs = started.elapsed().as_secs_f64();
    let mut text = format!(
        "restored {} for node {} of the new cluster {} (from cluster {}, {} metadata partitions) in {secs:.2} s\n",
        r.data_dir.display(),
        r.node_id,
        r.cluster_id,
        r.source_cluster_id,
        r.num_metadata_partitions
    );
    for p in &r.partitions {
        text += &format!(
            "  metadata partition {}: applied index {}, {} keys, digest {}\n",
            p.metadata_partition, p.applied_index, p.keys, p.digest
        );
    }
    let mut doc = serde_json::to_value(&r)?;
    doc["seconds"] = json!(secs);
    Ok(Report::ok(doc, text))
}
