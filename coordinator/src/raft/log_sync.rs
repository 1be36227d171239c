//! The Raft log's fsync thread: one fsync of a data directory's segmented Raft log (`seglog`)
//! makes the appends of every metadata partition placed there durable (group commit, in database
//! terms).
//!
//! A log append writes its entries to the segmented log (`seglog`) without syncing (so they are
//! readable at once, as openraft requires) and hands its completion callback here. A dedicated
//! thread takes every callback waiting, syncs the log once, and completes them all: while one fsync runs, the next
//! appends queue up and share the next one. An append is acknowledged to openraft — and so counts
//! towards a quorum — only after the fsync that covers it.
//!
//! A failed fsync stops the process at once (fsyncgate: after a failed fsync the kernel may have
//! dropped the dirty pages, so what the log holds is unknown; retrying or carrying on could
//! acknowledge entries that are not on disk). The node restarts from what is durable. A node with
//! several data directories instead takes only this one offline: nothing waiting or later is
//! acknowledged (each gets an error, which stops that metadata partition's replica), and its
//! other directories carry on.
//!
//! Owns the thread, its counters and the fsync failure policy. It must not write to the log (the
//! log store does) nor know what the entries hold.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use super::faults::Faults;
use super::seglog::SegLog;

type Done = Box<dyn FnOnce(std::io::Result<()>) + Send>;

/// Counters: how many fsyncs, and how many appends they covered.
#[derive(Debug, Default)]
pub struct LogSyncStats {
    pub syncs: AtomicU64,
    pub appends: AtomicU64,
}

/// Handle to the fsync thread of one data directory's Raft log.
#[derive(Clone)]
pub struct LogSyncer {
    tx: mpsc::Sender<Done>,
    stats: Arc<LogSyncStats>,
}

impl LogSyncer {
    /// Starts the fsync thread for `log` (`faults`: the test hooks each fsync passes). It ends
    /// when every handle is dropped.
    /// `isolate`: the directory's offline flag, when a failure should take only the directory
    /// offline instead of stopping the process.
    pub fn start(log: Arc<SegLog>, faults: Arc<Faults>, isolate: Option<Arc<AtomicBool>>) -> LogSyncer {
        let (tx, rx) = mpsc::channel::<Done>();
        let stats = Arc::new(LogSyncStats::default());
        let st = stats.clone();
        std::thread::Builder::new()
            .name("log-sync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut waiting = vec![first];
                    waiting.extend(rx.try_iter());
                    if isolate.as_ref().is_some_and(|o| o.load(Ordering::Relaxed)) {
                        for done in waiting {
                            done(Err(std::io::Error::other("the data directory is offline")));
                        }
                        continue;
                    }
                    let started = std::time::Instant::now();
                    let result = faults.before_fsync().map_err(crate::raft::io_err).and_then(|()| log.sync());
                    let m = crate::metrics::get();
                    m.fsync_duration.observe(started.elapsed().as_secs_f64());
                    m.appends_per_fsync.observe(waiting.len() as f64);
                    st.syncs.fetch_add(1, Ordering::Relaxed);
                    st.appends.fetch_add(waiting.len() as u64, Ordering::Relaxed);
                    if let Err(e) = &result {
                        // Nothing waiting is acknowledged, and nothing after it may be.
                        if let Some(offline) = &isolate {
                            tracing::error!(error = %e, "Raft log fsync failed: this data directory goes offline");
                            offline.store(true, Ordering::Relaxed);
                            for done in waiting {
                                done(Err(std::io::Error::other(format!("Raft log fsync failed: {e}"))));
                            }
                            continue;
                        }
                        tracing::error!(error = %e, "Raft log fsync failed: stopping the node now");
                        std::process::abort();
                    }
                    for done in waiting {
                        done(Ok(()));
                    }
                }
            })
            .expect("spawn the Raft log fsync thread");
        LogSyncer { tx, stats }
    }

    /// Calls `done` once everything written to the log before this call is durable.
    pub fn after_sync(&self, done: impl FnOnce(std::io::Result<()>) + Send + 'static) {
        if let Err(mpsc::SendError(done)) = self.tx.send(Box::new(done)) {
            done(Err(std::io::Error::other("the Raft log fsync thread has stopped")));
        }
    }

    pub fn stats(&self) -> &LogSyncStats {
        &self.stats
    }
}
