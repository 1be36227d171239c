//! Value encoding: bincode 2 (standard configuration) over serde.
//!
//! The encoding is deterministic: the same value always gives the same bytes, which the
//! byte-identical replica check relies on. Decoding failures name the key they came from.
//! Decoding is bounded ([`limit`]): every decode of bytes from the network or the disk, this
//! codec's only callers, claims no more memory for a length than the input could back.

use serde::{de::DeserializeOwned, Serialize};

use super::{display_key, StorageError};

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a value for storage or for the Raft log.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StorageError> {
    // Sized for most stored values, so encoding one seldom grows the buffer (bincode's own
    // `encode_to_vec` starts empty and grows it several times).
    let mut out = Vec::with_capacity(ENCODE_CAPACITY);
    bincode::serde::encode_into_std_write(value, &mut out, config())
        .map_err(|e| StorageError::Encode(e.to_string()))?;
    Ok(out)
}

/// The initial buffer of [`encode`], in bytes.
const ENCODE_CAPACITY: usize = 128;

const KIB: usize = 1 << 10;

/// The most bytes a decode of `len` input bytes may claim for its strings and byte vectors
/// before reading them (bincode sizes their buffers by the length it reads, issue #764): 16 times
/// the top of the input's step (64 KiB for inputs up to 4 KiB, then steps of 16×). An honest
/// value claims at most its own length (every claimed byte is a byte read), so it is never
/// refused; a lying length fails before its buffer is allocated. (Sequences of other types are
/// sized by serde, which preallocates at most 1 MiB.)
pub fn limit(len: usize) -> usize {
    match len {
        n if n <= 4 * KIB => 64 * KIB,
        n if n <= 64 * KIB => KIB * KIB,
        n if n <= KIB * KIB => 16 * KIB * KIB,
        n if n <= 16 * KIB * KIB => 256 * KIB * KIB,
        _ => 4096 * KIB * KIB,
    }
}

/// bincode's decoding with the claim limit of [`limit`] (a type-level constant per step).
fn decode_bounded<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize), bincode::error::DecodeError> {
    use bincode::serde::decode_from_slice;
    match limit(bytes.len()) {
        l if l == 64 * KIB => decode_from_slice(bytes, config().with_limit::<{ 64 * KIB }>()),
        l if l == KIB * KIB => decode_from_slice(bytes, config().with_limit::<{ KIB * KIB }>()),
        l if l == 16 * KIB * KIB => decode_from_slice(bytes, config().with_limit::<{ 16 * KIB * KIB }>()),
        l if l == 256 * KIB * KIB => decode_from_slice(bytes, config().with_limit::<{ 256 * KIB * KIB }>()),
        _ => decode_from_slice(bytes, config().with_limit::<{ 4096 * KIB * KIB }>()),
    }
}

/// Decodes a value read from `key` (a stored key, or what a network message is) from bytes that
/// may be hostile: a peer's Raft message, a forwarded request, a damaged disk. Trailing bytes are
/// corruption, and so is a length that claims more than [`limit`] allows.
pub fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, StorageError> {
    let corrupt = |reason: String| StorageError::Corrupt { key: display_key(key), reason };
    let (value, used) = decode_bounded(bytes).map_err(|e| corrupt(e.to_string()))?;
    if used != bytes.len() {
        return Err(corrupt(format!("{} trailing bytes", bytes.len() - used)));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_bytes_are_corruption() {
        let mut bytes = encode(&(1u32, "x".to_string())).unwrap();
        assert_eq!(decode::<(u32, String)>(b"k", &bytes).unwrap(), (1, "x".to_string()));
        bytes.push(0);
        let err = decode::<(u32, String)>(b"k", &bytes).unwrap_err();
        assert!(err.to_string().contains("trailing"), "{err}");
    }

    #[test]
    fn a_length_claiming_more_than_the_input_is_refused_before_it_is_allocated() {
        // A String whose varint length says 2^62 bytes, then nothing: without a limit bincode
        // sizes a buffer by it (capacity overflow, or an abort for lengths under isize::MAX).
        // (bincode's varint: 251, 252, 253 announce a u16, u32, u64.)
        let mut lie = vec![253u8];
        lie.extend((1u64 << 62).to_le_bytes());
        let err = decode::<String>(b"k", &lie).unwrap_err();
        assert!(err.to_string().contains("LimitExceeded"), "{err}");
        // 1 GiB claimed in a 5-byte Vec<u8>, and inside a struct field.
        let mut lie = vec![252u8];
        lie.extend((1u32 << 30).to_le_bytes());
        assert!(decode::<Vec<u8>>(b"k", &lie).is_err());
        assert!(decode::<(u32, String)>(b"k", &[&[1u8][..], &lie[..]].concat()).is_err());
        // Honest values of every size step decode.
        for n in [0, 10, 5000, 70_000, 2 << 20] {
            let v = (7u64, "x".repeat(n), vec![9u8; n]);
            assert_eq!(decode::<(u64, String, Vec<u8>)>(b"k", &encode(&v).unwrap()).unwrap(), v);
        }
        assert!(limit(1) >= 16 && limit(4096) == 64 << 10 && limit(5 << 20) == 256 << 20);
    }

    #[test]
    fn truncated_value_is_corruption_naming_the_key() {
        let bytes = encode(&(1u32, "hello".to_string())).unwrap();
        let err = decode::<(u32, String)>(b"P\x01", &bytes[..3]).unwrap_err();
        assert!(err.to_string().contains("P\\x01"), "{err}");
    }
}
