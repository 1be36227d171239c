//! v2 record batches built as a producer builds them, with any of Kafka's codecs and any header
//! field set as wanted, lies included: for tests, fuzz seeds and the validation benchmark. The
//! broker itself never builds batches.

use std::io::Write;

use super::decompress::Codec;
use super::records::encode_record;
use crate::wal::record_batch::{CRC_START, HEADER_LEN, MAGIC_V2};

/// The header of a batch to build; [`Spec::new`] makes a consistent one.
#[derive(Debug, Clone)]
pub struct Spec {
    pub codec: Codec,
    pub base_offset: i64,
    pub last_offset_delta: i32,
    pub record_count: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Attribute bits besides the codec (timestamp type, transactional, control).
    pub flags: i16,
}

impl Spec {
    /// A plain batch of `n` records stamped `base_timestamp + i`.
    pub fn new(codec: Codec, n: i32, base_timestamp: i64) -> Spec {
        Spec {
            codec,
            base_offset: 0,
            last_offset_delta: n - 1,
            record_count: n,
            base_timestamp,
            max_timestamp: base_timestamp + i64::from(n - 1),
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            flags: 0,
        }
    }
}

/// `n` records with keys `k{i}`, values of `value_len` bytes and timestamp deltas `i`.
pub fn records(n: i32, value_len: usize) -> Vec<u8> {
    let value = vec![b'v'; value_len];
    let mut out = vec![];
    for i in 0..n {
        out.extend(encode_record(i64::from(i), i, Some(format!("k{i}").as_bytes()), Some(&value), &[]));
    }
    out
}

/// Compresses a records section as the codec's producers do.
pub fn compress(codec: Codec, data: &[u8]) -> Vec<u8> {
    match codec {
        Codec::None => data.to_vec(),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(vec![], flate2::Compression::default());
            let _ = e.write_all(data);
            e.finish().unwrap_or_default()
        }
        // librdkafka's form: one raw block (Java's is xerial-framed; both are read).
        Codec::Snappy => snap::raw::Encoder::new().compress_vec(data).unwrap_or_default(),
        Codec::Lz4 => match lz4::EncoderBuilder::new().build(vec![]) {
            Ok(mut e) => {
                let _ = e.write_all(data);
                e.finish().0
            }
            Err(_) => vec![],
        },
        Codec::Zstd => zstd::encode_all(data, 3).unwrap_or_default(),
    }
}

/// A batch of `spec`'s header around `records` (uncompressed; compressed here with its codec),
/// with a correct length and CRC.
pub fn batch(spec: &Spec, records: &[u8]) -> Vec<u8> {
    let body = compress(spec.codec, records);
    let mut b = vec![0u8; HEADER_LEN];
    b[0..8].copy_from_slice(&spec.base_offset.to_be_bytes());
    b[16] = MAGIC_V2 as u8;
    let attributes = spec.flags | spec.codec as i16;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    b[23..27].copy_from_slice(&spec.last_offset_delta.to_be_bytes());
    b[27..35].copy_from_slice(&spec.base_timestamp.to_be_bytes());
    b[35..43].copy_from_slice(&spec.max_timestamp.to_be_bytes());
    b[43..51].copy_from_slice(&spec.producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&spec.producer_epoch.to_be_bytes());
    b[53..57].copy_from_slice(&spec.base_sequence.to_be_bytes());
    b[57..61].copy_from_slice(&spec.record_count.to_be_bytes());
    b.extend(body);
    seal(&mut b);
    b
}

/// Sets a batch's length field and CRC from its bytes (after a test changed them).
pub fn seal(b: &mut [u8]) {
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
}
