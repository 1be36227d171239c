//! The records of a v2 batch, read one by one from their (decompressed) bytes without keeping
//! any: Kafka's `DefaultRecord` layout, checked as `DefaultRecord.readFrom` checks it, a little
//! stricter where Kafka is lenient with bytes no client writes.
//!
//! ```text
//! length: varint            bytes of the record after this field
//! attributes: int8          unused
//! timestampDelta: varlong   from the batch's base timestamp
//! offsetDelta: varint       from the batch's base offset
//! keyLength: varint         -1: null
//! key: bytes
//! valueLength: varint       -1: null
//! value: bytes
//! headers: varint           count
//!   headerKeyLength: varint (never null) · headerKey · headerValueLength: varint (-1: null) · value
//! ```
//!
//! Owns the record layout; what the records must satisfy (offsets, timestamps) is `mod.rs`'s.

use std::io::{self, BufRead};

/// One record's facts the validator checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordInfo {
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub has_key: bool,
}

/// Why a record does not read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record's bytes are wrong (Kafka's `InvalidRecordException`).
    #[error("{0}")]
    Invalid(String),
    /// The underlying stream failed (decompression, or the limit).
    #[error(transparent)]
    Io(#[from] io::Error),
}

fn invalid(m: impl Into<String>) -> RecordError {
    RecordError::Invalid(m.into())
}

/// Reads records from `src`, counting the bytes taken.
pub struct RecordReader<R> {
    src: R,
    /// Bytes consumed so far.
    pub read: u64,
}

impl<R: BufRead> RecordReader<R> {
    pub fn new(src: R) -> RecordReader<R> {
        RecordReader { src, read: 0 }
    }

    /// `true` when no byte is left (a stream error is an error, not the end).
    pub fn at_end(&mut self) -> Result<bool, RecordError> {
        Ok(self.src.fill_buf()?.is_empty())
    }

    fn byte(&mut self) -> Result<Option<u8>, RecordError> {
        let b = match self.src.fill_buf()?.first() {
            Some(b) => *b,
            None => return Ok(None),
        };
        self.src.consume(1);
        self.read += 1;
        Ok(Some(b))
    }

    fn need_byte(&mut self) -> Result<u8, RecordError> {
        self.byte()?.ok_or_else(|| invalid("the records end in the middle of a record"))
    }

    /// An unsigned LEB128 of at most `max_bytes` bytes.
    fn unsigned(&mut self, max_bytes: u32) -> Result<u64, RecordError> {
        let mut v = 0u64;
        for i in 0..max_bytes {
            let b = self.need_byte()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(invalid(format!("a varint longer than {max_bytes} bytes")))
    }

    /// Kafka's zigzag `varint` (an `i32`, at most 5 bytes).
    pub fn varint(&mut self) -> Result<i32, RecordError> {
        let u = self.unsigned(5)?;
        let u = u32::try_from(u).map_err(|_| invalid("a varint beyond 32 bits"))?;
        Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
    }

    /// Kafka's zigzag `varlong` (an `i64`, at most 10 bytes).
    pub fn varlong(&mut self) -> Result<i64, RecordError> {
        let u = self.unsigned(10)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// Skips `n` bytes that must be there.
    fn skip(&mut self, mut n: u64) -> Result<(), RecordError> {
        while n > 0 {
            let have = self.src.fill_buf()?.len() as u64;
            if have == 0 {
                return Err(invalid("the records end in the middle of a record"));
            }
            let take = have.min(n);
            self.src.consume(take as usize);
            self.read += take;
            n -= take;
        }
        Ok(())
    }

    /// A length-prefixed field: `-1` is null, other negatives are refused; returns whether it
    /// was present.
    fn field(&mut self, what: &str, nullable: bool, left: u64) -> Result<bool, RecordError> {
        let len = self.varint()?;
        if len == -1 && nullable {
            return Ok(false);
        }
        if len < 0 {
            return Err(invalid(format!("invalid {what} length {len}")));
        }
        if len as u64 > left {
            return Err(invalid(format!("{what} of {len} bytes runs past its record")));
        }
        self.skip(len as u64)?;
        Ok(true)
    }

    /// The next record (the caller knows how many there are).
    pub fn record(&mut self) -> Result<RecordInfo, RecordError> {
        let size = self.varint()?;
        if size < 0 {
            return Err(invalid(format!("invalid record size {size}")));
        }
        let start = self.read;
        let size = size as u64;
        let left = |r: &Self| size.saturating_sub(r.read - start);
        let _attributes = self.need_byte()?;
        let timestamp_delta = self.varlong()?;
        let offset_delta = self.varint()?;
        let has_key = self.field("key", true, left(self))?;
        self.field("value", true, left(self))?;
        let headers = self.varint()?;
        if headers < 0 {
            return Err(invalid(format!("invalid number of record headers {headers}")));
        }
        for _ in 0..headers {
            if self.read - start >= size {
                return Err(invalid(format!("{headers} record headers do not fit in the record's {size} bytes")));
            }
            self.field("header key", false, left(self))?;
            self.field("header value", true, left(self))?;
        }
        let used = self.read - start;
        if used != size {
            return Err(invalid(format!(
                "invalid record size: expected to read {size} bytes in record payload, but instead read {used}"
            )));
        }
        Ok(RecordInfo { timestamp_delta, offset_delta, has_key })
    }
}

/// Encodes a zigzag varint (tests and fuzz seeds build records with it).
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

/// One record's bytes as Kafka lays them out (tests and fuzz seeds).
pub fn encode_record(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) -> Vec<u8> {
    let mut body = vec![0u8];
    put_varint(&mut body, timestamp_delta);
    put_varint(&mut body, i64::from(offset_delta));
    for f in [key, value] {
        match f {
            None => put_varint(&mut body, -1),
            Some(b) => {
                put_varint(&mut body, b.len() as i64);
                body.extend_from_slice(b);
            }
        }
    }
    put_varint(&mut body, headers.len() as i64);
    for (k, v) in headers {
        put_varint(&mut body, k.len() as i64);
        body.extend_from_slice(k);
        match v {
            None => put_varint(&mut body, -1),
            Some(b) => {
                put_varint(&mut body, b.len() as i64);
                body.extend_from_slice(b);
            }
        }
    }
    let mut out = vec![];
    put_varint(&mut out, body.len() as i64);
    out.extend(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> Result<Vec<RecordInfo>, RecordError> {
        let mut r = RecordReader::new(bytes);
        let mut out = vec![];
        while !r.at_end()? {
            out.push(r.record()?);
        }
        Ok(out)
    }

    #[test]
    fn records_read_back_as_written() {
        let mut bytes = encode_record(0, 0, Some(b"k"), Some(b"value"), &[(b"h", Some(b"x")), (b"n", None)]);
        bytes.extend(encode_record(-5, 1, None, None, &[]));
        bytes.extend(encode_record(i64::MAX / 2, 2, Some(b""), Some(&[7; 300]), &[]));
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], RecordInfo { timestamp_delta: 0, offset_delta: 0, has_key: true });
        assert_eq!(got[1], RecordInfo { timestamp_delta: -5, offset_delta: 1, has_key: false });
        assert_eq!(got[2].timestamp_delta, i64::MAX / 2);
    }

    #[test]
    fn varints_decode_as_kafka_encodes_them() {
        for v in [0i64, -1, 1, 63, -64, 64, 300, i64::from(i32::MAX), i64::from(i32::MIN)] {
            let mut b = vec![];
            put_varint(&mut b, v);
            assert_eq!(i64::from(RecordReader::new(&b[..]).varint().unwrap()), v);
            assert_eq!(RecordReader::new(&b[..]).varlong().unwrap(), v);
        }
        for v in [i64::MAX, i64::MIN] {
            let mut b = vec![];
            put_varint(&mut b, v);
            assert_eq!(RecordReader::new(&b[..]).varlong().unwrap(), v);
            assert!(RecordReader::new(&b[..]).varint().is_err());
        }
        assert!(RecordReader::new(&[0xff; 11][..]).varlong().is_err());
    }

    #[test]
    fn a_record_that_lies_about_its_size_or_fields_is_invalid() {
        let good = encode_record(0, 0, Some(b"key"), Some(b"value"), &[(b"h", Some(b"v"))]);
        // Size one more and one less than the body.
        for delta in [1i64, -1] {
            let body = &good[1..];
            let mut b = vec![];
            put_varint(&mut b, body.len() as i64 + delta);
            b.extend_from_slice(body);
            assert!(matches!(read_all(&b), Err(RecordError::Invalid(_))), "size {delta:+}");
        }
        // Every truncation.
        for cut in 1..good.len() {
            assert!(matches!(read_all(&good[..cut]), Err(RecordError::Invalid(_))), "cut at {cut}");
        }
        // Negative lengths other than null, a null header key, a header count beyond the record.
        let mut b = vec![];
        let mut body = vec![0u8, 0, 0];
        put_varint(&mut body, -2);
        put_varint(&mut body, -1);
        put_varint(&mut body, 0);
        put_varint(&mut b, body.len() as i64);
        b.extend(&body);
        assert!(matches!(read_all(&b), Err(RecordError::Invalid(m)) if m.contains("key length -2")));
        let mut b = vec![];
        let mut body = vec![0u8, 0, 0];
        put_varint(&mut body, -1);
        put_varint(&mut body, -1);
        put_varint(&mut body, 1);
        put_varint(&mut body, -1);
        put_varint(&mut body, -1);
        put_varint(&mut b, body.len() as i64);
        b.extend(&body);
        assert!(matches!(read_all(&b), Err(RecordError::Invalid(m)) if m.contains("header key length")));
        let mut b = vec![];
        let mut body = vec![0u8, 0, 0];
        put_varint(&mut body, -1);
        put_varint(&mut body, -1);
        put_varint(&mut body, i64::from(i32::MAX));
        put_varint(&mut b, body.len() as i64);
        b.extend(&body);
        assert!(matches!(read_all(&b), Err(RecordError::Invalid(_))));
        // A key claiming more than its record holds is refused before it is skipped.
        let mut b = vec![];
        let mut body = vec![0u8, 0, 0];
        put_varint(&mut body, 1 << 30);
        put_varint(&mut b, body.len() as i64);
        b.extend(&body);
        b.extend(vec![0u8; 64]);
        assert!(matches!(read_all(&b), Err(RecordError::Invalid(m)) if m.contains("runs past")));
    }
}
