//! Value encoding: bincode 2 (standard configuration) over serde.
//!
//! The encoding is deterministic: the same value always gives the same bytes, which the
//! byte-identical replica check relies on. Decoding failures name the key they came from.

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

/// Decodes a value read from `key`; trailing bytes are corruption.
pub fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, StorageError> {
    let corrupt = |reason: String| StorageError::Corrupt { key: display_key(key), reason };
    let (value, used) = bincode::serde::decode_from_slice(bytes, config()).map_err(|e| corrupt(e.to_string()))?;
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
    fn truncated_value_is_corruption_naming_the_key() {
        let bytes = encode(&(1u32, "hello".to_string())).unwrap();
        let err = decode::<(u32, String)>(b"P\x01", &bytes[..3]).unwrap_err();
        assert!(err.to_string().contains("P\\x01"), "{err}");
    }
}
