//! The record a time lookup names, as Kafka answers ListOffsets: the coordinator's time index
//! finds the *batch* (the first whose largest timestamp is ≥ t, or the one with the largest
//! timestamp), and this finds the *record* inside it by reading the batch back — from the range
//! cache or one ranged GET, through the fetcher — and walking its records: the first at or after
//! the offset the coordinator named whose timestamp is ≥ t (Kafka's
//! `FileRecords.searchForTimestamp`), or the first whose timestamp is the batch's largest
//! (`RecordBatch.offsetOfMaxTimestamp`, for MAX_TIMESTAMP).
//!
//! Per-batch facts kept by the coordinator cannot answer this: a batch's records carry their own
//! CreateTimes in any order, and the answer depends on the t asked. A LogAppendTime batch needs no
//! read (all its records have the batch's time), nor does a batch of one record.
//!
//! Owns the walk; it must not ask the coordinator cluster anything but the batch (FindBatches).
//! Total on hostile bytes: a batch that does not decode is CORRUPT_MESSAGE, never a panic.

use std::io::BufReader;

use diskless_proto::ErrorCode;

use super::{FetchPartition, Fetcher};
use crate::error::KafkaError;
use crate::validate::decompress::{self, Codec};
use crate::validate::records::RecordReader;
use crate::wal::record_batch::{self, TIMESTAMP_TYPE_BIT};

/// What a time lookup asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeTarget {
    /// The earliest record whose timestamp is ≥ this.
    AtOrAfter(i64),
    /// The record with the largest timestamp (the first of them).
    Max,
}

/// The most bytes a batch's records are decompressed to while walking them. They were checked at
/// produce against the broker's own limit (32 MiB by default); this bounds only the work a
/// damaged object can cause, since nothing decompressed is kept.
const WALK_LIMIT: usize = 256 << 20;

impl Fetcher {
    /// The record `target` names in the batch holding `offset` (what the coordinator answered,
    /// with `timestamp`, the batch's largest): `(timestamp, offset)` of that record. `None` when
    /// the batch is no longer there (deleted meanwhile: the caller asks the coordinator again).
    pub async fn record_by_time(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        offset: i64,
        timestamp: i64,
        target: TimeTarget,
    ) -> Result<Option<(i64, i64)>, KafkaError> {
        // One batch is enough: Kafka's min-one-batch rule gives the one holding `offset`.
        let want = FetchPartition { topic_id, partition, offset, max_bytes: 1, read_committed: false };
        let fetched = self.fetch(&[want], 1).await?.into_iter().next();
        let Some(fetched) = fetched else { return Ok(None) };
        if let Some(e) = fetched.error {
            return if e.code == ErrorCode::OffsetOutOfRange { Ok(None) } else { Err(e) };
        }
        if fetched.records.is_empty() {
            return Ok(None);
        }
        let records = fetched.records;
        let compressed = crate::validate::is_compressed(&records);
        let walk = move || walk(&records, offset, timestamp, target);
        if compressed {
            tokio::task::spawn_blocking(walk)
                .await
                .map_err(|e| KafkaError::new(ErrorCode::UnknownServerError, format!("time lookup: {e}")))?
        } else {
            walk()
        }
    }
}

fn corrupt(m: String) -> KafkaError {
    KafkaError::new(ErrorCode::CorruptMessage, m)
}

/// Walks the first batch of `records` (offsets and append times injected by the fetcher).
fn walk(records: &[u8], offset: i64, timestamp: i64, target: TimeTarget) -> Result<Option<(i64, i64)>, KafkaError> {
    let len = record_batch::framed_len(records)
        .filter(|&n| n <= records.len())
        .ok_or_else(|| corrupt(format!("the batch at offset {offset} is cut short ({} bytes read)", records.len())))?;
    let batch = &records[..len];
    let h = record_batch::parse(batch).map_err(|e| corrupt(format!("the batch at offset {offset}: {e}")))?;
    let last = h.base_offset + i64::from(h.last_offset_delta);
    if offset < h.base_offset || offset > last {
        // Not the batch asked for (the log moved meanwhile): ask again.
        return Ok(None);
    }
    // Every record of a LogAppendTime batch has the batch's time; a one-record batch is its record.
    if h.attributes & TIMESTAMP_TYPE_BIT != 0 || h.record_count == 1 {
        return Ok(Some((h.max_timestamp, offset)));
    }
    let codec = Codec::from_id(h.compression)
        .ok_or_else(|| corrupt(format!("the batch at offset {offset} has compression id {}", h.compression)))?;
    let body = &batch[record_batch::HEADER_LEN..];
    let src = decompress::reader(codec, body, WALK_LIMIT)
        .map_err(|e| corrupt(format!("the batch at offset {}: {e}", h.base_offset)))?;
    let mut reader = RecordReader::new(BufReader::with_capacity(32 << 10, src));
    for i in 0..h.record_count {
        let r =
            reader.record().map_err(|e| corrupt(format!("the batch at offset {}, record {i}: {e}", h.base_offset)))?;
        let (at, ts) = (h.base_offset + i64::from(r.offset_delta), h.base_timestamp.saturating_add(r.timestamp_delta));
        let hit = match target {
            TimeTarget::AtOrAfter(t) => ts >= t && at >= offset,
            TimeTarget::Max => ts == h.max_timestamp && at >= offset,
        };
        if hit {
            return Ok(Some((ts, at)));
        }
    }
    // The header's largest timestamp is the records' (set at produce), so a record always
    // matches; a batch where none does is answered as the coordinator found it.
    Ok(Some((timestamp, offset)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::build::{batch, Spec};
    use crate::validate::records::encode_record;

    const BASE: i64 = 1_700_000_000_000;
    /// Record i's timestamp delta: out of order, distinct.
    fn delta(i: i32) -> i64 {
        i64::from((i * 7) % 10) * 100
    }

    /// Ten records at offsets 50..60, timestamps BASE + delta(i).
    fn ten(codec: Codec, flags: i16) -> Vec<u8> {
        let records: Vec<u8> = (0..10).flat_map(|i| encode_record(delta(i), i, None, Some(b"v"), &[])).collect();
        let mut spec = Spec::new(codec, 10, BASE);
        spec.base_offset = 50;
        spec.max_timestamp = BASE + 900;
        spec.flags = flags;
        batch(&spec, &records)
    }

    #[test]
    fn the_earliest_record_at_or_after_the_time_and_the_offset_is_named_in_every_codec() {
        for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let b = ten(codec, 0);
            for t in [BASE - 5, BASE, BASE + 1, BASE + 350, BASE + 700, BASE + 899, BASE + 900] {
                let want = (0..10).find(|&i| BASE + delta(i) >= t).map(|i| (BASE + delta(i), 50 + i64::from(i)));
                assert_eq!(walk(&b, 50, BASE + 900, TimeTarget::AtOrAfter(t)).unwrap(), want, "{codec:?} t={t}");
            }
            // From offset 55 on (a log start inside the batch): records before it are not named.
            let want = (5..10).find(|&i| BASE + delta(i) >= BASE).map(|i| (BASE + delta(i), 50 + i64::from(i)));
            assert_eq!(walk(&b, 55, BASE + 900, TimeTarget::AtOrAfter(BASE)).unwrap(), want);
            // The largest timestamp: delta 900 is record 7 (7 * 7 % 10 = 9).
            assert_eq!(walk(&b, 50, BASE + 900, TimeTarget::Max).unwrap(), Some((BASE + 900, 57)), "{codec:?}");
        }
    }

    #[test]
    fn a_log_append_time_batch_is_answered_from_its_header() {
        let b = ten(Codec::Lz4, TIMESTAMP_TYPE_BIT);
        assert_eq!(walk(&b, 52, BASE + 900, TimeTarget::AtOrAfter(BASE + 5)).unwrap(), Some((BASE + 900, 52)));
    }

    #[test]
    fn another_batch_than_the_one_asked_for_is_asked_again() {
        let b = ten(Codec::None, 0);
        assert_eq!(walk(&b, 49, BASE, TimeTarget::Max).unwrap(), None);
        assert_eq!(walk(&b, 60, BASE, TimeTarget::Max).unwrap(), None);
    }

    #[test]
    fn damaged_bytes_are_corrupt_message_never_a_panic() {
        let good = ten(Codec::Zstd, 0);
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15); // random, the same every run
        for cut in 0..good.len() {
            let _ = walk(&good[..cut], 50, BASE, TimeTarget::Max);
        }
        for _ in 0..500 {
            let mut bad = good.clone();
            let at = rng.usize(..bad.len());
            bad[at] ^= rng.u8(1..);
            crate::validate::build::seal(&mut bad); // past the CRC: the walk's own checks
            if let Err(e) = walk(&bad, 50, BASE, TimeTarget::AtOrAfter(BASE + 1)) {
                assert_eq!(e.code, ErrorCode::CorruptMessage, "{e:?}");
            }
        }
    }
}
