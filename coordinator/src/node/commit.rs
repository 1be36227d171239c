//! Commits gathered into shared log entries (group commit at the state machine's level): a file's
//! commit on a metadata partition waits in that partition's queue, and one task per partition
//! proposes whatever is queued as one `CommitFiles` entry, at most `COMMIT_ENTRIES_IN_FLIGHT`
//! entries at once, so the per-entry costs (replication, fsync acknowledgements, apply
//! bookkeeping) are shared under load while a lone commit is proposed at once.
//!
//! Owns the queues, the gathering task, and each commit's deadline (past it the state machine
//! refuses the commit, so a caller told "timed out" is never applied later). It must not check
//! what a commit holds (that is the state machine's `commit_file`) nor route it (`route`).

use std::sync::Arc;
use std::time::Duration;

use super::{Node, RouteError};
use crate::state_machine::{CommittedBatch, Failure, FileToCommit, Op, Outcome};

/// The result of one file's commit: per batch, and the log index it was applied at.
pub type CommitResult = Result<(Vec<Result<CommittedBatch, Failure>>, u64), RouteError>;

/// A commit waiting in its metadata partition's queue.
pub(super) struct PendingCommit {
    file: FileToCommit,
    reply: tokio::sync::oneshot::Sender<CommitResult>,
}

/// Files one log entry gathers at most.
const MAX_FILES_PER_ENTRY: usize = 256;
/// Log entries of gathered commits in flight per metadata partition at once.
const COMMIT_ENTRIES_IN_FLIGHT: usize = 4;

impl Node {
    /// Commits one file on `g` (this node must lead it), gathered with the partition's concurrent
    /// commits (see the module's documentation). Answers once applied, or "timed out" at
    /// `timeout` (after which the commit can no longer apply).
    pub async fn commit(&self, g: u32, mut file: FileToCommit, timeout: Duration) -> CommitResult {
        let mp = self.partition(g)?;
        // Past this the state machine refuses the commit: once the caller has been told "timed
        // out", the commit cannot apply later (the broker's cleaners rely on it).
        file.file.deadline_ms = Some(self.now_ms() + timeout.as_millis() as i64);
        let (reply, rx) = tokio::sync::oneshot::channel();
        mp.commits
            .send(PendingCommit { file, reply })
            .await
            .map_err(|_| RouteError::Failed { partition: g, message: "the node is shutting down".into() })?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            // The gathering task went away with the commit perhaps proposed: unknown.
            Ok(Err(_)) => Err(RouteError::Timeout { partition: g }),
            Err(_) => Err(RouteError::Timeout { partition: g }),
        }
    }
}

/// Proposes the commits queued for metadata partition `g`, gathering those that arrive while
/// earlier entries are in flight (see [`Node::commit`]).
pub(super) async fn gather_commits(
    node: std::sync::Weak<Node>,
    g: u32,
    mut rx: tokio::sync::mpsc::Receiver<PendingCommit>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(COMMIT_ENTRIES_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        // Wait for a free slot first: while every slot is busy, commits pile up for this entry.
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_FILES_PER_ENTRY {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        // Callers that gave up (timed out) are not proposed for.
        batch.retain(|p| !p.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let Some(node) = node.upgrade() else { return };
        tokio::spawn(async move {
            let files: Vec<FileToCommit> = batch.iter().map(|p| p.file.clone()).collect();
            let r = node.propose(g, Op::CommitFiles(files), Duration::from_secs(30)).await;
            drop(permit);
            match r {
                Ok((Outcome::CommitFiles(outs), index)) if outs.len() == batch.len() => {
                    for (p, out) in batch.into_iter().zip(outs) {
                        let _ = p.reply.send(Ok((out, index)));
                    }
                }
                Ok((other, _)) => {
                    let e = RouteError::Failed { partition: g, message: format!("unexpected outcome {other:?}") };
                    batch.into_iter().for_each(|p| drop(p.reply.send(Err(e.clone()))));
                }
                Err(e) => batch.into_iter().for_each(|p| drop(p.reply.send(Err(e.clone())))),
            }
        });
    }
}
