//! Object consolidation (KIP-1165): the partitions this broker consolidates (rendezvous over the
//! live brokers, as groups are coordinated: one owner per partition while the registry agrees)
//! get their old batches rewritten from the mixed WAL objects into one object per partition, so
//! storage holds what the data costs and a replay reads few large ranges.
//!
//! A job, per partition: FindBatches from where the last job stopped (the log start after a
//! restart), `plan` picks the batches, their bytes are read (ranged GETs, at most
//! `max_bytes_per_sec`) and written as one new object (`<key_prefix>merged-<uuid>`), then
//! `ReplaceBatches` moves their coordinates there in one log entry. Safety is the cluster's: a
//! batch moves only if it is still the one read in the object it was copied from, so a job racing
//! DeleteRecords, retention, a topic deletion or another broker's job (two owners for a moment)
//! moves nothing stale; the WAL objects left without live batches are deleted by the cleaner after
//! its grace. The new object is never left behind: the cluster records it whatever moved (marked
//! for deletion when nothing did); one refused as malformed is deleted here; one whose replace got
//! no answer is known to the cluster or found by the orphan scan (same key prefix).
//!
//! Owns the job loop, its pacing and the copy. It must not decide what moves safely (the state
//! machine's `replace_batches`) nor speak the Kafka protocol.

pub mod config;
pub mod plan;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use diskless_proto::v1::*;

use crate::cluster::ClusterClient;
use crate::registry::Registry;
use crate::storage::Storage;
pub use config::ConsolidationConfig;
use plan::{Found, Plan};

type Tp = ([u8; 16], i32);

/// The part of a consolidated object's key after the prefix.
const MERGED: &str = "merged-";

/// What one job did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub batches_moved: usize,
    pub batches_changed: usize,
    pub bytes: u64,
}

pub struct Consolidator {
    config: ConsolidationConfig,
    storage: Storage,
    cluster: Arc<ClusterClient>,
    key_prefix: String,
    broker_id: i32,
    /// Per partition, the offset its next job looks from (past what it consolidated), and the
    /// index its last replace applied at (the next job reads from a replica that has it).
    cursors: Mutex<HashMap<Tp, (i64, Option<AppliedIndex>)>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Consolidator {
    pub fn new(
        config: ConsolidationConfig,
        storage: Storage,
        cluster: Arc<ClusterClient>,
        key_prefix: String,
        broker_id: i32,
    ) -> Consolidator {
        Consolidator { config, storage, cluster, key_prefix, broker_id, cursors: Mutex::default() }
    }

    fn merged(&self, key: &str) -> bool {
        key.strip_prefix(self.key_prefix.as_str()).is_some_and(|k| k.starts_with(MERGED))
    }

    /// The key that decides which broker consolidates a partition.
    fn owner_key(tp: &Tp) -> String {
        format!("consolidation/{}/{}", uuid::Uuid::from_bytes(tp.0), tp.1)
    }

    /// Consolidates the partitions `owns` says are this broker's every `interval_ms`, until
    /// `stop`.
    pub async fn run(self: Arc<Self>, registry: Arc<Registry>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let every = Duration::from_millis(self.config.interval_ms);
        tracing::info!(config = ?self.config, "consolidation on");
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
            let topics = match self.cluster.all_topics().await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(error = %e, "consolidation: no catalog this round");
                    continue;
                }
            };
            for t in topics {
                for p in 0..t.partitions {
                    let tp = (t.id, p);
                    if !registry.owns_group(&Self::owner_key(&tp)) {
                        continue;
                    }
                    let started = Instant::now();
                    match self.consolidate(tp, t.retention_ms).await {
                        Ok(done) if done.bytes > 0 => {
                            tracing::info!(topic = t.name, partition = p, ?done, "consolidated");
                            self.pace(done.bytes, started.elapsed(), &mut stop).await;
                        }
                        Ok(_) => tracing::debug!(topic = t.name, partition = p, "nothing to consolidate"),
                        Err(e) => {
                            crate::metrics::get().consolidation_failures.inc();
                            tracing::info!(topic = t.name, partition = p, error = %e, "consolidation failed; next round");
                        }
                    }
                    if *stop.borrow() {
                        return;
                    }
                }
            }
        }
    }

    /// Waits so that `bytes` read took at least what `max_bytes_per_sec` allows.
    async fn pace(&self, bytes: u64, took: Duration, stop: &mut tokio::sync::watch::Receiver<bool>) {
        let allowed = Duration::from_secs_f64(bytes as f64 / self.config.max_bytes_per_sec.max(1) as f64);
        if let Some(wait) = allowed.checked_sub(took) {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One job on `tp` (its topic's retention `retention_ms`): what it moved.
    pub async fn consolidate(&self, tp: Tp, retention_ms: i64) -> anyhow::Result<Done> {
        let (_, log_start) = self.cluster.list_offset(tp.0, tp.1, -2).await.map_err(|e| anyhow::anyhow!(e.message))?;
        let (cursor, seen) =
            self.cursors.lock().unwrap_or_else(|e| e.into_inner()).get(&tp).copied().unwrap_or((0, None));
        let found = self.find(tp, cursor.max(log_start), seen).await?;
        let now = now_ms();
        tracing::debug!(
            partition = tp.1,
            from = cursor.max(log_start),
            found = found.len(),
            oldest_age_ms = found.first().map(|b| now - b.log_append_time),
            "consolidation: batches found"
        );
        let Some(plan) = plan::plan(&found, now, &self.config, retention_ms, |k| self.merged(k)) else {
            // Nothing to do from here: the next job looks from the first batch not merged.
            let next = found.iter().find(|b| !self.merged(&b.object_key) && !b.marker).map(|b| b.base_offset);
            if let Some(next) = next.or_else(|| found.last().map(|b| b.last_offset + 1)) {
                self.cursors.lock().unwrap_or_else(|e| e.into_inner()).insert(tp, (next, seen));
            }
            return Ok(Done::default());
        };
        let (done, applied) = self.rewrite(tp, &plan).await?;
        if let Some(last) = plan.batches.last() {
            self.cursors.lock().unwrap_or_else(|e| e.into_inner()).insert(tp, (last.last_offset + 1, applied.or(seen)));
        }
        Ok(done)
    }

    /// The batches of `tp` from `offset`, about a target's worth of bytes, from a replica that
    /// has applied `seen` (this broker's last replace there).
    async fn find(&self, tp: Tp, offset: i64, seen: Option<AppliedIndex>) -> anyhow::Result<Vec<Found>> {
        let max = i32::try_from(self.config.target_bytes.saturating_mul(2)).unwrap_or(i32::MAX);
        let req = FindBatchesRequest {
            fetch_max_bytes: max,
            max_batches_per_partition: 10_000,
            topics: vec![find_batches_request::FindBatchesTopic {
                topic_id: tp.0.to_vec(),
                partitions: vec![find_batches_request::FindBatchesPartition {
                    partition_index: tp.1,
                    offset,
                    max_partition_fetch_bytes: max,
                }],
            }],
            timeout_ms: 10_000,
            min_applied: seen.into_iter().collect(),
            isolation_level: 0,
        };
        let r = self
            .cluster
            .call(|mut c| {
                let req = req.clone();
                async move { c.find_batches(req).await }
            })
            .await?;
        let Some(p) = r.topics.first().and_then(|t| t.partitions.first()) else {
            anyhow::bail!("FindBatches answered no partition");
        };
        anyhow::ensure!(p.error_code == 0, "FindBatches: error {} ({:?})", p.error_code, p.error_message);
        Ok(p.batches
            .iter()
            .map(|b| Found {
                batch_id: b.batch_id,
                object_key: b.object_key.clone(),
                byte_offset: b.byte_offset,
                byte_size: b.byte_size,
                base_offset: b.base_offset,
                last_offset: b.last_offset,
                log_append_time: b.log_append_timestamp,
                retention_time: if b.timestamp_type == 1 { b.log_append_timestamp } else { b.batch_max_timestamp },
                marker: b.marker.is_some(),
            })
            .collect())
    }

    /// Copies `plan`'s batches into a new object and moves them there; what moved, and the index
    /// the replace applied at.
    async fn rewrite(&self, tp: Tp, plan: &Plan) -> anyhow::Result<(Done, Option<AppliedIndex>)> {
        // One ranged read per source object, in the order the batches go out.
        let mut sources: Vec<String> = vec![];
        let mut by_source: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, b) in plan.batches.iter().enumerate() {
            let s = match sources.iter().position(|s| *s == b.object_key) {
                Some(s) => s,
                None => {
                    sources.push(b.object_key.clone());
                    sources.len() - 1
                }
            };
            by_source.entry(s).or_default().push(i);
        }
        let mut parts: Vec<Option<Bytes>> = vec![None; plan.batches.len()];
        for (s, idxs) in &by_source {
            let ranges: Vec<Range<u64>> = idxs
                .iter()
                .map(|&i| {
                    let b = &plan.batches[i];
                    b.byte_offset as u64..(b.byte_offset + b.byte_size) as u64
                })
                .collect();
            let read = self.storage.get_ranges(&sources[*s], &ranges).await?;
            anyhow::ensure!(read.len() == idxs.len(), "the store answered {} ranges of {}", read.len(), idxs.len());
            for (&i, bytes) in idxs.iter().zip(read) {
                anyhow::ensure!(
                    bytes.len() as i64 == plan.batches[i].byte_size,
                    "object {} answered {} bytes for a batch of {}",
                    sources[*s],
                    bytes.len(),
                    plan.batches[i].byte_size
                );
                parts[i] = Some(bytes);
            }
        }
        let mut object = BytesMut::with_capacity(usize::try_from(plan.bytes).unwrap_or(0));
        let mut moves = Vec::with_capacity(plan.batches.len());
        for (b, bytes) in plan.batches.iter().zip(parts) {
            let bytes = bytes.ok_or_else(|| anyhow::anyhow!("a batch was not read"))?;
            moves.push(replace_batches_request::Batch {
                last_offset: b.last_offset,
                batch_id: b.batch_id,
                byte_offset: i32::try_from(object.len())?,
                byte_size: i32::try_from(b.byte_size)?,
                source: sources.iter().position(|s| *s == b.object_key).unwrap_or(0) as u32,
            });
            object.extend_from_slice(&bytes);
        }
        let size = object.len();
        let key = Storage::new_key(&format!("{}{MERGED}", self.key_prefix));
        self.storage.put_new(&key, object.freeze()).await?;
        let req = ReplaceBatchesRequest {
            object_key: key.clone(),
            object_format: 1,
            file_size: size as i64,
            uploader_broker_id: self.broker_id,
            topic_id: tp.0.to_vec(),
            partition_index: tp.1,
            batches: moves,
            timeout_ms: 10_000,
            sources,
        };
        let r = self
            .cluster
            .call(|mut c| {
                let req = req.clone();
                async move { c.replace_batches(req).await }
            })
            .await?;
        if r.error_code != 0 {
            if r.error_code == diskless_proto::ErrorCode::InvalidRequest.wire() {
                // Refused as malformed: nothing recorded it, nobody reads it.
                let _ = self.storage.delete(&key).await;
            }
            anyhow::bail!("ReplaceBatches: error {} ({:?})", r.error_code, r.error_message);
        }
        let moved = r.replaced.iter().filter(|x| **x).count();
        let m = crate::metrics::get();
        m.consolidated_batches.inc_by(moved as u64);
        m.consolidated_bytes.inc_by(size as u64);
        let done = Done { batches_moved: moved, batches_changed: r.replaced.len() - moved, bytes: size as u64 };
        Ok((done, r.applied))
    }
}
