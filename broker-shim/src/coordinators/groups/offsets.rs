//! Committing a group's offsets, checked in one place: the committing member against its group as
//! held here, by the group's kind, for OffsetCommit and TxnOffsetCommit alike (Kafka's
//! `OffsetMetadataManager.validateOffsetCommit` and `validateTransactionalOffsetCommit`). The
//! cluster fences the commit again at apply against the stored group (a classic generation, a
//! KIP-848 member's epoch), and a committed transaction's offsets are not fenced again (the
//! transaction coordinator sends them with the cluster's `TXN_OFFSETS_GENERATION`).
//!
//! It must not send the commit (`cluster::ClusterClient::commit_group_offsets` does) nor speak the
//! Kafka protocol.

use diskless_proto::ErrorCode;

use super::held::HeldGroups;
use super::kinds::GroupKind;

/// Who commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committer {
    /// OffsetCommit of this request version.
    Member { version: i16 },
    /// TxnOffsetCommit, for a transaction to commit at its end.
    Transactional,
}

impl HeldGroups {
    /// Whether `member_id` of `generation_or_epoch` (a classic generation or a KIP-848 member
    /// epoch; negative: none) may commit offsets of `group_id` now.
    pub async fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        generation_or_epoch: i32,
        by: Committer,
    ) -> Result<(), ErrorCode> {
        if by == Committer::Transactional && generation_or_epoch < 0 && member_id.is_empty() {
            // A transactional commit naming no member is taken whatever the group's state.
            return Ok(());
        }
        let modern = if self.with_members(group_id).await == Some(GroupKind::Classic) {
            None
        } else {
            self.consumer.check_commit(group_id, member_id, generation_or_epoch).await
        };
        match (modern, by) {
            // A KIP-848 member commits with OffsetCommit v9+, as Kafka requires.
            (Some(Ok(())), Committer::Member { version }) if version < 9 && !member_id.is_empty() => {
                Err(ErrorCode::UnsupportedVersion)
            }
            // Kafka's TxnOffsetCommit reads a stale member epoch as ILLEGAL_GENERATION.
            (Some(Err(ErrorCode::StaleMemberEpoch)), Committer::Transactional) => Err(ErrorCode::IllegalGeneration),
            (Some(checked), _) => checked,
            // Not a KIP-848 group: the classic check (any negative generation is "none").
            (None, _) => self.classic.check_commit(group_id, generation_or_epoch.max(-1), member_id).await,
        }
    }
}
