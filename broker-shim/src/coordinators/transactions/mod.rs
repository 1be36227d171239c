//! Transactions: the transaction coordinator of the transactional ids this broker coordinates
//! (Kafka's `TransactionCoordinator`), for clients of Kafka's transaction protocol v1 (librdkafka,
//! aiokafka, kafka-python, KafkaJS) and v2 (KIP-890 part 2: Kafka 4's Java client).
//!
//! - `coordinator`: [`TransactionCoordinator`]: InitProducerId with a transactional id,
//!   AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, the verification of transactional produce, the
//!   abort of expired transactions and the completion of ends another broker left unfinished.
//! - `v2`: transactions v2's EndTxn (an epoch bump per transaction) and the implicit add of
//!   Produce v12+ and TxnOffsetCommit v5+.
//! - `store`: where the state is kept and the markers are written ([`TxnStore`]: the coordinator
//!   cluster, faked in the tests); `config`: `[transactions]`.
//!
//! A transactional id's state lives in the coordinator cluster, stored by compare-and-set on its
//! version: this broker reads it at the start of every call and stores every transition, so a
//! broker taking an id over continues it, and a deposed one can move nothing. This module must
//! not speak the Kafka protocol (`kafka::transactions` does) nor write partitions' data: markers
//! are the cluster's (`EndTransaction`).

pub mod config;
pub mod coordinator;
pub mod store;
mod v2;

pub use config::TxnConfig;
pub use coordinator::{verify_in, TransactionCoordinator, TxnPartition};
pub use store::{ClusterTxnStore, TxnStore};

#[cfg(test)]
mod tests;
