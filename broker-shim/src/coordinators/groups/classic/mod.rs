//! The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), Kafka's
//! `classic/ClassicGroup` and the classic path of its `GroupMetadataManager`.
//!
//! - `rebalance`: one group's state machine (members, generations, rebalances, static
//!   membership), pure: no lock, clock or I/O.
//! - `coordinator`: [`GroupCoordinator`], every classic group behind one lock, loaded from and
//!   stored in the coordinator cluster (by compare-and-set, before the answer), the timers.
//! - `api`: what the Kafka handlers ask and are told.

pub mod api;
pub mod coordinator;
mod rebalance;

pub use api::{Described, JoinOutcome, JoinRequest, SyncOutcome};
pub use coordinator::GroupCoordinator;
pub use rebalance::State;
