//! Consumer groups: the classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for
//! the groups this broker coordinates, with member state in memory as in Kafka.
//!
//! - `rebalance`: one group's state machine (members, generations, rebalances, static
//!   membership), pure: no lock, clock or I/O.
//! - `coordinator`: [`GroupCoordinator`], every group behind one lock, loaded from and stored in
//!   the coordinator cluster, the timers.
//! - `store`: where a group is kept when this broker is gone ([`GroupStore`]: the coordinator
//!   cluster, faked in the tests).
//! - `api`: what the Kafka handlers ask and are told; `config`: `[groups]`.
//!
//! What must survive this broker — the last completed generation and the committed offsets — is
//! the cluster's. This module must not commit offsets (the Kafka handlers send them to the
//! cluster, which fences them by generation) nor speak the Kafka protocol (`kafka::groups` does).

pub mod api;
pub mod config;
pub mod coordinator;
mod rebalance;
pub mod store;

pub use api::{Described, JoinOutcome, JoinRequest, SyncOutcome};
pub use config::GroupConfig;
pub use coordinator::GroupCoordinator;
pub use rebalance::State;
pub use store::GroupStore;

#[cfg(test)]
mod tests;
