//! A KIP-848 member's way from what it owns to its target assignment, as Kafka's
//! `CurrentAssignmentBuilder` takes it: a member first revokes what it loses (its epoch does not
//! advance meanwhile: UNREVOKED_PARTITIONS), a partition reaches its new owner only once no other
//! member holds it (UNRELEASED_PARTITIONS until then), and the member's epoch moves to the target's
//! once it has nothing left to revoke. Pure: the group (`group`) says which partitions other
//! members hold and what the member reported owning.

use serde::{Deserialize, Serialize};

use super::assignor::{Assignment, TopicId};

/// Kafka's `MemberState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum MemberState {
    #[default]
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
    Unknown,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
            MemberState::Unknown => "UNKNOWN",
        }
    }
}

/// Where a member is: its epochs, state, the partitions it is given and those it must give back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Current {
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    #[serde(with = "super::assignor::as_pairs")]
    pub assigned: Assignment,
    #[serde(with = "super::assignor::as_pairs")]
    pub pending_revocation: Assignment,
}

/// The member must rejoin (FENCED_MEMBER_EPOCH): it claims partitions it cannot be known to own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced;

/// Whether the member may still own some of `revoking`: `owned` is what it reported (None: not
/// reported in this heartbeat, so no proof that it let them go).
fn owns_any(owned: Option<&Assignment>, revoking: &Assignment) -> bool {
    let Some(owned) = owned else { return true };
    revoking.iter().any(|(t, ps)| owned.get(t).is_some_and(|o| !o.is_disjoint(ps)))
}

/// The next step of `current` towards `target` (of epoch `target_epoch`). `held(t, p)`: another
/// member holds partition `p` of topic `t` (assigned or being revoked). `owned`: the partitions
/// the member reported in this heartbeat, if it did.
pub fn reconcile(
    current: &Current,
    target_epoch: i32,
    target: &Assignment,
    held: &dyn Fn(&TopicId, i32) -> bool,
    owned: Option<&Assignment>,
) -> Result<Current, Fenced> {
    match current.state {
        MemberState::Stable if current.epoch == target_epoch => Ok(current.clone()),
        MemberState::Stable | MemberState::UnreleasedPartitions => {
            Ok(next(current, current.epoch, target_epoch, target, held, owned))
        }
        MemberState::UnrevokedPartitions if owns_any(owned, &current.pending_revocation) => Ok(current.clone()),
        MemberState::UnrevokedPartitions => Ok(next(current, current.epoch, target_epoch, target, held, owned)),
        MemberState::Unknown => match owned {
            Some(o) if o.values().all(|ps| ps.is_empty()) => {
                Ok(next(current, target_epoch, target_epoch, target, held, owned))
            }
            _ => Err(Fenced),
        },
    }
}

/// Kafka's `computeNextAssignment`.
fn next(
    current: &Current,
    epoch: i32,
    target_epoch: i32,
    target: &Assignment,
    held: &dyn Fn(&TopicId, i32) -> bool,
    owned: Option<&Assignment>,
) -> Current {
    let mut keep = Assignment::new();
    let mut revoke = Assignment::new();
    let mut assign = Assignment::new();
    let mut unreleased = false;
    let topics: std::collections::BTreeSet<&TopicId> = target.keys().chain(current.assigned.keys()).collect();
    let empty = Default::default();
    for t in topics {
        let want = target.get(t).unwrap_or(&empty);
        let has = current.assigned.get(t).unwrap_or(&empty);
        let kept: std::collections::BTreeSet<i32> = has.intersection(want).copied().collect();
        let lost: std::collections::BTreeSet<i32> = has.difference(&kept).copied().collect();
        let mut new = std::collections::BTreeSet::new();
        for &p in want.difference(&kept) {
            let own_pending = current.pending_revocation.get(t).is_some_and(|ps| ps.contains(&p));
            if held(t, p) && !own_pending {
                unreleased = true;
            } else {
                new.insert(p);
            }
        }
        if !kept.is_empty() {
            keep.insert(*t, kept);
        }
        if !lost.is_empty() {
            revoke.insert(*t, lost);
        }
        if !new.is_empty() {
            assign.insert(*t, new);
        }
    }
    let moved = |e: i32| if e == current.epoch { current.previous_epoch } else { current.epoch };
    if !revoke.is_empty() && owns_any(owned, &revoke) {
        return Current {
            epoch,
            previous_epoch: moved(epoch),
            state: MemberState::UnrevokedPartitions,
            assigned: keep,
            pending_revocation: revoke,
        };
    }
    let state = if unreleased { MemberState::UnreleasedPartitions } else { MemberState::Stable };
    let mut assigned = keep;
    for (t, ps) in assign {
        assigned.entry(t).or_default().extend(ps);
    }
    Current {
        epoch: target_epoch,
        previous_epoch: moved(target_epoch),
        state,
        assigned,
        pending_revocation: Assignment::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOO: TopicId = [7; 16];

    fn a(ps: &[i32]) -> Assignment {
        if ps.is_empty() {
            return Assignment::new();
        }
        [(FOO, ps.iter().copied().collect())].into()
    }

    /// Kafka's worked example: A owns foo 0..2 at epoch 1; B joins at epoch 2 (target A {0,1},
    /// B {2}). B waits for 2 until A revoked it; A revokes on its next heartbeat.
    #[test]
    fn a_partition_moves_only_after_its_owner_revoked_it() {
        let a1 = Current {
            epoch: 1,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: a(&[0, 1, 2]),
            ..Default::default()
        };
        let b0 = Current { epoch: 0, previous_epoch: -1, ..Default::default() };
        // B first: partition 2 is still A's.
        let held_by_a = |_: &TopicId, p: i32| [0, 1, 2].contains(&p);
        let b = reconcile(&b0, 2, &a(&[2]), &held_by_a, Some(&a(&[]))).unwrap();
        assert_eq!((b.epoch, b.state, b.assigned.clone()), (2, MemberState::UnreleasedPartitions, a(&[])));
        // A's plain heartbeat (nothing reported): it must revoke 2 first, at its old epoch.
        let nobody = |_: &TopicId, _: i32| false;
        let a2 = reconcile(&a1, 2, &a(&[0, 1]), &nobody, None).unwrap();
        assert_eq!((a2.epoch, a2.state), (1, MemberState::UnrevokedPartitions));
        assert_eq!((a2.assigned.clone(), a2.pending_revocation.clone()), (a(&[0, 1]), a(&[2])));
        // Still owning 2: unchanged. Reporting {0, 1}: revoked, epoch 2.
        assert_eq!(reconcile(&a2, 2, &a(&[0, 1]), &nobody, Some(&a(&[0, 1, 2]))).unwrap(), a2);
        let a3 = reconcile(&a2, 2, &a(&[0, 1]), &nobody, Some(&a(&[0, 1]))).unwrap();
        assert_eq!(
            (a3.epoch, a3.previous_epoch, a3.state, a3.assigned.clone()),
            (2, 1, MemberState::Stable, a(&[0, 1]))
        );
        // Now B gets 2.
        let b2 = reconcile(&b, 2, &a(&[2]), &nobody, None).unwrap();
        assert_eq!((b2.epoch, b2.state, b2.assigned), (2, MemberState::Stable, a(&[2])));
    }

    #[test]
    fn an_unknown_member_claiming_partitions_is_fenced() {
        let u = Current { state: MemberState::Unknown, ..Default::default() };
        let nobody = |_: &TopicId, _: i32| false;
        assert_eq!(reconcile(&u, 3, &a(&[1]), &nobody, Some(&a(&[1]))), Err(Fenced));
        assert_eq!(reconcile(&u, 3, &a(&[1]), &nobody, None), Err(Fenced));
        assert_eq!(reconcile(&u, 3, &a(&[1]), &nobody, Some(&a(&[]))).unwrap().assigned, a(&[1]));
    }
}
