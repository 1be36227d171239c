//! The groups this broker holds, of every kind together: which kind a group id is held as here
//! with members, so a request for another kind is answered by `kinds` before it reaches its own
//! kind's coordinator (which then checks the stored record the same way when it loads one).
//!
//! Owns nothing but the three coordinators' handles; it must not change a group.

use std::sync::Arc;

use super::classic::GroupCoordinator;
use super::consumer::ConsumerGroups;
use super::kinds::{self, GroupKind};
use super::share::ShareGroups;
use crate::error::KafkaError;

/// Every kind's coordinator on this broker.
pub struct HeldGroups {
    pub classic: Arc<GroupCoordinator>,
    pub consumer: Arc<ConsumerGroups>,
    pub share: Arc<ShareGroups>,
}

impl HeldGroups {
    /// The kind `group_id` is held as here with members, if it is.
    pub async fn with_members(&self, group_id: &str) -> Option<GroupKind> {
        if self.classic.has_members(group_id) {
            return Some(GroupKind::Classic);
        }
        if self.consumer.has_members(group_id).await {
            return Some(GroupKind::Consumer);
        }
        if self.share.has_members(group_id).await {
            return Some(GroupKind::Share);
        }
        None
    }

    /// Whether a request for a group of kind `asked` may go on, as far as what is held here says
    /// ([`kinds::admit`]).
    pub async fn admit(&self, group_id: &str, asked: GroupKind) -> Result<(), KafkaError> {
        kinds::admit(group_id, self.with_members(group_id).await.map(|k| (k, true)), asked)
    }
}
