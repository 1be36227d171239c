//! `[produce]`: how the produce path buffers, uploads and commits (Kafka's
//! `diskless.append.*` and `message.max.bytes`), and the bounds those settings must keep. Parsing
//! and validation only; `produce` applies them.

use serde::{Deserialize, Serialize};

/// The largest `produce.buffer_max_bytes`: a WAL segment never exceeds it, and batch positions in
/// a segment are `int32` in the commit.
pub const MAX_BUFFER_BYTES: usize = 1 << 30;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProduceConfig {
    /// `diskless.append.commit.interval.ms`: segments close on a fixed grid of this interval, so a
    /// batch waits at most this long for its segment to close, half of it on average.
    pub commit_interval_ms: u64,
    /// `diskless.append.buffer.max.bytes`: a segment is closed when it reaches this size.
    pub buffer_max_bytes: usize,
    /// Uploads in flight at once (each holds one segment in memory).
    pub max_parallel_uploads: usize,
    /// Prefix of object keys (`<prefix><uuid>`).
    pub key_prefix: String,
    /// `message.max.bytes`: the largest record batch a producer may send (Kafka's default, 1 MiB
    /// plus the 12-byte log overhead); at most `buffer_max_bytes - 1`.
    pub max_message_bytes: usize,
    /// The most bytes a compressed batch's records may decompress to (Kafka has no such bound;
    /// it stops zip bombs). A batch past it is refused with MESSAGE_TOO_LARGE, which makes a Java
    /// producer split it.
    pub max_uncompressed_batch_bytes: usize,
}

impl Default for ProduceConfig {
    fn default() -> Self {
        ProduceConfig {
            commit_interval_ms: 250,
            buffer_max_bytes: 8 << 20,
            max_parallel_uploads: 8,
            key_prefix: "wal/".into(),
            max_message_bytes: crate::validate::DEFAULT_MAX_MESSAGE_BYTES,
            max_uncompressed_batch_bytes: crate::validate::DEFAULT_MAX_UNCOMPRESSED_BYTES,
        }
    }
}

impl ProduceConfig {
    /// A segment's byte offsets fit `int32`, a batch fits a segment, and there is room to work.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1024..=MAX_BUFFER_BYTES).contains(&self.buffer_max_bytes),
            "produce.buffer_max_bytes must be 1024 to {MAX_BUFFER_BYTES} (a segment's byte offsets travel as int32), not {}",
            self.buffer_max_bytes
        );
        anyhow::ensure!(
            (crate::wal::record_batch::HEADER_LEN..self.buffer_max_bytes).contains(&self.max_message_bytes),
            "produce.max_message_bytes must be {} to produce.buffer_max_bytes - 1 ({}): a batch fits one WAL segment, not {}",
            crate::wal::record_batch::HEADER_LEN,
            self.buffer_max_bytes - 1,
            self.max_message_bytes
        );
        anyhow::ensure!(
            self.max_uncompressed_batch_bytes >= self.max_message_bytes,
            "produce.max_uncompressed_batch_bytes ({}) must be at least produce.max_message_bytes ({})",
            self.max_uncompressed_batch_bytes,
            self.max_message_bytes
        );
        anyhow::ensure!(self.max_parallel_uploads >= 1, "produce.max_parallel_uploads must be at least 1");
        anyhow::ensure!(self.commit_interval_ms >= 1, "produce.commit_interval_ms must be at least 1");
        Ok(())
    }
}
