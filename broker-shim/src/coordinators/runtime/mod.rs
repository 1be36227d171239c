//! The coordinator runtime: state this broker coordinates, held per key, loaded from where it is
//! kept on first use (or again when stale), changed only by writes that are stored before they are
//! answered, by compare-and-set on the version read. Kafka's `CoordinatorRuntime` is the model: a
//! write is an operation on the state whose result is answered once the change is durable.
//!
//! - **Load**: a key's state is read on its first use, again when older than
//!   [`Settings::fresh_for`], and after a store that another broker fenced or whose outcome is
//!   unknown.
//! - **Write**: an operation runs on a copy of the state and of its in-memory part (`V`: sessions,
//!   deadlines; never stored); if the state changed, the copy is stored naming the version read,
//!   and the operation is answered after the store. An operation that fails keeps none of its
//!   changes.
//! - **Batching**: while a key's store is in flight, the writes queued behind it run, in order,
//!   each on the result of the one before, and go out as one store (N queued writes, one Raft
//!   entry): the group commit a single slow store would otherwise serialize.
//! - **Fenced**: another broker stored since this one read (two brokers briefly coordinating one
//!   key): the state is read again and every queued operation runs again on it, up to
//!   [`Settings::tries`] times, so nothing another broker answered is overwritten.
//! - **Refused** as such (e.g. INVALID_RECORD_STATE): a batch is tried operation by operation, so
//!   only the operation whose change is refused fails.
//! - **Unknown** outcome: the operations are answered COORDINATOR_NOT_AVAILABLE and the state is
//!   read again before its next use (the store may have applied).
//! - **Release**: when another broker coordinates a key, its state is dropped; its next use loads.
//!   A key with nothing stored is not kept after the write that found it so (an unknown group id
//!   leaves nothing behind).
//! - **Load refused** as such (a group of another kind): the load answers the store's code, not
//!   [`Settings::load_failed`].
//! - **Dropped**: a write whose caller went away before it ran is never run; one dropped while its
//!   store is in flight leaves the key to be read again.
//!
//! Owns the slots, the queue and the store discipline. It must not know what a kind's state means
//! (the operations do), nor how it is kept (a [`Store`]), nor speak the Kafka protocol.

mod store;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use diskless_proto::ErrorCode;
use tokio::sync::oneshot;

use crate::error::KafkaError;

pub use store::{Store, StoreError};

/// How a kind of state uses the runtime.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a state read or stored here is used without reading it again: `None` while it is
    /// held (the broker coordinates the key alone, and is told when that changes), `ZERO` read
    /// before every use.
    pub fresh_for: Option<Duration>,
    /// What a failed load answers (COORDINATOR_LOAD_IN_PROGRESS for a group, for instance).
    pub load_failed: ErrorCode,
    /// How many times a write is run when its store is fenced.
    pub tries: usize,
    /// What a write answers when its store was fenced at every try (CONCURRENT_TRANSACTIONS for a
    /// transactional id, for instance: the client retries).
    pub fenced: ErrorCode,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            fresh_for: None,
            load_failed: ErrorCode::CoordinatorLoadInProgress,
            tries: 3,
            fenced: ErrorCode::CoordinatorNotAvailable,
        }
    }
}

/// A key's state as held here.
struct Held<S, V> {
    /// `None`: nothing is stored.
    state: Option<S>,
    /// The version `state` was read or stored at (0: none stored).
    version: u64,
    volatile: V,
    /// When it was last read or stored.
    fresh_at: Instant,
    /// To be read again before its next use (a store fenced, or of unknown outcome).
    reload: bool,
}

type Op<S, V> = Box<dyn FnMut(&mut Option<S>, &mut V) -> Result<(), KafkaError> + Send>;

/// A write waiting for the key's store.
struct Pending<S, V> {
    op: Op<S, V>,
    done: oneshot::Sender<Result<(), KafkaError>>,
}

struct Slot<S, V> {
    /// The state; whoever holds this lock loads and stores for the key.
    held: tokio::sync::Mutex<Option<Held<S, V>>>,
    /// Writes not yet run.
    queue: Mutex<Vec<Pending<S, V>>>,
    /// When it was last used (read or written), for [`Runtime::prune`].
    used_at: Mutex<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The in-memory part a state starts with when it is loaded (sessions from now, for instance).
pub type OnLoad<K, S, V> = Box<dyn Fn(&K, Option<&S>) -> V + Send + Sync>;

/// One kind of state this broker coordinates, by key `K`: the stored part `S`, the in-memory part
/// `V`.
pub struct Runtime<K, S, V> {
    store: Arc<dyn Store<K, S>>,
    settings: Settings,
    on_load: OnLoad<K, S, V>,
    slots: Mutex<HashMap<K, Arc<Slot<S, V>>>>,
}

impl<K, S, V> Runtime<K, S, V>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
    S: Clone + PartialEq + Send + Sync + 'static,
    V: Clone + Send + 'static,
{
    pub fn new(store: Arc<dyn Store<K, S>>, settings: Settings, on_load: OnLoad<K, S, V>) -> Runtime<K, S, V> {
        Runtime { store, settings, on_load, slots: Mutex::new(HashMap::new()) }
    }

    fn slot(&self, key: &K) -> Arc<Slot<S, V>> {
        let slot = lock(&self.slots)
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    held: tokio::sync::Mutex::new(None),
                    queue: Mutex::new(vec![]),
                    used_at: Mutex::new(Instant::now()),
                })
            })
            .clone();
        *lock(&slot.used_at) = Instant::now();
        slot
    }

    /// Runs `op` on `key`'s state (`None`: nothing stored; setting it creates one) and its
    /// in-memory part, stores the state if it changed, and answers `op`'s result once stored.
    /// Fenced stores run `op` again on the state read anew, so `op` must compute from what it is
    /// given.
    pub async fn write<R: Send + 'static>(
        &self,
        key: &K,
        mut op: impl FnMut(&mut Option<S>, &mut V) -> Result<R, KafkaError> + Send + 'static,
    ) -> Result<R, KafkaError> {
        let answer: Arc<Mutex<Option<R>>> = Arc::default();
        let out = answer.clone();
        let (done, answered) = oneshot::channel();
        let op: Op<S, V> = Box::new(move |s, v| {
            let r = op(s, v)?;
            *lock(&out) = Some(r);
            Ok(())
        });
        let slot = self.slot(key);
        lock(&slot.queue).push(Pending { op, done });
        {
            // Whoever holds the state runs every write queued so far: this one's, unless a store
            // in flight before took it, in which case it is answered already.
            let mut held = slot.held.lock().await;
            let mut batch = std::mem::take(&mut *lock(&slot.queue));
            // A write whose caller went away before it ran is not run (it would act for nobody,
            // perhaps long after).
            batch.retain(|p| !p.done.is_closed());
            if !batch.is_empty() {
                self.flush(key, &mut held, batch).await;
            }
            if held.as_ref().is_none_or(|h| h.state.is_none()) && lock(&slot.queue).is_empty() {
                // Nothing stored (or not loaded) and nothing to do: not kept (the next use loads).
                let mut slots = lock(&self.slots);
                if slots.get(key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                    slots.remove(key);
                }
            }
        }
        answered
            .await
            .unwrap_or_else(|_| Err(KafkaError::new(ErrorCode::CoordinatorNotAvailable, "the write was dropped")))?;
        let r = lock(&answer).take();
        r.ok_or_else(|| KafkaError::new(ErrorCode::UnknownServerError, "a write answered nothing"))
    }

    /// Reads `key`'s state as held (loaded first if need be), changing nothing.
    pub async fn read<R>(&self, key: &K, f: impl FnOnce(Option<&S>, &V) -> R) -> Result<R, KafkaError> {
        let slot = self.slot(key);
        let mut held = slot.held.lock().await;
        self.ensure(key, &mut held).await?;
        let h = held.as_ref().expect("loaded by ensure");
        Ok(f(h.state.as_ref(), &h.volatile))
    }

    /// Reads `key`'s state only if it is held here (loaded and not to be read again), without
    /// loading it: `None` otherwise. Waits for a store in flight.
    pub async fn peek<R>(&self, key: &K, f: impl FnOnce(Option<&S>, &V) -> R) -> Option<R> {
        let slot = lock(&self.slots).get(key).cloned()?;
        let held = slot.held.lock().await;
        held.as_ref().filter(|h| !h.reload).map(|h| f(h.state.as_ref(), &h.volatile))
    }

    /// [`Runtime::write`] on a key held here; `None` (nothing run) when it is not, so a timer
    /// does not take a released key over again.
    pub async fn write_if_held<R: Send + 'static>(
        &self,
        key: &K,
        op: impl FnMut(&mut Option<S>, &mut V) -> Result<R, KafkaError> + Send + 'static,
    ) -> Option<Result<R, KafkaError>> {
        if !lock(&self.slots).contains_key(key) {
            return None;
        }
        Some(self.write(key, op).await)
    }

    /// Drops `key`'s state (another broker coordinates it now): its next use loads it.
    pub fn release(&self, key: &K) {
        lock(&self.slots).remove(key);
    }

    /// Drops every state whose key `keep` refuses.
    pub fn release_unless(&self, keep: impl Fn(&K) -> bool) {
        lock(&self.slots).retain(|k, _| keep(k));
    }

    /// The keys held here.
    pub fn held(&self) -> Vec<K> {
        lock(&self.slots).keys().cloned().collect()
    }

    /// Drops states not used for `idle` (their next use loads them).
    pub fn prune(&self, idle: Duration) {
        lock(&self.slots).retain(|_, slot| {
            let mut queue = lock(&slot.queue);
            queue.retain(|p| !p.done.is_closed());
            let busy = slot.held.try_lock().is_err() || !queue.is_empty();
            drop(queue);
            busy || lock(&slot.used_at).elapsed() < idle
        });
    }

    /// Loads the state into `held` unless it is held and fresh.
    async fn ensure(&self, key: &K, held: &mut Option<Held<S, V>>) -> Result<(), KafkaError> {
        let fresh = held
            .as_ref()
            .is_some_and(|h| !h.reload && self.settings.fresh_for.is_none_or(|d| h.fresh_at.elapsed() < d));
        if fresh {
            return Ok(());
        }
        let loaded = self.store.load(key).await.map_err(|e| match e {
            StoreError::Refused { code, message } => KafkaError::new(code, message),
            e => KafkaError::new(self.settings.load_failed, e.to_string()),
        })?;
        let (state, version) = match loaded {
            Some((s, v)) => (Some(s), v),
            None => (None, 0),
        };
        // Read again while held: what is in memory only (sessions) carries on.
        let volatile = match held.take() {
            Some(h) => h.volatile,
            None => (self.on_load)(key, state.as_ref()),
        };
        *held = Some(Held { state, version, volatile, fresh_at: Instant::now(), reload: false });
        Ok(())
    }

    /// Runs `batch` and answers each of its writes.
    async fn flush(&self, key: &K, held: &mut Option<Held<S, V>>, mut batch: Vec<Pending<S, V>>) {
        let results = match self.run(key, held, &mut batch).await {
            Ok(results) => results,
            Err(refused) if batch.len() == 1 => vec![Err(refused)],
            Err(_) => {
                // One write's change is refused as such: each alone, so the others go through.
                let mut results = Vec::with_capacity(batch.len());
                for one in batch.chunks_mut(1) {
                    match self.run(key, held, one).await {
                        Ok(mut r) => results.append(&mut r),
                        Err(refused) => results.push(Err(refused)),
                    }
                }
                results
            }
        };
        for (p, r) in batch.into_iter().zip(results) {
            let _ = p.done.send(r);
        }
    }

    /// Runs `batch` on the state and stores the result once: per write, its outcome; `Err` when
    /// the store refused the result as such.
    async fn run(
        &self,
        key: &K,
        held: &mut Option<Held<S, V>>,
        batch: &mut [Pending<S, V>],
    ) -> Result<Vec<Result<(), KafkaError>>, KafkaError> {
        let n = batch.len();
        let all = |f: KafkaError| vec![Err(f); n];
        for _ in 0..self.settings.tries.max(1) {
            if let Err(f) = self.ensure(key, held).await {
                return Ok(all(f));
            }
            // Taken out while the store is in flight: a write dropped meanwhile leaves nothing
            // half-held (the next use loads).
            let h = held.take().expect("loaded by ensure");
            let (mut state, mut volatile) = (h.state.clone(), h.volatile.clone());
            let mut results = Vec::with_capacity(batch.len());
            for p in batch.iter_mut() {
                let (mut s, mut v) = (state.clone(), volatile.clone());
                let r = (p.op)(&mut s, &mut v);
                if r.is_ok() {
                    (state, volatile) = (s, v);
                }
                results.push(r);
            }
            let changed = match (&state, &h.state) {
                (None, None) => None,
                (Some(new), old) if old.as_ref() != Some(new) => Some(new),
                (Some(_), _) => None,
                (None, Some(_)) => {
                    *held = Some(h);
                    return Ok(all(KafkaError::new(ErrorCode::UnknownServerError, "a write cannot delete the state")));
                }
            };
            let Some(new) = changed else {
                *held = Some(Held { volatile, ..h });
                return Ok(results);
            };
            match self.store.store(key, new, h.version).await {
                Ok(version) => {
                    *held = Some(Held { state, version, volatile, fresh_at: Instant::now(), reload: false });
                    return Ok(results);
                }
                Err(StoreError::Fenced(message)) => {
                    tracing::debug!(?key, message, "stored elsewhere since it was read; reloading");
                    *held = Some(Held { reload: true, ..h });
                }
                Err(StoreError::Refused { code, message }) => {
                    *held = Some(Held { reload: true, ..h });
                    return Err(KafkaError::new(code, message));
                }
                Err(StoreError::Unknown(message)) => {
                    *held = Some(Held { reload: true, ..h });
                    return Ok(all(KafkaError::new(ErrorCode::CoordinatorNotAvailable, message)));
                }
            }
        }
        Ok(all(KafkaError::new(self.settings.fenced, "the state kept changing elsewhere")))
    }

    /// How many writes of `key` wait for its store (tests).
    #[cfg(test)]
    pub(crate) fn queued(&self, key: &K) -> usize {
        lock(&self.slots).get(key).map_or(0, |s| lock(&s.queue).len())
    }
}
