//! The server-side assignors of KIP-848 consumer groups (Kafka's `group.consumer.assignors`):
//! `uniform`, the default, and `range`. Pure functions of the members' subscriptions, their
//! previous target assignments and the topics' partition counts.
//!
//! - **uniform** (Kafka's `UniformAssignor`): sticky and balanced. Each member keeps what it was
//!   assigned while its subscription and balance allow; the rest go to the least loaded eligible
//!   member; then partitions move from the most to the least loaded eligible member until no move
//!   lowers the imbalance. With identical subscriptions every member ends within one partition of
//!   every other; with different ones, as balanced as moving single partitions makes them.
//! - **range** (Kafka's server-side `RangeAssignor`): per topic, its subscribers in order (static
//!   members by instance id first, then by member id) get contiguous ranges, the first
//!   `partitions % subscribers` one more. Not sticky.
//!
//! Every partition of a subscribed topic is assigned to exactly one subscriber. Nothing here
//! knows the group's members' current ownership: reconciliation (`reconcile`) keeps a partition
//! from its new owner until the old one released it.

use std::collections::{BTreeMap, BTreeSet};

/// A topic's id.
pub type TopicId = [u8; 16];

/// Partitions by topic.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// An [`Assignment`] stored as a list of (topic id, partitions): JSON keys must be strings.
pub mod as_pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{Assignment, TopicId};

    pub fn serialize<S: Serializer>(a: &Assignment, s: S) -> Result<S::Ok, S::Error> {
        let pairs: Vec<(&TopicId, Vec<i32>)> = a.iter().map(|(t, ps)| (t, ps.iter().copied().collect())).collect();
        pairs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Assignment, D::Error> {
        let pairs: Vec<(TopicId, Vec<i32>)> = Vec::deserialize(d)?;
        Ok(pairs.into_iter().map(|(t, ps)| (t, ps.into_iter().collect())).collect())
    }
}

/// The assignors a member may name (ConsumerGroupHeartbeat's `ServerAssignor`); the first is the
/// default.
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// What an assignor knows of one member.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub member_id: String,
    pub instance_id: Option<String>,
    /// The subscribed topics that exist.
    pub topics: BTreeSet<TopicId>,
    /// Its target assignment before this one.
    pub previous: Assignment,
}

/// The number of partitions in an assignment.
pub fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

/// Assigns with the assignor named `name` (one of [`ASSIGNORS`]; others are uniform).
pub fn assign(name: &str, members: &[MemberSpec], partitions: &BTreeMap<TopicId, i32>) -> BTreeMap<String, Assignment> {
    if name == "range" {
        range(members, partitions)
    } else {
        uniform(members, partitions)
    }
}

/// Kafka's `UniformAssignor`, sticky and balanced (see the module's documentation).
pub fn uniform(members: &[MemberSpec], partitions: &BTreeMap<TopicId, i32>) -> BTreeMap<String, Assignment> {
    let mut owner: BTreeMap<(TopicId, i32), usize> = BTreeMap::new();
    let mut load = vec![0usize; members.len()];
    // Keep what each member had, if it still subscribes to it and no other member kept it.
    for (i, m) in members.iter().enumerate() {
        for (t, ps) in &m.previous {
            let Some(&n) = partitions.get(t) else { continue };
            if !m.topics.contains(t) {
                continue;
            }
            for &p in ps.iter().filter(|&&p| (0..n).contains(&p)) {
                if let std::collections::btree_map::Entry::Vacant(e) = owner.entry((*t, p)) {
                    e.insert(i);
                    load[i] += 1;
                }
            }
        }
    }
    let eligible =
        |t: &TopicId| -> Vec<usize> { (0..members.len()).filter(|&i| members[i].topics.contains(t)).collect() };
    // The rest, each to its least loaded subscriber.
    for (t, &n) in partitions {
        let subscribers = eligible(t);
        if subscribers.is_empty() {
            continue;
        }
        for p in 0..n {
            if owner.contains_key(&(*t, p)) {
                continue;
            }
            let i = *subscribers.iter().min_by_key(|&&i| (load[i], i)).expect("not empty");
            owner.insert((*t, p), i);
            load[i] += 1;
        }
    }
    // Balance: move a partition from a member to an eligible one holding two or more fewer, the
    // most loaded first, until none can move. Each move lowers the sum of squared loads, so this
    // ends; bounded anyway.
    let subscribers: BTreeMap<TopicId, Vec<usize>> = partitions.keys().map(|t| (*t, eligible(t))).collect();
    let mut budget = owner.len().saturating_mul(members.len()).max(16);
    loop {
        let mut best: Option<((TopicId, i32), usize, usize)> = None;
        for (&(t, p), &from) in &owner {
            let Some(to) =
                subscribers[&t].iter().copied().filter(|&j| load[j] + 1 < load[from]).min_by_key(|&j| (load[j], j))
            else {
                continue;
            };
            let gain = load[from] - load[to];
            if best.is_none_or(|(_, f, b)| gain > load[f] - load[b]) {
                best = Some(((t, p), from, to));
            }
        }
        let Some((tp, from, to)) = best else { break };
        owner.insert(tp, to);
        load[from] -= 1;
        load[to] += 1;
        budget -= 1;
        if budget == 0 {
            break;
        }
    }
    collect(members, owner)
}

/// Kafka's server-side `RangeAssignor` (see the module's documentation).
pub fn range(members: &[MemberSpec], partitions: &BTreeMap<TopicId, i32>) -> BTreeMap<String, Assignment> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| {
        let key =
            |i: usize| (members[i].instance_id.is_none(), members[i].instance_id.clone(), members[i].member_id.clone());
        key(a).cmp(&key(b))
    });
    let mut owner = BTreeMap::new();
    for (t, &n) in partitions {
        let subscribers: Vec<usize> = order.iter().copied().filter(|&i| members[i].topics.contains(t)).collect();
        if subscribers.is_empty() || n <= 0 {
            continue;
        }
        let (quota, extra) = (n as usize / subscribers.len(), n as usize % subscribers.len());
        let mut next = 0i32;
        for (k, &i) in subscribers.iter().enumerate() {
            let take = quota + usize::from(k < extra);
            for p in next..next + take as i32 {
                owner.insert((*t, p), i);
            }
            next += take as i32;
        }
    }
    collect(members, owner)
}

fn collect(members: &[MemberSpec], owner: BTreeMap<(TopicId, i32), usize>) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> =
        members.iter().map(|m| (m.member_id.clone(), Assignment::new())).collect();
    for ((t, p), i) in owner {
        out.get_mut(&members[i].member_id).expect("every member").entry(t).or_default().insert(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn member(id: &str, topics: &[u8]) -> MemberSpec {
        MemberSpec {
            member_id: id.to_string(),
            instance_id: None,
            topics: topics.iter().map(|&t| [t; 16]).collect(),
            previous: Assignment::new(),
        }
    }

    fn check_complete(members: &[MemberSpec], partitions: &BTreeMap<TopicId, i32>, out: &BTreeMap<String, Assignment>) {
        let mut seen = BTreeSet::new();
        for m in members {
            for (t, ps) in &out[&m.member_id] {
                assert!(m.topics.contains(t), "{} got a topic it does not subscribe to", m.member_id);
                for &p in ps {
                    assert!(seen.insert((*t, p)), "partition {p} assigned twice");
                }
            }
        }
        for (t, &n) in partitions {
            if members.iter().any(|m| m.topics.contains(t)) {
                for p in 0..n {
                    assert!(seen.contains(&(*t, p)), "partition {p} of a subscribed topic left out");
                }
            }
        }
    }

    #[test]
    fn uniform_is_balanced_and_sticky_when_a_member_joins() {
        let partitions: BTreeMap<TopicId, i32> = [([1; 16], 6)].into();
        let a = member("a", &[1]);
        let first = uniform(std::slice::from_ref(&a), &partitions);
        assert_eq!(count(&first["a"]), 6);
        let a = MemberSpec { previous: first["a"].clone(), ..a };
        let b = member("b", &[1]);
        let second = uniform(&[a.clone(), b], &partitions);
        assert_eq!((count(&second["a"]), count(&second["b"])), (3, 3));
        assert!(second["a"][&[1; 16]].is_subset(&first["a"][&[1; 16]]), "a keeps half of what it had");
    }

    #[test]
    fn range_gives_contiguous_ranges_the_first_members_one_more() {
        let partitions: BTreeMap<TopicId, i32> = [([1; 16], 5)].into();
        let out = range(&[member("b", &[1]), member("a", &[1])], &partitions);
        assert_eq!(out["a"][&[1; 16]], [0, 1, 2].into());
        assert_eq!(out["b"][&[1; 16]], [3, 4].into());
    }

    proptest! {
        #[test]
        fn every_subscribed_partition_is_assigned_once_and_identical_subscriptions_balance(
            counts in proptest::collection::vec(0i32..12, 1..4),
            nmembers in 1usize..7,
            subs in proptest::collection::vec(proptest::collection::btree_set(0u8..4, 0..4), 7),
            homogeneous in any::<bool>(),
            sticky_seed in proptest::collection::vec(0usize..7, 48),
        ) {
            let partitions: BTreeMap<TopicId, i32> =
                counts.iter().enumerate().map(|(i, &n)| ([i as u8; 16], n)).collect();
            let topics: Vec<u8> = (0..counts.len() as u8).collect();
            let mut members: Vec<MemberSpec> = (0..nmembers)
                .map(|i| {
                    let ts: Vec<u8> = if homogeneous { topics.clone() } else { subs[i].iter().copied().filter(|t| (*t as usize) < counts.len()).collect() };
                    member(&format!("m{i}"), &ts)
                })
                .collect();
            // Arbitrary previous assignments, overlapping and stale, must not break anything.
            let mut k = 0;
            for (t, &n) in &partitions {
                for p in 0..n + 1 {
                    let i = sticky_seed[k % sticky_seed.len()] % nmembers;
                    k += 1;
                    members[i].previous.entry(*t).or_default().insert(p);
                }
            }
            for name in ASSIGNORS {
                let out = assign(name, &members, &partitions);
                check_complete(&members, &partitions, &out);
                if homogeneous {
                    let loads: Vec<usize> = members.iter().map(|m| count(&out[&m.member_id])).collect();
                    let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                    if name == "uniform" {
                        prop_assert!(hi - lo <= 1, "uniform loads {loads:?}");
                    }
                }
            }
        }
    }
}
