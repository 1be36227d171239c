//! A read/write transaction over the state keys: the state machine applies commands in a `Txn`,
//! whose reads see its own pending writes, and whose writes become one atomic batch.
//!
//! With a [`HotKeys`] cache, point reads of hot keys are answered from it, and [`Txn::commit`]
//! updates it once the batch is written.

use std::collections::BTreeMap;
use std::ops::Bound;

use rocksdb::WriteBatch;

use super::{Db, Family, HotKeys, KvRead, StorageError};

/// Pending writes over the latest database state. Not shared between threads: one metadata
/// partition applies one command at a time.
pub struct Txn<'a> {
    db: &'a Db,
    /// `None` is a delete.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    hot: Option<&'a mut HotKeys>,
}

impl<'a> Txn<'a> {
    pub fn new(db: &'a Db) -> Txn<'a> {
        Txn { db, writes: BTreeMap::new(), hot: None }
    }

    /// A transaction that reads hot keys from `hot` and, when committed, updates it. `hot` must
    /// hold only values committed to `db`, for the keys of the state this transaction writes.
    pub fn with_hot(db: &'a Db, hot: &'a mut HotKeys) -> Txn<'a> {
        Txn { db, writes: BTreeMap::new(), hot: Some(hot) }
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }

    /// Number of keys written so far.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// The keys this transaction writes (puts and deletes).
    pub fn keys(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.writes.keys()
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Writes the pending writes as one atomic batch (fsynced with `sync`), then records the hot
    /// ones in the cache.
    pub fn commit(self, sync: bool) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        self.add_to(&mut batch);
        self.db.write(batch, sync)?;
        if let Some(hot) = self.hot {
            for (k, v) in self.writes {
                if hot.is_hot(&k) {
                    hot.committed(k, v);
                }
            }
        }
        Ok(())
    }

    /// The pending writes as one RocksDB batch, in key order, for a caller that writes it itself.
    /// The hot keys it writes are dropped from the cache at once, as the cache cannot know
    /// whether or when the batch is written.
    pub fn into_write_batch(mut self) -> WriteBatch {
        let mut batch = WriteBatch::default();
        self.add_to(&mut batch);
        if let Some(hot) = self.hot.take() {
            for k in self.writes.keys() {
                hot.forget(k);
            }
        }
        batch
    }

    fn add_to(&self, batch: &mut WriteBatch) {
        for (k, v) in &self.writes {
            match v {
                Some(v) => self.db.batch_put(batch, Family::State, k, v),
                None => self.db.batch_delete(batch, Family::State, k),
            }
        }
    }
}

impl KvRead for Txn<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(pending) = self.writes.get(key) {
            return Ok(pending.clone());
        }
        if let Some(v) = self.hot.as_ref().and_then(|h| h.get(key)) {
            return Ok(Some(v.to_vec()));
        }
        self.db.get(Family::State, key)
    }

    fn get_with(
        &self,
        key: &[u8],
        read: &mut dyn FnMut(Option<&[u8]>) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        if let Some(pending) = self.writes.get(key) {
            return read(pending.as_deref());
        }
        if let Some(v) = self.hot.as_ref().and_then(|h| h.get(key)) {
            return read(Some(v));
        }
        self.db.get_with(Family::State, key, read)
    }

    /// Merges the database's entries with the pending writes; a pending write wins over the
    /// stored value of the same key, and a pending delete hides it.
    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        let mut pending = self.writes.range::<[u8], _>((Bound::Included(from), Bound::Excluded(to))).peekable();
        let mut stopped = false;
        self.db.scan_family(Family::State, None, from, to, &mut |k, v| {
            // First the pending writes that sort before this stored key.
            while let Some((pk, pv)) = pending.next_if(|(pk, _)| pk.as_slice() < k) {
                if let Some(pv) = pv {
                    if !visit(pk, pv)? {
                        stopped = true;
                        return Ok(false);
                    }
                }
            }
            // Then this key: overridden by a pending write of the same key, or as stored.
            let keep_going = match pending.next_if(|(pk, _)| pk.as_slice() == k) {
                Some((_, Some(pv))) => visit(k, pv)?,
                Some((_, None)) => true,
                None => visit(k, v)?,
            };
            stopped = !keep_going;
            Ok(keep_going)
        })?;
        if stopped {
            return Ok(());
        }
        for (pk, pv) in pending {
            if let Some(pv) = pv {
                if !visit(pk, pv)? {
                    break;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(r: &dyn KvRead, from: &[u8], to: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = vec![];
        r.scan(from, to, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
        out
    }

    #[test]
    fn scan_merges_pending_writes_over_stored_keys() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let mut t = Txn::new(&db);
        for k in [b"a", b"c", b"e", b"g"] {
            t.put(k.to_vec(), b"old".to_vec());
        }
        db.write(t.into_write_batch(), true).unwrap();

        let mut t = Txn::new(&db);
        t.put(b"b".to_vec(), b"new".to_vec()); // before a stored key
        t.put(b"c".to_vec(), b"new".to_vec()); // overrides
        t.delete(b"e".to_vec()); // hides
        t.put(b"h".to_vec(), b"new".to_vec()); // after every stored key
        t.put(b"z".to_vec(), b"new".to_vec()); // outside the range
        let got = collect(&t, b"a", b"y");
        let want: Vec<(Vec<u8>, Vec<u8>)> = [("a", "old"), ("b", "new"), ("c", "new"), ("g", "old"), ("h", "new")]
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(t.get(b"e").unwrap(), None);
        assert_eq!(t.get(b"c").unwrap(), Some(b"new".to_vec()));
        assert_eq!(t.get(b"g").unwrap(), Some(b"old".to_vec()));

        // Stopping early stops both sources.
        let mut seen = 0;
        t.scan(b"a", b"y", &mut |_, _| {
            seen += 1;
            Ok(seen < 2)
        })
        .unwrap();
        assert_eq!(seen, 2);
    }

    #[test]
    fn snapshot_does_not_see_later_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let view = db.read();
        let mut t = Txn::new(&db);
        t.put(b"k".to_vec(), b"v".to_vec());
        db.write(t.into_write_batch(), false).unwrap();
        assert_eq!(view.get(b"k").unwrap(), None);
        assert_eq!(db.read().get(b"k").unwrap(), Some(b"v".to_vec()));
    }
}
