//! Altering a topic's retention settings (the fields given change, the others stay).

use uuid::Uuid;

use super::command::{AlterTopic, ErrorCode, Failure};
use super::create_partitions::validate_retention;
use super::{tables, StateMachine};
use crate::storage::{StorageError, Txn};

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    topics: &[AlterTopic],
) -> Result<Vec<(Uuid, Result<(), Failure>)>, StorageError> {
    let mut out = Vec::with_capacity(topics.len());
    for a in topics {
        let r =
            match (tables::topic(txn, &sm.keys, &a.topic_id)?, validate_retention(a.retention_ms, a.retention_bytes)) {
                (None, _) => Err(Failure::new(ErrorCode::UnknownTopicId, format!("no topic has id {}", a.topic_id))),
                (Some(_), Err(f)) => Err(f),
                (Some(mut t), Ok(())) => {
                    t.retention_ms = a.retention_ms.unwrap_or(t.retention_ms);
                    t.retention_bytes = a.retention_bytes.unwrap_or(t.retention_bytes);
                    tables::put(txn, sm.keys.topic(&a.topic_id), &t)?;
                    Ok(())
                }
            };
        out.push((a.topic_id, r));
    }
    Ok(out)
}
