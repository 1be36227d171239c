//! A fake coordinator for produce-path tests: commits wait until the test lets them through, and
//! it checks at every commit how many segments are uploaded but not yet resolved.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_proto::v1::{commit_file_response, CommitFileRequest, CommitFileResponse};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::sync::Semaphore;

use super::{Committer, Producer, ProducerTasks};
use crate::cluster::Fence;
use crate::produce::ProduceConfig;
use crate::storage::Storage;
use crate::storage::StorageConfig;

pub struct FakeCoordinator {
    pub storage: Storage,
    /// Commits answered so far may not exceed the permits added here.
    pub gate: Semaphore,
    pub commits: Mutex<Vec<CommitFileRequest>>,
    pub fences: Mutex<Vec<String>>,
    answered: AtomicUsize,
    /// The most objects seen in storage at a commit, less the commits answered before it.
    pub max_unresolved: AtomicUsize,
    next_offset: AtomicUsize,
}

impl FakeCoordinator {
    pub fn new(storage: Storage, open: bool) -> Arc<FakeCoordinator> {
        Arc::new(FakeCoordinator {
            storage,
            gate: Semaphore::new(if open { Semaphore::MAX_PERMITS } else { 0 }),
            commits: Mutex::new(vec![]),
            fences: Mutex::new(vec![]),
            answered: AtomicUsize::new(0),
            max_unresolved: AtomicUsize::new(0),
            next_offset: AtomicUsize::new(0),
        })
    }

    pub fn commits(&self) -> Vec<CommitFileRequest> {
        self.commits.lock().unwrap().clone()
    }

    /// Waits (polling) until `check` holds; panics after a minute.
    pub async fn until(&self, what: &str, check: impl Fn(&FakeCoordinator) -> bool) {
        let start = Instant::now();
        while !check(self) {
            assert!(start.elapsed() < Duration::from_secs(60), "{what} did not happen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Committer for FakeCoordinator {
    fn num_metadata_partitions(&self) -> u32 {
        1
    }

    fn commit(&self, req: CommitFileRequest, _deadline: Instant) -> BoxFuture<'_, CommitFileResponse> {
        async move {
            self.commits.lock().unwrap().push(req.clone());
            let objects = self.storage.list("").await.expect("list").len();
            let unresolved = objects.saturating_sub(self.answered.load(Ordering::SeqCst));
            self.max_unresolved.fetch_max(unresolved, Ordering::SeqCst);
            self.gate.acquire().await.expect("gate").forget();
            self.answered.fetch_add(1, Ordering::SeqCst);
            let batches = req
                .batches
                .iter()
                .map(|b| commit_file_response::CommitBatchResult {
                    error_code: 0,
                    error_message: None,
                    assigned_base_offset: self.next_offset.fetch_add(b.last_offset as usize + 1, Ordering::SeqCst)
                        as i64,
                    log_append_time: 1,
                    log_start_offset: 0,
                    is_duplicate: false,
                })
                .collect();
            CommitFileResponse { throttle_time_ms: 0, batches, applied: vec![] }
        }
        .boxed()
    }

    fn fence(&self, object_key: String, _metadata_partitions: Vec<u32>) -> BoxFuture<'_, Fence> {
        async move {
            self.fences.lock().unwrap().push(object_key);
            Fence::Fenced
        }
        .boxed()
    }
}

/// A producer over an in-memory store and a fake coordinator.
pub fn producer(
    config: ProduceConfig,
    open: bool,
    commit_deadline: Duration,
) -> (Producer, ProducerTasks, Arc<FakeCoordinator>, Storage) {
    let storage = Storage::new(&StorageConfig::Memory).expect("memory store");
    let fake = FakeCoordinator::new(storage.clone(), open);
    let (p, tasks) = Producer::start(config, 1, storage.clone(), fake.clone(), commit_deadline);
    (p, tasks, fake, storage)
}
