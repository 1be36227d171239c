//! One KIP-932 share group's membership, as Kafka 4.1's `GroupMetadataManager.shareGroupHeartbeat`
//! and `shareGroupLeave` drive it: members join (epoch 0), heartbeat and leave (epoch -1); a change
//! of the members, their subscriptions or the subscribed topics' partitions bumps the group epoch
//! and recomputes every member's assignment (`assign`, after Kafka's `SimpleAssignor`: every
//! subscribed partition to at least one member, several members may share one). There is no
//! revocation: a member moves to its new assignment at its next heartbeat, since the records it
//! holds stay its own until acknowledged or their locks expire.
//!
//! Pure: no lock, clock or I/O; `coordinator` stores what changed before it answers and runs the
//! session timers. It must not speak the Kafka protocol.

use std::collections::{BTreeMap, BTreeSet};

use diskless_proto::ErrorCode;
use serde::{Deserialize, Serialize};

pub use crate::coordinators::groups::consumer::group::{Catalog, Refused};

/// A topic id.
pub type TopicId = [u8; 16];
/// Partitions by topic.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

fn refused(code: ErrorCode, message: impl Into<String>) -> Refused {
    Refused { code, message: message.into() }
}

/// A ShareGroupHeartbeat as the handler decoded it.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// None: unchanged since the last heartbeat.
    pub subscribed_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// What a heartbeat is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub member_id: String,
    pub member_epoch: i32,
    /// The member's assignment when it must learn it (None: unchanged).
    pub assignment: Option<Assignment>,
}

/// One member, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub member_id: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: BTreeSet<String>,
    /// What the member was last told it is assigned (stored as pairs: JSON keys must be strings;
    /// a map keyed by topic id did not serialize, and every stored member was dropped at load).
    #[serde(with = "crate::coordinators::groups::consumer::assignor::as_pairs")]
    pub assigned: Assignment,
}

/// A share group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Group {
    pub epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// Every member's target at `epoch`.
    pub targets: BTreeMap<String, Assignment>,
    /// The subscribed topics' partition counts the targets were computed from.
    pub seen: BTreeMap<String, (TopicId, i32)>,
}

/// Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`.
pub fn validate(group_id: &str, hb: &Heartbeat) -> Result<(), Refused> {
    if hb.member_id.trim().is_empty() {
        return Err(refused(ErrorCode::InvalidRequest, "MemberId can't be empty."));
    }
    if group_id.trim().is_empty() {
        return Err(refused(ErrorCode::InvalidRequest, "GroupId can't be empty."));
    }
    if hb.rack_id.as_deref().is_some_and(|r| r.trim().is_empty()) {
        return Err(refused(ErrorCode::InvalidRequest, "RackId can't be empty."));
    }
    if hb.member_epoch == 0 && hb.subscribed_names.as_ref().is_none_or(|n| n.is_empty()) {
        return Err(refused(ErrorCode::InvalidRequest, "SubscribedTopicNames must be set in first request."));
    }
    if hb.member_epoch < -1 {
        return Err(refused(ErrorCode::InvalidRequest, "MemberEpoch is invalid."));
    }
    Ok(())
}

/// Every subscribed partition to at least one member, as even as the subscriptions allow: per
/// topic, its partitions dealt round-robin over its subscribers in member-id order, or, with more
/// subscribers than partitions, the subscribers dealt over the partitions (several share one).
pub fn assign(
    members: &BTreeMap<String, Member>,
    topics: &BTreeMap<String, (TopicId, i32)>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members.keys().map(|m| (m.clone(), Assignment::new())).collect();
    for (name, &(id, partitions)) in topics {
        let subs: Vec<&String> =
            members.values().filter(|m| m.subscribed_names.contains(name)).map(|m| &m.member_id).collect();
        if subs.is_empty() || partitions <= 0 {
            continue;
        }
        let n = partitions as usize;
        for i in 0..n.max(subs.len()) {
            let (member, partition) = (subs[i % subs.len()], (i % n) as i32);
            out.entry(member.clone()).or_default().entry(id).or_default().insert(partition);
        }
    }
    out
}

impl Group {
    /// The subscribed topics as the catalog has them now.
    fn subscribed(&self, catalog: &Catalog) -> BTreeMap<String, (TopicId, i32)> {
        let names: BTreeSet<&String> = self.members.values().flat_map(|m| m.subscribed_names.iter()).collect();
        names.into_iter().filter_map(|n| catalog.get(n).map(|v| (n.clone(), *v))).collect()
    }

    /// A new epoch with targets recomputed.
    pub fn bump(&mut self, catalog: &Catalog) {
        self.epoch += 1;
        self.seen = self.subscribed(catalog);
        self.targets = assign(&self.members, &self.seen);
    }

    /// Kafka's state name: "Empty" or "Stable".
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// A heartbeat (validated with [`validate`]); `max_size`: `group.share.max.size`.
    pub fn heartbeat(&mut self, hb: &Heartbeat, catalog: &Catalog, max_size: usize) -> Result<Answer, Refused> {
        let id = &hb.member_id;
        if hb.member_epoch == -1 {
            if self.members.remove(id).is_none() {
                return Err(refused(ErrorCode::UnknownMemberId, format!("Member {id} is not a member of the group.")));
            }
            self.bump(catalog);
            return Ok(Answer { member_id: id.clone(), member_epoch: -1, assignment: None });
        }
        let mut changed = false;
        match self.members.get(id) {
            None if hb.member_epoch != 0 => {
                return Err(refused(ErrorCode::UnknownMemberId, format!("Member {id} is not a member of the group.")))
            }
            None => {
                if self.members.len() >= max_size {
                    return Err(refused(
                        ErrorCode::GroupMaxSizeReached,
                        format!("The share group has reached its maximum capacity of {max_size} members."),
                    ));
                }
                self.members.insert(
                    id.clone(),
                    Member {
                        member_id: id.clone(),
                        epoch: 0,
                        previous_epoch: 0,
                        rack_id: None,
                        client_id: String::new(),
                        client_host: String::new(),
                        subscribed_names: BTreeSet::new(),
                        assigned: Assignment::new(),
                    },
                );
                changed = true;
            }
            Some(m) if hb.member_epoch != 0 && hb.member_epoch != m.epoch && hb.member_epoch != m.previous_epoch => {
                return Err(refused(
                    ErrorCode::FencedMemberEpoch,
                    format!("The share group member has a smaller member epoch ({}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.", hb.member_epoch, m.epoch),
                ));
            }
            Some(_) => {}
        }
        let m = self.members.get_mut(id).expect("present");
        if let Some(names) = &hb.subscribed_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            if names != m.subscribed_names {
                m.subscribed_names = names;
                changed = true;
            }
        }
        m.rack_id = hb.rack_id.clone().or(m.rack_id.take());
        m.client_id = hb.client_id.clone();
        m.client_host = hb.client_host.clone();
        let rejoined = hb.member_epoch == 0;
        if changed || self.subscribed(catalog) != self.seen {
            self.bump(catalog);
        }
        let target = self.targets.get(id).cloned().unwrap_or_default();
        let m = self.members.get_mut(id).expect("present");
        let tell = rejoined || hb.subscribed_names.is_some() || m.epoch != self.epoch || m.assigned != target;
        if m.epoch != self.epoch {
            m.previous_epoch = m.epoch;
            m.epoch = self.epoch;
        }
        m.assigned = target.clone();
        Ok(Answer { member_id: id.clone(), member_epoch: m.epoch, assignment: tell.then_some(target) })
    }

    /// Members removed (their sessions ended): the epoch bumps once.
    pub fn remove_all(&mut self, ids: &[&str], catalog: &Catalog) {
        let before = self.members.len();
        self.members.retain(|k, _| !ids.contains(&k.as_str()));
        if self.members.len() != before {
            self.bump(catalog);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        [("a".to_string(), ([1; 16], 3)), ("b".to_string(), ([2; 16], 1))].into_iter().collect()
    }

    fn hb(member: &str, epoch: i32, topics: Option<&[&str]>) -> Heartbeat {
        Heartbeat {
            member_id: member.into(),
            member_epoch: epoch,
            subscribed_names: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            ..Heartbeat::default()
        }
    }

    fn partitions(a: &Option<Assignment>, topic: u8) -> Vec<i32> {
        a.as_ref().and_then(|a| a.get(&[topic; 16])).map(|s| s.iter().copied().collect()).unwrap_or_default()
    }

    #[test]
    fn members_share_partitions_and_every_partition_has_a_member() {
        let mut g = Group::default();
        let a = g.heartbeat(&hb("m1", 0, Some(&["a", "b"])), &catalog(), 200).unwrap();
        assert_eq!(
            (a.member_epoch, partitions(&a.assignment, 1), partitions(&a.assignment, 2)),
            (1, vec![0, 1, 2], vec![0])
        );
        for m in ["m2", "m3", "m4"] {
            g.heartbeat(&hb(m, 0, Some(&["a", "b"])), &catalog(), 200).unwrap();
        }
        // Four members, three partitions of a: each member has one, partition 0 has two; all four share b's.
        for (m, want) in [("m1", vec![0]), ("m2", vec![1]), ("m3", vec![2]), ("m4", vec![0])] {
            let a = g.heartbeat(&hb(m, g.members[m].epoch, None), &catalog(), 200).unwrap();
            assert_eq!(a.member_epoch, g.epoch);
            let told = Some(g.members[m].assigned.clone());
            assert_eq!(partitions(&told, 1), want, "{m}");
            assert_eq!(partitions(&told, 2), vec![0], "{m}");
        }
    }

    #[test]
    fn epochs_fence_stale_members_and_a_leave_bumps_the_group() {
        let mut g = Group::default();
        g.heartbeat(&hb("m1", 0, Some(&["a"])), &catalog(), 200).unwrap();
        g.heartbeat(&hb("m2", 0, Some(&["a"])), &catalog(), 200).unwrap();
        // m1 at its previous epoch (1) or current epoch is accepted and moves to the group's epoch.
        let a = g.heartbeat(&hb("m1", 1, None), &catalog(), 200).unwrap();
        assert_eq!(a.member_epoch, 2);
        assert_eq!(g.heartbeat(&hb("m1", 7, None), &catalog(), 200).unwrap_err().code, ErrorCode::FencedMemberEpoch);
        assert_eq!(g.heartbeat(&hb("zz", 1, None), &catalog(), 200).unwrap_err().code, ErrorCode::UnknownMemberId);
        let left = g.heartbeat(&hb("m2", -1, None), &catalog(), 200).unwrap();
        assert_eq!((left.member_epoch, g.epoch, g.members.len()), (-1, 3, 1));
        // The full group refuses a new member.
        assert_eq!(
            g.heartbeat(&hb("m3", 0, Some(&["a"])), &catalog(), 1).unwrap_err().code,
            ErrorCode::GroupMaxSizeReached
        );
    }

    #[test]
    fn validation_follows_kafka() {
        assert_eq!(validate("g", &hb("", 0, Some(&["a"]))).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(validate(" ", &hb("m", 0, Some(&["a"]))).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(validate("g", &hb("m", 0, None)).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(validate("g", &hb("m", 0, Some(&[]))).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(validate("g", &hb("m", -2, None)).unwrap_err().code, ErrorCode::InvalidRequest);
        validate("g", &hb("m", 3, None)).unwrap();
    }

    #[test]
    fn new_partitions_of_a_subscribed_topic_bump_the_epoch() {
        let mut g = Group::default();
        g.heartbeat(&hb("m1", 0, Some(&["a"])), &catalog(), 200).unwrap();
        let mut more = catalog();
        more.insert("a".into(), ([1; 16], 5));
        let a = g.heartbeat(&hb("m1", 1, None), &more, 200).unwrap();
        assert_eq!((a.member_epoch, partitions(&a.assignment, 1)), (2, vec![0, 1, 2, 3, 4]));
        // Nothing new: no assignment sent.
        assert_eq!(g.heartbeat(&hb("m1", 2, None), &more, 200).unwrap().assignment, None);
    }
}
