//! KIP-848 consumer groups (`group.protocol=consumer`): the server decides the assignment.
//!
//! - `assignor`: the `uniform` and `range` assignors, pure.
//! - `reconcile`: a member's steps from what it owns to its target (revoke first, then receive
//!   what others released), pure.
//! - `group`: one group's heartbeats, joins and leaves, epochs and targets, pure.
//! - `coordinator`: [`ConsumerGroups`], the groups this broker coordinates, loaded from and
//!   stored in the coordinator cluster, and their timers.
//!
//! Follows Kafka 4's `GroupMetadataManager`, `CurrentAssignmentBuilder`, `UniformAssignor` and
//! `RangeAssignor` (see docs/research/kip-848-kafka-rules.md). This module must not speak the
//! Kafka protocol (`kafka::consumer_groups` does) nor commit offsets.

pub mod assignor;
pub mod coordinator;
pub mod group;
pub mod reconcile;

pub use coordinator::ConsumerGroups;

#[cfg(test)]
mod tests;
