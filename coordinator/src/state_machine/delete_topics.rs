//! DisklessDeleteTopics: the topic disappears at once; its data goes through the purge queue.
//!
//! Its record, name and settings are removed from this metadata partition, its partitions here are flagged
//! deleted (they answer as unknown) and queued; batches, producer states and partition records are
//! then removed by the purge, which releases the topic's files. Committed offsets of the topic
//! (of the groups this metadata partition holds) go at once. The id is remembered for good
//! (even when this metadata partition never had the topic): a create of a deleted id — a stale or
//! late one, e.g. from the topic reconciler — is refused, so a deleted topic never comes back.

use uuid::Uuid;

use super::command::{ErrorCode, Failure};
use super::keys::TopicPartition;
use super::purge::{self, Progress};
use super::records::PartitionRecord;
use super::{groups, tables, StateMachine};
use crate::storage::{StorageError, Txn};

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    topic_ids: &[Uuid],
    mut budget: u32,
) -> Result<Vec<(Uuid, Result<(), Failure>)>, StorageError> {
    let keys = &sm.keys;
    let mut out = Vec::with_capacity(topic_ids.len());
    for id in topic_ids {
        tables::put(txn, keys.deleted_topic(id), &now)?;
        let Some(topic) = tables::topic(txn, keys, id)? else {
            out.push((*id, Err(Failure::new(ErrorCode::UnknownTopicId, format!("no topic has id {id}")))));
            continue;
        };
        txn.delete(keys.topic(id));
        txn.delete(keys.topic_name(&topic.name));
        txn.delete(keys.topic_settings(id));
        groups::drop_topic(sm, txn, id)?;
        for partition in 0..topic.num_partitions {
            let tp = TopicPartition { topic_id: *id, partition };
            if !sm.owns(&tp) {
                continue;
            }
            let part: Option<PartitionRecord> = tables::get(txn, &keys.partition(&tp))?;
            if let Some(mut part) = part.filter(|p| !p.deleted) {
                part.deleted = true;
                tables::put(txn, keys.partition(&tp), &part)?;
                txn.put(keys.purge(&tp), Vec::new());
            }
        }
        out.push((*id, Ok(())));
    }
    purge::run(sm, txn, now, &mut budget, &mut Progress::default())?;
    Ok(out)
}
