//! Deleting WAL segments nobody needs, without ever deleting one somebody does.
//!
//! Nothing is deleted on the strength of a read: a read (even a linearizable one) cannot see a
//! commit entry appended but not yet committed, nor a commit part still queued on a broker or in
//! flight to another metadata partition. Before deleting, the cleaner **fences** the object's key
//! (FenceObjects) in every metadata partition that could hold batches of it, through each one's
//! log: a partition with live batches answers LIVE (keep it); one that does not know the key
//! records a tombstone, so a commit of the key that reaches its log afterwards is refused. Only
//! objects every partition named answered RELEASED or FENCED for are deleted.
//!
//! - **Released files** ([`Cleaner::delete_released`]): the coordinator lists files whose batches
//!   are all gone (oldest first; metadata partitions that do not answer are skipped, not fatal).
//!   Candidates listed as released at least `delete_grace_ms` ago are fenced in their owners
//!   (`owner_ids`: a commit part is accepted only by an owner). The fence answers with the latest
//!   release across the owners, so the grace period counts from the *last* release even when the
//!   list was truncated; past it the object is deleted (a missing object is fine) and the
//!   deletion confirmed, so the coordinator forgets the file (leaving a tombstone).
//! - **Orphans** ([`Cleaner::delete_orphans`]): objects no coordinator knows — uploaded by a broker
//!   that crashed before committing, or whose commit failed or was abandoned. The bucket listing is
//!   paged through (never held whole); objects older than `orphan_grace_ms` are fenced in every
//!   metadata partition and deleted when all answer FENCED.
//!
//! What the coordinator answers is taken as hostile: owners, partitions and times of any value,
//! and a fence answer count that does not match the question, are kept or refused, never a panic.

pub mod config;

pub use config::CleanupConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use diskless_proto::v1::{ConfirmFilesDeletedRequest, ListFilesToDeleteRequest, ListFilesToDeleteResponse};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};

use crate::cluster::{ClusterClient, Fence};
use crate::storage::Storage;

/// Files handled per round, and orphan candidates fenced per request.
const PAGE: usize = 1000;

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub deleted: usize,
    pub kept: usize,
}

/// What the cleaner asks of the coordinator cluster ([`ClusterClient`], or a fake in tests).
pub trait CleanupClient: Send + Sync + 'static {
    fn files_to_delete(&self, limit: usize) -> BoxFuture<'_, anyhow::Result<ListFilesToDeleteResponse>>;
    /// Fences each object in the metadata partitions given (empty: every one).
    fn fence(&self, objects: Vec<(String, Vec<u32>)>) -> BoxFuture<'_, anyhow::Result<Vec<Fence>>>;
    /// Confirms deletions; returns the keys whose confirmation failed, with why.
    fn confirm(&self, object_keys: Vec<String>) -> BoxFuture<'_, anyhow::Result<Vec<(String, String)>>>;
}

impl CleanupClient for ClusterClient {
    fn files_to_delete(&self, limit: usize) -> BoxFuture<'_, anyhow::Result<ListFilesToDeleteResponse>> {
        async move {
            let limit = i32::try_from(limit).unwrap_or(i32::MAX);
            Ok(self
                .call(|mut c| async move {
                    c.list_files_to_delete(ListFilesToDeleteRequest { limit, timeout_ms: 10_000 }).await
                })
                .await?)
        }
        .boxed()
    }

    fn fence(&self, objects: Vec<(String, Vec<u32>)>) -> BoxFuture<'_, anyhow::Result<Vec<Fence>>> {
        async move { Ok(self.fence_objects(&objects).await?) }.boxed()
    }

    fn confirm(&self, object_keys: Vec<String>) -> BoxFuture<'_, anyhow::Result<Vec<(String, String)>>> {
        async move {
            let req = ConfirmFilesDeletedRequest { object_keys, timeout_ms: 10_000 };
            let r = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.confirm_files_deleted(req).await }
                })
                .await?;
            Ok(r.files
                .into_iter()
                .filter(|f| f.error_code != 0)
                .map(|f| (f.object_key, f.error_message.unwrap_or_default()))
                .collect())
        }
        .boxed()
    }
}

pub struct Cleaner {
    config: CleanupConfig,
    storage: Storage,
    coordinators: Arc<dyn CleanupClient>,
    key_prefix: String,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Cleaner {
    pub fn new(
        config: CleanupConfig,
        storage: Storage,
        coordinators: Arc<dyn CleanupClient>,
        key_prefix: String,
    ) -> Cleaner {
        Cleaner { config, storage, coordinators, key_prefix }
    }

    /// Deletes released files past their grace period; returns what it did.
    pub async fn delete_released(&self) -> anyhow::Result<Swept> {
        let r = self.coordinators.files_to_delete(PAGE).await?;
        if !r.unavailable_metadata_partitions.is_empty() {
            tracing::debug!(
                groups = ?r.unavailable_metadata_partitions,
                "some metadata partitions did not list their released files; they wait for the next round"
            );
        }
        let cutoff = now_ms().saturating_sub(i64::try_from(self.config.delete_grace_ms).unwrap_or(i64::MAX));
        // Per object: the latest release listed, and where to fence it (None: everywhere — a file
        // recorded before owners were checked, whose owner list may not name the partition itself).
        let mut listed: BTreeMap<String, (i64, Option<BTreeSet<u32>>)> = BTreeMap::new();
        for f in &r.files {
            let (at, owners) = listed.entry(f.object_key.clone()).or_insert((i64::MIN, Some(BTreeSet::new())));
            *at = (*at).max(f.marked_for_deletion_at);
            let named = f.owner_ids.contains(&(f.metadata_partition as i32));
            match (owners.as_mut(), named) {
                (Some(set), true) => set.extend(f.owner_ids.iter().filter(|o| **o >= 0).map(|&o| o as u32)),
                _ => *owners = None,
            }
        }
        let candidates: Vec<(String, Vec<u32>)> = listed
            .iter()
            .filter(|(_, (at, _))| *at <= cutoff)
            .map(|(k, (_, owners))| (k.clone(), owners.as_ref().map_or(vec![], |s| s.iter().copied().collect())))
            .collect();
        let mut swept = Swept { kept: listed.len() - candidates.len(), ..Swept::default() };
        if candidates.is_empty() {
            return Ok(swept);
        }
        let fences = self.coordinators.fence(candidates.clone()).await?;
        anyhow::ensure!(
            fences.len() == candidates.len(),
            "{} fence answers for {} files",
            fences.len(),
            candidates.len()
        );
        let mut deleted = vec![];
        for ((key, _), fence) in candidates.into_iter().zip(fences) {
            match fence {
                // The grace period counts from the last release, wherever it happened.
                Fence::Released { at } if at <= cutoff => {}
                // Nobody knows it any more (another cleaner confirmed it): nothing can commit it.
                Fence::Fenced => {}
                Fence::Released { .. } | Fence::Live => {
                    swept.kept += 1;
                    continue;
                }
                Fence::Unknown(why) => {
                    tracing::debug!(key, why, "fence of a released file not answered by every owner; kept");
                    swept.kept += 1;
                    continue;
                }
            }
            self.storage.delete(&key).await?;
            deleted.push(key);
        }
        if !deleted.is_empty() {
            for (key, why) in self.coordinators.confirm(deleted.clone()).await? {
                tracing::warn!(key, why, "deletion not confirmed");
            }
            swept.deleted = deleted.len();
            crate::metrics::get().cleaner_files_deleted.inc_by(deleted.len() as u64);
            tracing::info!(deleted = deleted.len(), "deleted released WAL segments");
        }
        Ok(swept)
    }

    /// Deletes objects under the key prefix that no coordinator knows and that are older than the
    /// orphan grace period, a page of the listing at a time.
    pub async fn delete_orphans(&self) -> anyhow::Result<Swept> {
        // A grace period longer than the clock's past keeps everything (never a panic).
        let cutoff =
            SystemTime::now().checked_sub(Duration::from_millis(self.config.orphan_grace_ms)).unwrap_or(UNIX_EPOCH);
        let mut swept = Swept::default();
        let mut listing = self.storage.list_stream(&self.key_prefix);
        let mut page: Vec<String> = Vec::with_capacity(PAGE);
        while let Some(o) = listing.next().await {
            let o = o?;
            if o.last_modified > cutoff {
                swept.kept += 1;
                continue;
            }
            page.push(o.key);
            if page.len() == PAGE {
                self.sweep_orphans(std::mem::take(&mut page), &mut swept).await?;
            }
        }
        if !page.is_empty() {
            self.sweep_orphans(page, &mut swept).await?;
        }
        Ok(swept)
    }

    /// Fences old objects in every metadata partition; deletes those none of them knows.
    async fn sweep_orphans(&self, keys: Vec<String>, swept: &mut Swept) -> anyhow::Result<()> {
        let fences = self.coordinators.fence(keys.iter().map(|k| (k.clone(), vec![])).collect()).await?;
        anyhow::ensure!(fences.len() == keys.len(), "{} fence answers for {} objects", fences.len(), keys.len());
        for (key, fence) in keys.into_iter().zip(fences) {
            match fence {
                Fence::Fenced => {
                    self.storage.delete(&key).await?;
                    swept.deleted += 1;
                    crate::metrics::get().cleaner_orphans_deleted.inc();
                    tracing::info!(key, "deleted an orphan WAL segment");
                }
                // Committed: live, or released (then the released-file path deletes it).
                Fence::Live | Fence::Released { .. } => swept.kept += 1,
                Fence::Unknown(why) => {
                    tracing::debug!(key, why, "orphan candidate not fenced everywhere; kept");
                    swept.kept += 1;
                }
            }
        }
        Ok(())
    }

    /// Runs both duties periodically until `stop` fires.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let every = Duration::from_millis(self.config.interval_ms.max(100));
        let orphan_every = self.config.orphan_scan_interval_ms;
        let mut last_orphan_scan = std::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
            let m = crate::metrics::get();
            let mut ok = true;
            match self.delete_released().await {
                Ok(swept) => {
                    m.cleaner_backlog_files.set(swept.kept as i64);
                }
                Err(e) => {
                    ok = false;
                    m.cleaner_failures.inc();
                    tracing::warn!(error = %e, "deleting released files failed; retrying next round");
                }
            }
            if orphan_every > 0 && last_orphan_scan.elapsed() >= Duration::from_millis(orphan_every) {
                last_orphan_scan = std::time::Instant::now();
                if let Err(e) = self.delete_orphans().await {
                    ok = false;
                    m.cleaner_failures.inc();
                    tracing::warn!(error = %e, "orphan scan failed; retrying next round");
                }
            }
            if ok {
                m.cleaner_succeeded();
            }
        }
    }
}

#[cfg(test)]
mod tests;
