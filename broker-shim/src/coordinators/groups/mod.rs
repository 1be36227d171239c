//! The groups this broker coordinates, one folder per kind, with member state in memory as in
//! Kafka:
//!
//! - `classic`: the classic group protocol ([`GroupCoordinator`]).
//! - `consumer`: KIP-848 consumer groups (`group.protocol=consumer`), whose assignments the
//!   coordinator computes; `share`: KIP-932 share groups and their partitions' states; `modern`:
//!   how both are kept, as the coordinator runtime's store.
//! - `kinds`: which kind a group is and what a request for another kind answers, decided once;
//!   `held`: the three kinds' coordinators together ([`HeldGroups`]); `offsets`: the committing
//!   member's check, for OffsetCommit and TxnOffsetCommit alike.
//! - `store`: where a group is kept when this broker is gone ([`GroupStore`]: the coordinator
//!   cluster, faked in the tests); `config`: `[groups]`.
//!
//! What must survive this broker — the last completed generation and the committed offsets — is
//! the cluster's. This module must not commit offsets (the Kafka handlers send them to the
//! cluster, which fences them by generation) nor speak the Kafka protocol (`kafka::groups` does).

pub mod classic;
pub mod config;
pub mod consumer;
pub mod held;
pub mod kinds;
pub mod modern;
pub mod offsets;
pub mod share;
pub mod store;

pub use classic::{Described, GroupCoordinator, JoinOutcome, JoinRequest, State, SyncOutcome};
pub use config::GroupConfig;
pub use held::HeldGroups;
pub use kinds::GroupKind;
pub use store::GroupStore;

#[cfg(test)]
mod tests;
