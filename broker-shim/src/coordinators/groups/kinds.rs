//! Which kind a group is, and what a request for one kind answers when the group is another: the
//! one place these are decided (Kafka's `GroupMetadataManager` throws the same codes from
//! `getOrMaybeCreateConsumerGroup`, `shareGroup` and the classic join, without online migration).
//!
//! A stored group's kind is its record's protocol marker (KIP-848 and share groups mark theirs;
//! anything else is classic). A group with members takes no request of another kind; an empty one
//! gives way (its epoch continued, its offsets kept) — except that a KIP-848 group, even empty,
//! is never a share group, as in Kafka. Pure: no I/O, no holder.

use diskless_proto::v1::ConsumerGroup;
use diskless_proto::ErrorCode;

use crate::error::KafkaError;

/// The kinds of group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    Classic,
    /// KIP-848 (`group.protocol=consumer`).
    Consumer,
    /// KIP-932.
    Share,
}

impl GroupKind {
    /// The group type ListGroups v5 and DescribeGroups show.
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Classic => "classic",
            GroupKind::Consumer => "consumer",
            GroupKind::Share => "share",
        }
    }

    /// The protocol type its stored record names (a classic group's is its members').
    pub fn protocol_type(self) -> &'static str {
        match self {
            GroupKind::Classic => "",
            GroupKind::Consumer => "consumer",
            GroupKind::Share => "share",
        }
    }

    /// The protocol a stored group of this kind is marked with (`None`: classic, whose record
    /// holds its assignment protocol there).
    pub fn mark(self) -> Option<&'static str> {
        match self {
            GroupKind::Classic => None,
            GroupKind::Consumer => Some(diskless_proto::CONSUMER_PROTOCOL_MARK),
            GroupKind::Share => Some(diskless_proto::SHARE_PROTOCOL_MARK),
        }
    }
}

/// The kind of a stored group.
pub fn kind_of(record: &ConsumerGroup) -> GroupKind {
    match record.protocol.as_deref() {
        Some(diskless_proto::CONSUMER_PROTOCOL_MARK) => GroupKind::Consumer,
        Some(diskless_proto::SHARE_PROTOCOL_MARK) => GroupKind::Share,
        _ => GroupKind::Classic,
    }
}

/// Whether a request for a group of kind `asked` may go on with `group_id` as it is: `found` is
/// the group's kind and whether it has members, `None` when there is no such group. `Err` is
/// Kafka's answer.
pub fn admit(group_id: &str, found: Option<(GroupKind, bool)>, asked: GroupKind) -> Result<(), KafkaError> {
    let Some((kind, members)) = found.filter(|(kind, _)| *kind != asked) else { return Ok(()) };
    // A KIP-848 group is never a share group, even empty.
    let never = kind == GroupKind::Consumer && asked == GroupKind::Share;
    if !members && !never {
        return Ok(());
    }
    Err(match asked {
        GroupKind::Classic => KafkaError::new(
            ErrorCode::InconsistentGroupProtocol,
            format!("Group {group_id} is a {} group with members.", kind.name()),
        ),
        GroupKind::Consumer => {
            KafkaError::new(ErrorCode::GroupIdNotFound, format!("Group {group_id} is not a consumer group."))
        }
        GroupKind::Share => {
            KafkaError::new(ErrorCode::GroupIdNotFound, format!("Group {group_id} is not a share group."))
        }
    })
}

/// [`admit`] against a stored record.
pub fn admit_stored(group_id: &str, record: Option<&ConsumerGroup>, asked: GroupKind) -> Result<(), KafkaError> {
    admit(group_id, record.map(|r| (kind_of(r), !r.members.is_empty())), asked)
}

#[cfg(test)]
mod tests {
    use super::GroupKind::{Classic, Consumer, Share};
    use super::*;

    #[test]
    fn every_kind_found_against_every_kind_asked_answers_kafkas_code() {
        let none = ErrorCode::None;
        // (found kind, has members, asked) → code
        let table = [
            (Classic, true, Classic, none),
            (Classic, true, Consumer, ErrorCode::GroupIdNotFound),
            (Classic, true, Share, ErrorCode::GroupIdNotFound),
            (Classic, false, Consumer, none),
            (Classic, false, Share, none),
            (Consumer, true, Classic, ErrorCode::InconsistentGroupProtocol),
            (Consumer, true, Consumer, none),
            (Consumer, true, Share, ErrorCode::GroupIdNotFound),
            (Consumer, false, Classic, none),
            (Consumer, false, Share, ErrorCode::GroupIdNotFound),
            (Share, true, Classic, ErrorCode::InconsistentGroupProtocol),
            (Share, true, Consumer, ErrorCode::GroupIdNotFound),
            (Share, true, Share, none),
            (Share, false, Classic, none),
            (Share, false, Consumer, none),
        ];
        for (kind, members, asked, want) in table {
            let got = admit("g", Some((kind, members)), asked).err().map_or(none, |e| e.code);
            assert_eq!(got, want, "{kind:?} (members: {members}) asked as {asked:?}");
        }
        for asked in [Classic, Consumer, Share] {
            assert!(admit("g", None, asked).is_ok(), "no group: any kind starts one");
        }
    }

    #[test]
    fn a_records_kind_is_its_protocol_mark() {
        for kind in [Classic, Consumer, Share] {
            let r = ConsumerGroup { protocol: kind.mark().map(str::to_string), ..Default::default() };
            assert_eq!(kind_of(&r), kind);
        }
        let range = ConsumerGroup { protocol: Some("range".into()), ..Default::default() };
        assert_eq!(kind_of(&range), Classic);
    }
}
