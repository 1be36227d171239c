//! The WAL segment format and Kafka record batches as bytes (no I/O here).

pub mod control;
pub mod record_batch;
pub mod segment;
