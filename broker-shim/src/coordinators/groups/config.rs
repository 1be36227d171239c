//! `[groups]`: the settings of this broker's consumer-group coordinator (Kafka's `group.*`
//! broker settings). Parsing and defaults only; `coordinator` applies them.

use serde::{Deserialize, Serialize};

/// Settings of the group coordinator (`[groups]` in the broker's configuration).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupConfig {
    /// Kafka's `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members (extended by each join, up to the rebalance timeout).
    pub initial_rebalance_delay_ms: u64,
    /// Kafka's `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    /// KIP-848 groups: Kafka's `group.consumer.session.timeout.ms`, after which a member that has
    /// not heartbeated is removed.
    pub consumer_session_timeout_ms: u64,
    /// KIP-848 groups: Kafka's `group.consumer.heartbeat.interval.ms`, told to members.
    pub consumer_heartbeat_interval_ms: i32,
    /// Share groups: Kafka's `group.share.session.timeout.ms` and
    /// `group.share.heartbeat.interval.ms`.
    pub share_session_timeout_ms: u64,
    pub share_heartbeat_interval_ms: i32,
    /// Kafka's `group.share.record.lock.duration.ms`: how long a share consumer holds the records
    /// it was given before they are delivered again.
    pub share_record_lock_duration_ms: u64,
    /// Kafka's `group.share.delivery.count.limit`: a record delivered this many times without
    /// being accepted is archived (never delivered again).
    pub share_delivery_count_limit: i32,
    /// Kafka's `group.share.partition.max.record.locks`: records in flight per share partition.
    pub share_partition_max_record_locks: i64,
    /// Kafka's `group.share.max.share.sessions`: share sessions this broker keeps.
    pub share_max_sessions: usize,
    /// Kafka's `group.share.max.size`: members per share group.
    pub share_max_size: usize,
    /// Kafka's group config `share.auto.offset.reset`, for every share group: where a share group
    /// starts consuming a partition it has no state for, "latest" (Kafka's default) or "earliest".
    pub share_auto_offset_reset: String,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            share_session_timeout_ms: 45_000,
            share_heartbeat_interval_ms: 5_000,
            share_record_lock_duration_ms: 30_000,
            share_delivery_count_limit: 5,
            share_partition_max_record_locks: 2_000,
            share_max_sessions: 2_000,
            share_max_size: 200,
            share_auto_offset_reset: "latest".to_string(),
        }
    }
}

impl GroupConfig {
    /// Refuses share-group settings Kafka would refuse, or that would hand out no record.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            matches!(self.share_auto_offset_reset.as_str(), "latest" | "earliest"),
            "[groups] share_auto_offset_reset is {:?}: \"latest\" or \"earliest\"",
            self.share_auto_offset_reset
        );
        anyhow::ensure!(
            (1..=100).contains(&self.share_delivery_count_limit),
            "[groups] share_delivery_count_limit is {}: 1 to 100",
            self.share_delivery_count_limit
        );
        anyhow::ensure!(
            self.share_record_lock_duration_ms >= 100 && self.share_record_lock_duration_ms <= 3_600_000,
            "[groups] share_record_lock_duration_ms is {}: 100 to 3600000",
            self.share_record_lock_duration_ms
        );
        anyhow::ensure!(
            (1..=1_000_000).contains(&self.share_partition_max_record_locks),
            "[groups] share_partition_max_record_locks is {}: 1 to 1000000",
            self.share_partition_max_record_locks
        );
        anyhow::ensure!(
            self.share_max_sessions >= 1 && self.share_max_size >= 1 && self.share_heartbeat_interval_ms > 0,
            "[groups] share_max_sessions, share_max_size and share_heartbeat_interval_ms must be positive"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_settings_out_of_range_are_refused() {
        GroupConfig::default().validate().unwrap();
        for bad in [
            GroupConfig { share_auto_offset_reset: "by_duration:PT1H".into(), ..GroupConfig::default() },
            GroupConfig { share_delivery_count_limit: 0, ..GroupConfig::default() },
            GroupConfig { share_record_lock_duration_ms: 0, ..GroupConfig::default() },
            GroupConfig { share_partition_max_record_locks: 0, ..GroupConfig::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
