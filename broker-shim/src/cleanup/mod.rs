//! Deleting WAL segments nobody needs, without ever deleting one somebody does.
//!
//! - **Released files** ([`Cleaner::delete_released`]): the coordinator lists files whose batches
//!   are all gone (oldest first). Once a file has been released for `delete_grace_ms` (readers may
//!   still be fetching from it), and no metadata partition still has a live batch in it
//!   (DescribeFiles across every owner), the object is deleted (a missing object is fine) and the
//!   deletion confirmed, so the coordinator forgets it.
//! - **Orphans** ([`Cleaner::delete_orphans`]): objects no coordinator knows — uploaded by a broker
//!   that crashed before committing, or whose commit failed. Objects younger than
//!   `orphan_grace_ms` are left alone (their commit may still be on its way); older ones that no
//!   metadata partition knows are deleted.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use diskless_proto::v1::{
    describe_files_request, ConfirmFilesDeletedRequest, DescribeFilesRequest, ListFilesToDeleteRequest,
};

use crate::config::CleanupConfig;
use crate::coordinator::Coordinators;
use crate::storage::Storage;

/// Files handled per round.
const PAGE: i32 = 1000;

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub deleted: usize,
    pub kept: usize,
}

pub struct Cleaner {
    config: CleanupConfig,
    storage: Storage,
    coordinators: Arc<Coordinators>,
    key_prefix: String,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Cleaner {
    pub fn new(
        config: CleanupConfig,
        storage: Storage,
        coordinators: Arc<Coordinators>,
        key_prefix: String,
    ) -> Cleaner {
        Cleaner { config, storage, coordinators, key_prefix }
    }

    /// Which of `keys` some metadata partition still has live batches in / knows at all.
    async fn describe(&self, keys: &[String]) -> anyhow::Result<Vec<(bool, bool)>> {
        let req = DescribeFilesRequest {
            files: keys.iter().map(|k| describe_files_request::DescribeFileEntry { object_key: k.clone() }).collect(),
            timeout_ms: 10_000,
        };
        let r = self
            .coordinators
            .call(|mut c| {
                let req = req.clone();
                async move { c.describe_files(req).await }
            })
            .await?;
        anyhow::ensure!(
            r.files.len() == keys.len(),
            "DescribeFiles answered {} of {} files",
            r.files.len(),
            keys.len()
        );
        r.files
            .iter()
            .map(|f| {
                anyhow::ensure!(f.error_code == 0, "DescribeFiles {}: {:?}", f.object_key, f.error_message);
                Ok((f.has_live_batches, f.known))
            })
            .collect()
    }

    /// Deletes released files past their grace period; returns what it did.
    pub async fn delete_released(&self) -> anyhow::Result<Swept> {
        let r = self
            .coordinators
            .call(|mut c| async move {
                c.list_files_to_delete(ListFilesToDeleteRequest { limit: PAGE, timeout_ms: 10_000 }).await
            })
            .await?;
        let cutoff = now_ms() - self.config.delete_grace_ms as i64;
        // A file several metadata partitions released waits for the grace period after the
        // *last* release (readers of the last one may still be fetching from it).
        let mut last_release: std::collections::BTreeMap<String, i64> = Default::default();
        for f in &r.files {
            let e = last_release.entry(f.object_key.clone()).or_insert(i64::MIN);
            *e = (*e).max(f.marked_for_deletion_at);
        }
        let keys: Vec<String> = last_release.iter().filter(|(_, at)| **at <= cutoff).map(|(k, _)| k.clone()).collect();
        let mut swept = Swept { kept: last_release.len() - keys.len(), ..Swept::default() };
        if keys.is_empty() {
            return Ok(swept);
        }
        let states = self.describe(&keys).await?;
        let mut confirmed = vec![];
        for (key, (live, _)) in keys.into_iter().zip(states) {
            if live {
                // Another metadata partition still has batches in it.
                swept.kept += 1;
                continue;
            }
            self.storage.delete(&key).await?;
            confirmed.push(key);
        }
        if !confirmed.is_empty() {
            let req = ConfirmFilesDeletedRequest { object_keys: confirmed.clone(), timeout_ms: 10_000 };
            let r = self
                .coordinators
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.confirm_files_deleted(req).await }
                })
                .await?;
            for f in r.files.iter().filter(|f| f.error_code != 0) {
                tracing::warn!(key = %f.object_key, error = ?f.error_message, "deletion not confirmed");
            }
            swept.deleted = confirmed.len();
            tracing::info!(deleted = confirmed.len(), "deleted released WAL segments");
        }
        Ok(swept)
    }

    /// Deletes objects under the key prefix that no coordinator knows and that are older than the
    /// orphan grace period.
    pub async fn delete_orphans(&self) -> anyhow::Result<Swept> {
        let listed = self.storage.list(&self.key_prefix).await?;
        let cutoff = SystemTime::now() - Duration::from_millis(self.config.orphan_grace_ms);
        let old: Vec<String> = listed.iter().filter(|o| o.last_modified <= cutoff).map(|o| o.key.clone()).collect();
        let mut swept = Swept { kept: listed.len() - old.len(), ..Swept::default() };
        for chunk in old.chunks(PAGE as usize) {
            let states = self.describe(chunk).await?;
            for (key, (_, known)) in chunk.iter().zip(states) {
                if known {
                    swept.kept += 1;
                } else {
                    self.storage.delete(key).await?;
                    swept.deleted += 1;
                    tracing::info!(key, "deleted an orphan WAL segment");
                }
            }
        }
        Ok(swept)
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
            if let Err(e) = self.delete_released().await {
                tracing::warn!(error = %e, "deleting released files failed; retrying next round");
            }
            if orphan_every > 0 && last_orphan_scan.elapsed() >= Duration::from_millis(orphan_every) {
                last_orphan_scan = std::time::Instant::now();
                if let Err(e) = self.delete_orphans().await {
                    tracing::warn!(error = %e, "orphan scan failed; retrying next round");
                }
            }
        }
    }
}
