//! The records section of a compressed record batch as a stream of decompressed bytes, bounded:
//! a reader never yields more than its limit (the caller's `max_uncompressed_batch_bytes`) and
//! never holds more than a block in memory, so neither a zip bomb nor a lying length field costs
//! more than the limit. The formats are Kafka's (`CompressionType`, magic v2):
//!
//! | id | codec | stream |
//! | --- | --- | --- |
//! | 1 | gzip | RFC 1952 members, one after the other (Java's `GZIPInputStream`) |
//! | 2 | snappy | xerial's `SnappyOutputStream` framing (magic `82 53 4E 41 50 50 59 00`, two `i32` versions, then blocks of `i32` length + raw snappy), or one raw snappy block (librdkafka's, which xerial also reads) |
//! | 3 | lz4 | the LZ4 frame format (`KafkaLZ4BlockInputStream`) |
//! | 4 | zstd | zstd frames, the window at most the limit |
//!
//! Owns decompression only: what the bytes mean is `records`' business.

use std::io::{self, Read};

/// Kafka's compression type ids (attributes bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    /// The codec of compression id `id`, or `None` for the ids Kafka does not define (5-7).
    pub fn from_id(id: u8) -> Option<Codec> {
        Some(match id {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// Why decompressed bytes stopped.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    /// More than the limit would come out.
    #[error("decompresses to more than {limit} bytes")]
    TooLarge { limit: usize },
    /// The compressed bytes are not a valid stream of the codec.
    #[error("invalid {codec} data: {reason}")]
    Corrupt { codec: &'static str, reason: String },
}

/// The error a reader's `read` returns past its limit; [`classify`] turns it back.
#[derive(Debug)]
struct LimitReached(usize);

impl std::fmt::Display for LimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "more than {} decompressed bytes", self.0)
    }
}

impl std::error::Error for LimitReached {}

/// What an I/O error of a decompressing reader means.
pub fn classify(codec: Codec, e: io::Error, limit: usize) -> DecompressError {
    if let Some(LimitReached(limit)) = e.get_ref().and_then(|inner| inner.downcast_ref::<LimitReached>()) {
        return DecompressError::TooLarge { limit: *limit };
    }
    // zstd refuses a frame whose window is beyond `window_log_max` before producing anything
    // ("Frame requires too much memory for decoding"): it asks for more than may come out.
    if codec == Codec::Zstd && e.to_string().contains("too much memory") {
        return DecompressError::TooLarge { limit };
    }
    DecompressError::Corrupt { codec: codec.name(), reason: e.to_string() }
}

/// Counts the bytes a reader yields and fails once more than `limit` would come out.
struct Limited<R> {
    inner: R,
    left: usize,
    limit: usize,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // Ask for one byte more than is allowed, so reaching the limit exactly is not an error.
        let want = buf.len().min(self.left.saturating_add(1));
        let n = self.inner.read(&mut buf[..want])?;
        if n > self.left {
            return Err(io::Error::other(LimitReached(self.limit)));
        }
        self.left -= n;
        Ok(n)
    }
}

/// A reader of `compressed` decompressed with `codec`, yielding at most `limit` bytes.
pub fn reader<'a>(codec: Codec, compressed: &'a [u8], limit: usize) -> Result<Box<dyn Read + 'a>, DecompressError> {
    let corrupt = |reason: String| DecompressError::Corrupt { codec: codec.name(), reason };
    let inner: Box<dyn Read + 'a> = match codec {
        Codec::None => Box::new(compressed),
        Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(compressed)),
        Codec::Snappy => Box::new(Snappy::new(compressed, limit)?),
        Codec::Lz4 => Box::new(lz4::Decoder::new(compressed).map_err(|e| corrupt(e.to_string()))?),
        Codec::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(compressed).map_err(|e| corrupt(e.to_string()))?;
            // The window is memory the decoder allocates up front, as the frame header asks:
            // bounded by the bytes it may produce, but never below 8 MiB (2^23: what a streaming
            // producer's levels up to 19 ask, not knowing the batch's size).
            d.window_log_max(window_log(limit).clamp(MIN_ZSTD_WINDOW_LOG, 27)).map_err(|e| corrupt(e.to_string()))?;
            Box::new(d)
        }
    };
    Ok(Box::new(Limited { inner, left: limit, limit }))
}

/// The window a zstd frame may always ask for (8 MiB).
const MIN_ZSTD_WINDOW_LOG: u32 = 23;

/// The smallest window log whose window covers `limit` bytes, within zstd's 10..=31.
fn window_log(limit: usize) -> u32 {
    let bits = usize::BITS - limit.saturating_sub(1).leading_zeros();
    bits.clamp(10, 31)
}

/// xerial's block framing, or a single raw block.
struct Snappy<'a> {
    rest: &'a [u8],
    /// The current block, decompressed, and how much of it was read.
    block: Vec<u8>,
    at: usize,
    framed: bool,
    limit: usize,
}

const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// The magic, then the format version and the oldest compatible version (`i32` each).
const XERIAL_HEADER: usize = 16;

impl<'a> Snappy<'a> {
    fn new(compressed: &'a [u8], limit: usize) -> Result<Snappy<'a>, DecompressError> {
        let mut s = Snappy { rest: compressed, block: Vec::new(), at: 0, framed: false, limit };
        if compressed.len() >= XERIAL_HEADER && compressed[..8] == XERIAL_MAGIC {
            s.framed = true;
            s.rest = &compressed[XERIAL_HEADER..];
        } else {
            // One raw block: its decompressed length is declared first; check it before sizing
            // anything by it.
            s.block = s.decompress(compressed)?;
            s.rest = &[];
        }
        Ok(s)
    }

    fn corrupt(reason: impl Into<String>) -> DecompressError {
        DecompressError::Corrupt { codec: "snappy", reason: reason.into() }
    }

    fn decompress(&self, raw: &[u8]) -> Result<Vec<u8>, DecompressError> {
        let n = snap::raw::decompress_len(raw).map_err(|e| Self::corrupt(e.to_string()))?;
        if n > self.limit {
            return Err(DecompressError::TooLarge { limit: self.limit });
        }
        let mut out = vec![0; n];
        let got = snap::raw::Decoder::new().decompress(raw, &mut out).map_err(|e| Self::corrupt(e.to_string()))?;
        out.truncate(got);
        Ok(out)
    }

    /// The next framed block, or `false` at the end.
    fn next_block(&mut self) -> Result<bool, DecompressError> {
        if self.rest.is_empty() {
            return Ok(false);
        }
        if self.rest.len() < 4 {
            return Err(Self::corrupt(format!("{} stray bytes after the last block", self.rest.len())));
        }
        let len = u32::from_be_bytes([self.rest[0], self.rest[1], self.rest[2], self.rest[3]]) as usize;
        let body = self
            .rest
            .get(4..4 + len)
            .ok_or_else(|| Self::corrupt(format!("a block of {len} bytes where {} are left", self.rest.len() - 4)))?;
        self.block = self.decompress(body)?;
        self.at = 0;
        self.rest = &self.rest[4 + len..];
        Ok(true)
    }
}

impl Read for Snappy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.block.len() {
            if !self.framed {
                return Ok(0);
            }
            match self.next_block() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(DecompressError::TooLarge { limit }) => return Err(io::Error::other(LimitReached(limit))),
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::validate::build::compress;

    fn all(codec: Codec, bytes: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
        let mut out = vec![];
        reader(codec, bytes, limit)?.read_to_end(&mut out).map_err(|e| classify(codec, e, limit))?;
        Ok(out)
    }

    fn xerial(data: &[u8], block: usize) -> Vec<u8> {
        let mut out = XERIAL_MAGIC.to_vec();
        out.extend(1i32.to_be_bytes());
        out.extend(1i32.to_be_bytes());
        for chunk in data.chunks(block) {
            let c = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            out.extend((c.len() as u32).to_be_bytes());
            out.extend(c);
        }
        out
    }

    #[test]
    fn every_codec_round_trips_up_to_its_limit_and_no_further() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let c = compress(codec, &data);
            assert_eq!(all(codec, &c, data.len()).unwrap(), data, "{codec:?} at exactly its size");
            let e = all(codec, &c, data.len() - 1).unwrap_err();
            assert!(matches!(e, DecompressError::TooLarge { .. }), "{codec:?}: {e}");
        }
        let framed = xerial(&data, 32 << 10);
        assert_eq!(all(Codec::Snappy, &framed, data.len()).unwrap(), data);
        assert!(matches!(all(Codec::Snappy, &framed, 1000).unwrap_err(), DecompressError::TooLarge { .. }));
    }

    #[test]
    fn a_zip_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 64 << 20];
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let bomb = compress(codec, &zeros);
            assert!(bomb.len() < 4 << 20, "{codec:?}: {} bytes", bomb.len());
            let e = all(codec, &bomb, 1 << 20).unwrap_err();
            assert!(matches!(e, DecompressError::TooLarge { limit } if limit == 1 << 20), "{codec:?}: {e}");
        }
    }

    #[test]
    fn garbage_and_truncation_are_corrupt_never_a_panic() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 13) as u8).collect();
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15); // random, the same every run
        let mut next = move || rng.u64(..);
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let good = compress(codec, &data);
            for cut in [0, 1, good.len() / 2, good.len() - 1] {
                // Whatever comes out is refused or is at most the limit: never a panic.
                if let Ok(out) = all(codec, &good[..cut], 20_000) {
                    assert!(out.len() <= 20_000);
                }
            }
            for _ in 0..200 {
                let mut bad = good.clone();
                let i = next() as usize % bad.len();
                bad[i] ^= 1 << (next() % 8);
                if let Ok(out) = all(codec, &bad, 20_000) {
                    assert!(out.len() <= 20_000);
                }
            }
            let garbage: Vec<u8> = (0..512).map(|_| next() as u8).collect();
            assert!(all(codec, &garbage, 1 << 20).is_err(), "{codec:?} took garbage");
        }
        // A raw snappy block declaring 4 GiB is refused before anything is allocated for it.
        let lie = [0xff, 0xff, 0xff, 0xff, 0x0f, 0];
        assert!(matches!(all(Codec::Snappy, &lie, 1 << 20).unwrap_err(), DecompressError::TooLarge { .. }));
        // A xerial block longer than what is left.
        let mut framed = xerial(&data, 4096);
        framed.truncate(XERIAL_HEADER + 10);
        assert!(matches!(all(Codec::Snappy, &framed, 1 << 20).unwrap_err(), DecompressError::Corrupt { .. }));
    }

    #[test]
    fn the_zstd_window_is_bounded_by_the_limit() {
        assert_eq!(window_log(1), 10);
        assert_eq!(window_log(1 << 20), 20);
        assert_eq!(window_log((1 << 20) + 1), 21);
        assert_eq!(window_log(32 << 20), 25);
        assert_eq!(window_log(usize::MAX), 31);
        // A producer's streaming frame (level 3: a 2 MiB window) of a small batch decodes under
        // a small limit.
        let small = vec![7u8; 1000];
        let mut frame = vec![];
        let mut e = zstd::stream::write::Encoder::new(&mut frame, 3).unwrap();
        e.write_all(&small).unwrap();
        e.finish().unwrap();
        assert_eq!(all(Codec::Zstd, &frame, 4096).unwrap(), small);
    }
}
