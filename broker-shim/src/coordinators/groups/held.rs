//! The groups this broker holds, of every kind together: which kind a group id is held as here
//! with members, so a request for another kind is answered by `kinds` before it reaches its own
//! kind's coordinator (which then checks the stored record the same way when it loads one).
//!
//! Also takes over the groups this broker has just become the coordinator of: each is loaded by
//! its kind's coordinator (Kafka loads a coordinator partition's groups at its election), so the
//! sessions of their stored members run and members that died meanwhile are removed even when
//! nobody uses the group again.
//!
//! Owns nothing but the three coordinators' handles; it must not change a group.

use std::sync::Arc;

use super::classic::GroupCoordinator;
use super::consumer::ConsumerGroups;
use super::kinds::{self, GroupKind};
use super::share::ShareGroups;
use super::store::{GroupStore, StoreError};
use crate::error::KafkaError;

/// Every kind's coordinator on this broker.
#[derive(Clone)]
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

    /// Loads every group with members kept in `store` that `owns` says this broker coordinates,
    /// each by its kind's coordinator; a group held here already is left as it is. Returns how
    /// many are held now; one that failed to load is loaded at its next use.
    pub async fn take_over(
        &self,
        store: &dyn GroupStore,
        owns: &(dyn Fn(&str) -> bool + Send + Sync),
    ) -> Result<usize, StoreError> {
        let mut loaded = 0;
        for (group_id, record) in store.list_with_members().await? {
            if !owns(&group_id) {
                continue;
            }
            let r = match kinds::kind_of(&record) {
                GroupKind::Classic => self.classic.take_over(&group_id).await.map_err(|c| KafkaError::new(c, c.name())),
                GroupKind::Consumer => self.consumer.take_over(&group_id).await,
                GroupKind::Share => self.share.take_over(&group_id).await,
            };
            match r {
                Ok(()) => loaded += 1,
                Err(e) => tracing::info!(group = group_id, error = %e, "taking a group over failed"),
            }
        }
        Ok(loaded)
    }
}
