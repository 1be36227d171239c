//! What can go wrong when a request is served for a metadata partition: [`RouteError`], the one
//! vocabulary every layer above uses. It travels between nodes (the answer of a forwarded request,
//! bincode-encoded: variants are only ever added at the end); `server::convert::route_codes` is
//! the one table of what each kind becomes on the wire.
//!
//! Owns the kinds and their meaning (applied or not, retriable or not). It must not know gRPC or
//! Kafka codes.

use crate::raft::NodeId;

/// Why a request could not be served by this node for a metadata partition. Travels back from a
/// leader that served a forwarded request (`route`); `server::convert::route_codes` is the one
/// table of what each kind becomes on the wire.
#[derive(Debug, Clone, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum RouteError {
    /// Nothing was applied: the request never reached a leader.
    #[error("this node is not the leader of metadata partition {partition} (leader: {leader:?})")]
    NotLeader { partition: u32, leader: Option<(NodeId, String)> },
    /// The outcome is unknown: the request may or may not have been applied.
    #[error("metadata partition {partition} did not confirm in time; the outcome is unknown")]
    Timeout { partition: u32 },
    #[error("there is no metadata partition {0}")]
    UnknownPartition(u32),
    #[error("metadata partition {partition} failed: {message}")]
    Failed { partition: u32, message: String },
    /// A read could not be confirmed by a quorum in time (peers down or cut off); nothing changed.
    #[error("metadata partition {partition}: no quorum confirmed the read in time")]
    NoQuorum { partition: u32 },
    /// This node's replica cannot serve reads now (stale, not a member, stopped); another node's
    /// may.
    #[error("this node's replica of metadata partition {partition} cannot serve reads: {reason}")]
    ReplicaUnavailable { partition: u32, reason: String },
}

impl RouteError {
    /// A metadata partition answered something else than the request asks for (a bug).
    pub fn unexpected(partition: u32, what: &impl std::fmt::Debug) -> RouteError {
        RouteError::Failed { partition, message: format!("unexpected answer {what:?}") }
    }
}
