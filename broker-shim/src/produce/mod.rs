//! The produce path (KIP-1163): callers hand in record batches; batches of many partitions are
//! buffered into one WAL segment, uploaded, then committed; each caller learns its offset.
//!
//! ```text
//! produce() ─validate─▶ buffer ─(interval or size)─▶ seal #n ─▶ upload (≤ N in parallel)
//!                                                                   │
//!            callers ◀─results── commit in seal order (#1, #2, …) ◀──┘
//! ```
//! - A batch that is not a valid v2 record batch is refused at once (CORRUPT_MESSAGE), never
//!   uploaded.
//! - Commits go strictly in the order segments were sealed, so batches of a partition keep their
//!   produce order across segments.
//! - An upload failure fails every batch of the segment with a retriable error; nothing is
//!   committed. Each metadata partition's part of the commit goes straight to that partition's
//!   leader. A commit that surely applied nowhere (not-leader everywhere) is deleted at once if no
//!   coordinator knows it; one whose outcome is unknown is left to the orphan reconciler, whose
//!   grace period outlasts any commit in flight.
//! - Memory is bounded: the open segment stops at `buffer_max_bytes`, and sealing waits for an
//!   upload slot when `max_parallel_uploads` segments are in flight.
//! - Shutdown seals and commits what was accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::v1::{commit_file_request, CommitFileRequest, DescribeFilesRequest};
use diskless_proto::ErrorCode;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::config::ProduceConfig;
use crate::coordinator::Coordinators;
use crate::error::KafkaError;
use crate::storage::Storage;
use crate::wal::record_batch::{self, BatchHeader};
use crate::wal::segment::{PartitionKey, Placed, SegmentBuilder, OBJECT_FORMAT};

/// How long the coordinator may take to commit a segment. The coordinator turns it into a
/// deadline in the command: past it the commit is refused whole, so no commit of ours applies
/// later than this after it reached a coordinator (the cleaner's grace periods rely on it).
pub const COMMIT_TIMEOUT_MS: i32 = 30_000;

/// Where a committed batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub duplicate: bool,
}

type Reply = oneshot::Sender<Result<Appended, KafkaError>>;

struct Pending {
    partition: PartitionKey,
    batch: Bytes,
    header: BatchHeader,
    reply: Reply,
}

/// A sealed segment on its way to object storage and the coordinator.
struct Sealed {
    seq: u64,
    key: String,
    size: usize,
    placed: Vec<Placed<Reply>>,
    uploaded: Result<(), String>,
}

/// Counters for benchmarks and status.
#[derive(Debug, Default)]
pub struct ProduceStats {
    pub segments: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
}

/// Handle to the produce pipeline. Dropping every handle (or calling [`Producer::close`]) flushes
/// and stops it.
#[derive(Clone)]
pub struct Producer {
    tx: mpsc::Sender<Pending>,
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
    pub fn start(
        config: ProduceConfig,
        broker_id: i32,
        storage: Storage,
        coordinators: Arc<Coordinators>,
    ) -> (Producer, ProducerTasks) {
        let (tx, rx) = mpsc::channel::<Pending>(4096);
        let (sealed_tx, sealed_rx) = mpsc::channel::<Sealed>(config.max_parallel_uploads * 2);
        let stats = Arc::new(ProduceStats::default());
        let buffer = tokio::spawn(buffer_loop(config.clone(), rx, storage.clone(), sealed_tx, stats.clone()));
        let committer = tokio::spawn(commit_loop(sealed_rx, broker_id, storage, coordinators));
        (Producer { tx, stats }, ProducerTasks { buffer, committer })
    }

    /// Appends one record batch to `partition` of topic `topic_id`; resolves when it is committed.
    pub async fn produce(&self, topic_id: [u8; 16], partition: i32, batch: Bytes) -> Result<Appended, KafkaError> {
        self.submit(topic_id, partition, batch).await?.await
    }

    /// Validates and enqueues a batch; the returned future resolves when it is committed. Batches
    /// submitted one after the other keep that order in the log, whatever order their futures are
    /// awaited in.
    pub async fn submit(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        batch: Bytes,
    ) -> Result<impl std::future::Future<Output = Result<Appended, KafkaError>> + Send + 'static, KafkaError> {
        let header =
            record_batch::validate(&batch).map_err(|e| KafkaError::new(ErrorCode::CorruptMessage, e.to_string()))?;
        let (reply, rx) = oneshot::channel();
        let p = Pending { partition: PartitionKey { topic_id, partition }, batch, header, reply };
        self.tx
            .send(p)
            .await
            .map_err(|_| KafkaError::new(ErrorCode::KafkaStorageError, "the broker is shutting down"))?;
        Ok(async move {
            rx.await
                .unwrap_or_else(|_| Err(KafkaError::new(ErrorCode::KafkaStorageError, "the produce pipeline stopped")))
        })
    }
}

async fn buffer_loop(
    config: ProduceConfig,
    mut rx: mpsc::Receiver<Pending>,
    storage: Storage,
    sealed_tx: mpsc::Sender<Sealed>,
    stats: Arc<ProduceStats>,
) {
    let uploads = Arc::new(Semaphore::new(config.max_parallel_uploads));
    let interval = Duration::from_millis(config.commit_interval_ms);
    let mut open: SegmentBuilder<Reply> = SegmentBuilder::default();
    let mut deadline: Option<Instant> = None;
    let mut seq = 0u64;
    loop {
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(p) => {
                    if open.is_empty() {
                        deadline = Some(Instant::now() + interval);
                    }
                    open.push(p.partition, p.batch, p.header, p.reply);
                    if open.len() < config.buffer_max_bytes {
                        continue;
                    }
                }
                None => {
                    if !open.is_empty() {
                        seq += 1;
                        seal(std::mem::take(&mut open), seq, &config, &storage, &uploads, &sealed_tx, &stats).await;
                    }
                    return;
                }
            },
            _ = timer => {}
        }
        deadline = None;
        seq += 1;
        seal(std::mem::take(&mut open), seq, &config, &storage, &uploads, &sealed_tx, &stats).await;
    }
}

/// Lays the segment out and starts its upload (waiting for a free upload slot first).
async fn seal(
    open: SegmentBuilder<Reply>,
    seq: u64,
    config: &ProduceConfig,
    storage: &Storage,
    uploads: &Arc<Semaphore>,
    sealed_tx: &mpsc::Sender<Sealed>,
    stats: &Arc<ProduceStats>,
) {
    let permit = uploads.clone().acquire_owned().await.expect("the upload semaphore is never closed");
    let (bytes, placed) = open.finish();
    let key = Storage::new_key(&config.key_prefix);
    let size = bytes.len();
    stats.segments.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    stats.bytes.fetch_add(size as u64, std::sync::atomic::Ordering::Relaxed);
    let storage = storage.clone();
    let sealed_tx = sealed_tx.clone();
    tokio::spawn(async move {
        let uploaded = storage.put_new(&key, bytes).await.map_err(|e| e.to_string());
        if let Err(e) = &uploaded {
            tracing::warn!(key, error = %e, "WAL segment upload failed");
        }
        drop(permit);
        let _ = sealed_tx.send(Sealed { seq, key, size, placed, uploaded }).await;
    });
}

/// Commits uploaded segments strictly in seal order.
async fn commit_loop(
    mut rx: mpsc::Receiver<Sealed>,
    broker_id: i32,
    storage: Storage,
    coordinators: Arc<Coordinators>,
) {
    let mut waiting: BTreeMap<u64, Sealed> = BTreeMap::new();
    let mut next = 1u64;
    while let Some(s) = rx.recv().await {
        waiting.insert(s.seq, s);
        while let Some(s) = waiting.remove(&next) {
            next += 1;
            commit(s, broker_id, &storage, &coordinators).await;
        }
    }
}

async fn commit(s: Sealed, broker_id: i32, storage: &Storage, coordinators: &Coordinators) {
    if let Err(e) = &s.uploaded {
        let err = KafkaError::new(ErrorCode::KafkaStorageError, format!("upload of WAL segment failed: {e}"));
        for p in s.placed {
            let _ = p.tag.send(Err(err.clone()));
        }
        return;
    }
    let n = coordinators.num_groups();
    let owners: BTreeSet<i32> = s
        .placed
        .iter()
        .map(|p| diskless_proto::metadata_partition_for(&p.partition.topic_id, p.partition.partition, n) as i32)
        .collect();
    let req = CommitFileRequest {
        object_key: s.key.clone(),
        object_format: OBJECT_FORMAT,
        file_size: s.size as i64,
        owner_ids: owners.into_iter().collect(),
        batches: s
            .placed
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
            })
            .collect(),
        timeout_ms: COMMIT_TIMEOUT_MS,
        uploader_broker_id: broker_id,
    };
    let r = coordinators.commit_file(req).await;
    coordinators.record_applied(&r.applied);
    // Nothing committed anywhere, for sure (every batch refused by a node that was not the
    // leader)? Then the object is garbage: delete it now if no metadata partition knows it. An
    // unknown outcome (REQUEST_TIMED_OUT) may still commit later, so that object is left to the
    // orphan reconciler and its grace period.
    let nothing = r.batches.iter().all(|b| b.error_code == ErrorCode::NotLeaderOrFollower.wire());
    let mut results = r.batches.into_iter();
    for p in s.placed {
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
        let _ = p.tag.send(res);
    }
    if nothing {
        delete_if_unknown(&s.key, storage, coordinators).await;
    }
}

/// After a failed commit: delete the object now if no metadata partition knows it.
async fn delete_if_unknown(key: &str, storage: &Storage, coordinators: &Coordinators) {
    let req = DescribeFilesRequest {
        files: vec![diskless_proto::v1::describe_files_request::DescribeFileEntry { object_key: key.to_string() }],
        timeout_ms: 10_000,
    };
    let known = coordinators.call(|mut c| {
        let req = req.clone();
        async move { c.describe_files(req).await }
    });
    match known.await {
        Ok(r) if r.files.first().is_some_and(|f| f.error_code == 0 && !f.known) => {
            if let Err(e) = storage.delete(key).await {
                tracing::warn!(key, error = %e, "could not delete an uncommitted segment; the orphan reconciler will");
            } else {
                tracing::info!(key, "deleted a segment whose commit failed");
            }
        }
        _ => tracing::warn!(key, "commit outcome unknown; leaving the segment to the orphan reconciler"),
    }
}
