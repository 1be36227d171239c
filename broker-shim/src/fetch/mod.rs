//! The fetch path (KIP-1163): FindBatches tells where the batches from an offset live; the byte
//! ranges are read from object storage (adjacent ranges of one object coalesced into one GET, a
//! bounded cache in front), each batch is checked (CRC32C, size, record count against the
//! coordinator's offsets), then its base offset — and, for LogAppendTime batches, the append time —
//! is injected, giving record batches a Kafka consumer parses as if they came from a classic log.
//!
//! A damaged batch fails its partition with CORRUPT_MESSAGE (the others are served); an object that
//! cannot be read fails its partitions with a retriable KAFKA_STORAGE_ERROR.

pub mod cache;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use diskless_proto::v1::find_batches_response::BatchInfo;
use diskless_proto::v1::{find_batches_request, FindBatchesRequest};
use diskless_proto::ErrorCode;
use futures_util::stream::{self, StreamExt};

use crate::config::FetchConfig;
use crate::coordinator::Coordinators;
use crate::error::KafkaError;
use crate::storage::Storage;
use crate::wal::record_batch;
use cache::RangeCache;

/// One partition of a fetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchPartition {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

/// What a fetch returns for one partition.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub error: Option<KafkaError>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Record batches, back to back, offsets injected.
    pub records: Bytes,
}

pub struct Fetcher {
    coordinators: Arc<Coordinators>,
    reader: Reader,
}

/// Reads batches' bytes: from the cache, else by coalesced ranged GETs; checks them.
struct Reader {
    storage: Storage,
    cache: RangeCache,
    gap: u64,
}

/// The bytes one fetch needs, gathered before it assembles its answer: cache hits are taken when
/// the reads are planned, so an eviction meanwhile cannot leave a batch unread.
#[derive(Default)]
struct Gathered {
    cached: HashMap<(String, u64), Bytes>,
    read: HashMap<String, Result<Vec<(Range<u64>, Bytes)>, String>>,
}

/// Reads of one object at once, at most.
const PARALLEL_OBJECTS: usize = 16;

impl Fetcher {
    pub fn new(config: &FetchConfig, storage: Storage, coordinators: Arc<Coordinators>) -> Fetcher {
        Fetcher {
            coordinators,
            reader: Reader { storage, cache: RangeCache::new(config.cache_bytes), gap: config.coalesce_gap_bytes },
        }
    }

    pub fn cache(&self) -> &RangeCache {
        &self.reader.cache
    }

    pub async fn fetch(&self, parts: &[FetchPartition], max_total_bytes: i32) -> Result<Vec<Fetched>, KafkaError> {
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
            timeout_ms: 10_000,
            min_applied: self.coordinators.min_applied(),
        };
        let mut attempts = 0;
        let r = loop {
            let r = self
                .coordinators
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.find_batches(req).await }
                })
                .await
                .map_err(|s| KafkaError::unavailable("find batches", &s))?;
            // A node whose replica cannot vouch for its state (stale, removed, mid-install) says
            // so per partition: ask the next node.
            let unavailable = r
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .any(|p| p.error_code == ErrorCode::ReplicaNotAvailable.wire());
            attempts += 1;
            if !unavailable || attempts >= self.coordinators.nodes() {
                break r;
            }
            self.coordinators.move_on();
        };

        // Reads never go backwards: the next FindBatches waits for what this one saw.
        self.coordinators.record_applied(&r.applied);
        // Per partition: its answer; and every batch whose bytes are needed.
        let mut answers: Vec<_> = r.topics.into_iter().map(|t| t.partitions.into_iter().next()).collect();
        // A replica behind the leader may call an offset past its own high watermark out of range
        // when it is not: ask the leader (strictly) before telling a consumer to reset.
        for (a, p) in answers.iter_mut().zip(parts) {
            let Some(a) = a else { continue };
            if a.error_code == ErrorCode::OffsetOutOfRange.wire()
                && p.offset > a.high_watermark
                && a.high_watermark >= 0
            {
                if let Ok((_, hwm)) = self.coordinators.list_offset(p.topic_id, p.partition, -1).await {
                    if p.offset <= hwm {
                        a.error_code = 0;
                        a.error_message = None;
                        a.high_watermark = hwm;
                        a.batches.clear();
                    }
                }
            }
        }
        let gathered = self.reader.gather(answers.iter().flatten().flat_map(|a| a.batches.iter())).await;

        let mut out = Vec::with_capacity(parts.len());
        for a in answers {
            let Some(a) = a else {
                out.push(Fetched {
                    error: Some(KafkaError::new(ErrorCode::UnknownServerError, "no answer for the partition")),
                    high_watermark: -1,
                    log_start_offset: -1,
                    records: Bytes::new(),
                });
                continue;
            };
            let mut f = Fetched {
                error: KafkaError::from_wire(a.error_code, a.error_message.clone()),
                high_watermark: a.high_watermark,
                log_start_offset: a.log_start_offset,
                records: Bytes::new(),
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

impl Reader {
    /// Takes what the cache holds of these batches, and reads the rest (coalescing close ranges).
    async fn gather(&self, batches: impl Iterator<Item = &BatchInfo>) -> Gathered {
        let mut g = Gathered::default();
        let mut needed: BTreeMap<String, Vec<Range<u64>>> = BTreeMap::new();
        for b in batches {
            let at = b.byte_offset as u64;
            if g.cached.contains_key(&(b.object_key.clone(), at)) {
                continue;
            }
            match self.cache.get(&b.object_key, at) {
                Some(bytes) => {
                    g.cached.insert((b.object_key.clone(), at), bytes);
                }
                None => needed.entry(b.object_key.clone()).or_default().push(at..at + b.byte_size as u64),
            }
        }
        g.read = self.read_objects(needed).await;
        g
    }

    /// Reads the needed ranges, coalescing close ones; returns per object the ranges read.
    async fn read_objects(
        &self,
        needed: BTreeMap<String, Vec<Range<u64>>>,
    ) -> HashMap<String, Result<Vec<(Range<u64>, Bytes)>, String>> {
        let gap = self.gap;
        stream::iter(needed)
            .map(|(key, mut ranges)| async move {
                ranges.sort_by_key(|r| r.start);
                let mut merged: Vec<Range<u64>> = vec![];
                for r in ranges {
                    match merged.last_mut() {
                        Some(last) if r.start <= last.end + gap => last.end = last.end.max(r.end),
                        _ => merged.push(r),
                    }
                }
                let got = self.storage.get_ranges(&key, &merged).await;
                let r = got.map(|bytes| merged.into_iter().zip(bytes).collect()).map_err(|e| e.to_string());
                (key, r)
            })
            .buffer_unordered(PARALLEL_OBJECTS)
            .collect()
            .await
    }

    /// One partition's record batches from what was gathered, checked and injected.
    fn assemble(&self, batches: &[BatchInfo], gathered: &Gathered) -> Result<Bytes, KafkaError> {
        let mut out = BytesMut::new();
        for b in batches {
            let at = b.byte_offset as u64;
            let raw = match gathered.cached.get(&(b.object_key.clone(), at)) {
                Some(raw) => raw.clone(),
                None => {
                    let ranges = match gathered.read.get(&b.object_key) {
                        Some(Ok(r)) => r,
                        Some(Err(e)) => {
                            return Err(KafkaError::new(
                                ErrorCode::KafkaStorageError,
                                format!("reading object {}: {e}", b.object_key),
                            ))
                        }
                        None => return Err(KafkaError::new(ErrorCode::KafkaStorageError, "batch bytes not read")),
                    };
                    let end = at + b.byte_size as u64;
                    let (range, bytes) =
                        ranges.iter().find(|(r, _)| r.start <= at && end <= r.end).ok_or_else(|| {
                            KafkaError::new(ErrorCode::KafkaStorageError, "batch outside the ranges read")
                        })?;
                    let lo = (at - range.start) as usize;
                    let hi = (end - range.start) as usize;
                    if hi > bytes.len() {
                        return Err(self.corrupt(b, "object shorter than the batch's coordinates".into()));
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

    fn check(&self, b: &BatchInfo, raw: &[u8]) -> Result<(), KafkaError> {
        let h = record_batch::validate(raw).map_err(|e| self.corrupt(b, e.to_string()))?;
        let span = b.last_offset - b.base_offset;
        if i64::from(h.last_offset_delta) != span {
            return Err(self.corrupt(
                b,
                format!("batch spans {} offsets, the coordinator says {}", h.last_offset_delta + 1, span + 1),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StorageConfig;
    use crate::wal::record_batch::tests::fake_batch;

    #[tokio::test]
    async fn a_batch_evicted_from_the_cache_between_planning_and_assembly_is_still_served() {
        let storage = Storage::new(&StorageConfig::Memory).unwrap();
        let batch = fake_batch(3, -1, -1);
        let mut object = vec![0u8];
        object.extend_from_slice(&batch);
        storage.put_new("wal/a", Bytes::from(object)).await.unwrap();
        let reader = Reader { storage, cache: RangeCache::new(1 << 20), gap: 0 };
        reader.cache.put("wal/a", 1, Bytes::from(batch.clone()));
        let info = BatchInfo {
            batch_id: 1,
            object_key: "wal/a".into(),
            magic: 2,
            byte_offset: 1,
            byte_size: batch.len() as i64,
            base_offset: 10,
            last_offset: 12,
            log_append_timestamp: 5,
            batch_max_timestamp: 2_000,
            timestamp_type: 0,
        };
        let gathered = reader.gather([&info].into_iter()).await;
        // A concurrent fetch evicts the range before this one assembles its answer.
        reader.cache.forget_object("wal/a");
        let out = reader.assemble(&[info], &gathered).expect("served from what was gathered");
        let h = record_batch::validate(&out).unwrap();
        assert_eq!(h.record_count, 3);
        assert_eq!(i64::from_be_bytes(out[..8].try_into().unwrap()), 10, "base offset injected");
    }
}
