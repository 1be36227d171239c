//! The topic catalog as this broker caches it: names to ids and partition counts, read whole from
//! the cluster (ListTopics, safe to repeat) on a miss, and forgotten name by name when a topic is
//! deleted or the cluster calls it unknown. A cached entry may be stale; the cluster checks every
//! request against its own catalog, so staleness costs a retry, never a wrong write.

use std::collections::HashMap;

use diskless_proto::v1::ListTopicsRequest;

use super::ClusterClient;

/// A topic as the catalog holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub id: [u8; 16],
    pub name: String,
    pub partitions: i32,
}

impl ClusterClient {
    /// The topic named `name`, refreshing the catalog once when it is not known.
    pub async fn topic(&self, name: &str) -> Result<Option<TopicMeta>, tonic::Status> {
        if let Some(t) = self.cached().get(name) {
            return Ok(Some(t.clone()));
        }
        self.refresh_topics().await?;
        Ok(self.cached().get(name).cloned())
    }

    /// Reloads the whole catalog.
    pub async fn refresh_topics(&self) -> Result<Vec<TopicMeta>, tonic::Status> {
        let r = self
            .call(|mut c| async move { c.list_topics(ListTopicsRequest { names: vec![], timeout_ms: 10_000 }).await })
            .await?;
        let topics: Vec<TopicMeta> = r
            .topics
            .into_iter()
            .filter_map(|t| {
                Some(TopicMeta {
                    id: t.topic_id.as_slice().try_into().ok()?,
                    name: t.name,
                    partitions: t.num_partitions,
                })
            })
            .collect();
        let mut map = self.cached();
        map.clear();
        for t in &topics {
            map.insert(t.name.clone(), t.clone());
        }
        Ok(topics)
    }

    /// Forgets a topic (after deleting it, or when the coordinator says it is unknown).
    pub fn forget_topic(&self, name: &str) {
        self.cached().remove(name);
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, HashMap<String, TopicMeta>> {
        self.topics.lock().unwrap_or_else(|e| e.into_inner())
    }
}
