//! Kafka record batches (magic v2) as bytes: validating what producers send, and patching what
//! consumers get (the base offset the coordinator assigned, the log append time) without
//! re-encoding, so compressed batches pass through untouched.
//!
//! Layout of the v2 batch header (Kafka's `DefaultRecordBatch`), big-endian:
//!
//! | offset | field | |
//! | --- | --- | --- |
//! | 0 | baseOffset: i64 | not covered by the CRC |
//! | 8 | batchLength: i32 | bytes after this field |
//! | 12 | partitionLeaderEpoch: i32 | not covered by the CRC |
//! | 16 | magic: i8 | 2 |
//! | 17 | crc: u32 | CRC32C of bytes 21.. |
//! | 21 | attributes: i16 | bits 0–2 compression, 3 timestamp type, 4 transactional, 5 control |
//! | 23 | lastOffsetDelta: i32 | |
//! | 27 | baseTimestamp: i64 | |
//! | 35 | maxTimestamp: i64 | |
//! | 43 | producerId: i64 | |
//! | 51 | producerEpoch: i16 | |
//! | 53 | baseSequence: i32 | |
//! | 57 | recordCount: i32 | |
//! | 61 | records | |

use thiserror::Error;

pub const HEADER_LEN: usize = 61;
pub const MAGIC_V2: i8 = 2;
/// Where the CRC-covered part starts (attributes onwards).
pub const CRC_START: usize = 21;
pub const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;

/// Why bytes are not a valid record batch (Kafka's CORRUPT_MESSAGE).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    #[error("record batch of {0} bytes is shorter than its {HEADER_LEN}-byte header")]
    TooShort(usize),
    #[error("record batch magic {0} is not supported (only v2)")]
    Magic(i8),
    #[error("record batch length field says {declared} bytes follow, but {actual} do")]
    Length { declared: i64, actual: usize },
    #[error("record batch CRC32C mismatch: header {stored:#010x}, computed {computed:#010x}")]
    Crc { stored: u32, computed: u32 },
    #[error("record batch holds {count} records but its offset delta spans {span}")]
    RecordCount { count: i32, span: i64 },
    #[error("a control batch is never stored in a segment (markers are built when fetched)")]
    Control,
}

/// The header fields of a validated batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// The raw attributes (compression, timestamp type, transactional, control bits).
    pub attributes: i16,
    pub base_offset: i64,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    /// 0 = CreateTime, 1 = LogAppendTime.
    pub timestamp_type: i8,
    pub compression: u8,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// The sequence of the batch's last record (wrapping at `i32::MAX`), or -1.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        ((i64::from(self.base_sequence) + i64::from(self.last_offset_delta)) % (1i64 << 31)) as i32
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The total size of the batch starting at `bytes[0]` from its length field, if readable.
pub fn framed_len(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < 12 {
        return None;
    }
    let len = i32_at(bytes, 8);
    (len >= 0).then(|| 12 + len as usize)
}

/// Validates one whole stored batch (`bytes` is exactly the batch) and reads its header: its
/// framing and CRC ([`parse`]), no control flag (a transactional batch is stored as any other),
/// and a record count matching its offset span. What a producer sends is checked record by record
/// first (`crate::validate`).
pub fn validate(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let h = parse(bytes)?;
    if h.attributes & CONTROL_BIT != 0 {
        return Err(BatchError::Control);
    }
    let span = i64::from(h.last_offset_delta) + 1;
    if h.record_count <= 0 || i64::from(h.record_count) != span {
        return Err(BatchError::RecordCount { count: h.record_count, span });
    }
    Ok(h)
}

/// Checks one whole batch's framing (length, magic) and CRC-32C, and reads its header; nothing
/// about what the header says.
pub fn parse(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    if bytes.len() < HEADER_LEN {
        return Err(BatchError::TooShort(bytes.len()));
    }
    let magic = bytes[16] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::Magic(magic));
    }
    let declared = i64::from(i32_at(bytes, 8));
    if declared + 12 != bytes.len() as i64 {
        return Err(BatchError::Length { declared, actual: bytes.len() - 12 });
    }
    let stored = u32::from_be_bytes(bytes[17..21].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(&bytes[CRC_START..]);
    if stored != computed {
        return Err(BatchError::Crc { stored, computed });
    }
    let attributes = i16_at(bytes, 21);
    Ok(BatchHeader {
        attributes,
        base_offset: i64_at(bytes, 0),
        last_offset_delta: i32_at(bytes, 23),
        base_timestamp: i64_at(bytes, 27),
        max_timestamp: i64_at(bytes, 35),
        timestamp_type: i8::from(attributes & TIMESTAMP_TYPE_BIT != 0),
        compression: (attributes & 0x7) as u8,
        producer_id: i64_at(bytes, 43),
        producer_epoch: i16_at(bytes, 51),
        base_sequence: i32_at(bytes, 53),
        record_count: i32_at(bytes, 57),
    })
}

/// Sets a batch's attributes and max timestamp and recomputes its CRC: what Kafka's
/// `setMaxTimestamp` does to a producer's header (the timestamp-type bit, the records' largest
/// CreateTime).
pub fn set_header_times(bytes: &mut [u8], attributes: i16, max_timestamp: i64) -> Result<(), BatchError> {
    if bytes.len() < HEADER_LEN {
        return Err(BatchError::TooShort(bytes.len()));
    }
    bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
    bytes[35..43].copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[CRC_START..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Rewrites a stored batch for a consumer: the assigned base offset, and for LogAppendTime the
/// append time as max timestamp (with the timestamp-type bit), then the CRC.
pub fn inject(bytes: &mut [u8], base_offset: i64, log_append_time: Option<i64>) -> Result<(), BatchError> {
    if bytes.len() < HEADER_LEN {
        return Err(BatchError::TooShort(bytes.len()));
    }
    bytes[0..8].copy_from_slice(&base_offset.to_be_bytes());
    if let Some(t) = log_append_time {
        let attributes = i16_at(bytes, 21) | TIMESTAMP_TYPE_BIT;
        bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
        bytes[35..43].copy_from_slice(&t.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal valid uncompressed batch of `records` records with a one-byte value each (for
    /// tests; real batches come from clients or from kafka-protocol's encoder).
    pub fn fake_batch(records: i32, producer_id: i64, base_sequence: i32) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        b[16] = MAGIC_V2 as u8;
        b[23..27].copy_from_slice(&(records - 1).to_be_bytes());
        b[27..35].copy_from_slice(&1_000i64.to_be_bytes());
        // The records' largest timestamp, as a producer writes it.
        let max = 1_000 + i64::from(records - 1).clamp(0, 1000);
        b[35..43].copy_from_slice(&max.to_be_bytes());
        b[43..51].copy_from_slice(&producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&0i16.to_be_bytes());
        b[53..57].copy_from_slice(&base_sequence.to_be_bytes());
        b[57..61].copy_from_slice(&records.to_be_bytes());
        for i in 0..records {
            // Timestamps 1000, 1001, ... (at most 2000).
            let delta = i64::from(i).min(1000);
            b.extend(crate::validate::records::encode_record(delta, i, None, Some(&[i as u8]), &[]));
        }
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn a_well_formed_batch_validates() {
        let b = fake_batch(3, 7, 10);
        let h = validate(&b).unwrap();
        assert_eq!((h.record_count, h.producer_id, h.base_sequence, h.last_sequence()), (3, 7, 10, 12));
        assert_eq!(framed_len(&b), Some(b.len()));
    }

    #[test]
    fn damage_is_detected() {
        let good = fake_batch(2, -1, -1);
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(validate(&flipped), Err(BatchError::Crc { .. })));
        let mut magic = good.clone();
        magic[16] = 1;
        assert_eq!(validate(&magic), Err(BatchError::Magic(1)));
        assert!(matches!(validate(&good[..good.len() - 1]), Err(BatchError::Length { .. })));
        assert_eq!(validate(&good[..20]), Err(BatchError::TooShort(20)));
        let mut count = good.clone();
        count[57..61].copy_from_slice(&5i32.to_be_bytes());
        let crc = crc32c::crc32c(&count[CRC_START..]);
        count[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(validate(&count), Err(BatchError::RecordCount { .. })));
    }

    #[test]
    fn injection_sets_offset_and_append_time_and_keeps_the_crc_valid() {
        let mut b = fake_batch(2, -1, -1);
        inject(&mut b, 4242, None).unwrap();
        let h = validate(&b).unwrap();
        assert_eq!((h.base_offset, h.timestamp_type, h.max_timestamp), (4242, 0, 1_001));
        inject(&mut b, 7, Some(99_000)).unwrap();
        assert_eq!(inject(&mut b[..60], 1, None), Err(BatchError::TooShort(60)));
        let h = validate(&b).unwrap();
        assert_eq!((h.base_offset, h.timestamp_type, h.max_timestamp), (7, 1, 99_000));
    }
}
