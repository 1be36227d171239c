//! The model of consumer groups: a map of groups and a map of committed offsets, restating
//! `state_machine::groups` (fencing by stored generation and members, deletions, expiry from a
//! cursor in key order: group id length, group id, topic-partition).

use std::collections::BTreeMap;

use diskless_coordinator::state_machine::*;
use uuid::Uuid;

use super::fail;

/// An offset row's place in the real key order.
pub type OffsetKey = (usize, String, TopicPartition);

fn key(group: &str, tp: TopicPartition) -> OffsetKey {
    (group.len(), group.to_string(), tp)
}

#[derive(Debug, Clone, Default)]
pub struct Groups {
    pub groups: BTreeMap<String, GroupRecord>,
    pub offsets: BTreeMap<OffsetKey, OffsetRecord>,
    pub cursor: Option<OffsetKey>,
}

fn check_id(id: &str) -> Result<(), Failure> {
    if id.is_empty() || id.len() > u16::MAX as usize {
        return fail(ErrorCode::InvalidGroupId);
    }
    Ok(())
}

impl Groups {
    /// StoreGroup: a compare-and-set (a resend of a store that applied, the same group from the
    /// same coordinator, answers what is stored). The stored group gets the next version, one
    /// numbered from `now` when none is stored.
    pub fn store(&mut self, now: i64, id: &str, g: &GroupRecord, expected: u64) -> Result<GroupRecord, Failure> {
        check_id(id)?;
        let old = self.groups.get(id);
        let plain = |r: &GroupRecord| GroupRecord { updated_ms: 0, version: 0, ..r.clone() };
        if let Some(o) = old.filter(|o| o.version != expected && plain(o) == plain(g)) {
            return Ok(o.clone());
        }
        if old.map_or(0, |o| o.version) != expected {
            return fail(ErrorCode::IllegalGeneration);
        }
        let version = match old {
            Some(o) => o.version.saturating_add(1),
            None => ((now.max(0) as u64) << 20).max(1),
        };
        let stored = GroupRecord { updated_ms: now, version, ..g.clone() };
        self.groups.insert(id.to_string(), stored.clone());
        Ok(stored)
    }

    fn fence(&self, c: &CommitOffsets) -> Result<(), Failure> {
        check_id(&c.group_id)?;
        if c.generation == TXN_OFFSETS_GENERATION {
            return Ok(());
        }
        let g = self.groups.get(&c.group_id);
        let members = g.map(|g| g.members.clone()).unwrap_or_default();
        if c.generation < 0 && c.member_id.is_empty() {
            return if members.is_empty() { Ok(()) } else { fail(ErrorCode::UnknownMemberId) };
        }
        if !members.iter().any(|m| m.member_id == c.member_id) {
            return fail(ErrorCode::UnknownMemberId);
        }
        if g.map(|g| g.generation) != Some(c.generation) {
            return fail(ErrorCode::IllegalGeneration);
        }
        Ok(())
    }

    pub fn commit(
        &mut self,
        now: i64,
        c: &CommitOffsets,
        partitions_of: impl Fn(&Uuid) -> Option<i32>,
    ) -> Vec<Result<(), Failure>> {
        if let Err(f) = self.fence(c) {
            return vec![Err(f); c.offsets.len()];
        }
        c.offsets
            .iter()
            .map(|o| {
                if !partitions_of(&o.tp.topic_id).is_some_and(|n| (0..n).contains(&o.tp.partition)) {
                    return fail(ErrorCode::UnknownTopicOrPartition);
                }
                let r = OffsetRecord {
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata.clone(),
                    commit_ms: now,
                };
                self.offsets.insert(key(&c.group_id, o.tp), r);
                Ok(())
            })
            .collect()
    }

    fn has_offsets(&self, id: &str) -> bool {
        self.offsets.keys().any(|(_, g, _)| g == id)
    }

    pub fn delete_groups(&mut self, ids: &[String]) -> Vec<Result<(), Failure>> {
        ids.iter()
            .map(|id| {
                check_id(id)?;
                let g = self.groups.get(id);
                if g.is_some_and(|g| !g.members.is_empty()) {
                    return fail(ErrorCode::NonEmptyGroup);
                }
                if g.is_none() && !self.has_offsets(id) {
                    return fail(ErrorCode::GroupIdNotFound);
                }
                self.groups.remove(id);
                self.offsets.retain(|(_, g, _), _| g != id);
                Ok(())
            })
            .collect()
    }

    pub fn delete_offsets(&mut self, id: &str, tps: &[TopicPartition]) -> Vec<Result<(), Failure>> {
        let refused = check_id(id).and_then(|()| match self.groups.get(id) {
            Some(g) if !g.members.is_empty() => fail(ErrorCode::GroupSubscribedToTopic),
            _ => Ok(()),
        });
        if let Err(f) = refused {
            return vec![Err(f); tps.len()];
        }
        tps.iter()
            .map(|tp| {
                self.offsets.remove(&key(id, *tp));
                Ok(())
            })
            .collect()
    }

    pub fn drop_topic(&mut self, topic_id: &Uuid) {
        self.offsets.retain(|(_, _, tp), _| tp.topic_id != *topic_id);
    }

    pub fn expire(&mut self, now: i64, retention_ms: i64, budget: u32) -> Outcome {
        if retention_ms < 0 {
            return Outcome::ExpireOffsets { offsets_expired: 0, groups_expired: 0, more: false };
        }
        let from = self.cursor.take();
        let mut rows: Vec<OffsetKey> =
            self.offsets.keys().filter(|k| from.as_ref().is_none_or(|f| *k >= f)).cloned().collect();
        let next = (rows.len() > budget as usize).then(|| rows[budget as usize].clone());
        rows.truncate(budget as usize);
        let (mut offsets, mut groups) = (0, 0);
        let mut touched: Vec<String> = vec![];
        for k in rows {
            let g = self.groups.get(&k.1);
            if g.is_some_and(|g| !g.members.is_empty()) {
                continue;
            }
            let since = self.offsets[&k].commit_ms.max(g.map(|g| g.updated_ms).unwrap_or(i64::MIN));
            if now.saturating_sub(since) >= retention_ms {
                self.offsets.remove(&k);
                offsets += 1;
                if !touched.contains(&k.1) {
                    touched.push(k.1.clone());
                }
            }
        }
        for id in touched {
            if !self.has_offsets(&id) && self.groups.remove(&id).is_some() {
                groups += 1;
            }
        }
        let more = next.is_some();
        self.cursor = next;
        Outcome::ExpireOffsets { offsets_expired: offsets, groups_expired: groups, more }
    }

    /// OffsetFetch of every committed offset of a group, in key order.
    pub fn fetch_all(&self, id: &str) -> Vec<(TopicPartition, Option<OffsetRecord>)> {
        if check_id(id).is_err() {
            return vec![];
        }
        self.offsets.iter().filter(|((_, g, _), _)| g == id).map(|((_, _, tp), o)| (*tp, Some(o.clone()))).collect()
    }

    /// Stored groups and groups with offsets only, by id.
    pub fn list(&self) -> Vec<(String, Option<GroupRecord>)> {
        let mut out: BTreeMap<String, Option<GroupRecord>> =
            self.groups.iter().map(|(id, g)| (id.clone(), Some(g.clone()))).collect();
        for (_, id, _) in self.offsets.keys() {
            out.entry(id.clone()).or_insert(None);
        }
        out.into_iter().collect()
    }
}
