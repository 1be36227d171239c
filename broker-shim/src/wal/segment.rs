//! WAL segments (KIP-1163): one object holding the batches of many partitions.
//!
//! Format version 0: a 1-byte header (`0`), then Kafka v2 record batches, the batches of each
//! partition contiguous (partitions in the order they first appear), batches of one partition in
//! produce order. A segment is built in memory ([`SegmentBuilder`]), bounded by
//! `diskless.append.buffer.max.bytes`, and read back by byte ranges; [`validate`] checks a whole
//! object. [`validate`] is total on hostile bytes: any object is a list of batches within it or an
//! error naming the byte where it goes wrong (the caller names the object), never a panic.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};

use super::record_batch::{self, BatchError, BatchHeader};

/// The only format version so far.
pub const VERSION: u8 = 0;
/// `ObjectFormat` in CommitFile: WRITE_AHEAD_MULTI_SEGMENT.
pub const OBJECT_FORMAT: i32 = 1;

/// A topic-partition as the broker names it to the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub topic_id: [u8; 16],
    pub partition: i32,
}

/// Where one batch of a finished segment lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed<T> {
    pub partition: PartitionKey,
    pub byte_offset: u32,
    pub size: u32,
    pub header: BatchHeader,
    /// The caller's handle for this batch (e.g. where to send its result).
    pub tag: T,
}

/// Collects validated batches; lays them out grouped by partition.
#[derive(Debug)]
pub struct SegmentBuilder<T> {
    order: Vec<PartitionKey>,
    parts: BTreeMap<PartitionKey, Vec<(Bytes, BatchHeader, T)>>,
    bytes: usize,
}

impl<T> Default for SegmentBuilder<T> {
    fn default() -> Self {
        SegmentBuilder { order: vec![], parts: BTreeMap::new(), bytes: 1 }
    }
}

impl<T> SegmentBuilder<T> {
    /// Bytes the segment would have now.
    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Adds one batch (already validated: `header` is what [`record_batch::validate`] returned).
    pub fn push(&mut self, partition: PartitionKey, batch: Bytes, header: BatchHeader, tag: T) {
        self.bytes += batch.len();
        let list = self.parts.entry(partition).or_insert_with(|| {
            self.order.push(partition);
            Vec::new()
        });
        list.push((batch, header, tag));
    }

    /// The segment's bytes and where each batch went.
    pub fn finish(mut self) -> (Bytes, Vec<Placed<T>>) {
        let mut out = BytesMut::with_capacity(self.bytes);
        out.extend_from_slice(&[VERSION]);
        let mut placed = Vec::new();
        for p in &self.order {
            for (batch, header, tag) in self.parts.remove(p).unwrap_or_default() {
                placed.push(Placed {
                    partition: *p,
                    byte_offset: out.len() as u32,
                    size: batch.len() as u32,
                    header,
                    tag,
                });
                out.extend_from_slice(&batch);
            }
        }
        (out.freeze(), placed)
    }
}

/// Why an object is not a valid WAL segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("empty object (no version byte at byte 0)")]
    Empty,
    #[error("unknown WAL segment version {0} at byte 0")]
    Version(u8),
    #[error("batch at byte {at}: {error}")]
    Batch { at: usize, error: BatchError },
    #[error("truncated batch at byte {0}")]
    Truncated(usize),
}

/// Checks a whole segment; returns the batches' positions and headers.
pub fn validate(object: &[u8]) -> Result<Vec<(usize, usize, BatchHeader)>, SegmentError> {
    let (&version, mut rest) = object.split_first().ok_or(SegmentError::Empty)?;
    if version != VERSION {
        return Err(SegmentError::Version(version));
    }
    let mut at = 1;
    let mut out = vec![];
    while !rest.is_empty() {
        let len = record_batch::framed_len(rest).filter(|l| *l <= rest.len()).ok_or(SegmentError::Truncated(at))?;
        let header = record_batch::validate(&rest[..len]).map_err(|error| SegmentError::Batch { at, error })?;
        out.push((at, len, header));
        at += len;
        rest = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::record_batch::tests::fake_batch;
    use super::*;

    #[test]
    fn batches_are_grouped_by_partition_and_read_back() {
        let p = |n| PartitionKey { topic_id: [1; 16], partition: n };
        let mut b = SegmentBuilder::default();
        for (i, part) in [0, 1, 0, 2, 1].iter().enumerate() {
            let bytes = Bytes::from(fake_batch(i as i32 + 1, -1, -1));
            let h = record_batch::validate(&bytes).unwrap();
            b.push(p(*part), bytes, h, i);
        }
        let (object, placed) = b.finish();
        assert_eq!(object[0], VERSION);
        let order: Vec<(i32, usize)> = placed.iter().map(|x| (x.partition.partition, x.tag)).collect();
        assert_eq!(order, [(0, 0), (0, 2), (1, 1), (1, 4), (2, 3)]);
        for x in &placed {
            let slice = &object[x.byte_offset as usize..(x.byte_offset + x.size) as usize];
            assert_eq!(record_batch::validate(slice).unwrap().record_count, x.tag as i32 + 1);
        }
        assert_eq!(validate(&object).unwrap().len(), 5);
        let mut bad = object.to_vec();
        bad[0] = 9;
        assert_eq!(validate(&bad), Err(SegmentError::Version(9)));
        assert!(validate(&object[..object.len() - 2]).is_err());
    }

    /// A segment of three batches of 1, 2 and 3 records; the object and where each batch ends.
    fn three_batches() -> (Vec<u8>, Vec<usize>) {
        let mut object = vec![VERSION];
        let mut ends = vec![];
        for n in 1..=3 {
            object.extend_from_slice(&fake_batch(n, -1, -1));
            ends.push(object.len());
        }
        (object, ends)
    }

    /// Where the error says the trouble is (every variant names a byte).
    fn byte_named(e: &SegmentError) -> usize {
        match e {
            SegmentError::Empty | SegmentError::Version(_) => 0,
            SegmentError::Batch { at, .. } | SegmentError::Truncated(at) => *at,
        }
    }

    #[test]
    fn a_segment_cut_anywhere_is_an_error_naming_the_byte_unless_cut_between_batches() {
        let (object, ends) = three_batches();
        for cut in 0..object.len() {
            match validate(&object[..cut]) {
                Ok(batches) => {
                    let whole: Vec<usize> = batches.iter().map(|(at, len, _)| at + len).collect();
                    assert!(cut == 1 || ends.contains(&cut), "cut at {cut} accepted");
                    assert_eq!(whole, ends.iter().copied().filter(|e| *e <= cut).collect::<Vec<_>>(), "cut at {cut}");
                }
                Err(e) => {
                    assert!(byte_named(&e) < cut.max(1), "cut at {cut}: {e}");
                    assert!(e.to_string().contains("byte"), "{e}");
                }
            }
        }
    }

    #[test]
    fn a_segment_with_any_byte_damaged_is_an_error_naming_the_batch_s_byte() {
        let (object, ends) = three_batches();
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15); // random, the same every run
        for _ in 0..300 {
            let at = rng.usize(..object.len());
            let mask = rng.u8(1..);
            let mut bad = object.clone();
            bad[at] ^= mask;
            // The batch the byte is in, and where in it.
            let start = ends.iter().copied().rfind(|e| *e <= at).unwrap_or(1);
            let r = validate(&bad);
            match (at, at - start.min(at)) {
                (0, _) => assert_eq!(r, Err(SegmentError::Version(mask)), "byte 0"),
                // Kafka's CRC leaves out the base offset and the partition leader epoch.
                (_, 0..8 | 12..16) => assert!(r.is_ok(), "byte {at}: {r:?}"),
                _ => {
                    let e = r.expect_err(&format!("byte {at} ^ {mask:#04x} accepted"));
                    assert!(byte_named(&e) <= at, "byte {at}: {e}");
                    assert!(e.to_string().contains("byte"), "{e}");
                }
            }
        }
    }

    #[test]
    fn a_batch_length_field_of_any_size_is_an_error_naming_the_batch_s_byte() {
        let (object, ends) = three_batches();
        for start in [1, ends[0], ends[1]] {
            for v in [0u32, 1, 48, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff] {
                let mut bad = object.clone();
                bad[start + 8..start + 12].copy_from_slice(&v.to_be_bytes());
                let e = validate(&bad).expect_err("accepted");
                assert_eq!(byte_named(&e), start, "length {v:#x} of the batch at {start}: {e}");
            }
        }
    }
}
