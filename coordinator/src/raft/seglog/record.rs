//! One record of the segmented Raft log, as bytes, and how a run of records is read back.
//!
//! A record is `len: u32 LE`, `crc: u32 LE` (CRC32C of the body), then the body of `len` bytes:
//! `kind: u8`, `partition: u32 LE`, `index: u64 LE`, then the payload (an entry's bincode bytes, or
//! nothing). Segments are zero-filled before use, so a zero header means "nothing was written
//! here"; anything else that does not check out is a torn or corrupt record. It must not know
//! what a payload means. [`parse`] is total on hostile bytes: whatever it is given, it answers
//! `End`, a record lying wholly within the bytes, or `Invalid`, never a panic.

/// Bytes before the body: length and checksum.
pub const HEADER: usize = 8;
/// Bytes of the body before the payload: kind, metadata partition, index.
pub const FIXED: usize = 13;
/// No record is larger than this (a sanity bound on the length field).
pub const MAX_RECORD: usize = 1 << 30;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Metadata partition `partition`'s entry at `index` (payload: the entry). Replaces the
    /// metadata partition's entries from `index` on, if it had any.
    Entry = 1,
    /// The metadata partition's entries from `index` on are gone (a truncation after a conflict).
    Truncate = 2,
    /// Every earlier record of the metadata partition is void (its replica left this directory).
    Drop = 3,
    /// The end of the segment: nothing after it is read, and everything before it must check out.
    Seal = 4,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Entry,
            2 => Kind::Truncate,
            3 => Kind::Drop,
            4 => Kind::Seal,
            _ => return None,
        })
    }
}

/// Appends one record to `out`.
pub fn encode(out: &mut Vec<u8>, kind: Kind, partition: u32, index: u64, payload: &[u8]) {
    let body_len = FIXED + payload.len();
    let start = out.len();
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(kind as u8);
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start + HEADER..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The encoded size of a record with `payload_len` bytes of payload.
pub fn size(payload_len: usize) -> usize {
    HEADER + FIXED + payload_len
}

/// A record read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub kind: Kind,
    pub partition: u32,
    pub index: u64,
    pub payload: &'a [u8],
    /// The record's whole size (header included).
    pub len: usize,
}

/// What the bytes at a position hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<'a> {
    Record(Record<'a>),
    /// A zero header: nothing was written from here on.
    End,
    /// Bytes that are not a whole, valid record (why).
    Invalid(String),
}

/// Reads the record at the start of `buf`.
pub fn parse(buf: &[u8]) -> Next<'_> {
    if buf.len() < HEADER {
        return if buf.iter().all(|&b| b == 0) { Next::End } else { Next::Invalid("a partial header".into()) };
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if len == 0 && crc == 0 {
        return Next::End;
    }
    if !(FIXED..=MAX_RECORD).contains(&len) {
        return Next::Invalid(format!("a record length of {len} bytes"));
    }
    let Some(body) = buf.get(HEADER..HEADER + len) else {
        return Next::Invalid(format!("a record of {len} bytes past the end of the segment"));
    };
    if crc32c::crc32c(body) != crc {
        return Next::Invalid("a record whose checksum does not match".into());
    }
    let Some(kind) = Kind::from_u8(body[0]) else {
        return Next::Invalid(format!("a record of unknown kind {}", body[0]));
    };
    let partition = u32::from_le_bytes([body[1], body[2], body[3], body[4]]);
    let mut index = [0u8; 8];
    index.copy_from_slice(&body[5..13]);
    let index = u64::from_le_bytes(index);
    // No log reaches the last index (its successor could not be named): such an entry is forged
    // or damaged, and replaying it would overflow the index arithmetic.
    if kind == Kind::Entry && index == u64::MAX {
        return Next::Invalid(format!("an entry record at index {index}, past any log"));
    }
    Next::Record(Record { kind, partition, index, payload: &body[FIXED..], len: HEADER + len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let mut b = vec![];
        encode(&mut b, Kind::Entry, 7, 42, b"hello");
        assert_eq!(b.len(), size(5));
        match parse(&b) {
            Next::Record(r) => {
                assert_eq!(
                    (r.kind, r.partition, r.index, r.payload, r.len),
                    (Kind::Entry, 7, 42, &b"hello"[..], b.len())
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zeros_are_the_end_and_damage_is_invalid() {
        assert_eq!(parse(&[0; 64]), Next::End);
        assert_eq!(parse(&[0; 3]), Next::End);
        let mut b = vec![];
        encode(&mut b, Kind::Entry, 1, 1, b"payload");
        for cut in 1..b.len() {
            assert!(matches!(parse(&b[..cut]), Next::Invalid(_)), "cut at {cut}");
        }
        for flip in 0..b.len() {
            let mut d = b.clone();
            d[flip] ^= 0x40;
            assert!(matches!(parse(&d), Next::Invalid(_)), "flip at {flip}");
        }
    }

    #[test]
    fn a_record_length_field_of_any_value_is_invalid_unless_it_frames_the_record() {
        let mut b = vec![];
        encode(&mut b, Kind::Entry, 1, 1, b"payload");
        b.extend_from_slice(&[0; 64]);
        let real = (FIXED + 7) as u32;
        for len in [1u32, 12, real + 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, MAX_RECORD as u32 + 1] {
            let mut d = b.clone();
            d[..4].copy_from_slice(&len.to_le_bytes());
            assert!(matches!(parse(&d), Next::Invalid(_)), "length {len:#x}");
            // Forged: the checksum made to match the bytes the length claims, where there are any.
            if let Some(body) = d.get(HEADER..HEADER + len as usize) {
                let crc = crc32c::crc32c(body);
                d[4..8].copy_from_slice(&crc.to_le_bytes());
            }
            let r = parse(&d);
            assert!(
                matches!(r, Next::Invalid(_)) || matches!(r, Next::Record(x) if x.len <= d.len()),
                "length {len:#x}: {r:?}"
            );
        }
        // A zero length with a non-zero checksum is not the end.
        let mut d = b.clone();
        d[..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(parse(&d), Next::Invalid(_)));
    }

    #[test]
    fn an_entry_at_the_last_index_is_invalid_even_with_a_good_checksum() {
        let mut b = vec![];
        encode(&mut b, Kind::Entry, 1, u64::MAX, b"x");
        assert!(matches!(parse(&b), Next::Invalid(why) if why.contains("past any log")));
        let mut t = vec![];
        encode(&mut t, Kind::Truncate, 1, u64::MAX, &[]);
        assert!(matches!(parse(&t), Next::Record(_)), "a truncation from there is harmless");
    }
}
