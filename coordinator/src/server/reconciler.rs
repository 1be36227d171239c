//! The topic reconciler: drives every metadata partition's topics to the catalog.
//!
//! Metadata partition 0 holds the authoritative topic catalog; CreatePartitions, DeleteTopics and
//! AlterTopicConfigs reach it first, then every other metadata partition. One that fails part-way
//! (a timeout, a leader change, a crashed node) would leave some partitions without the topic, or
//! with a deleted topic and its data for ever. So each node, for every metadata partition it leads
//! (other than 0), every `topic_reconcile_ms`:
//! 1. reads the partition's own topics (linearizable: it leads it);
//! 2. *then* reads the catalog (ListTopics, linearizable on partition 0's leader);
//! 3. proposes what differs: CreatePartitions for catalog topics it lacks (or has with fewer
//!    partitions), AlterTopicConfigs for different settings, DeleteTopics for topics the catalog
//!    no longer has.
//!
//! The order of the reads is what makes step 3 safe: a topic reaches the catalog before any other
//! partition, so one this partition had at step 1 and the catalog lacks at step 2 was deleted, not
//! "not created yet". A creation that is stale by the time it applies cannot bring a deleted topic
//! back: every partition remembers deleted topic ids (see `state_machine::delete_topics`).
//!
//! It must not decide anything the catalog did not: it only copies the catalog's decisions.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use diskless_proto::v1::coordinator_service_server::CoordinatorService;
use diskless_proto::v1::ListTopicsRequest;
use tonic::Request;
use uuid::Uuid;

use super::coordinator::CoordinatorApi;
use crate::node::{Node, DELETE_BUDGET};
use crate::state_machine::topic_settings::parse_timestamp_type;
use crate::state_machine::{AlterTopic, CreateTopic, Op, TopicInfo, TopicSettings, TopicToAlter, TopicToCreate};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Runs until the node goes away or stops.
pub async fn run(node: Weak<Node>, every: Duration) {
    let Some(mut stop) = node.upgrade().map(|n| n.stopping()) else { return };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let Some(node) = node.upgrade() else { return };
        let api = CoordinatorApi::new(node.clone());
        for g in 1..node.num_partitions() {
            if node.raft(g).is_ok_and(|r| r.is_leader()) {
                if let Err(e) = reconcile(&node, &api, g).await {
                    tracing::debug!(metadata_partition = g, error = %e, "topic reconciliation deferred");
                }
            }
        }
    }
}

/// One pass over metadata partition `g`, which this node leads.
async fn reconcile(node: &Arc<Node>, api: &CoordinatorApi, g: u32) -> anyhow::Result<()> {
    node.linearizable(g, TIMEOUT).await?;
    let mine: BTreeMap<Uuid, TopicInfo> =
        node.state_machine(g)?.topics(&node.placed(g)?.db.read())?.into_iter().map(|t| (t.topic_id, t)).collect();
    let catalog = api
        .list_topics(Request::new(ListTopicsRequest { names: vec![], timeout_ms: TIMEOUT.as_millis() as i32 }))
        .await
        .map_err(|s| anyhow::anyhow!("reading the catalog: {}", s.message()))?
        .into_inner();
    let mut create = vec![];
    let mut alter = vec![];
    let mut listed = std::collections::BTreeSet::new();
    for t in catalog.topics {
        let Ok(id) = Uuid::from_slice(&t.topic_id) else { continue };
        listed.insert(id);
        let configs = t.configs.unwrap_or_default();
        let (retention_ms, retention_bytes) = (configs.retention_ms, configs.retention_bytes);
        // The catalog's own answer; a value it could not have stored is not copied.
        let Ok(timestamp_type) = configs.message_timestamp_type.as_deref().map(parse_timestamp_type).transpose() else {
            continue;
        };
        let settings = TopicSettings {
            max_message_bytes: configs.max_message_bytes,
            timestamp_type,
            timestamp_before_max_ms: configs.message_timestamp_before_max_ms,
            timestamp_after_max_ms: configs.message_timestamp_after_max_ms,
        };
        match mine.get(&id) {
            Some(have) if have.num_partitions >= t.num_partitions => {
                if Some(have.retention_ms) != retention_ms
                    || Some(have.retention_bytes) != retention_bytes
                    || have.settings != settings
                {
                    alter.push(TopicToAlter {
                        topic: AlterTopic { topic_id: id, retention_ms, retention_bytes },
                        settings: settings.as_changes(),
                    });
                }
            }
            _ => create.push(TopicToCreate {
                topic: CreateTopic {
                    topic_id: id,
                    name: t.name,
                    num_partitions: t.num_partitions,
                    retention_ms,
                    retention_bytes,
                },
                settings,
            }),
        }
    }
    let delete: Vec<Uuid> = mine.keys().filter(|id| !listed.contains(id)).copied().collect();
    // Deletions first: a deleted topic's name may have been given to a new one.
    for (what, op) in [
        (
            "deleted",
            (!delete.is_empty()).then(|| Op::DeleteTopics { topic_ids: delete.clone(), budget: DELETE_BUDGET }),
        ),
        ("created", (!create.is_empty()).then(|| Op::CreatePartitions(create.clone()))),
        ("altered", (!alter.is_empty()).then(|| Op::AlterTopicConfigs(alter.clone()))),
    ] {
        let Some(op) = op else { continue };
        let (outcome, _) = node.propose(g, op, TIMEOUT).await?;
        tracing::info!(metadata_partition = g, ?outcome, "topics {what} to match the catalog");
    }
    Ok(())
}
