//! A write-through copy of the state keys that nearly every command reads, so applying a command
//! does not search RocksDB for them.
//!
//! Owns: the committed values of the keys a caller-supplied predicate calls hot, as written by
//! transactions committed through it ([`Txn::commit`](super::Txn::commit)). A key is cached once
//! a committed transaction wrote it and dropped when one deleted it; a key it does not hold is
//! read from RocksDB. It is a cache and nothing more: the database stays the source of truth and
//! holds the same values, so dropping the cache (`clear`) is always safe, and must be done by
//! whoever writes the keys behind its back (a snapshot install).
//!
//! Its memory is bounded by a byte budget: a new key that would exceed it empties the cache first
//! (the keys in use come back with their next writes), so a working set larger than the budget
//! costs RocksDB reads, never memory.
//!
//! It must not know what the keys mean (the predicate does), nor hand out a value that a
//! transaction has not committed.

use rustc_hash::FxHashMap;

/// The committed values of the hot keys written through it.
pub struct HotKeys {
    is_hot: fn(&[u8]) -> bool,
    /// Keyed with a fast non-cryptographic hash: the keys are the state machine's own, and the
    /// map is never iterated in an order that reaches the state.
    values: FxHashMap<Vec<u8>, Vec<u8>>,
    /// What the cached pairs cost, counted by [`cost`].
    bytes: usize,
    max_bytes: usize,
}

/// The memory a cached pair costs: its bytes and, roughly, two `Vec`s, their allocations and the
/// map's slot.
fn cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + 96
}

impl std::fmt::Debug for HotKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotKeys").field("keys", &self.values.len()).field("bytes", &self.bytes).finish()
    }
}

impl HotKeys {
    /// An empty cache of the keys `is_hot` selects, holding at most about `max_bytes`.
    pub fn new(is_hot: fn(&[u8]) -> bool, max_bytes: usize) -> HotKeys {
        HotKeys { is_hot, values: FxHashMap::default(), bytes: 0, max_bytes }
    }

    pub fn is_hot(&self, key: &[u8]) -> bool {
        (self.is_hot)(key)
    }

    /// The committed value of `key`, if it is cached.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.values.get(key).map(Vec::as_slice)
    }

    /// Records a committed write (`None`: a delete) of a hot key.
    pub(super) fn committed(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        let Some(value) = value else {
            self.forget(&key);
            return;
        };
        if let Some(old) = self.values.get_mut(&key) {
            self.bytes = self.bytes - old.len() + value.len();
            *old = value;
        } else {
            let c = cost(&key, &value);
            if self.bytes + c > self.max_bytes {
                self.clear();
                if c > self.max_bytes {
                    return;
                }
            }
            self.bytes += c;
            self.values.insert(key, value);
        }
    }

    /// Forgets `key` (its value is about to change by a path that does not update the cache).
    pub(super) fn forget(&mut self, key: &[u8]) {
        if let Some((k, v)) = self.values.remove_entry(key) {
            self.bytes -= cost(&k, &v);
        }
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.values = FxHashMap::default();
        self.bytes = 0;
    }

    /// About how many bytes the cached pairs take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of keys cached.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: &[u8]) -> bool {
        true
    }

    #[test]
    fn holds_committed_values_and_forgets_deleted_keys() {
        let mut h = HotKeys::new(all, 1 << 20);
        h.committed(b"a".to_vec(), Some(b"1".to_vec()));
        h.committed(b"a".to_vec(), Some(b"22".to_vec()));
        h.committed(b"b".to_vec(), Some(b"3".to_vec()));
        assert_eq!(h.get(b"a"), Some(&b"22"[..]));
        assert_eq!(h.bytes(), cost(b"a", b"22") + cost(b"b", b"3"));
        h.committed(b"a".to_vec(), None);
        assert_eq!(h.get(b"a"), None);
        assert_eq!(h.bytes(), cost(b"b", b"3"));
        h.forget(b"b");
        assert!(h.is_empty());
        assert_eq!(h.bytes(), 0);
    }

    #[test]
    fn a_new_key_past_the_budget_empties_the_cache_first() {
        let budget = 3 * cost(b"k0", b"v");
        let mut h = HotKeys::new(all, budget);
        for i in 0..3u8 {
            h.committed(vec![b'k', b'0' + i], Some(b"v".to_vec()));
        }
        assert_eq!(h.len(), 3);
        // Updating a cached key in place is not a new key.
        h.committed(b"k0".to_vec(), Some(b"w".to_vec()));
        assert_eq!(h.len(), 3);
        h.committed(b"k3".to_vec(), Some(b"v".to_vec()));
        assert_eq!(h.len(), 1);
        assert_eq!(h.get(b"k3"), Some(&b"v"[..]));
        assert!(h.bytes() <= budget);
        // A pair larger than the whole budget is not cached at all.
        h.committed(b"big".to_vec(), Some(vec![0; budget]));
        assert!(h.is_empty());
        assert_eq!(h.get(b"big"), None);
    }
}
