//! The fetch path (KIP-1163): FindBatches tells where the batches from an offset live; the byte
//! ranges are read from object storage (adjacent ranges of one object coalesced into one GET, a
//! bounded cache in front), each batch is checked (CRC32C, size, record count against the
//! coordinator's offsets), then its base offset — and, for LogAppendTime batches, the append time —
//! is injected, giving record batches a Kafka consumer parses as if they came from a classic log.
//!
//! A damaged batch fails its partition with CORRUPT_MESSAGE (the others are served); an object that
//! cannot be read fails its partitions with a retriable KAFKA_STORAGE_ERROR. Total on hostile
//! input: coordinates from FindBatches (negative, huge, overlapping, mismatched) and bytes from
//! object storage are checked before any arithmetic or read with them, each failure naming the
//! object key and the byte offset, never a panic.
//!
//! A transaction marker has no object bytes: its control batch is built from what the coordinator
//! says of it (`wal::control`).

pub mod by_time;
pub mod cache;
pub mod config;
pub mod reads;

pub use config::FetchConfig;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use diskless_proto::v1::find_batches_response::{BatchInfo, FindBatchesPartitionResponse, FindBatchesTopicResponse};
use diskless_proto::v1::{find_batches_request, AppliedIndex, FindBatchesRequest};
use diskless_proto::ErrorCode;

use crate::cluster::coordinates::Coordinate;
use crate::cluster::ClusterClient;
use crate::error::KafkaError;
use crate::storage::Storage;
use crate::wal::{control, record_batch};
use cache::RangeCache;
use reads::{Need, ObjectReads};

/// One partition of a fetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchPartition {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
    /// Kafka's `read_committed`: nothing at or past the last stable offset, with the aborted
    /// transactions of what is returned (one fetch has one isolation level: its partitions agree).
    pub read_committed: bool,
}

/// What a fetch returns for one partition.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub error: Option<KafkaError>,
    pub high_watermark: i64,
    /// The high watermark when the coordinator did not say (an answer from the cache).
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Record batches, back to back, offsets injected.
    pub records: Bytes,
    /// `read_committed`: the aborted transactions overlapping `records` (producer id, first offset).
    pub aborted: Vec<(i64, i64)>,
}

impl Fetched {
    /// A partition's answer with nothing read: an error, or the state a mark knows.
    pub fn empty(error: Option<KafkaError>, high_watermark: i64, log_start_offset: i64) -> Fetched {
        Fetched {
            error,
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset,
            records: Bytes::new(),
            aborted: vec![],
        }
    }
}

pub struct Fetcher {
    cluster: Arc<ClusterClient>,
    reader: Reader,
}

/// Reads batches' bytes: from the cache, else by coalesced, shared ranged GETs (`reads`); checks
/// them.
struct Reader {
    reads: ObjectReads,
    cache: RangeCache,
}

/// The bytes one fetch needs, gathered before it assembles its answer: cache hits are taken when
/// the reads are planned, so an eviction meanwhile cannot leave a batch unread.
#[derive(Default)]
struct Gathered {
    cached: HashMap<(String, u64), Bytes>,
    read: HashMap<String, reads::Got>,
}

impl Fetcher {
    pub fn new(config: &FetchConfig, storage: Storage, cluster: Arc<ClusterClient>) -> Fetcher {
        Fetcher {
            cluster,
            reader: Reader {
                reads: ObjectReads::new(
                    storage,
                    config.coalesce_gap_bytes,
                    config.catch_up_age_ms,
                    config.catch_up_bytes_in_flight,
                ),
                cache: RangeCache::new(config.cache_bytes),
            },
        }
    }

    pub fn cache(&self) -> &RangeCache {
        &self.reader.cache
    }

    pub async fn fetch(&self, parts: &[FetchPartition], max_total_bytes: i32) -> Result<Vec<Fetched>, KafkaError> {
        self.fetch_after(parts, max_total_bytes, &[]).await
    }

    /// Like [`Fetcher::fetch`], from a replica that has applied at least `seen` too (what woke a
    /// parked fetch: a change the replica it asks must show).
    ///
    /// A partition whose state the broker knows (a trusted mark) and whose batches from the fetch
    /// offset are in the coordinate cache is answered from them; FindBatches is asked for the
    /// others only, from a replica that has applied what those marks show.
    pub async fn fetch_after(
        &self,
        parts: &[FetchPartition],
        max_total_bytes: i32,
        seen: &[AppliedIndex],
    ) -> Result<Vec<Fetched>, KafkaError> {
        let m = crate::metrics::get();
        let marks = self.cluster.marks();
        let coordinates = self.cluster.coordinates();
        let n = self.cluster.num_metadata_partitions();
        let mut answers: Vec<Option<FindBatchesPartitionResponse>> = vec![None; parts.len()];
        let mut budget = i64::from(max_total_bytes.max(0));
        let mut asked = vec![];
        let mut seen = seen.to_vec();
        let mut served_any = false;
        for (i, p) in parts.iter().enumerate() {
            // read_committed: only while no transaction is open (a settled mark), and only batches
            // known not to be transactional; else FindBatches (the last stable offset, the
            // aborted transactions).
            let cached = coordinates.enabled() && (!p.read_committed || marks.settled(p.topic_id, p.partition));
            let known = cached.then(|| marks.known(p.topic_id, p.partition)).flatten();
            if let Some(mark) = known {
                let answer = |batches| FindBatchesPartitionResponse {
                    partition_index: p.partition,
                    error_code: 0,
                    error_message: None,
                    log_start_offset: mark.log_start_offset,
                    high_watermark: mark.high_watermark,
                    batches,
                    last_stable_offset: mark.high_watermark,
                    aborted_transactions: vec![],
                };
                let readable = (mark.log_start_offset..=mark.high_watermark).contains(&p.offset);
                // Nothing to read here, or no room left in the response (as Kafka, only the first
                // partition with data may pass the limit).
                if readable && (p.offset == mark.high_watermark || (served_any && budget <= 0)) {
                    answers[i] = Some(answer(vec![]));
                    continue;
                }
                let max = i64::from(p.max_bytes.max(0)).min(budget);
                let served = readable.then(|| {
                    coordinates.serve(p.topic_id, p.partition, p.offset, mark.high_watermark, max, p.read_committed)
                });
                match served {
                    Some(Some(served)) => {
                        m.coordinate_cache_hits.inc();
                        budget = budget.saturating_sub(served.bytes);
                        served_any = true;
                        answers[i] = Some(answer(served.batches));
                        continue;
                    }
                    _ => {
                        // What the broker knows of the partition, the replica asked must show.
                        let g = diskless_proto::metadata_partition_for(&p.topic_id, p.partition.max(0), n);
                        seen.push(AppliedIndex { metadata_partition: g, index: mark.index });
                    }
                }
            }
            m.coordinate_cache_misses.inc();
            asked.push(i);
        }
        if !asked.is_empty() {
            let ask: Vec<FetchPartition> = asked.iter().map(|&i| parts[i]).collect();
            let max = i32::try_from(budget.max(1)).unwrap_or(i32::MAX);
            for (i, a) in asked.into_iter().zip(self.find_batches(&ask, max, &seen).await?) {
                answers[i] = a;
            }
        }
        let gathered = self.reader.gather(answers.iter().flatten().flat_map(|a| a.batches.iter())).await;

        let mut out = Vec::with_capacity(parts.len());
        for a in answers {
            let Some(a) = a else {
                let e = KafkaError::new(ErrorCode::UnknownServerError, "no answer for the partition");
                out.push(Fetched::empty(Some(e), -1, -1));
                continue;
            };
            let mut f = Fetched {
                error: KafkaError::from_wire(a.error_code, a.error_message.clone()),
                high_watermark: a.high_watermark,
                last_stable_offset: a.last_stable_offset,
                log_start_offset: a.log_start_offset,
                records: Bytes::new(),
                aborted: a.aborted_transactions.iter().map(|t| (t.producer_id, t.first_offset)).collect(),
            };
            if f.error.is_none() {
                match self.reader.assemble(&a.batches, &gathered) {
                    Ok(records) => f.records = records,
                    Err(e) => f.error = Some(e),
                }
            }
            out.push(f);
        }
        Ok(out)
    }
}

impl Fetcher {
    /// FindBatches for `parts` (from a replica that has applied this broker's writes and `seen`):
    /// each partition's answer, in order; what the reads saw goes to the marks and the coordinate
    /// cache.
    async fn find_batches(
        &self,
        parts: &[FetchPartition],
        max_total_bytes: i32,
        seen: &[AppliedIndex],
    ) -> Result<Vec<Option<FindBatchesPartitionResponse>>, KafkaError> {
        let mut min_applied = self.cluster.min_applied();
        for s in seen {
            match min_applied.iter_mut().find(|m| m.metadata_partition == s.metadata_partition) {
                Some(m) => m.index = m.index.max(s.index),
                None => min_applied.push(*s),
            }
        }
        let req = FindBatchesRequest {
            fetch_max_bytes: max_total_bytes,
            max_batches_per_partition: 0,
            topics: parts
                .iter()
                .map(|p| find_batches_request::FindBatchesTopic {
                    topic_id: p.topic_id.to_vec(),
                    partitions: vec![find_batches_request::FindBatchesPartition {
                        partition_index: p.partition,
                        offset: p.offset,
                        max_partition_fetch_bytes: p.max_bytes,
                    }],
                })
                .collect(),
            // Bounds only the wait for `min_applied`: a replica seconds behind is left for another.
            timeout_ms: 3_000,
            min_applied,
            isolation_level: i32::from(parts.iter().any(|p| p.read_committed)),
        };
        let mut attempts = 0;
        let r = loop {
            let r = self
                .cluster
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.find_batches(req).await }
                })
                .await
                .map_err(|s| KafkaError::unavailable("find batches", &s))?;
            // A node whose replica cannot vouch for its state (stale, removed, mid-install) says
            // so per partition: ask the next node. So does one that calls an offset past its own
            // high watermark out of range: it may be behind (cut off and not yet aware of it),
            // and another replica may hold the batches.
            let unavailable = r.topics.iter().flat_map(|t| &t.partitions).any(|p| {
                p.error_code == ErrorCode::ReplicaNotAvailable.wire()
                    || (p.error_code == ErrorCode::OffsetOutOfRange.wire()
                        && parts.iter().any(|a| a.partition == p.partition_index && a.offset > p.high_watermark))
            });
            attempts += 1;
            if !unavailable || attempts >= self.cluster.nodes() {
                break r;
            }
            self.cluster.move_on();
        };

        // Reads never go backwards: the next FindBatches waits for what this one saw.
        self.cluster.record_applied(&r.applied);
        // Per partition: its answer (exactly one per partition asked for, answers for another
        // partition dropped).
        let mut answers = answers_for(parts, r.topics);
        // A replica behind the leader may call an offset past its own high watermark out of range
        // when it is not: ask the leader (strictly) before telling a consumer to reset.
        for (a, p) in answers.iter_mut().zip(parts) {
            let Some(a) = a else { continue };
            if a.error_code == ErrorCode::OffsetOutOfRange.wire()
                && p.offset > a.high_watermark
                && a.high_watermark >= 0
            {
                if let Ok((_, hwm)) = self.cluster.list_offset(p.topic_id, p.partition, -1).await {
                    if p.offset <= hwm {
                        a.error_code = 0;
                        a.error_message = None;
                        a.high_watermark = hwm;
                        a.batches.clear();
                    }
                }
            }
        }
        // What the reads saw: the marks that let caught-up fetches park without a read, and the
        // coordinates of the batches for the next fetches.
        let marks = self.cluster.marks();
        let coordinates = self.cluster.coordinates();
        let mut keys: HashMap<&str, Arc<str>> = HashMap::new();
        for (a, p) in answers.iter().zip(parts) {
            let Some(a) = a else { continue };
            if a.error_code != 0 {
                continue;
            }
            let g = diskless_proto::metadata_partition_for(
                &p.topic_id,
                p.partition.max(0),
                self.cluster.num_metadata_partitions(),
            );
            let at = r.applied.iter().find(|x| x.metadata_partition == g);
            if coordinates.enabled() {
                if a.log_start_offset >= 0 {
                    coordinates.truncate_below(p.topic_id, p.partition, a.log_start_offset);
                }
                // Kept only with the index the answer was true at (a replace may move them).
                for b in a.batches.iter().filter(|_| at.is_some()) {
                    let key = keys.entry(b.object_key.as_str()).or_insert_with(|| Arc::from(b.object_key.as_str()));
                    let c = Coordinate::from_batch_info(b, key.clone());
                    coordinates.insert(p.topic_id, p.partition, c, at.map_or(0, |x| x.index));
                }
            }
            if let Some(at) = at {
                marks.observe_read(
                    p.topic_id,
                    p.partition,
                    a.high_watermark,
                    a.log_start_offset,
                    a.last_stable_offset,
                    at.index,
                );
            }
        }
        Ok(answers)
    }
}

impl Reader {
    /// Takes what the cache holds of these batches, and reads the rest (coalescing close ranges,
    /// sharing reads under way).
    async fn gather(&self, batches: impl Iterator<Item = &BatchInfo>) -> Gathered {
        let mut g = Gathered::default();
        let mut needed: Vec<Need> = vec![];
        for b in batches {
            if b.marker.is_some() {
                continue;
            }
            // Bad coordinates are read from nowhere: `assemble` fails their partition.
            let Ok(range) = coordinates(b) else { continue };
            let at = range.start;
            if g.cached.contains_key(&(b.object_key.clone(), at)) {
                continue;
            }
            match self.cache.get(&b.object_key, at).filter(|bytes| bytes.len() as u64 == range.end - at) {
                Some(bytes) => {
                    g.cached.insert((b.object_key.clone(), at), bytes);
                }
                None => needed.push(Need { key: b.object_key.clone(), range, appended_ms: b.log_append_timestamp }),
            }
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        g.read = self.reads.read(needed, now_ms).await;
        g
    }

    /// One partition's record batches from what was gathered, checked and injected.
    fn assemble(&self, batches: &[BatchInfo], gathered: &Gathered) -> Result<Bytes, KafkaError> {
        let mut out = BytesMut::new();
        for b in batches {
            if let Some(m) = &b.marker {
                out.extend_from_slice(&marker_batch(b, m)?);
                continue;
            }
            let Range { start: at, end } = coordinates(b).map_err(|why| {
                tracing::error!(object = %b.object_key, at = b.byte_offset, %why, "FindBatches gave impossible coordinates");
                KafkaError::new(
                    ErrorCode::CorruptMessage,
                    format!("batch at byte {} of {}: the coordinator's coordinates {why}", b.byte_offset, b.object_key),
                )
            })?;
            let cached = gathered.cached.get(&(b.object_key.clone(), at)).filter(|raw| raw.len() as u64 == end - at);
            let raw = match cached {
                Some(raw) => raw.clone(),
                None => {
                    let read = gathered
                        .read
                        .get(&b.object_key)
                        .and_then(|got| got.iter().find(|(r, _)| r.start <= at && end <= r.end));
                    let (range, bytes) = match read {
                        Some((range, Ok(bytes))) => (range, bytes),
                        Some((_, Err(e))) => {
                            return Err(KafkaError::new(
                                ErrorCode::KafkaStorageError,
                                format!("reading object {} (the batch at byte {}): {e}", b.object_key, b.byte_offset),
                            ))
                        }
                        None => {
                            return Err(KafkaError::new(
                                ErrorCode::KafkaStorageError,
                                format!("batch at byte {} of {}: its bytes were not read", b.byte_offset, b.object_key),
                            ))
                        }
                    };
                    let lo = (at - range.start) as usize;
                    let hi = (end - range.start) as usize;
                    if hi > bytes.len() {
                        return Err(self.corrupt(
                            b,
                            format!(
                                "the object ends at byte {}, before the batch does",
                                range.start + bytes.len() as u64
                            ),
                        ));
                    }
                    let raw = bytes.slice(lo..hi);
                    // Check before caching: only good bytes are kept.
                    self.check(b, &raw)?;
                    self.cache.put(&b.object_key, at, raw.clone());
                    raw
                }
            };
            let mut batch = raw.to_vec();
            let lat = (b.timestamp_type == 1).then_some(b.log_append_timestamp);
            record_batch::inject(&mut batch, b.base_offset, lat).map_err(|e| self.corrupt(b, e.to_string()))?;
            out.extend_from_slice(&batch);
        }
        Ok(out.freeze())
    }

    #[cfg(test)]
    fn for_tests(storage: Storage, gap: u64) -> Reader {
        Reader { reads: ObjectReads::new(storage, gap, 30_000, 1 << 20), cache: RangeCache::new(1 << 20) }
    }

    fn check(&self, b: &BatchInfo, raw: &[u8]) -> Result<(), KafkaError> {
        let h = record_batch::validate(raw).map_err(|e| self.corrupt(b, e.to_string()))?;
        // `coordinates` bounded the span to what a batch can have.
        let span = b.last_offset - b.base_offset;
        if i64::from(h.last_offset_delta) != span {
            return Err(self.corrupt(
                b,
                format!(
                    "batch spans {} offsets, the coordinator says {}",
                    i64::from(h.last_offset_delta) + 1,
                    span + 1
                ),
            ));
        }
        Ok(())
    }

    fn corrupt(&self, b: &BatchInfo, why: String) -> KafkaError {
        self.cache.forget_object(&b.object_key);
        tracing::error!(object = %b.object_key, at = b.byte_offset, %why, "damaged batch in object storage");
        KafkaError::new(
            ErrorCode::CorruptMessage,
            format!("batch at byte {} of {}: {why}", b.byte_offset, b.object_key),
        )
    }
}

/// The control batch of a transaction marker, if the coordinator's description can be one.
fn marker_batch(b: &BatchInfo, m: &diskless_proto::v1::TxnMarker) -> Result<Vec<u8>, KafkaError> {
    let epoch = i16::try_from(m.producer_epoch);
    match epoch {
        Ok(producer_epoch) if b.base_offset >= 0 && b.last_offset == b.base_offset && m.producer_id >= 0 => {
            let marker = control::Marker {
                producer_id: m.producer_id,
                producer_epoch,
                commit: m.commit,
                coordinator_epoch: m.coordinator_epoch,
            };
            Ok(control::batch(b.base_offset, b.batch_max_timestamp, &marker))
        }
        _ => {
            tracing::error!(at = b.base_offset, ?m, "FindBatches gave an impossible transaction marker");
            Err(KafkaError::new(
                ErrorCode::CorruptMessage,
                format!("the transaction marker at offset {} is not one a partition can hold", b.base_offset),
            ))
        }
    }
}

/// The answer for each partition asked for, in order: the coordinator answers one topic of one
/// partition per request topic; a missing answer, or one for another partition, is `None`.
fn answers_for(
    parts: &[FetchPartition],
    topics: Vec<FindBatchesTopicResponse>,
) -> Vec<Option<FindBatchesPartitionResponse>> {
    let mut topics = topics.into_iter();
    parts
        .iter()
        .map(|p| {
            let t = topics.next()?;
            let a = t.partitions.into_iter().next()?;
            (t.topic_id == p.topic_id && a.partition_index == p.partition).then_some(a)
        })
        .collect()
}

/// Where a batch lies in its object, from what FindBatches says, if that can be a batch of a WAL
/// segment: a whole batch header at least, within the largest segment, and offsets a batch can
/// span (else why not).
fn coordinates(b: &BatchInfo) -> Result<Range<u64>, String> {
    let max = crate::produce::config::MAX_BUFFER_BYTES as u64;
    let (Ok(at), Ok(size)) = (u64::try_from(b.byte_offset), u64::try_from(b.byte_size)) else {
        return Err(format!("(byte {}, {} bytes) are negative", b.byte_offset, b.byte_size));
    };
    if size < record_batch::HEADER_LEN as u64 || at.saturating_add(size) > max {
        return Err(format!(
            "({size} bytes from byte {at}) are not a batch within a WAL segment (at least {} bytes, ending by byte {max})",
            record_batch::HEADER_LEN
        ));
    }
    let span = b.last_offset.checked_sub(b.base_offset).filter(|s| *s >= 0 && *s < i64::from(i32::MAX));
    if b.base_offset < 0 || span.is_none() {
        return Err(format!("(offsets {} to {}) are not those of one batch", b.base_offset, b.last_offset));
    }
    Ok(at..at + size)
}

#[cfg(test)]
mod tests;
