//! DisklessCreatePartitions: a new topic, or more partitions for an existing one.
//!
//! Every metadata partition applies the command and keeps the topic's record (name, partition
//! count, retention, the settings its brokers enforce), but creates only the partitions it owns. Fewer partitions than the topic has
//! is `INVALID_PARTITIONS`; the same count again is a successful no-op. The id of a deleted topic
//! is never reused (`UNKNOWN_TOPIC_ID`).

use uuid::Uuid;

use super::command::{CreateTopic, ErrorCode, Failure, TopicToCreate, DEFAULT_RETENTION_BYTES, DEFAULT_RETENTION_MS};
use super::keys::TopicPartition;
use super::records::{PartitionRecord, TopicRecord};
use super::{tables, topic_settings, StateMachine};
use crate::storage::{StorageError, Txn};

/// The most partitions one topic may have.
pub const MAX_PARTITIONS: i32 = 100_000;

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    topics: &[TopicToCreate],
) -> Result<Vec<(Uuid, Result<(), Failure>)>, StorageError> {
    let mut out = Vec::with_capacity(topics.len());
    for t in topics {
        out.push((t.topic.topic_id, create(sm, txn, t)?));
    }
    Ok(out)
}

fn create(sm: &StateMachine, txn: &mut Txn<'_>, v2: &TopicToCreate) -> Result<Result<(), Failure>, StorageError> {
    let t = &v2.topic;
    if let Err(f) = validate(t).and_then(|()| v2.settings.validate()) {
        return Ok(Err(f));
    }
    let keys = &sm.keys;
    let (old_count, record) = match tables::topic(txn, keys, &t.topic_id)? {
        Some(existing) => {
            if existing.name != t.name {
                return Ok(Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    format!("topic {} is named {:?}, not {:?}", t.topic_id, existing.name, t.name),
                )));
            }
            if t.num_partitions < existing.num_partitions {
                return Ok(Err(Failure::new(
                    ErrorCode::InvalidPartitions,
                    format!(
                        "topic {} has {} partitions; it cannot shrink to {}",
                        t.name, existing.num_partitions, t.num_partitions
                    ),
                )));
            }
            (existing.num_partitions, TopicRecord { num_partitions: t.num_partitions, ..existing })
        }
        None => {
            let taken: Option<Uuid> = tables::get(txn, &keys.topic_name(&t.name))?;
            if let Some(other) = taken {
                return Ok(Err(Failure::new(
                    ErrorCode::TopicAlreadyExists,
                    format!("topic {:?} already exists with id {other}", t.name),
                )));
            }
            if tables::get::<i64>(txn, &keys.deleted_topic(&t.topic_id))?.is_some() {
                return Ok(Err(Failure::new(
                    ErrorCode::UnknownTopicId,
                    format!(
                        "topic id {} belongs to a deleted topic; the ids of deleted topics are never reused",
                        t.topic_id
                    ),
                )));
            }
            tables::put(txn, keys.topic_name(&t.name), &t.topic_id)?;
            topic_settings::put(txn, keys, &t.topic_id, &v2.settings)?;
            let record = TopicRecord {
                name: t.name.clone(),
                num_partitions: t.num_partitions,
                retention_ms: t.retention_ms.unwrap_or(DEFAULT_RETENTION_MS),
                retention_bytes: t.retention_bytes.unwrap_or(DEFAULT_RETENTION_BYTES),
            };
            (0, record)
        }
    };
    if old_count == t.num_partitions {
        return Ok(Ok(()));
    }
    tables::put(txn, keys.topic(&t.topic_id), &record)?;
    for partition in old_count..t.num_partitions {
        let tp = TopicPartition { topic_id: t.topic_id, partition };
        if sm.owns(&tp) {
            tables::put(txn, keys.partition(&tp), &PartitionRecord::new())?;
        }
    }
    Ok(Ok(()))
}

fn validate(t: &CreateTopic) -> Result<(), Failure> {
    if t.topic_id.is_nil() {
        return Err(Failure::new(ErrorCode::InvalidRequest, "the topic id must not be the zero UUID"));
    }
    validate_topic_name(&t.name)?;
    if t.num_partitions <= 0 || t.num_partitions > MAX_PARTITIONS {
        return Err(Failure::new(
            ErrorCode::InvalidPartitions,
            format!("a topic has 1 to {MAX_PARTITIONS} partitions, not {}", t.num_partitions),
        ));
    }
    validate_retention(t.retention_ms, t.retention_bytes)
}

/// Kafka's topic name rules: 1 to 249 characters of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), Failure> {
    let bad = |why: &str| Err(Failure::new(ErrorCode::InvalidTopicException, format!("topic name {name:?} {why}")));
    if name.is_empty() || name.len() > 249 {
        return bad("must have 1 to 249 characters");
    }
    if name == "." || name == ".." {
        return bad("is reserved");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return bad("may hold only ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// retention.ms and retention.bytes: -1 (unlimited) or a non-negative value.
pub fn validate_retention(retention_ms: Option<i64>, retention_bytes: Option<i64>) -> Result<(), Failure> {
    for (name, v) in [("retention.ms", retention_ms), ("retention.bytes", retention_bytes)] {
        if let Some(v) = v {
            if v < -1 {
                return Err(Failure::new(
                    ErrorCode::InvalidConfig,
                    format!("{name} must be -1 or at least 0, not {v}"),
                ));
            }
        }
    }
    Ok(())
}
