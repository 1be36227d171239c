//! A bounded cache of raw batch bytes, keyed by (object key, byte offset), least recently used
//! out first. Bounded by bytes, not entries.

use std::sync::Mutex;

use bytes::Bytes;
use lru::LruCache;

pub struct RangeCache {
    inner: Mutex<Inner>,
    budget: usize,
}

struct Inner {
    lru: LruCache<(String, u64), Bytes>,
    bytes: usize,
}

impl RangeCache {
    pub fn new(budget: usize) -> RangeCache {
        let lru = LruCache::unbounded();
        RangeCache { inner: Mutex::new(Inner { lru, bytes: 0 }), budget }
    }

    pub fn get(&self, key: &str, offset: u64) -> Option<Bytes> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let hit = g.lru.get(&(key.to_string(), offset)).cloned();
        let m = crate::metrics::get();
        if hit.is_some() {
            m.fetch_cache_hits.inc()
        } else {
            m.fetch_cache_misses.inc()
        };
        hit
    }

    pub fn put(&self, key: &str, offset: u64, bytes: Bytes) {
        if bytes.len() > self.budget {
            return;
        }
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = g.lru.put((key.to_string(), offset), bytes.clone()) {
            g.bytes -= old.len();
        }
        g.bytes += bytes.len();
        while g.bytes > self.budget {
            match g.lru.pop_lru() {
                Some((_, b)) => g.bytes -= b.len(),
                None => break,
            }
        }
    }

    /// Drops every cached range of an object (it was found damaged, or deleted).
    pub fn forget_object(&self, key: &str) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let doomed: Vec<(String, u64)> = g.lru.iter().filter(|((k, _), _)| k == key).map(|(k, _)| k.clone()).collect();
        for k in doomed {
            if let Some(b) = g.lru.pop(&k) {
                g.bytes -= b.len();
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_byte_budget_evicting_the_least_recently_used() {
        let c = RangeCache::new(100);
        c.put("a", 0, Bytes::from(vec![0; 40]));
        c.put("a", 40, Bytes::from(vec![0; 40]));
        assert!(c.get("a", 0).is_some()); // now most recent
        c.put("b", 0, Bytes::from(vec![0; 40]));
        assert!(c.bytes() <= 100);
        assert!(c.get("a", 40).is_none(), "the least recently used went");
        assert!(c.get("a", 0).is_some());
        c.put("huge", 0, Bytes::from(vec![0; 101]));
        assert!(c.get("huge", 0).is_none());
        c.forget_object("a");
        assert!(c.get("a", 0).is_none());
    }
}
