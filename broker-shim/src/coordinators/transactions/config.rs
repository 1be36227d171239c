//! `[transactions]`: the settings of this broker's transaction coordinator (Kafka's
//! `transaction.*` broker settings). Parsing and defaults only; `coordinator` applies them.

use serde::{Deserialize, Serialize};

/// Settings of the transaction coordinator (`[transactions]` in the broker's configuration).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TxnConfig {
    /// Kafka's `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer may
    /// ask for (INVALID_TRANSACTION_TIMEOUT above it).
    pub max_timeout_ms: i32,
    /// Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often expired
    /// transactions are looked for (and unfinished ends of transactions another broker left).
    pub abort_check_interval_ms: u64,
    /// Kafka's `transactional.id.expiration.ms`: a transactional id whose state has not changed
    /// for this long, with no transaction open, is forgotten (its producer starts over with a new
    /// producer id). Checked with the timer.
    pub id_expiration_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig { max_timeout_ms: 900_000, abort_check_interval_ms: 10_000, id_expiration_ms: 604_800_000 }
    }
}
