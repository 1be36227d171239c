//! The topic catalog as this broker caches it: names to ids, partition counts and settings, read whole from
//! the cluster (ListTopics, safe to repeat) on a miss, and forgotten name by name when a topic is
//! deleted or the cluster calls it unknown, and again when it is older than [`CATALOG_MAX_AGE`]
//! (one caller reloads it while the others go on with what is cached). A cached entry may be
//! stale; the cluster checks every request against its own catalog, so a stale id or partition
//! count costs a retry, never a wrong write, and a topic's settings changed through another broker
//! reach this one within `CATALOG_MAX_AGE`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use diskless_proto::v1::ListTopicsRequest;

use super::ClusterClient;
use crate::validate::Overrides;

/// Kafka's defaults for a topic's retention, which the coordinator cluster applies when a topic is
/// created without them: 7 days, no size limit.
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
pub const DEFAULT_RETENTION_BYTES: i64 = -1;

/// How long the cached catalog is used before it is read again.
pub const CATALOG_MAX_AGE: Duration = Duration::from_secs(5);

/// The cached catalog.
#[derive(Debug, Default)]
pub(super) struct Catalog {
    by_name: HashMap<String, TopicMeta>,
    /// When the last reload started (`None`: never).
    loaded_at: Option<Instant>,
}

/// A topic as the catalog holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub id: [u8; 16],
    pub name: String,
    pub partitions: i32,
    /// The topic's `retention.ms` and `retention.bytes` as the cluster keeps them.
    pub retention_ms: i64,
    pub retention_bytes: i64,
    /// The topic's own `max.message.bytes` and timestamp settings, which this broker enforces.
    pub overrides: Overrides,
}

impl ClusterClient {
    /// The topic named `name`, refreshing the catalog once when it is not known.
    pub async fn topic(&self, name: &str) -> Result<Option<TopicMeta>, tonic::Status> {
        let (hit, reload) = {
            let mut c = self.cached();
            let old = c.loaded_at.is_none_or(|at| at.elapsed() >= CATALOG_MAX_AGE);
            let hit = c.by_name.get(name).cloned();
            if old && hit.is_some() {
                // This caller reloads; the others use the entry meanwhile.
                c.loaded_at = Some(Instant::now());
            }
            (hit, old)
        };
        match hit {
            Some(t) if !reload => Ok(Some(t)),
            Some(t) => match self.refresh_topics().await {
                Ok(_) => Ok(self.cached().by_name.get(name).cloned()),
                Err(e) => {
                    tracing::debug!(error = %e, "topic catalog not reloaded; using the cached one");
                    Ok(Some(t))
                }
            },
            None => {
                self.refresh_topics().await?;
                Ok(self.cached().by_name.get(name).cloned())
            }
        }
    }

    /// Reloads the whole catalog.
    pub async fn refresh_topics(&self) -> Result<Vec<TopicMeta>, tonic::Status> {
        let started = Instant::now();
        let r = self
            .call(|mut c| async move { c.list_topics(ListTopicsRequest { names: vec![], timeout_ms: 10_000 }).await })
            .await?;
        let topics: Vec<TopicMeta> = r
            .topics
            .into_iter()
            .filter_map(|t| {
                let configs = t.configs.unwrap_or_default();
                Some(TopicMeta {
                    id: t.topic_id.as_slice().try_into().ok()?,
                    name: t.name,
                    partitions: t.num_partitions,
                    retention_ms: configs.retention_ms.unwrap_or(DEFAULT_RETENTION_MS),
                    retention_bytes: configs.retention_bytes.unwrap_or(DEFAULT_RETENTION_BYTES),
                    overrides: Overrides {
                        max_message_bytes: configs.max_message_bytes,
                        // The cluster stores only Kafka's two names; anything else is its default.
                        log_append_time: match configs.message_timestamp_type.as_deref() {
                            Some("LogAppendTime") => Some(true),
                            Some("CreateTime") => Some(false),
                            _ => None,
                        },
                        timestamp_before_max_ms: configs.message_timestamp_before_max_ms,
                        timestamp_after_max_ms: configs.message_timestamp_after_max_ms,
                    },
                })
            })
            .collect();
        let mut c = self.cached();
        c.by_name = topics.iter().map(|t| (t.name.clone(), t.clone())).collect();
        c.loaded_at = Some(c.loaded_at.map_or(started, |at| at.max(started)));
        Ok(topics)
    }

    /// Every topic, from the cache while it is younger than [`CATALOG_MAX_AGE`] (a consumer
    /// group's subscriptions are matched against it at each heartbeat).
    pub async fn all_topics(&self) -> Result<Vec<TopicMeta>, tonic::Status> {
        {
            let c = self.cached();
            if c.loaded_at.is_some_and(|at| at.elapsed() < CATALOG_MAX_AGE) {
                return Ok(c.by_name.values().cloned().collect());
            }
        }
        self.refresh_topics().await
    }

    /// Forgets a topic (after deleting it, or when the coordinator says it is unknown).
    pub fn forget_topic(&self, name: &str) {
        self.cached().by_name.remove(name);
    }

    /// The name of topic `id` in the cached catalog, if it is there.
    pub fn cached_topic_name(&self, id: &[u8; 16]) -> Option<String> {
        self.cached().by_name.values().find(|t| &t.id == id).map(|t| t.name.clone())
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, Catalog> {
        self.topics.lock().unwrap_or_else(|e| e.into_inner())
    }
}
