//! `ShareStates`: share-partition states as this broker last read or stored them, and every
//! change made durable in the coordinator cluster before it is acted on. Each (group, partition)
//! is behind its own lock; a change is computed on a copy and stored by compare-and-set on the
//! version read (`StoreShareState`), so two brokers serving one share partition never hand out the
//! same record: the loser is told FENCED_STATE_EPOCH, reloads and computes again.
//!
//! A copy is trusted for a second ([`TRUSTED_FOR`]), then read again: clients send a partition's
//! share fetches to the broker Metadata names its leader, so one broker mostly serves it, and
//! another broker's changes reach it within that second.
//!
//! A partition a group has no state for starts at `share.auto.offset.reset` (the caller gives the
//! offset). This module must not read the log nor speak the Kafka protocol; the transitions are
//! `partition`'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_proto::v1::{DeleteShareStatesRequest, ReadShareStatesRequest, ShareState, StoreShareStateRequest};
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use super::partition::SharePartition;
use crate::cluster::ClusterClient;
use crate::groups::store::StoreError;

/// Where share-partition states are kept: the coordinator cluster, faked in tests.
pub trait ShareStateStore: Send + Sync + 'static {
    /// The group's stored states: all, or `only` one partition's.
    fn load<'a>(
        &'a self,
        group_id: &'a str,
        only: Option<([u8; 16], i32)>,
    ) -> BoxFuture<'a, Result<Vec<ShareState>, StoreError>>;
    fn store<'a>(
        &'a self,
        group_id: &'a str,
        state: ShareState,
        expected: u64,
    ) -> BoxFuture<'a, Result<ShareState, StoreError>>;
    fn delete<'a>(&'a self, group_id: &'a str, topic_ids: Vec<[u8; 16]>) -> BoxFuture<'a, Result<(), StoreError>>;
}

const TIMEOUT_MS: i32 = 10_000;

fn refused(code: i32, message: Option<String>) -> Result<(), StoreError> {
    match code {
        0 => Ok(()),
        code => Err(StoreError::Refused { code: ErrorCode::from_wire(code), message: message.unwrap_or_default() }),
    }
}

impl ShareStateStore for ClusterClient {
    fn load<'a>(
        &'a self,
        group_id: &'a str,
        only: Option<([u8; 16], i32)>,
    ) -> BoxFuture<'a, Result<Vec<ShareState>, StoreError>> {
        Box::pin(async move {
            let req = ReadShareStatesRequest {
                group_id: group_id.to_string(),
                timeout_ms: TIMEOUT_MS,
                topic_id: only.map(|o| o.0.to_vec()),
                partition_index: only.map(|o| o.1),
            };
            let r = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.read_share_states(req).await }
                })
                .await
                .map_err(|s| StoreError::Unavailable(s.message().to_string()))?;
            refused(r.error_code, r.error_message)?;
            Ok(r.states)
        })
    }

    fn store<'a>(
        &'a self,
        group_id: &'a str,
        state: ShareState,
        expected: u64,
    ) -> BoxFuture<'a, Result<ShareState, StoreError>> {
        Box::pin(async move {
            let req = StoreShareStateRequest {
                group_id: group_id.to_string(),
                state: Some(state),
                expected_version: expected,
                timeout_ms: TIMEOUT_MS,
            };
            let r = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.store_share_state(req).await }
                })
                .await
                .map_err(|s| StoreError::Unavailable(s.message().to_string()))?;
            refused(r.error_code, r.error_message)?;
            r.state.ok_or_else(|| StoreError::Unavailable("StoreShareState answered no state".into()))
        })
    }

    fn delete<'a>(&'a self, group_id: &'a str, topic_ids: Vec<[u8; 16]>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let req = DeleteShareStatesRequest {
                group_id: group_id.to_string(),
                topic_ids: topic_ids.iter().map(|t| t.to_vec()).collect(),
                timeout_ms: TIMEOUT_MS,
            };
            let r = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.delete_share_states(req).await }
                })
                .await
                .map_err(|s| StoreError::Unavailable(s.message().to_string()))?;
            refused(r.error_code, r.error_message)
        })
    }
}

/// A (group, topic id, partition).
pub type Key = (String, [u8; 16], i32);

struct Held {
    partition: SharePartition,
    version: u64,
    /// When it was last read from or stored in the cluster.
    fresh_at: Instant,
}

/// How long a state read or stored here is trusted without reading it again: another broker's
/// changes (a release, an operator's reset) are seen within this; a change computed on an older
/// copy is refused by the compare-and-set anyway.
const TRUSTED_FOR: Duration = Duration::from_secs(1);

impl Held {
    fn stale(&self) -> bool {
        self.fresh_at.elapsed() >= TRUSTED_FOR
    }
}

/// Share-partition states, cached and stored.
pub struct ShareStates {
    store: Arc<dyn ShareStateStore>,
    identity: String,
    held: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Option<Held>>>>>,
}

/// Why a change could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub code: ErrorCode,
    pub message: String,
}

fn unavailable(e: &StoreError) -> Failed {
    Failed { code: ErrorCode::CoordinatorNotAvailable, message: e.to_string() }
}

impl ShareStates {
    pub fn new(store: Arc<dyn ShareStateStore>, broker_id: i32) -> Arc<ShareStates> {
        let identity = format!("broker-{broker_id}-{}", uuid::Uuid::new_v4());
        Arc::new(ShareStates { store, identity, held: Mutex::new(HashMap::new()) })
    }

    fn slot(&self, key: &Key) -> Arc<tokio::sync::Mutex<Option<Held>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).entry(key.clone()).or_default().clone()
    }

    /// The stored state of `key`, if any (read from the cluster).
    async fn read(&self, key: &Key) -> Result<Option<Held>, Failed> {
        let all = self.store.load(&key.0, Some((key.1, key.2))).await.map_err(|e| unavailable(&e))?;
        let Some(s) = all.into_iter().find(|s| s.topic_id == key.1 && s.partition_index == key.2) else {
            return Ok(None);
        };
        let partition = SharePartition::from_stored(&s).ok_or_else(|| Failed {
            code: ErrorCode::UnknownServerError,
            message: format!("the stored share state of partition {} does not decode", key.2),
        })?;
        Ok(Some(Held { partition, version: s.version, fresh_at: Instant::now() }))
    }

    /// Runs `change` on the state of `key` (started at `start` when none is stored) and stores the
    /// result when it differs; on a store another broker fenced, reloads and runs it again (at
    /// most three times). Returns `change`'s answer for the state as stored.
    pub async fn update<R>(
        &self,
        key: &Key,
        start: impl Fn() -> i64,
        change: impl FnMut(&mut SharePartition) -> R,
    ) -> Result<R, Failed> {
        self.change(key, Some(&start), change)
            .await?
            .ok_or_else(|| Failed { code: ErrorCode::UnknownServerError, message: "no share state was created".into() })
    }

    /// As [`update`](Self::update), only if a state is stored (`None` when none is): an
    /// acknowledgement or a release never creates one (a state deleted meanwhile stays deleted).
    pub async fn update_existing<R>(
        &self,
        key: &Key,
        change: impl FnMut(&mut SharePartition) -> R,
    ) -> Result<Option<R>, Failed> {
        self.change(key, None::<&fn() -> i64>, change).await
    }

    async fn change<R>(
        &self,
        key: &Key,
        start: Option<&impl Fn() -> i64>,
        mut change: impl FnMut(&mut SharePartition) -> R,
    ) -> Result<Option<R>, Failed> {
        let slot = self.slot(key);
        let mut held = slot.lock().await;
        for _ in 0..3 {
            if held.as_ref().is_none_or(Held::stale) {
                *held = match (self.read(key).await?, start) {
                    (Some(h), _) => Some(h),
                    (None, Some(start)) => {
                        Some(Held { partition: SharePartition::at(start(), 0), version: 0, fresh_at: Instant::now() })
                    }
                    (None, None) => return Ok(None),
                };
            }
            let h = held.as_mut().expect("loaded");
            let mut next = h.partition.clone();
            let answer = change(&mut next);
            if next == h.partition && h.version != 0 {
                return Ok(Some(answer));
            }
            let mut stored = next.to_stored(key.1, key.2);
            stored.owner = self.identity.clone();
            match self.store.store(&key.0, stored, h.version).await {
                Ok(s) => {
                    h.version = s.version;
                    h.partition = next;
                    h.fresh_at = Instant::now();
                    return Ok(Some(answer));
                }
                Err(StoreError::Refused { code: ErrorCode::InvalidRecordState, message }) => {
                    // Records another member holds, locked by the cluster's clock: this broker's
                    // clock runs ahead. Nothing changes now.
                    tracing::debug!(
                        group = key.0,
                        partition = key.2,
                        message,
                        "a lock has not expired by the cluster's clock"
                    );
                    *held = None;
                    return Err(Failed { code: ErrorCode::InvalidRecordState, message });
                }
                Err(StoreError::Refused { code: ErrorCode::FencedStateEpoch, message }) => {
                    tracing::debug!(
                        group = key.0,
                        partition = key.2,
                        message,
                        "share state changed elsewhere; reloading"
                    );
                    *held = None;
                }
                Err(e) => {
                    // Unknown whether it was stored: read it again next time.
                    *held = None;
                    return Err(unavailable(&e));
                }
            }
        }
        Err(Failed {
            code: ErrorCode::CoordinatorNotAvailable,
            message: "the share state kept changing elsewhere".into(),
        })
    }

    /// The state of `key` as held (or stored), without changing it.
    pub async fn peek(&self, key: &Key) -> Result<Option<SharePartition>, Failed> {
        let slot = self.slot(key);
        let mut held = slot.lock().await;
        if held.as_ref().is_none_or(Held::stale) {
            *held = self.read(key).await?;
        }
        Ok(held.as_ref().map(|h| h.partition.clone()))
    }

    /// Gives back what `member` holds in `partitions` of `group_id` (its share session closed, or
    /// it left the group), its deliveries not counted.
    pub async fn release_member(&self, group_id: &str, member: &str, partitions: &[([u8; 16], i32)]) {
        for &(topic_id, partition) in partitions {
            let key = (group_id.to_string(), topic_id, partition);
            if let Ok(Some(p)) = self.peek(&key).await {
                if p.ranges.iter().any(|r| r.member == member) {
                    if let Err(e) = self.update_existing(&key, |p| p.release_member(member)).await {
                        tracing::info!(
                            group = group_id,
                            member,
                            error = e.message,
                            "releasing a member's records failed; their locks will expire"
                        );
                    }
                }
            }
        }
    }

    /// Every stored state of `group_id` (DescribeShareGroupOffsets), read from the cluster.
    pub async fn stored(&self, group_id: &str) -> Result<Vec<ShareState>, Failed> {
        self.store.load(group_id, None).await.map_err(|e| unavailable(&e))
    }

    /// Replaces the state of `key` (AlterShareGroupOffsets: in-flight records forgotten, the state
    /// epoch bumped).
    pub async fn reset(&self, key: &Key, start_offset: i64) -> Result<(), Failed> {
        self.update(
            key,
            || start_offset,
            |p| {
                *p = SharePartition::at(start_offset, p.state_epoch + 1);
            },
        )
        .await
    }

    /// Deletes `group_id`'s states of `topic_ids` (all when empty) here and in the cluster.
    pub async fn delete(&self, group_id: &str, topic_ids: Vec<[u8; 16]>) -> Result<(), Failed> {
        self.forget(group_id, &topic_ids);
        self.store.delete(group_id, topic_ids.clone()).await.map_err(|e| unavailable(&e))?;
        self.forget(group_id, &topic_ids);
        Ok(())
    }

    /// Forgets cached states not read or stored for a minute (their slots are made again on use).
    pub fn prune(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, slot| match slot.try_lock() {
            Ok(h) => h.as_ref().is_some_and(|h| h.fresh_at.elapsed() < Duration::from_secs(60)),
            Err(_) => true,
        });
    }

    /// Forgets what is cached of `group_id` (of `topic_ids`, all when empty).
    pub fn forget(&self, group_id: &str, topic_ids: &[[u8; 16]]) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| k.0 != group_id || !(topic_ids.is_empty() || topic_ids.contains(&k.1)));
    }
}
