//! A [`Store`] in memory with the cluster's compare-and-set rule, for the runtime's tests and the
//! kinds' own: counts its loads and stores, can hold the next store until released, and can be
//! told how the next stores end (another broker storing first, an unknown outcome) and which
//! states to refuse as such.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::{lock, Store, StoreError};

/// How a coming store ends, instead of the plain rule.
#[derive(Debug, Clone)]
pub enum Next<S> {
    /// Another broker stores this state first (so this store is fenced).
    OtherStores(S),
    /// Applied, but the answer is lost.
    UnknownAfterApplying,
}

/// Which states the store refuses as such.
type Refuse<S> = Box<dyn Fn(&S) -> bool + Send + Sync>;

pub struct FakeStore<K, S> {
    pub stored: Mutex<HashMap<K, (S, u64)>>,
    pub loads: AtomicUsize,
    /// Stores that applied.
    pub stores: AtomicUsize,
    next: Mutex<VecDeque<Next<S>>>,
    /// A state this refuses as such (INVALID_RECORD_STATE), whatever the version.
    refuse: Mutex<Option<Refuse<S>>>,
    /// A stored state whose load this refuses as such (GROUP_ID_NOT_FOUND: another kind of state).
    refuse_loads: Mutex<Option<Refuse<S>>>,
    gate: Mutex<Option<Arc<Notify>>>,
    /// A store is held at the gate.
    pub gated: AtomicBool,
}

impl<K, S> Default for FakeStore<K, S> {
    fn default() -> Self {
        FakeStore {
            stored: Mutex::new(HashMap::new()),
            loads: AtomicUsize::new(0),
            stores: AtomicUsize::new(0),
            next: Mutex::new(VecDeque::new()),
            refuse: Mutex::new(None),
            refuse_loads: Mutex::new(None),
            gate: Mutex::new(None),
            gated: AtomicBool::new(false),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash, S: Clone> FakeStore<K, S> {
    pub fn then(&self, next: Next<S>) {
        lock(&self.next).push_back(next);
    }

    pub fn refuse_when(&self, f: impl Fn(&S) -> bool + Send + Sync + 'static) {
        *lock(&self.refuse) = Some(Box::new(f));
    }

    pub fn refuse_loads_of(&self, f: impl Fn(&S) -> bool + Send + Sync + 'static) {
        *lock(&self.refuse_loads) = Some(Box::new(f));
    }

    /// Holds the next store until the returned notify is notified.
    pub fn hold_next(&self) -> Arc<Notify> {
        let open = Arc::new(Notify::new());
        *lock(&self.gate) = Some(open.clone());
        open
    }

    pub fn get(&self, key: &K) -> Option<(S, u64)> {
        lock(&self.stored).get(key).cloned()
    }

    /// Stores `state` as another broker would (over whatever is stored).
    pub fn put(&self, key: &K, state: S) -> u64 {
        let mut all = lock(&self.stored);
        let version = all.get(key).map_or(1, |(_, v)| v + 1);
        all.insert(key.clone(), (state, version));
        version
    }

    pub fn loads(&self) -> usize {
        self.loads.load(Ordering::SeqCst)
    }

    pub fn stores(&self) -> usize {
        self.stores.load(Ordering::SeqCst)
    }
}

impl<K, S> Store<K, S> for FakeStore<K, S>
where
    K: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    S: Clone + Send + Sync + 'static,
{
    fn load<'a>(&'a self, key: &'a K) -> BoxFuture<'a, Result<Option<(S, u64)>, StoreError>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let stored = self.get(key);
            if stored.as_ref().is_some_and(|(s, _)| lock(&self.refuse_loads).as_ref().is_some_and(|f| f(s))) {
                return Err(StoreError::Refused { code: ErrorCode::GroupIdNotFound, message: "another kind".into() });
            }
            Ok(stored)
        })
    }

    fn store<'a>(&'a self, key: &'a K, state: &'a S, expected: u64) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let gate = lock(&self.gate).take();
            if let Some(open) = gate {
                self.gated.store(true, Ordering::SeqCst);
                open.notified().await;
            }
            let next = lock(&self.next).pop_front();
            match next {
                Some(Next::OtherStores(other)) => {
                    self.put(key, other);
                }
                Some(Next::UnknownAfterApplying) => {
                    self.put(key, state.clone());
                    self.stores.fetch_add(1, Ordering::SeqCst);
                    return Err(StoreError::Unknown("the answer was lost".into()));
                }
                None => {}
            }
            if lock(&self.refuse).as_ref().is_some_and(|f| f(state)) {
                return Err(StoreError::Refused { code: ErrorCode::InvalidRecordState, message: "refused".into() });
            }
            let at = self.get(key).map_or(0, |(_, v)| v);
            if at != expected {
                return Err(StoreError::Fenced(format!("at version {at}, not {expected}")));
            }
            self.stores.fetch_add(1, Ordering::SeqCst);
            Ok(self.put(key, state.clone()))
        })
    }
}
