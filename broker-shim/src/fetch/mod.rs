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
    storage: Storage,
    coordinators: Arc<Coordinators>,
    cache: RangeCache,
    gap: u64,
}

/// Reads of one object at once, at most.
const PARALLEL_OBJECTS: usize = 16;

impl Fetcher {
    pub fn new(config: &FetchConfig, storage: Storage, coordinators: Arc<Coordinators>) -> Fetcher {
        Fetcher { storage, coordinators, cache: RangeCache::new(config.cache_bytes), gap: config.coalesce_gap_bytes }
    }

    pub fn cache(&self) -> &RangeCache {
        &self.cache
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
        let mut needed: BTreeMap<String, Vec<Range<u64>>> = BTreeMap::new();
        for a in answers.iter().flatten() {
            for b in &a.batches {
                let at = b.byte_offset as u64;
                if self.cache.get(&b.object_key, at).is_none() {
                    needed.entry(b.object_key.clone()).or_default().push(at..at + b.byte_size as u64);
                }
            }
        }
        let fetched = self.read_objects(needed).await;

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
                match self.assemble(&a.batches, &fetched) {
                    Ok(records) => f.records = records,
                    Err(e) => f.error = Some(e),
                }
            }
            out.push(f);
        }
        Ok(out)
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

    /// One partition's record batches from the read ranges (or the cache), checked and injected.
    fn assemble(
        &self,
        batches: &[BatchInfo],
        fetched: &HashMap<String, Result<Vec<(Range<u64>, Bytes)>, String>>,
    ) -> Result<Bytes, KafkaError> {
        let mut out = BytesMut::new();
        for b in batches {
            let at = b.byte_offset as u64;
            let raw = match self.cache.get(&b.object_key, at) {
                Some(raw) => raw,
                None => {
                    let ranges = match fetched.get(&b.object_key) {
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
            record_batch::inject(&mut batch, b.base_offset, lat);
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
