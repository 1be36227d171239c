//! `ShareStates`: share-partition states as this broker last read or stored them, and every
//! change made durable in the coordinator cluster before it is acted on, on the coordinator
//! runtime (`runtime`): each (group, partition) is a key, a change is computed on a copy and
//! stored by compare-and-set on the version read (`StoreShareState`), so two brokers serving one
//! share partition never hand out the same record: the loser is fenced (FENCED_STATE_EPOCH),
//! reloads and computes again. Changes queued while a partition's store is in flight (several
//! share consumers fetching and acknowledging) go out as one store.
//!
//! A copy is trusted for a second ([`TRUSTED_FOR`]), then read again: clients send a partition's
//! share fetches to the broker Metadata names its leader, so one broker mostly serves it, and
//! another broker's changes reach it within that second.
//!
//! A partition a group has no state for starts at `share.auto.offset.reset` (the caller gives the
//! offset). This module must not read the log nor speak the Kafka protocol; the transitions are
//! `partition`'s.

use crate::incarnation::Incarnation;
use std::sync::Arc;
use std::time::Duration;

use diskless_proto::v1::{DeleteShareStatesRequest, ReadShareStatesRequest, ShareState, StoreShareStateRequest};
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use super::partition::SharePartition;
use crate::cluster::ClusterClient;
use crate::coordinators::cluster_error::StoreError;
use crate::coordinators::runtime::{self, Runtime, Settings};

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
                .map_err(|s| StoreError::unavailable(&s))?;
            StoreError::check(r.error_code, r.error_message)?;
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
                .map_err(|s| StoreError::unavailable(&s))?;
            StoreError::check(r.error_code, r.error_message)?;
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
                .map_err(|s| StoreError::unavailable(&s))?;
            StoreError::check(r.error_code, r.error_message)
        })
    }
}

/// A (group, topic id, partition).
pub type Key = (String, [u8; 16], i32);

/// How long a state read or stored here is trusted without reading it again: another broker's
/// changes (a release, an operator's reset) are seen within this; a change computed on an older
/// copy is refused by the compare-and-set anyway.
const TRUSTED_FOR: Duration = Duration::from_secs(1);

/// How long a state nobody used stays held.
const IDLE: Duration = Duration::from_secs(60);

/// The runtime's view of the cluster's share states: one partition's state by key, stored under
/// this broker's name.
struct PartitionStore {
    store: Arc<dyn ShareStateStore>,
    identity: String,
}

impl runtime::Store<Key, SharePartition> for PartitionStore {
    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<(SharePartition, u64)>, runtime::StoreError>> {
        Box::pin(async move {
            let all = self
                .store
                .load(&key.0, Some((key.1, key.2)))
                .await
                .map_err(|e| e.for_runtime(ErrorCode::FencedStateEpoch))?;
            let Some(s) = all.into_iter().find(|s| s.topic_id == key.1 && s.partition_index == key.2) else {
                return Ok(None);
            };
            let partition = SharePartition::from_stored(&s).ok_or_else(|| runtime::StoreError::Refused {
                code: ErrorCode::UnknownServerError,
                message: format!("the stored share state of partition {} does not decode", key.2),
            })?;
            Ok(Some((partition, s.version)))
        })
    }

    fn store<'a>(
        &'a self,
        key: &'a Key,
        state: &'a SharePartition,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64, runtime::StoreError>> {
        Box::pin(async move {
            let mut stored = state.to_stored(key.1, key.2);
            stored.owner = self.identity.clone();
            let s = self
                .store
                .store(&key.0, stored, expected)
                .await
                .map_err(|e| e.for_runtime(ErrorCode::FencedStateEpoch))?;
            Ok(s.version)
        })
    }
}

/// Share-partition states, cached and stored.
pub struct ShareStates {
    store: Arc<dyn ShareStateStore>,
    runtime: Runtime<Key, SharePartition, ()>,
}

/// Why a change could not be made.
pub type Failed = crate::error::KafkaError;

fn unavailable(e: &StoreError) -> Failed {
    Failed::new(ErrorCode::CoordinatorNotAvailable, e.to_string())
}

impl ShareStates {
    pub fn new(store: Arc<dyn ShareStateStore>, me: &Incarnation) -> Arc<ShareStates> {
        let identity = me.tag();
        let partitions = Arc::new(PartitionStore { store: store.clone(), identity });
        let settings = Settings {
            fresh_for: Some(TRUSTED_FOR),
            load_failed: ErrorCode::CoordinatorNotAvailable,
            ..Settings::default()
        };
        Arc::new(ShareStates { store, runtime: Runtime::new(partitions, settings, Box::new(|_, _| ())) })
    }

    /// Runs `change` on the state of `key` (started at `start` when none is stored) and stores the
    /// result when it differs; on a store another broker fenced, reloads and runs it again (at
    /// most three times). Returns `change`'s answer for the state as stored.
    pub async fn update<R: Send + 'static>(
        &self,
        key: &Key,
        start: impl Fn() -> i64 + Send + 'static,
        mut change: impl FnMut(&mut SharePartition) -> R + Send + 'static,
    ) -> Result<R, Failed> {
        self.runtime.write(key, move |s, _| Ok(change(s.get_or_insert_with(|| SharePartition::at(start(), 0))))).await
    }

    /// As [`update`](Self::update), only if a state is stored (`None` when none is): an
    /// acknowledgement or a release never creates one (a state deleted meanwhile stays deleted).
    pub async fn update_existing<R: Send + 'static>(
        &self,
        key: &Key,
        mut change: impl FnMut(&mut SharePartition) -> R + Send + 'static,
    ) -> Result<Option<R>, Failed> {
        self.runtime.write(key, move |s, _| Ok(s.as_mut().map(&mut change))).await
    }

    /// The state of `key` as held (or stored), without changing it.
    pub async fn peek(&self, key: &Key) -> Result<Option<SharePartition>, Failed> {
        self.runtime.read(key, |s, _| s.cloned()).await
    }

    /// Gives back what `member` holds in `partitions` of `group_id` (its share session closed, or
    /// it left the group), its deliveries not counted.
    pub async fn release_member(&self, group_id: &str, member: &str, partitions: &[([u8; 16], i32)]) {
        for &(topic_id, partition) in partitions {
            let key = (group_id.to_string(), topic_id, partition);
            if let Ok(Some(p)) = self.peek(&key).await {
                if p.ranges.iter().any(|r| r.member == member) {
                    let m = member.to_string();
                    if let Err(e) = self.update_existing(&key, move |p| p.release_member(&m)).await {
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
            move || start_offset,
            move |p| {
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

    /// Forgets cached states not used for a minute (read again on their next use).
    pub fn prune(&self) {
        self.runtime.prune(IDLE);
    }

    /// Forgets what is cached of `group_id` (of `topic_ids`, all when empty).
    pub fn forget(&self, group_id: &str, topic_ids: &[[u8; 16]]) {
        self.runtime.release_unless(|k| k.0 != group_id || !(topic_ids.is_empty() || topic_ids.contains(&k.1)));
    }
}
