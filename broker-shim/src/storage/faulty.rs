//! A test-only object store wrapper that delays, fails or hangs operations, by kind (put, get,
//! delete, list), for the fault suite: slow, failing and hanging object storage without a real
//! one misbehaving. Built only when the broker runs with `allow_fault_injection = true`, and
//! driven through `BrokerService.InjectStorageFault`.
//!
//! Actions: **delay** (wait, then do it), **fail** (do nothing, report an error), **fail after**
//! (do it, then report an error: the caller cannot tell it happened), **hang** (wait until the
//! fault is healed, then report an error). Each applies to a share of the matching operations.
//! It must not change what a successful operation returns.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// The kinds of operations a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Put,
    Get,
    Delete,
    List,
}

/// What happens to an affected operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Delay(Duration),
    Fail,
    FailAfter,
    Hang,
}

#[derive(Debug, Clone, Copy)]
struct Rule {
    action: Action,
    /// Share of the matching operations affected, 1..=100 percent.
    percent: u32,
}

/// The faults in force, shared by the store wrapper and the RPC that sets them.
#[derive(Debug)]
pub struct StoreFaults {
    rules: Mutex<HashMap<Operation, Rule>>,
    /// Bumped at every change, so hung operations notice a heal.
    changed: tokio::sync::watch::Sender<u64>,
    /// Decides whether an operation under a partial fault fails.
    dice: Mutex<fastrand::Rng>,
}

impl Default for StoreFaults {
    fn default() -> Self {
        StoreFaults {
            rules: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            dice: Mutex::new(fastrand::Rng::new()),
        }
    }
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic { store: "fault-injection", source: what.to_string().into() }
}

impl StoreFaults {
    /// Puts `action` on `percent` % (0 means all) of the `ops`; `None` heals them.
    pub fn set(&self, ops: &[Operation], action: Option<Action>, percent: u32) {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        for op in ops {
            match action {
                Some(action) => {
                    let percent = if percent == 0 { 100 } else { percent.min(100) };
                    rules.insert(*op, Rule { action, percent });
                }
                None => {
                    rules.remove(op);
                }
            }
        }
        drop(rules);
        self.changed.send_modify(|g| *g += 1);
    }

    /// Heals every fault (hung operations end with an error).
    pub fn heal_all(&self) {
        self.set(&[Operation::Put, Operation::Get, Operation::Delete, Operation::List], None, 0);
    }

    fn roll(&self) -> u32 {
        self.dice.lock().unwrap_or_else(|e| e.into_inner()).u32(..100)
    }

    /// Applies the fault in force for `op` before it runs: `Ok(true)` = run it and report an
    /// error afterwards.
    async fn before(&self, op: Operation) -> Result<bool> {
        let rule = self.rules.lock().unwrap_or_else(|e| e.into_inner()).get(&op).copied();
        let Some(rule) = rule else { return Ok(false) };
        if self.roll() >= rule.percent {
            return Ok(false);
        }
        match rule.action {
            Action::Delay(d) => {
                tokio::time::sleep(d).await;
                Ok(false)
            }
            Action::Fail => Err(injected(&format!("{op:?} failed"))),
            Action::FailAfter => Ok(true),
            Action::Hang => {
                let mut rx = self.changed.subscribe();
                let _ = rx.changed().await;
                Err(injected(&format!("{op:?} hung until the fault was healed")))
            }
        }
    }
}

/// The wrapper.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Arc<StoreFaults>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>, faults: Arc<StoreFaults>) -> FaultyStore {
        FaultyStore { inner, faults }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

/// Runs `op` under the fault in force for `kind`.
async fn guarded<T>(
    faults: &StoreFaults,
    kind: Operation,
    op: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let fail_after = faults.before(kind).await?;
    let r = op.await?;
    if fail_after {
        return Err(injected(&format!("{kind:?} done, then reported failed")));
    }
    Ok(r)
}

#[tonic::async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        guarded(&self.faults, Operation::Put, self.inner.put_opts(location, payload, opts)).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        guarded(&self.faults, Operation::Put, self.inner.put_multipart_opts(location, opts)).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        guarded(&self.faults, Operation::Get, self.inner.get_opts(location, options)).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        guarded(&self.faults, Operation::Get, self.inner.get_ranges(location, ranges)).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        let (inner, faults) = (self.inner.clone(), self.faults.clone());
        locations
            .then(move |p| {
                let (inner, faults) = (inner.clone(), faults.clone());
                async move {
                    let p = p?;
                    guarded(&faults, Operation::Delete, inner.delete(&p)).await.map(|()| p)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, faults, prefix) = (self.inner.clone(), self.faults.clone(), prefix.cloned());
        futures_util::stream::once(async move {
            match faults.before(Operation::List).await {
                Ok(false) => inner.list(prefix.as_ref()),
                Ok(true) => futures_util::stream::once(async { Err(injected("List failed")) }).boxed(),
                Err(e) => futures_util::stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        guarded(&self.faults, Operation::List, self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        guarded(&self.faults, Operation::Put, self.inner.copy_opts(from, to, options)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn faults_delay_fail_hang_and_heal() {
        let faults = Arc::new(StoreFaults::default());
        let s = FaultyStore::new(Arc::new(object_store::memory::InMemory::new()), faults.clone());
        let p = Path::from("a");
        s.put(&p, PutPayload::from_static(b"x")).await.unwrap();

        faults.set(&[Operation::Get], Some(Action::Fail), 100);
        assert!(s.get(&p).await.is_err());
        faults.set(&[Operation::Put], Some(Action::FailAfter), 0);
        assert!(s.put(&Path::from("b"), PutPayload::from_static(b"y")).await.is_err());
        faults.heal_all();
        assert_eq!(
            &s.get(&Path::from("b")).await.unwrap().bytes().await.unwrap()[..],
            b"y",
            "done, then reported failed"
        );

        faults.set(&[Operation::Delete], Some(Action::Hang), 100);
        let hung = {
            let faults = faults.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                faults.heal_all();
            })
        };
        assert!(s.delete(&p).await.is_err(), "a hung delete fails when the fault is healed");
        hung.await.unwrap();
        s.delete(&p).await.unwrap();

        faults.set(&[Operation::List], Some(Action::Fail), 100);
        assert!(s.list(None).collect::<Vec<_>>().await.iter().any(|r| r.is_err()));
        faults.set(&[Operation::List], Some(Action::Delay(Duration::from_millis(10))), 100);
        assert_eq!(s.list(None).collect::<Vec<_>>().await.len(), 1);
    }
}
