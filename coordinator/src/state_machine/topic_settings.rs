//! A topic's settings that the brokers enforce at produce: Kafka's topic configs
//! `max.message.bytes`, `message.timestamp.type`, `message.timestamp.before.max.ms` and
//! `message.timestamp.after.max.ms`. The cluster keeps them so that every broker enforces the same
//! values for a topic; a setting left unset is each broker's own default (its `[produce]` section),
//! as a Kafka topic without the config follows the broker's `message.max.bytes` and
//! `log.message.timestamp.*`.
//!
//! They live in their own table (`L`, keyed by topic id, absent when nothing is set) rather than in
//! the topic's record, whose encoding is the on-disk format and cannot grow a field.
//!
//! Owns the settings' ranges (Kafka's `LogConfig`: every value at least 0; the timestamp type one of
//! two names) and their table; it must not touch the topic's record or its partitions.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::failure::{ErrorCode, Failure};
use super::keys::Keys;
use super::tables;
use crate::storage::{KvRead, StorageError, Txn};

/// The batch attribute's timestamp types, as `message.timestamp.type` names them.
pub const CREATE_TIME: i8 = 0;
pub const LOG_APPEND_TIME: i8 = 1;

/// A topic's broker-enforced settings; `None`: the broker's own default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSettings {
    /// `max.message.bytes`: the largest record batch, as sent.
    pub max_message_bytes: Option<i32>,
    /// `message.timestamp.type`: [`CREATE_TIME`] or [`LOG_APPEND_TIME`].
    pub timestamp_type: Option<i8>,
    /// `message.timestamp.before.max.ms`: how far behind the broker's clock a CreateTime may be.
    pub timestamp_before_max_ms: Option<i64>,
    /// `message.timestamp.after.max.ms`: how far ahead of it.
    pub timestamp_after_max_ms: Option<i64>,
}

/// One setting changed: to a value, or (`None`) back to the broker's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SettingChange {
    MaxMessageBytes(Option<i32>),
    TimestampType(Option<i8>),
    TimestampBeforeMaxMs(Option<i64>),
    TimestampAfterMaxMs(Option<i64>),
}

/// The Kafka config names of the settings, in [`SettingChange`]'s order.
pub const SETTING_NAMES: [&str; 4] = [
    "max.message.bytes",
    "message.timestamp.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
];

/// `message.timestamp.type`'s value for a timestamp type.
pub fn timestamp_type_name(t: i8) -> &'static str {
    if t == LOG_APPEND_TIME {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

/// The timestamp type `message.timestamp.type` names (Kafka's names, exactly).
pub fn parse_timestamp_type(name: &str) -> Result<i8, Failure> {
    match name {
        "CreateTime" => Ok(CREATE_TIME),
        "LogAppendTime" => Ok(LOG_APPEND_TIME),
        other => Err(Failure::new(
            ErrorCode::InvalidConfig,
            format!("Invalid value {other} for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime"),
        )),
    }
}

impl SettingChange {
    /// The change that resets the setting named `name` (a Kafka config name).
    pub fn reset(name: &str) -> Option<SettingChange> {
        Some(match name {
            "max.message.bytes" => SettingChange::MaxMessageBytes(None),
            "message.timestamp.type" => SettingChange::TimestampType(None),
            "message.timestamp.before.max.ms" => SettingChange::TimestampBeforeMaxMs(None),
            "message.timestamp.after.max.ms" => SettingChange::TimestampAfterMaxMs(None),
            _ => return None,
        })
    }

    /// Its setting's Kafka config name.
    pub fn name(&self) -> &'static str {
        SETTING_NAMES[match self {
            SettingChange::MaxMessageBytes(_) => 0,
            SettingChange::TimestampType(_) => 1,
            SettingChange::TimestampBeforeMaxMs(_) => 2,
            SettingChange::TimestampAfterMaxMs(_) => 3,
        }]
    }
}

impl TopicSettings {
    pub fn is_empty(&self) -> bool {
        *self == TopicSettings::default()
    }

    /// These settings with `changes` applied, in order.
    pub fn with(mut self, changes: &[SettingChange]) -> TopicSettings {
        for c in changes {
            match *c {
                SettingChange::MaxMessageBytes(v) => self.max_message_bytes = v,
                SettingChange::TimestampType(v) => self.timestamp_type = v,
                SettingChange::TimestampBeforeMaxMs(v) => self.timestamp_before_max_ms = v,
                SettingChange::TimestampAfterMaxMs(v) => self.timestamp_after_max_ms = v,
            }
        }
        self
    }

    /// The changes that turn any settings into these (every setting named).
    pub fn as_changes(&self) -> Vec<SettingChange> {
        vec![
            SettingChange::MaxMessageBytes(self.max_message_bytes),
            SettingChange::TimestampType(self.timestamp_type),
            SettingChange::TimestampBeforeMaxMs(self.timestamp_before_max_ms),
            SettingChange::TimestampAfterMaxMs(self.timestamp_after_max_ms),
        ]
    }

    /// Kafka's ranges: sizes and durations at least 0, a known timestamp type.
    pub fn validate(&self) -> Result<(), Failure> {
        let at_least_0 = |name: &str, v: Option<i64>| match v {
            Some(v) if v < 0 => Err(Failure::new(
                ErrorCode::InvalidConfig,
                format!("Invalid value {v} for configuration {name}: Value must be at least 0"),
            )),
            _ => Ok(()),
        };
        at_least_0(SETTING_NAMES[0], self.max_message_bytes.map(i64::from))?;
        if let Some(t) = self.timestamp_type.filter(|t| ![CREATE_TIME, LOG_APPEND_TIME].contains(t)) {
            return Err(Failure::new(
                ErrorCode::InvalidConfig,
                format!("message.timestamp.type must be 0 (CreateTime) or 1 (LogAppendTime), not {t}"),
            ));
        }
        at_least_0(SETTING_NAMES[2], self.timestamp_before_max_ms)?;
        at_least_0(SETTING_NAMES[3], self.timestamp_after_max_ms)
    }
}

/// A topic's settings (all unset when it has none stored).
pub fn get(view: &dyn KvRead, keys: &Keys, topic_id: &Uuid) -> Result<TopicSettings, StorageError> {
    Ok(tables::get(view, &keys.topic_settings(topic_id))?.unwrap_or_default())
}

/// Stores a topic's settings; none set leaves no row.
pub fn put(txn: &mut Txn<'_>, keys: &Keys, topic_id: &Uuid, settings: &TopicSettings) -> Result<(), StorageError> {
    if settings.is_empty() {
        txn.delete(keys.topic_settings(topic_id));
        Ok(())
    } else {
        tables::put(txn, keys.topic_settings(topic_id), settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_apply_in_order_and_reset_to_unset() {
        let s = TopicSettings::default().with(&[
            SettingChange::MaxMessageBytes(Some(10)),
            SettingChange::TimestampType(Some(LOG_APPEND_TIME)),
            SettingChange::MaxMessageBytes(None),
        ]);
        assert_eq!(s, TopicSettings { timestamp_type: Some(LOG_APPEND_TIME), ..TopicSettings::default() });
        let all = TopicSettings {
            max_message_bytes: Some(1),
            timestamp_type: Some(CREATE_TIME),
            timestamp_before_max_ms: Some(2),
            timestamp_after_max_ms: Some(3),
        };
        assert_eq!(s.clone().with(&all.as_changes()), all);
        assert!(all.with(&TopicSettings::default().as_changes()).is_empty());
    }

    #[test]
    fn kafka_ranges_are_checked() {
        let bad = [
            TopicSettings { max_message_bytes: Some(-1), ..TopicSettings::default() },
            TopicSettings { timestamp_type: Some(2), ..TopicSettings::default() },
            TopicSettings { timestamp_before_max_ms: Some(-1), ..TopicSettings::default() },
            TopicSettings { timestamp_after_max_ms: Some(i64::MIN), ..TopicSettings::default() },
        ];
        for s in bad {
            assert_eq!(s.validate().unwrap_err().code, ErrorCode::InvalidConfig, "{s:?}");
        }
        let zero = TopicSettings {
            max_message_bytes: Some(0),
            timestamp_type: Some(LOG_APPEND_TIME),
            timestamp_before_max_ms: Some(0),
            timestamp_after_max_ms: Some(i64::MAX),
        };
        assert!(zero.validate().is_ok());
        assert_eq!(parse_timestamp_type("LogAppendTime").unwrap(), LOG_APPEND_TIME);
        assert_eq!(parse_timestamp_type("logappendtime").unwrap_err().code, ErrorCode::InvalidConfig);
        for n in SETTING_NAMES {
            assert_eq!(SettingChange::reset(n).unwrap().name(), n);
        }
        assert!(SettingChange::reset("retention.ms").is_none());
    }
}
