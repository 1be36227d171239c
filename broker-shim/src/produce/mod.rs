//! The produce path (KIP-1163): callers hand in record batches; batches of many partitions are
//! buffered into one WAL segment, uploaded, then committed; each caller learns its offset.
//!
//! ```text
//! produce() ─validate─▶ buffer ─(interval or size)─▶ seal #n ─▶ upload (≤ N in parallel)
//!                                                                   │
//!            callers ◀─results── commit in seal order (#1, #2, …) ◀──┘
//! ```
//! - A batch is validated record by record before it is enqueued (`crate::validate`: Kafka's
//!   checks and codes); a refused one is never uploaded. The batches one call submits for a
//!   partition are validated together and enqueued together, into one segment, or none of them is.
//! - Segments close on a fixed grid of `commit_interval_ms` (a batch waits the rest of the current
//!   tick), or earlier when full.
//! - Commits go strictly in the order segments were sealed, so batches of a partition keep their
//!   produce order across segments.
//! - An upload failure fails every batch of the segment with a retriable error; nothing is
//!   committed. Each metadata partition's part of the commit goes straight to that partition's
//!   leader. A commit that surely applied nowhere (not-leader everywhere) is fenced in its owners
//!   and deleted at once; one whose outcome is unknown is left to the cleaner's orphan scan, which
//!   fences it the same way before deleting it.
//! - **Bounded backlog.** An upload slot (`max_parallel_uploads`) is held from the upload until
//!   the commit resolves, so at most that many segments are ever uploaded but not committed or
//!   failed, however slow a metadata partition is; sealing waits for a slot, and the callers wait
//!   for the buffer (back-pressure).
//! - **Commit deadline.** Each segment must be committed within [`commit_deadline`] of its upload
//!   start (the orphan grace period minus a margin): the coordinator is given only the time left,
//!   and a segment whose turn comes after its deadline is abandoned (its callers get the retriable
//!   REQUEST_TIMED_OUT, no commit is sent, the object is deleted) instead of being committed when
//!   the cleaners may already treat it as an orphan. (Even then nothing could be lost: a commit
//!   that reaches a metadata partition after the cleaner fenced its key is refused.)
//! - Memory is bounded: a segment never exceeds `buffer_max_bytes`, a submission larger than that
//!   is refused (RECORD_LIST_TOO_LARGE, Kafka's answer past `segment.bytes`), and segments in
//!   flight are bounded as above.
//! - Shutdown seals and commits what was accepted.

pub mod config;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::v1::{commit_file_request, CommitFileRequest, CommitFileResponse};
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

pub use config::ProduceConfig;

use crate::cluster::{ClusterClient, Fence, MIN_COMMIT_WINDOW};
use crate::error::KafkaError;
use crate::storage::Storage;
use crate::validate::{Limits, Validated, Validator};
use crate::wal::record_batch::BatchHeader;
use crate::wal::segment::{PartitionKey, Placed, SegmentBuilder, OBJECT_FORMAT};

/// The longest the coordinator is given to commit a segment (less when the segment's deadline is
/// nearer). The coordinator turns it into a deadline in the command: a commit proposed after it
/// is refused whole.
pub const COMMIT_TIMEOUT_MS: i32 = 30_000;

/// How much earlier than the orphan grace period a segment's commit deadline falls (at most):
/// room for clock differences between brokers, object storage and coordinators, and for the
/// commit's own travel.
pub const COMMIT_DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// How long after its upload starts a segment may still be sent for commit: the orphan grace
/// period minus [`COMMIT_DEADLINE_MARGIN`] (a quarter of the grace when that is smaller).
pub fn commit_deadline(orphan_grace: Duration) -> Duration {
    orphan_grace.saturating_sub(COMMIT_DEADLINE_MARGIN.min(orphan_grace / 4))
}

/// Where a committed batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub duplicate: bool,
}

/// A batch's result, when its segment's commit resolves.
pub type Waiting = BoxFuture<'static, Result<Appended, KafkaError>>;

/// Where a batch's result goes, and the number of its transaction (0: none; `Validated`).
#[derive(Debug)]
struct Reply {
    to: oneshot::Sender<Result<Appended, KafkaError>>,
    txn_number: u64,
}

/// One call's batches for one partition: they go into one segment together.
struct Submission {
    partition: PartitionKey,
    batches: Vec<(Bytes, BatchHeader, Reply)>,
    bytes: usize,
}

/// A sealed segment on its way to object storage and the coordinator.
struct Sealed {
    seq: u64,
    key: String,
    size: usize,
    placed: Vec<Placed<Reply>>,
    uploaded: Result<(), String>,
    /// In the commit backlog metric while uploaded and not committed or failed.
    backlog: Option<crate::metrics::InBacklog>,
    /// The segment's upload slot, held until its commit resolves.
    slot: OwnedSemaphorePermit,
    /// No commit of the segment is sent after this (upload start + [`commit_deadline`]).
    deadline: Instant,
}

/// Where sealed segments are committed, and what is asked before deleting one that failed: the
/// coordinator cluster ([`ClusterClient`]), or a fake in tests.
pub trait Committer: Send + Sync + 'static {
    fn num_metadata_partitions(&self) -> u32;
    /// Commits a segment; nothing is sent after `deadline`. Per-batch results in request order.
    fn commit(&self, req: CommitFileRequest, deadline: Instant) -> BoxFuture<'_, CommitFileResponse>;
    /// Fences an object key in these metadata partitions (see FenceObjects).
    fn fence(&self, object_key: String, metadata_partitions: Vec<u32>) -> BoxFuture<'_, Fence>;
}

impl Committer for ClusterClient {
    fn num_metadata_partitions(&self) -> u32 {
        ClusterClient::num_metadata_partitions(self)
    }

    fn commit(&self, req: CommitFileRequest, deadline: Instant) -> BoxFuture<'_, CommitFileResponse> {
        async move {
            let r = self.commit_file(req.clone(), deadline).await;
            self.record_commit(&req, &r);
            r
        }
        .boxed()
    }

    fn fence(&self, object_key: String, metadata_partitions: Vec<u32>) -> BoxFuture<'_, Fence> {
        async move {
            match self.fence_objects(&[(object_key, metadata_partitions)]).await {
                Ok(mut v) => v.pop().unwrap_or_else(|| Fence::Unknown("no answer".into())),
                Err(s) => Fence::Unknown(s.to_string()),
            }
        }
        .boxed()
    }
}

/// Counters for benchmarks and status.
#[derive(Debug, Default)]
pub struct ProduceStats {
    pub segments: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
    /// Segments abandoned because their commit deadline passed before their turn.
    pub abandoned: std::sync::atomic::AtomicU64,
}

/// Handle to the produce pipeline. Dropping every handle (or calling [`Producer::close`]) flushes
/// and stops it.
#[derive(Clone)]
pub struct Producer {
    tx: mpsc::Sender<Submission>,
    /// The most bytes one submission may have (a segment's, less its header).
    max_submission_bytes: usize,
    /// The broker's limits on a batch (`message.max.bytes` and the decompressed bound).
    limits: Limits,
    validator: Arc<Validator>,
    pub stats: Arc<ProduceStats>,
}

pub struct ProducerTasks {
    buffer: tokio::task::JoinHandle<()>,
    committer: tokio::task::JoinHandle<()>,
}

impl ProducerTasks {
    /// Waits until everything accepted before the handles were dropped is committed.
    pub async fn join(self) {
        let _ = self.buffer.await;
        let _ = self.committer.await;
    }
}

impl Producer {
    /// Starts the pipeline; each segment must be sent for commit within `commit_deadline` of its
    /// upload start (see [`commit_deadline`]).
    pub fn start(
        config: ProduceConfig,
        broker_id: i32,
        storage: Storage,
        committer: Arc<dyn Committer>,
        commit_deadline: Duration,
    ) -> (Producer, ProducerTasks) {
        let (tx, rx) = mpsc::channel::<Submission>(4096);
        let (sealed_tx, sealed_rx) = mpsc::channel::<Sealed>(config.max_parallel_uploads * 2);
        let stats = Arc::new(ProduceStats::default());
        let max_submission_bytes = config.buffer_max_bytes.saturating_sub(1);
        let limits = Limits {
            max_message_bytes: config.max_message_bytes,
            max_uncompressed_bytes: config.max_uncompressed_batch_bytes,
            ..Limits::default()
        };
        let buffer =
            tokio::spawn(buffer_loop(config.clone(), rx, storage.clone(), sealed_tx, stats.clone(), commit_deadline));
        let committer = tokio::spawn(commit_loop(sealed_rx, broker_id, storage, committer, stats.clone()));
        let validator = Arc::new(Validator::per_core());
        (Producer { tx, max_submission_bytes, limits, validator, stats }, ProducerTasks { buffer, committer })
    }

    /// The broker's limits on a producer's batch (a topic's own settings change them: see
    /// [`Producer::limits_for`]).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The limits on a batch of a topic with these settings.
    pub fn limits_for(&self, overrides: &crate::validate::Overrides) -> Limits {
        self.limits.with_overrides(overrides, self.max_submission_bytes)
    }

    /// The largest batch one WAL segment takes (`produce.buffer_max_bytes - 1`).
    pub fn max_batch_ceiling(&self) -> usize {
        self.max_submission_bytes
    }

    /// Validates one call's batches for a partition (named in errors), in order (`crate::validate`).
    pub async fn validate(
        &self,
        batches: Vec<Bytes>,
        limits: Limits,
        partition: String,
    ) -> Result<Vec<Validated>, KafkaError> {
        self.validator.validate_all(batches, limits, partition).await
    }

    /// Appends one record batch to `partition` of topic `topic_id`; resolves when it is committed.
    pub async fn produce(&self, topic_id: [u8; 16], partition: i32, batch: Bytes) -> Result<Appended, KafkaError> {
        self.submit(topic_id, partition, batch).await?.await
    }

    /// Validates (with the broker's limits) and enqueues a batch; the returned future resolves
    /// when it is committed. Batches submitted one after the other keep that order in the log,
    /// whatever order their futures are awaited in.
    pub async fn submit(&self, topic_id: [u8; 16], partition: i32, batch: Bytes) -> Result<Waiting, KafkaError> {
        let name = format!("{}-{partition}", uuid::Uuid::from_bytes(topic_id));
        let batches = self.validate(vec![batch], self.limits, name).await?;
        let mut w = self.submit_all(topic_id, partition, batches).await?;
        w.pop().ok_or_else(|| KafkaError::new(ErrorCode::UnknownServerError, "no batch was submitted"))
    }

    /// Enqueues validated batches all together (in order, into one segment), or refuses them all:
    /// nothing of a call that fails is ever committed. One future per batch.
    pub async fn submit_all(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        batches: Vec<Validated>,
    ) -> Result<Vec<Waiting>, KafkaError> {
        let mut sub = Submission { partition: PartitionKey { topic_id, partition }, batches: vec![], bytes: 0 };
        let mut waiting: Vec<Waiting> = Vec::with_capacity(batches.len());
        if batches.iter().any(|b| b.header.is_transactional() && b.txn_number == 0) {
            // Only the Kafka listener's Produce verifies a batch's transaction (and numbers it).
            return Err(KafkaError::new(
                ErrorCode::TransactionalIdAuthorizationFailed,
                "a transactional record batch needs a Produce request with its transactional id",
            ));
        }
        for Validated { bytes: batch, header, txn_number } in batches {
            sub.bytes += batch.len();
            let (to, rx) = oneshot::channel();
            sub.batches.push((batch, header, Reply { to, txn_number }));
            let submitted = Instant::now();
            waiting.push(
                async move {
                    let r = rx.await.unwrap_or_else(|_| {
                        Err(KafkaError::new(ErrorCode::KafkaStorageError, "the produce pipeline stopped"))
                    });
                    let m = crate::metrics::get();
                    m.produce_duration.observe(submitted.elapsed().as_secs_f64());
                    let result = if r.is_ok() { "ok" } else { "error" };
                    m.produced_batches.get_or_create(&crate::metrics::Outcome { result }).inc();
                    r
                }
                .boxed(),
            );
        }
        if sub.bytes > self.max_submission_bytes {
            // Kafka's answer to an append larger than a log segment (`segment.bytes`).
            return Err(KafkaError::new(
                ErrorCode::RecordListTooLarge,
                format!(
                    "{} bytes of record batches for one partition exceed a WAL segment's {} (produce.buffer_max_bytes)",
                    sub.bytes, self.max_submission_bytes
                ),
            ));
        }
        if sub.batches.is_empty() {
            return Ok(waiting);
        }
        self.tx
            .send(sub)
            .await
            .map_err(|_| KafkaError::new(ErrorCode::KafkaStorageError, "the broker is shutting down"))?;
        Ok(waiting)
    }
}

async fn buffer_loop(
    config: ProduceConfig,
    mut rx: mpsc::Receiver<Submission>,
    storage: Storage,
    sealed_tx: mpsc::Sender<Sealed>,
    stats: Arc<ProduceStats>,
    commit_deadline: Duration,
) {
    let uploads = Arc::new(Semaphore::new(config.max_parallel_uploads));
    let interval = Duration::from_millis(config.commit_interval_ms);
    let mut open: SegmentBuilder<Reply> = SegmentBuilder::default();
    let mut deadline: Option<Instant> = None;
    // Segments close on a fixed grid of `interval` from here rather than an interval after their
    // first batch: a batch waits the rest of the current tick, half an interval on average, and at
    // most one segment a tick is sealed by time, as before (docs/benchmarks.md: the lock step
    // between a producer's in-flight requests and segments timed from their first batch).
    let grid = Instant::now();
    let mut seq = 0u64;
    let seal_now = |open: &mut SegmentBuilder<Reply>, seq: &mut u64| {
        *seq += 1;
        seal(std::mem::take(open), *seq, &config, &storage, &uploads, &sealed_tx, &stats, commit_deadline)
    };
    loop {
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(sub) => {
                    // A segment never exceeds buffer_max_bytes (its offsets travel as int32): seal
                    // first if this submission would not fit.
                    if !open.is_empty() && open.len() + sub.bytes > config.buffer_max_bytes {
                        seal_now(&mut open, &mut seq).await;
                        deadline = None;
                    }
                    if open.is_empty() {
                        deadline = Some(next_tick(grid, interval, Instant::now()));
                    }
                    for (batch, header, reply) in sub.batches {
                        open.push(sub.partition, batch, header, reply);
                    }
                    if open.len() < config.buffer_max_bytes {
                        continue;
                    }
                }
                None => {
                    if !open.is_empty() {
                        seal_now(&mut open, &mut seq).await;
                    }
                    return;
                }
            },
            _ = timer => {}
        }
        deadline = None;
        seal_now(&mut open, &mut seq).await;
    }
}

/// The first tick of the grid `origin + k × interval` strictly after `now`.
pub(crate) fn next_tick(origin: Instant, interval: Duration, now: Instant) -> Instant {
    let interval_ns = interval.as_nanos().max(1);
    let ticks = now.saturating_duration_since(origin).as_nanos() / interval_ns + 1;
    // Past u32::MAX intervals (a year of 8 ms ticks) a segment closes an interval after its first
    // batch instead.
    let ticks = u32::try_from(ticks).unwrap_or(u32::MAX);
    let at = origin + interval * ticks;
    if at > now {
        at
    } else {
        now + interval
    }
}

/// Lays the segment out and starts its upload (waiting for a free upload slot first).
#[allow(clippy::too_many_arguments)]
async fn seal(
    open: SegmentBuilder<Reply>,
    seq: u64,
    config: &ProduceConfig,
    storage: &Storage,
    uploads: &Arc<Semaphore>,
    sealed_tx: &mpsc::Sender<Sealed>,
    stats: &Arc<ProduceStats>,
    commit_deadline: Duration,
) {
    let slot = uploads.clone().acquire_owned().await.expect("the upload semaphore is never closed");
    let (bytes, placed) = open.finish();
    let key = Storage::new_key(&config.key_prefix);
    let size = bytes.len();
    stats.segments.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    stats.bytes.fetch_add(size as u64, std::sync::atomic::Ordering::Relaxed);
    let m = crate::metrics::get();
    m.segment_bytes.observe(size as f64);
    m.segment_batches.observe(placed.len() as f64);
    let storage = storage.clone();
    let sealed_tx = sealed_tx.clone();
    // The object's age, as the orphan scan sees it, starts no earlier than this.
    let deadline = Instant::now() + commit_deadline;
    tokio::spawn(async move {
        let m = crate::metrics::get();
        m.uploads_in_flight.inc();
        let uploaded = storage.put_new(&key, bytes).await.map_err(|e| e.to_string());
        m.uploads_in_flight.dec();
        let backlog = uploaded.is_ok().then(|| m.uploaded());
        if let Err(e) = &uploaded {
            tracing::warn!(key, error = %e, "WAL segment upload failed");
        }
        let _ = sealed_tx.send(Sealed { seq, key, size, placed, uploaded, backlog, slot, deadline }).await;
    });
}

/// Commits uploaded segments strictly in seal order.
async fn commit_loop(
    mut rx: mpsc::Receiver<Sealed>,
    broker_id: i32,
    storage: Storage,
    committer: Arc<dyn Committer>,
    stats: Arc<ProduceStats>,
) {
    let mut waiting: BTreeMap<u64, Sealed> = BTreeMap::new();
    let mut next = 1u64;
    while let Some(s) = rx.recv().await {
        waiting.insert(s.seq, s);
        while let Some(s) = waiting.remove(&next) {
            next += 1;
            commit(s, broker_id, &storage, committer.as_ref(), &stats).await;
        }
    }
}

async fn commit(s: Sealed, broker_id: i32, storage: &Storage, committer: &dyn Committer, stats: &ProduceStats) {
    // The upload slot is released when this returns: the segment is then committed or failed.
    let Sealed { seq, key, size, placed, uploaded, backlog: _backlog, slot: _slot, deadline } = s;
    if let Err(e) = &uploaded {
        let err = KafkaError::new(ErrorCode::KafkaStorageError, format!("upload of WAL segment failed: {e}"));
        for p in placed {
            let _ = p.tag.to.send(Err(err.clone()));
        }
        return;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if left < MIN_COMMIT_WINDOW {
        abandon(seq, key, placed, storage, stats);
        return;
    }
    let n = committer.num_metadata_partitions();
    let owners: BTreeSet<i32> = placed
        .iter()
        .map(|p| diskless_proto::metadata_partition_for(&p.partition.topic_id, p.partition.partition, n) as i32)
        .collect();
    let owner_ids: Vec<i32> = owners.into_iter().collect();
    let req = CommitFileRequest {
        object_key: key.clone(),
        object_format: OBJECT_FORMAT,
        file_size: size as i64,
        owner_ids: owner_ids.clone(),
        batches: placed
            .iter()
            .enumerate()
            .map(|(i, p)| commit_file_request::CommitBatch {
                magic: 2,
                request_id: i as i32,
                topic_id: p.partition.topic_id.to_vec(),
                partition_index: p.partition.partition,
                byte_offset: p.byte_offset as i32,
                size: p.size as i32,
                base_offset: 0,
                last_offset: i64::from(p.header.last_offset_delta),
                batch_max_timestamp: p.header.max_timestamp,
                timestamp_type: i32::from(p.header.timestamp_type),
                producer_id: p.header.producer_id,
                producer_epoch: i32::from(p.header.producer_epoch),
                base_sequence: p.header.base_sequence,
                last_sequence: p.header.last_sequence(),
                is_transactional: p.header.is_transactional(),
                txn_number: p.tag.txn_number,
            })
            .collect(),
        // The coordinator may take only the time left before the deadline.
        timeout_ms: left.as_millis().min(COMMIT_TIMEOUT_MS as u128) as i32,
        uploader_broker_id: broker_id,
    };
    let started = Instant::now();
    let r = committer.commit(req, deadline).await;
    crate::metrics::get().commit_duration.observe(started.elapsed().as_secs_f64());
    // Nothing committed anywhere, for sure (every batch refused by a node that was not the
    // leader)? Then the object is garbage: fence it in its owners and delete it now. An unknown
    // outcome (REQUEST_TIMED_OUT) is left to the orphan scan, which fences before deleting.
    let nothing = r.batches.iter().all(|b| b.error_code == ErrorCode::NotLeaderOrFollower.wire());
    let mut results = r.batches.into_iter();
    for p in placed {
        let res = match results.next() {
            Some(b) => match KafkaError::from_wire(b.error_code, b.error_message) {
                Some(e) => Err(e),
                None => Ok(Appended {
                    base_offset: b.assigned_base_offset,
                    log_append_time: b.log_append_time,
                    log_start_offset: b.log_start_offset,
                    duplicate: b.is_duplicate,
                }),
            },
            None => Err(KafkaError::new(ErrorCode::UnknownServerError, "the coordinator answered fewer batches")),
        };
        let _ = p.tag.to.send(res);
    }
    if nothing {
        let owners = owner_ids.iter().map(|&o| o as u32).collect();
        delete_if_fenced(&key, owners, storage, committer).await;
    }
}

/// A segment whose commit deadline passed before its turn: its callers get a retriable error, no
/// commit is sent, and the object is deleted (no commit of its key was ever sent, so none can
/// apply; if the delete fails the orphan scan fences and deletes it later).
fn abandon(seq: u64, key: String, placed: Vec<Placed<Reply>>, storage: &Storage, stats: &ProduceStats) {
    stats.abandoned.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::metrics::get().segments_abandoned.inc();
    tracing::warn!(
        key,
        seq,
        batches = placed.len(),
        "WAL segment abandoned: its commit deadline passed before its turn (a metadata partition is slow or \
         unreachable); its producers get REQUEST_TIMED_OUT and retry"
    );
    let err = KafkaError::new(
        ErrorCode::RequestTimedOut,
        "the WAL segment holding this batch could not be committed before its deadline; nothing of it was \
         committed: produce again",
    );
    for p in placed {
        let _ = p.tag.to.send(Err(err.clone()));
    }
    let storage = storage.clone();
    tokio::spawn(async move {
        if let Err(e) = storage.delete(&key).await {
            tracing::warn!(key, error = %e, "could not delete an abandoned segment; the orphan scan will");
        }
    });
}

/// After a commit that surely applied nowhere: fence the key in its owners (a commit part still
/// on its way is then refused) and delete the object if none of them knows it.
async fn delete_if_fenced(key: &str, owners: Vec<u32>, storage: &Storage, committer: &dyn Committer) {
    match committer.fence(key.to_string(), owners).await {
        Fence::Fenced => match storage.delete(key).await {
            Ok(()) => tracing::info!(key, "deleted a segment whose commit failed"),
            Err(e) => tracing::warn!(key, error = %e, "could not delete an uncommitted segment; the orphan scan will"),
        },
        other => tracing::warn!(key, fence = ?other, "commit failed; leaving the segment to the cleaner"),
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
