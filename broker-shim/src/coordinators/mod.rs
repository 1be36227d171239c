//! The coordinators this broker runs, beside its data path: the groups it coordinates (classic,
//! KIP-848 consumer and KIP-932 share groups, with share-partition states) and the transactional
//! ids it coordinates, each keeping what must outlive the broker in the coordinator cluster.
//!
//! - `runtime`: the coordinator runtime (Kafka's `CoordinatorRuntime`): state per key, stored by
//!   compare-and-set before an answer, writes queued behind a store batched.
//! - `groups`: one folder per group kind (`classic`, `consumer`, `share`).
//! - `transactions`: the transaction coordinator.
//! - `cluster_error`: why a call to the coordinator cluster failed, for all of them.
//!
//! Which broker coordinates what is the registry's (`crate::registry`); the Kafka handlers
//! (`crate::kafka`) translate requests into calls here. Nothing here speaks the Kafka protocol.

pub mod cluster_error;
pub mod groups;
pub mod runtime;
pub mod transactions;
