//! What every CoordinatorService request carries besides its items: its timeout, and whether the
//! client asks for its parts to be served here (`x-diskless-local`) or on their leaders.
//!
//! Owns the bounds of a request's timeout and the header. It must not look at a request's items.

use std::time::Duration;

use tonic::Request;

use crate::node::Hop;

/// The timeout of a request that names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest timeout a request may name.
const MAX_TIMEOUT: Duration = Duration::from_secs(120);

/// The header asking a node to serve every part of a request itself, never forwarding one: a part
/// whose metadata partition this node does not lead is answered NOT_LEADER_OR_FOLLOWER (nothing
/// applied). Smart clients send each node the parts of every partition it leads, in one request.
pub const LOCAL_HEADER: &str = "x-diskless-local";

/// A request's timeout (`timeout_ms`; 0 or less: the default), bounded.
pub(super) fn timeout_of(ms: i32) -> Duration {
    if ms <= 0 {
        DEFAULT_TIMEOUT
    } else {
        Duration::from_millis(ms as u64).min(MAX_TIMEOUT)
    }
}

/// Where a request's parts run: here with [`LOCAL_HEADER`], else on their leaders.
pub(super) fn hop_of<T>(r: &Request<T>) -> Hop {
    if r.metadata().get(LOCAL_HEADER).is_some() {
        Hop::Here
    } else {
        Hop::Leader
    }
}
