//! What the consumer-group APIs (`groups`, `group_offsets`) share: the cluster calls' timeout, how
//! a coordinator-cluster answer becomes a group coordinator's Kafka error, the group ACL check and
//! the ownership check. It must not answer an API.

use diskless_proto::ErrorCode;

use super::listener::Listener;
use crate::authz::{Access, Operation, Resource};

pub(super) const TIMEOUT_MS: i32 = 15_000;

/// Kafka's `offset.metadata.max.bytes` (its default): a committed offset's metadata longer than
/// this is refused with OFFSET_METADATA_TOO_LARGE, by OffsetCommit and TxnOffsetCommit alike.
pub(super) const MAX_OFFSET_METADATA_BYTES: usize = 4096;

/// Whether a committed offset's metadata fits [`MAX_OFFSET_METADATA_BYTES`].
pub(super) fn metadata_fits(metadata: Option<&str>) -> bool {
    metadata.is_none_or(|m| m.len() <= MAX_OFFSET_METADATA_BYTES)
}

/// A coordinator-cluster answer as a group coordinator's Kafka error (routing and availability
/// problems: COORDINATOR_NOT_AVAILABLE).
pub(super) use crate::cluster::group_offsets::group_code as cluster_code;

/// GROUP_AUTHORIZATION_FAILED unless `access` allows `op` on the group.
pub(super) fn may(access: &Access, op: Operation, group_id: &str) -> Result<(), ErrorCode> {
    if access.allowed(op, Resource::Group, group_id) {
        Ok(())
    } else {
        Err(ErrorCode::GroupAuthorizationFailed)
    }
}

/// NOT_COORDINATOR unless this broker coordinates `group_id` (the client finds the coordinator
/// again).
pub(super) fn owned(l: &Listener, group_id: &str) -> Result<(), ErrorCode> {
    if l.shim.registry.owns_group(group_id) {
        Ok(())
    } else {
        Err(ErrorCode::NotCoordinator)
    }
}
