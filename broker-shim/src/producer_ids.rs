//! Producer ids for the idempotent producers this broker serves (InitProducerId).
//!
//! Ids come in blocks from the coordinator cluster (`AllocateProducerIds`, Kafka's KIP-730), which
//! never hands out a block twice: two brokers — even with the same `broker_id`, even across
//! restarts and clock steps — never give two producers the same id (a second producer's first
//! batch would otherwise be taken for a duplicate and acknowledged without being stored). A block
//! lost to a crash is simply never used. This module must not invent ids itself.

use std::sync::Arc;

use diskless_proto::v1::AllocateProducerIdsRequest;

use crate::cluster::ClusterClient;
use crate::error::KafkaError;

/// Ids asked for at a time (Kafka's ProducerIdManager asks for 1000).
pub const BLOCK_SIZE: i32 = 1000;

pub struct ProducerIds {
    cluster: Arc<ClusterClient>,
    broker_id: i32,
    /// `[next, end)`: what is left of the current block.
    block: tokio::sync::Mutex<(i64, i64)>,
}

impl ProducerIds {
    pub fn new(cluster: Arc<ClusterClient>, broker_id: i32) -> ProducerIds {
        ProducerIds { cluster, broker_id, block: tokio::sync::Mutex::new((0, 0)) }
    }

    /// A producer id no one else was or will be given.
    pub async fn next(&self) -> Result<i64, KafkaError> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            *block = self.allocate().await?;
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    async fn allocate(&self) -> Result<(i64, i64), KafkaError> {
        let req = AllocateProducerIdsRequest { broker_id: self.broker_id, count: BLOCK_SIZE, timeout_ms: 10_000 };
        // Repeating is safe: a block whose answer was lost is never used.
        let r = self
            .cluster
            .call(|mut c| async move { c.allocate_producer_ids(req).await })
            .await
            .map_err(|s| KafkaError::unavailable("allocate producer ids", &s))?;
        if let Some(e) = KafkaError::from_wire(r.error_code, r.error_message) {
            return Err(e);
        }
        let len = i64::from(r.producer_id_len);
        if r.producer_id_start < 0 || len <= 0 {
            return Err(KafkaError::new(
                diskless_proto::ErrorCode::UnknownServerError,
                format!("the coordinator answered an empty block of producer ids at {}", r.producer_id_start),
            ));
        }
        tracing::debug!(first = r.producer_id_start, len, "new block of producer ids");
        Ok((r.producer_id_start, r.producer_id_start + len))
    }
}
