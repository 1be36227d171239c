//! Altering a topic's retention (the fields given change, the others stay) and the settings its
//! brokers enforce (`topic_settings`: the changes given, in order).

use uuid::Uuid;

use super::command::{ErrorCode, Failure, TopicToAlter};
use super::create_partitions::validate_retention;
use super::{tables, topic_settings, StateMachine};
use crate::storage::{StorageError, Txn};

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    topics: &[TopicToAlter],
) -> Result<Vec<(Uuid, Result<(), Failure>)>, StorageError> {
    let mut out = Vec::with_capacity(topics.len());
    for TopicToAlter { topic: a, settings: changes } in topics {
        let Some(mut t) = tables::topic(txn, &sm.keys, &a.topic_id)? else {
            out.push((
                a.topic_id,
                Err(Failure::new(ErrorCode::UnknownTopicId, format!("no topic has id {}", a.topic_id))),
            ));
            continue;
        };
        let settings = topic_settings::get(txn, &sm.keys, &a.topic_id)?.with(changes);
        let r = validate_retention(a.retention_ms, a.retention_bytes).and_then(|()| settings.validate());
        if r.is_ok() {
            t.retention_ms = a.retention_ms.unwrap_or(t.retention_ms);
            t.retention_bytes = a.retention_bytes.unwrap_or(t.retention_bytes);
            tables::put(txn, sm.keys.topic(&a.topic_id), &t)?;
            topic_settings::put(txn, &sm.keys, &a.topic_id, &settings)?;
        }
        out.push((a.topic_id, r));
    }
    Ok(out)
}
