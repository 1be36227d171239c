//! Consumer groups: the classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for
//! the groups this broker coordinates, with member state in memory as in Kafka, and KIP-848's
//! consumer protocol (`consumer`).
//!
//! - `rebalance`: one group's state machine (members, generations, rebalances, static
//!   membership), pure: no lock, clock or I/O.
//! - `coordinator`: [`GroupCoordinator`], every group behind one lock, loaded from and stored in
//!   the coordinator cluster, the timers.
//! - `store`: where a group is kept when this broker is gone ([`GroupStore`]: the coordinator
//!   cluster, faked in the tests).
//! - `api`: what the Kafka handlers ask and are told; `config`: `[groups]`.
//! - `consumer`: KIP-848 consumer groups (`group.protocol=consumer`), whose assignments the
//!   coordinator computes; `share`: KIP-932 share groups; `modern`: how both are kept, as the
//!   runtime's store.
//!
//! What must survive this broker — the last completed generation and the committed offsets — is
//! the cluster's. This module must not commit offsets (the Kafka handlers send them to the
//! cluster, which fences them by generation) nor speak the Kafka protocol (`kafka::groups` does).

pub mod api;
pub mod config;
pub mod consumer;
pub mod coordinator;
pub mod modern;
mod rebalance;
pub mod share;
pub mod store;

pub use api::{Described, JoinOutcome, JoinRequest, SyncOutcome};
pub use config::GroupConfig;
pub use coordinator::GroupCoordinator;
pub use rebalance::State;
pub use store::GroupStore;

#[cfg(test)]
mod tests;
