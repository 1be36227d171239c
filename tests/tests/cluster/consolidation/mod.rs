//! Cluster tests of object consolidation (KIP-1165): brokers rewriting old batches out of the WAL
//! objects.

mod t91_consolidation;
