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
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
        }
    }
}
