//! A naive in-memory model of one metadata partition: plain vectors and maps, linear scans, no
//! indexes, no storage. It restates the rules of `state_machine` from the specification so
//! the model-based test can compare every answer of the real, RocksDB-backed state machine with
//! it. Where the specification leaves a choice (which error code, the purge order and budget), the
//! model follows the choice documented in the state machine's modules.

mod acls;
mod groups;
mod registry;

use std::collections::{BTreeMap, BTreeSet};

use diskless_coordinator::state_machine::*;
use uuid::Uuid;

pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
const KEPT: usize = 5;

#[derive(Debug, Clone)]
struct Topic {
    name: String,
    partitions: i32,
    retention_ms: i64,
    retention_bytes: i64,
    settings: TopicSettings,
}

#[derive(Debug, Clone, Default)]
struct Partition {
    lso: i64,
    hwm: i64,
    bytes: i64,
    deleted: bool,
    /// Stored batches in offset order (including ones below the log start not purged yet);
    /// transaction markers among them (no object key).
    batches: Vec<BatchRecord>,
    /// Open transactions: producer id -> (first offset, epoch); and the same by first offset
    /// (purged apart, as the two tables are).
    /// Producer id -> (first offset, epoch, transaction number).
    open: BTreeMap<i64, (i64, i16, u64)>,
    open_by_offset: BTreeMap<i64, i64>,
    /// Markers by offset.
    markers: BTreeMap<i64, MarkerRecord>,
    /// Aborted transactions by marker offset: (producer id, first offset, last stable offset then).
    aborted: BTreeMap<i64, (i64, i64, i64)>,
}

impl Partition {
    /// The last stable offset: the oldest open transaction's start, else the high watermark; never
    /// below the log start.
    fn stable(&self) -> i64 {
        self.open.values().map(|o| o.0).min().map_or(self.hwm, |o| o.min(self.hwm)).max(self.lso)
    }
}

#[derive(Debug, Clone)]
struct Producer {
    epoch: i16,
    /// (base seq, last seq, base offset, append time), oldest first.
    batches: Vec<(i32, i32, i64, i64)>,
    /// The last transaction number a marker ended here.
    ended: u64,
}

#[derive(Debug, Clone)]
struct File {
    size: i64,
    owners: Vec<i32>,
    live: i64,
    marked: Option<i64>,
    committed_at: i64,
    /// The commit that recorded the file (its deadline cleared, with its transactional flags, none
    /// when no batch was) and what it answered per batch (`Err` keeps only the code), for repeats;
    /// `None`: a replace recorded it (no commit of it is a repeat).
    first: Option<(CommitFile, Vec<bool>, Vec<u64>)>,
    answers: Vec<Result<CommittedBatch, ErrorCode>>,
}

#[derive(Debug, Clone)]
pub struct Model {
    metadata_partition: u32,
    num_metadata_partitions: u32,
    topics: BTreeMap<Uuid, Topic>,
    parts: BTreeMap<TopicPartition, Partition>,
    producers: BTreeMap<(TopicPartition, i64), Producer>,
    txns: BTreeMap<String, TxnRecord>,
    share_states: BTreeMap<(String, TopicPartition), ShareStateRecord>,
    files: BTreeMap<String, File>,
    /// Fenced object keys and when they were fenced (tombstones).
    fenced: BTreeMap<String, i64>,
    queue: BTreeSet<TopicPartition>,
    cursor: Option<TopicPartition>,
    /// In the producer-expiration walk: where it resumes (`Some(None)`: from the start).
    producer_cursor: Option<Option<(TopicPartition, i64)>>,
    next_batch_id: i64,
    next_producer_id: i64,
    /// Ids of deleted topics: never created again.
    deleted_ids: BTreeSet<Uuid>,
    /// Consumer groups and their committed offsets.
    pub groups: groups::Groups,
    /// The broker registry (metadata partition 0 only).
    pub registry: registry::Registry,
    /// The ACL bindings (metadata partition 0 only).
    pub acls: acls::Acls,
}

fn fail<T>(code: ErrorCode) -> Result<T, Failure> {
    Err(Failure::new(code, ""))
}

fn eff(b: &BatchRecord) -> i64 {
    if b.timestamp_type == 1 {
        b.log_append_time
    } else {
        b.batch_max_timestamp
    }
}

impl Model {
    pub fn new(metadata_partition: u32, num_metadata_partitions: u32) -> Model {
        Model {
            metadata_partition,
            num_metadata_partitions,
            topics: BTreeMap::new(),
            parts: BTreeMap::new(),
            producers: BTreeMap::new(),
            txns: BTreeMap::new(),
            share_states: BTreeMap::new(),
            files: BTreeMap::new(),
            fenced: BTreeMap::new(),
            queue: BTreeSet::new(),
            cursor: None,
            producer_cursor: None,
            next_batch_id: 0,
            next_producer_id: 0,
            deleted_ids: BTreeSet::new(),
            groups: groups::Groups::default(),
            registry: registry::Registry::default(),
            acls: acls::Acls::default(),
        }
    }

    fn owns(&self, tp: &TopicPartition) -> bool {
        tp.partition >= 0
            && diskless_proto::metadata_partition_for(
                tp.topic_id.as_bytes(),
                tp.partition,
                self.num_metadata_partitions,
            ) == self.metadata_partition
    }

    pub fn metadata_partition(&self) -> u32 {
        self.metadata_partition
    }

    fn live(&self, tp: &TopicPartition) -> Option<&Partition> {
        self.parts.get(tp).filter(|p| !p.deleted)
    }

    pub fn apply(&mut self, cmd: &Command) -> Outcome {
        let now = cmd.now_ms;
        match &cmd.op {
            Op::CreatePartitions(ts) => {
                Outcome::Topics(ts.iter().map(|t| (t.topic.topic_id, self.create(&t.topic, &t.settings))).collect())
            }
            Op::DeleteTopics { topic_ids, budget } => {
                let r = topic_ids.iter().map(|id| (*id, self.delete_topic(id))).collect();
                self.purge(now, &mut budget.clone());
                Outcome::Topics(r)
            }
            Op::CommitFile(c) => Outcome::CommitFile(self.commit(now, c, &[])),
            Op::CommitFiles(files) => Outcome::CommitFiles(
                files.iter().map(|c| self.commit_numbered(now, &c.file, &c.transactional, &c.txn_numbers)).collect(),
            ),
            Op::EndTransaction(markers) => {
                Outcome::EndTransaction(markers.iter().map(|m| self.end_txn(now, m)).collect())
            }
            Op::StoreTxn { transactional_id, record, expected_version } => {
                Outcome::Txn(self.store_txn(now, transactional_id, record, *expected_version))
            }
            Op::ExpireTxn { transactional_id, expected_version } => {
                Outcome::TxnExpired(self.expire_txn(transactional_id, *expected_version))
            }
            // Share-partition states are a compare-and-set like transactional ids; the generator
            // does not draw them (`share_states_test` covers their shape checks).
            Op::StoreShareState { group_id, tp, record, expected_version } => {
                let key = (group_id.clone(), *tp);
                let old = self.share_states.get(&key).map_or(0, |o| o.version);
                Outcome::ShareState(if old == *expected_version {
                    let stored = ShareStateRecord { version: old + 1, updated_ms: now, ..record.clone() };
                    self.share_states.insert(key, stored.clone());
                    Ok(stored)
                } else {
                    fail(ErrorCode::FencedStateEpoch)
                })
            }
            Op::DeleteShareStates { group_id, topic_ids } => {
                self.share_states
                    .retain(|(g, tp), _| g != group_id || !(topic_ids.is_empty() || topic_ids.contains(&tp.topic_id)));
                Outcome::ShareStatesDeleted(Ok(()))
            }
            Op::DeleteRecords { partitions, budget } => {
                let r = partitions.iter().map(|p| (p.tp, self.delete_records(p))).collect();
                self.purge(now, &mut budget.clone());
                Outcome::DeleteRecords(r)
            }
            Op::AlterTopicConfigs(ts) => {
                Outcome::Topics(ts.iter().map(|a| (a.topic.topic_id, self.alter(&a.topic, &a.settings))).collect())
            }
            Op::ConfirmFilesDeleted { object_keys } => {
                Outcome::ConfirmFilesDeleted(object_keys.iter().map(|k| (k.clone(), self.confirm(k, now))).collect())
            }
            Op::EnforceRetention { budget, producer_expiration_ms, fenced_object_retention_ms } => {
                Outcome::EnforceRetention(self.retention(
                    now,
                    *budget,
                    *producer_expiration_ms,
                    *fenced_object_retention_ms,
                ))
            }
            Op::Noop => Outcome::Noop,
            Op::AllocateProducerIds { count, .. } => Outcome::ProducerIds(self.allocate_producer_ids(*count)),
            Op::FenceObjects { object_keys } => {
                Outcome::FenceObjects(object_keys.iter().map(|k| (k.clone(), self.fence(k, now))).collect())
            }
            Op::StoreGroup { group_id, group, expected_version } => {
                Outcome::Group(self.groups.store(now, group_id, group, *expected_version))
            }
            Op::CommitOffsets(c) => {
                let topics = &self.topics;
                Outcome::Offsets(self.groups.commit(now, c, |id| topics.get(id).map(|t| t.partitions)))
            }
            Op::DeleteGroups { group_ids } => Outcome::Groups(self.groups.delete_groups(group_ids)),
            Op::DeleteOffsets { group_id, partitions } => {
                Outcome::Offsets(self.groups.delete_offsets(group_id, partitions))
            }
            Op::ExpireOffsets { retention_ms, budget } => self.groups.expire(now, *retention_ms, *budget),
            Op::CreateAcls(b) => Outcome::AclsCreated(self.acls.create(self.metadata_partition == 0, b)),
            Op::DeleteAcls(f) => Outcome::AclsDeleted(self.acls.delete(self.metadata_partition == 0, f)),
            Op::RegisterBroker(r) => Outcome::Broker(self.registry.register(self.metadata_partition == 0, now, r)),
            Op::BrokerHeartbeat { broker_id, incarnation, lease_ms } => Outcome::Broker(self.registry.heartbeat(
                self.metadata_partition == 0,
                now,
                *broker_id,
                *incarnation,
                *lease_ms,
            )),
            Op::UnregisterBroker { broker_id, incarnation } => {
                Outcome::Broker(self.registry.unregister(self.metadata_partition == 0, now, *broker_id, *incarnation))
            }
            Op::ReplaceBatches(r) => Outcome::ReplaceBatches(self.replace(now, r)),
        }
    }

    /// Every stored batch of `tp` (below the log start too, until purged), in offset order.
    pub fn stored_batches(&self, tp: &TopicPartition) -> Vec<BatchRecord> {
        self.parts.get(tp).map(|p| p.batches.clone()).unwrap_or_default()
    }

    /// ReplaceBatches: the batches still as read (same id and size, in another object, not a
    /// marker, not below the log start) move to the new object; the old objects lose their bytes;
    /// the new object is a file with the moved bytes live (none: marked at once).
    fn replace(&mut self, now: i64, r: &ReplaceBatches) -> Result<Vec<Replaced>, Failure> {
        let ordered = r.batches.windows(2).all(|w| w[0].last_offset < w[1].last_offset);
        let sources_ok = !r.sources.is_empty()
            && r.sources.len() <= r.batches.len()
            && r.sources.iter().all(|s| !s.is_empty() && s.len() <= 1024 && *s != r.object_key);
        let ranges_ok = r.batches.iter().all(|b| {
            (b.source as usize) < r.sources.len()
                && b.last_offset >= 0
                && b.byte_offset >= 0
                && b.byte_size > 0
                && i64::from(b.byte_offset) + i64::from(b.byte_size) <= r.file_size
        });
        if r.object_key.is_empty()
            || r.object_key.len() > 1024
            || r.object_format != 1
            || r.file_size < 0
            || r.batches.is_empty()
            || r.batches.len() > MAX_REPLACED_BATCHES
            || !ordered
            || !sources_ok
            || !ranges_ok
        {
            return fail(ErrorCode::InvalidRequest);
        }
        if self.fenced.contains_key(&r.object_key) {
            return fail(ErrorCode::KafkaStorageError);
        }
        let at = |m: &Model, b: &ReplacedBatch| -> Option<BatchRecord> {
            m.parts.get(&r.tp)?.batches.iter().find(|s| s.last_offset == b.last_offset).cloned()
        };
        if self.files.contains_key(&r.object_key) {
            return Ok(r
                .batches
                .iter()
                .map(|b| match at(self, b) {
                    Some(s)
                        if s.batch_id == b.batch_id
                            && s.object_key == r.object_key
                            && s.byte_offset == b.byte_offset =>
                    {
                        Replaced::Replaced
                    }
                    _ => Replaced::Changed,
                })
                .collect());
        }
        let lso = self.live(&r.tp).map(|p| p.lso);
        let mut out = vec![];
        let mut live = 0;
        for b in &r.batches {
            let moved = match (lso, at(self, b)) {
                (Some(lso), Some(s))
                    if s.batch_id == b.batch_id
                        && !s.object_key.is_empty()
                        && s.byte_size == b.byte_size
                        && s.object_key == r.sources[b.source as usize]
                        && s.last_offset >= lso =>
                {
                    Some(s)
                }
                _ => None,
            };
            let Some(s) = moved else {
                out.push(Replaced::Changed);
                continue;
            };
            self.release(&s.object_key, i64::from(s.byte_size), now);
            let part = self.parts.get_mut(&r.tp).expect("found above");
            let stored = part.batches.iter_mut().find(|x| x.last_offset == b.last_offset).expect("found above");
            stored.object_key = r.object_key.clone();
            stored.byte_offset = b.byte_offset;
            live += i64::from(b.byte_size);
            out.push(Replaced::Replaced);
        }
        self.files.insert(
            r.object_key.clone(),
            File {
                size: r.file_size,
                owners: vec![self.metadata_partition as i32],
                live,
                marked: (live == 0).then_some(now),
                committed_at: now,
                first: None,
                answers: vec![],
            },
        );
        Ok(out)
    }

    /// One counter in metadata partition 0; blocks of 1 to a million ids.
    fn allocate_producer_ids(&mut self, count: u32) -> Result<ProducerIdBlock, Failure> {
        if self.metadata_partition != 0 || count == 0 || count > 1_000_000 {
            return fail(ErrorCode::InvalidRequest);
        }
        let first = self.next_producer_id;
        self.next_producer_id += i64::from(count);
        Ok(ProducerIdBlock { first, len: count })
    }

    fn create(&mut self, t: &CreateTopic, settings: &TopicSettings) -> Result<(), Failure> {
        if t.topic_id.is_nil() {
            return fail(ErrorCode::InvalidRequest);
        }
        let n = &t.name;
        let name_ok = !n.is_empty()
            && n.len() <= 249
            && n != "."
            && n != ".."
            && n.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !name_ok {
            return fail(ErrorCode::InvalidTopicException);
        }
        if t.num_partitions < 1 || t.num_partitions > MAX_PARTITIONS {
            return fail(ErrorCode::InvalidPartitions);
        }
        if t.retention_ms.is_some_and(|v| v < -1) || t.retention_bytes.is_some_and(|v| v < -1) || !settings_ok(settings)
        {
            return fail(ErrorCode::InvalidConfig);
        }
        let old = match self.topics.get(&t.topic_id) {
            Some(existing) => {
                if existing.name != t.name {
                    return fail(ErrorCode::InvalidRequest);
                }
                if t.num_partitions < existing.partitions {
                    return fail(ErrorCode::InvalidPartitions);
                }
                existing.partitions
            }
            None => {
                if self.topics.values().any(|x| x.name == t.name) {
                    return fail(ErrorCode::TopicAlreadyExists);
                }
                if self.deleted_ids.contains(&t.topic_id) {
                    return fail(ErrorCode::UnknownTopicId);
                }
                self.topics.insert(
                    t.topic_id,
                    Topic {
                        name: t.name.clone(),
                        partitions: 0,
                        retention_ms: t.retention_ms.unwrap_or(DEFAULT_RETENTION_MS),
                        retention_bytes: t.retention_bytes.unwrap_or(-1),
                        settings: settings.clone(),
                    },
                );
                0
            }
        };
        self.topics.get_mut(&t.topic_id).unwrap().partitions = t.num_partitions;
        for p in old..t.num_partitions {
            let tp = TopicPartition { topic_id: t.topic_id, partition: p };
            if self.owns(&tp) {
                self.parts.insert(tp, Partition::default());
            }
        }
        Ok(())
    }

    fn delete_topic(&mut self, id: &Uuid) -> Result<(), Failure> {
        self.deleted_ids.insert(*id);
        let Some(t) = self.topics.remove(id) else { return fail(ErrorCode::UnknownTopicId) };
        self.groups.drop_topic(id);
        for p in 0..t.partitions {
            let tp = TopicPartition { topic_id: *id, partition: p };
            if let Some(part) = self.parts.get_mut(&tp).filter(|p| !p.deleted) {
                part.deleted = true;
                self.queue.insert(tp);
            }
        }
        Ok(())
    }

    fn release(&mut self, key: &str, bytes: i64, now: i64) {
        let f = self.files.get_mut(key).expect("batch of an unknown file");
        f.live -= bytes;
        if f.live <= 0 && f.marked.is_none() {
            f.live = 0;
            f.marked = Some(now);
        }
    }

    /// Returns whether the queue is empty afterwards.
    fn purge(&mut self, now: i64, budget: &mut u32) -> (bool, u64) {
        let mut deleted = 0;
        loop {
            let Some(&tp) = self.queue.iter().next() else { return (true, deleted) };
            let part = self.parts.get(&tp).unwrap();
            let below = if part.deleted { i64::MAX } else { part.lso };
            while self.parts[&tp].batches.first().is_some_and(|b| b.last_offset < below) {
                if *budget == 0 {
                    return (false, deleted);
                }
                *budget -= 1;
                deleted += 1;
                let b = self.parts.get_mut(&tp).unwrap().batches.remove(0);
                self.forget(&tp, &b, now);
            }
            if self.parts[&tp].deleted {
                let mine: Vec<_> = self.producers.keys().filter(|(t, _)| *t == tp).copied().collect();
                for k in mine {
                    if *budget == 0 {
                        return (false, deleted);
                    }
                    *budget -= 1;
                    self.producers.remove(&k);
                }
                let part = self.parts.get_mut(&tp).unwrap();
                while let Some((&pid, _)) = part.open.iter().next() {
                    if *budget == 0 {
                        return (false, deleted);
                    }
                    *budget -= 1;
                    part.open.remove(&pid);
                }
                while let Some((&first, _)) = part.open_by_offset.iter().next() {
                    if *budget == 0 {
                        return (false, deleted);
                    }
                    *budget -= 1;
                    part.open_by_offset.remove(&first);
                }
            }
            if *budget == 0 {
                return (false, deleted);
            }
            *budget -= 1;
            self.queue.remove(&tp);
            if self.parts[&tp].deleted {
                self.parts.remove(&tp);
            }
        }
    }

    /// A deleted batch's bytes off its partition and file, or a marker's records.
    fn forget(&mut self, tp: &TopicPartition, b: &BatchRecord, now: i64) {
        let part = self.parts.get_mut(tp).unwrap();
        if b.object_key.is_empty() {
            part.markers.remove(&b.base_offset);
            part.aborted.remove(&b.base_offset);
            return;
        }
        part.bytes -= i64::from(b.byte_size);
        self.release(&b.object_key, i64::from(b.byte_size), now);
    }

    /// EndTransaction, one marker.
    fn end_txn(&mut self, now: i64, m: &TxnMarker) -> Result<Option<i64>, Failure> {
        if m.producer_id < 0 || m.producer_epoch < 0 {
            return fail(ErrorCode::InvalidRequest);
        }
        if self.live(&m.tp).is_none() {
            return fail(ErrorCode::UnknownTopicOrPartition);
        }
        let key = (m.tp, m.producer_id);
        if self.producers.get(&key).is_some_and(|p| m.producer_epoch < p.epoch) {
            return fail(ErrorCode::InvalidProducerEpoch);
        }
        // Numbered on both sides: only the same number ends it; else the epoch must be later.
        let open = self.parts[&m.tp].open.get(&m.producer_id).copied();
        let numbered = open.is_some_and(|o| m.txn_number != 0 && o.2 != 0);
        let ends = open.is_some() && (!numbered || open.is_some_and(|o| o.2 == m.txn_number));
        if ends && !numbered && open.is_some_and(|o| m.producer_epoch <= o.1) {
            return fail(ErrorCode::InvalidProducerEpoch);
        }
        let id = (i64::from(self.metadata_partition) << 47) | self.next_batch_id;
        let part = self.parts.get_mut(&m.tp).unwrap();
        let ended = if ends { part.open.remove(&m.producer_id) } else { None };
        let written = match ended {
            None => None,
            Some((first, _, _)) => {
                part.open_by_offset.remove(&first);
                let at = part.hwm;
                self.next_batch_id += 1;
                part.batches.push(BatchRecord {
                    batch_id: id,
                    object_key: String::new(),
                    magic: 2,
                    byte_offset: 0,
                    byte_size: 0,
                    base_offset: at,
                    last_offset: at,
                    log_append_time: now,
                    batch_max_timestamp: now,
                    timestamp_type: 0,
                });
                part.markers.insert(
                    at,
                    MarkerRecord {
                        producer_id: m.producer_id,
                        producer_epoch: m.producer_epoch,
                        commit: m.commit,
                        coordinator_epoch: m.coordinator_epoch,
                    },
                );
                part.hwm += 1;
                if !m.commit {
                    let stable = part.open.values().map(|o| o.0).min().unwrap_or(part.hwm);
                    part.aborted.insert(at, (m.producer_id, first, stable));
                }
                Some(at)
            }
        };
        let fenced_at = written.unwrap_or(part.hwm);
        let ended = self.producers.get(&key).map_or(0, |p| p.ended).max(m.txn_number);
        match self.producers.get_mut(&key) {
            Some(p) if p.epoch == m.producer_epoch => p.ended = ended,
            _ => {
                let batches = vec![(-1, -1, fenced_at, now)];
                self.producers.insert(key, Producer { epoch: m.producer_epoch, batches, ended });
            }
        }
        Ok(written)
    }

    /// StoreTxn: a compare-and-set on the version.
    fn store_txn(&mut self, now: i64, id: &str, r: &TxnRecord, expected: u64) -> Result<TxnRecord, Failure> {
        if id.is_empty() {
            return fail(ErrorCode::InvalidRequest);
        }
        let old = self.txns.get(id);
        if old.map_or(0, |o| o.version) != expected {
            return fail(ErrorCode::TransactionCoordinatorFenced);
        }
        let same = old.is_some_and(|o| o.state == TxnState::Ongoing && o.txn_number == r.txn_number);
        let started_ms = if r.state == TxnState::Ongoing && !same { now } else { old.map_or(-1, |o| o.started_ms) };
        // A record created anew is numbered from the command's time (no copy of an earlier one
        // can hold that version), else the next one.
        let version = if expected == 0 { ((now.max(0) as u64) << 20).max(1) } else { expected + 1 };
        let stored = TxnRecord { started_ms, updated_ms: now, version, ..r.clone() };
        self.txns.insert(id.to_string(), stored.clone());
        Ok(stored)
    }

    /// ExpireTxn: forgets an idle id at the version expected.
    fn expire_txn(&mut self, id: &str, expected: u64) -> Result<(), Failure> {
        if id.is_empty() {
            return fail(ErrorCode::InvalidRequest);
        }
        let Some(old) = self.txns.get(id).filter(|o| o.version == expected) else {
            return fail(ErrorCode::TransactionCoordinatorFenced);
        };
        if !matches!(old.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort) {
            return fail(ErrorCode::InvalidTxnState);
        }
        self.txns.remove(id);
        Ok(())
    }

    /// The stored version of transactional id `id` (0: none).
    pub fn txn_version(&self, id: &str) -> u64 {
        self.txns.get(id).map_or(0, |t| t.version)
    }

    /// Every transactional id's state.
    pub fn txns(&self) -> &BTreeMap<String, TxnRecord> {
        &self.txns
    }

    /// Every (partition, producer) with an open transaction.
    pub fn open_txns(&self) -> Vec<(TopicPartition, i64)> {
        self.parts.iter().flat_map(|(tp, p)| p.open.keys().map(move |pid| (*tp, *pid))).collect()
    }

    fn delete_records(&mut self, p: &DeleteRecordsPartition) -> Result<i64, Failure> {
        let Some(part) = self.parts.get_mut(&p.tp).filter(|x| !x.deleted) else {
            return fail(ErrorCode::UnknownTopicOrPartition);
        };
        let target = if p.offset == -1 { part.hwm } else { p.offset };
        if target < 0 || target > part.hwm {
            return fail(ErrorCode::OffsetOutOfRange);
        }
        if target > part.lso {
            part.lso = target;
            if part.batches.iter().any(|b| b.last_offset < target) {
                self.queue.insert(p.tp);
            }
        }
        Ok(part.lso)
    }

    fn alter(&mut self, a: &AlterTopic, changes: &[SettingChange]) -> Result<(), Failure> {
        let Some(t) = self.topics.get_mut(&a.topic_id) else { return fail(ErrorCode::UnknownTopicId) };
        let mut settings = t.settings.clone();
        for c in changes {
            match *c {
                SettingChange::MaxMessageBytes(v) => settings.max_message_bytes = v,
                SettingChange::TimestampType(v) => settings.timestamp_type = v,
                SettingChange::TimestampBeforeMaxMs(v) => settings.timestamp_before_max_ms = v,
                SettingChange::TimestampAfterMaxMs(v) => settings.timestamp_after_max_ms = v,
            }
        }
        if a.retention_ms.is_some_and(|v| v < -1)
            || a.retention_bytes.is_some_and(|v| v < -1)
            || !settings_ok(&settings)
        {
            return fail(ErrorCode::InvalidConfig);
        }
        t.retention_ms = a.retention_ms.unwrap_or(t.retention_ms);
        t.retention_bytes = a.retention_bytes.unwrap_or(t.retention_bytes);
        t.settings = settings;
        Ok(())
    }

    /// ListTopics: every topic with its retention and settings, in id order.
    pub fn topics(&self) -> Vec<TopicInfo> {
        self.topics
            .iter()
            .map(|(id, t)| TopicInfo {
                topic_id: *id,
                name: t.name.clone(),
                num_partitions: t.partitions,
                retention_ms: t.retention_ms,
                retention_bytes: t.retention_bytes,
                settings: t.settings.clone(),
            })
            .collect()
    }

    fn confirm(&mut self, key: &str, now: i64) -> Result<(), Failure> {
        match self.files.get(key) {
            None => Ok(()),
            Some(f) if f.marked.is_some() => {
                self.files.remove(key);
                self.fenced.insert(key.to_string(), now);
                Ok(())
            }
            Some(_) => fail(ErrorCode::InvalidRequest),
        }
    }

    fn fence(&mut self, key: &str, now: i64) -> Result<FenceAnswer, Failure> {
        if key.is_empty() || key.len() > 1024 {
            return fail(ErrorCode::InvalidRequest);
        }
        if let Some(f) = self.files.get(key) {
            return Ok(match f.marked {
                None => FenceAnswer::Live,
                Some(at) => FenceAnswer::Released { marked_at: at },
            });
        }
        let at = *self.fenced.entry(key.to_string()).or_insert(now);
        Ok(FenceAnswer::Fenced { fenced_at: at })
    }

    fn retention(&mut self, now: i64, mut budget: u32, expiration: i64, fenced_retention: i64) -> RetentionReport {
        let mut r = RetentionReport::default();
        let (empty, deleted) = self.purge(now, &mut budget);
        r.batches_deleted = deleted;
        if !empty {
            r.more = true;
            return r;
        }
        if fenced_retention >= 0 {
            // Oldest first (then by key), one unit each.
            let mut old: Vec<(i64, String)> = self
                .fenced
                .iter()
                .filter(|(_, at)| **at <= now.saturating_sub(fenced_retention))
                .map(|(k, at)| (*at, k.clone()))
                .collect();
            old.sort();
            for (_, k) in old {
                if budget == 0 {
                    r.more = true;
                    return r;
                }
                budget -= 1;
                r.fenced_forgotten += 1;
                self.fenced.remove(&k);
            }
        }
        if expiration < 0 {
            self.producer_cursor = None;
        }
        if self.producer_cursor.is_none() {
            if !self.walk_partitions(now, &mut budget, &mut r) {
                r.more = true;
                return r;
            }
            if expiration < 0 {
                return r;
            }
            self.producer_cursor = Some(None);
        }
        // Expire producer states idle for `expiration`, one unit per state examined.
        let from = self.producer_cursor.flatten();
        let states: Vec<(TopicPartition, i64)> =
            self.producers.keys().filter(|k| from.is_none_or(|c| **k >= c)).copied().collect();
        for k in states {
            if budget == 0 {
                self.producer_cursor = Some(Some(k));
                r.more = true;
                return r;
            }
            budget -= 1;
            let open = self.parts.get(&k.0).is_some_and(|p| p.open.contains_key(&k.1));
            if self.producers[&k].batches.last().is_none_or(|b| now - b.3 >= expiration) && !open {
                self.producers.remove(&k);
                r.producers_expired += 1;
            }
        }
        self.producer_cursor = None;
        r
    }

    /// The retention walk over the partitions; false when the budget ran out first.
    fn walk_partitions(&mut self, now: i64, budget: &mut u32, r: &mut RetentionReport) -> bool {
        let start = self.cursor;
        let tps: Vec<TopicPartition> = self
            .parts
            .iter()
            .filter(|(tp, p)| !p.deleted && start.is_none_or(|c| **tp >= c))
            .map(|(tp, _)| *tp)
            .collect();
        for tp in tps {
            if *budget == 0 {
                self.cursor = Some(tp);
                return false;
            }
            *budget -= 1;
            r.partitions_examined += 1;
            let Some(t) = self.topics.get(&tp.topic_id).cloned() else { continue };
            if t.retention_ms < 0 && t.retention_bytes < 0 {
                continue;
            }
            loop {
                let part = &self.parts[&tp];
                let Some(b) = part.batches.first() else { break };
                let old = t.retention_ms >= 0 && eff(b) < now.saturating_sub(t.retention_ms);
                let big = t.retention_bytes >= 0 && part.bytes - i64::from(b.byte_size) >= t.retention_bytes;
                let unstable = part.open.values().any(|o| b.last_offset >= o.0);
                if !(old || big) || unstable {
                    break;
                }
                if *budget == 0 {
                    self.cursor = Some(tp);
                    return false;
                }
                *budget -= 1;
                r.batches_deleted += 1;
                let part = self.parts.get_mut(&tp).unwrap();
                let b = part.batches.remove(0);
                part.lso = part.lso.max(b.last_offset + 1);
                self.forget(&tp, &b, now);
            }
        }
        self.cursor = None;
        true
    }

    fn commit(&mut self, now: i64, c: &CommitFile, flags: &[bool]) -> Vec<Result<CommittedBatch, Failure>> {
        self.commit_numbered(now, c, flags, &[])
    }

    fn commit_numbered(
        &mut self,
        now: i64,
        c: &CommitFile,
        flags: &[bool],
        numbers: &[u64],
    ) -> Vec<Result<CommittedBatch, Failure>> {
        if c.deadline_ms.is_some_and(|d| now > d) {
            return c.batches.iter().map(|_| fail(ErrorCode::RequestTimedOut)).collect();
        }
        let owners_bad = c.owner_ids.iter().any(|&o| o < 0 || o >= self.num_metadata_partitions as i32)
            || c.owner_ids.iter().collect::<BTreeSet<_>>().len() != c.owner_ids.len()
            || !c.owner_ids.contains(&(self.metadata_partition as i32));
        let file_bad = c.object_key.is_empty()
            || c.object_key.len() > 1024
            || c.object_format != 1
            || c.file_size < 0
            || owners_bad
            || (!flags.is_empty() && flags.len() != c.batches.len())
            || (!numbers.is_empty() && numbers.len() != c.batches.len());
        if file_bad {
            return c.batches.iter().map(|_| fail(ErrorCode::InvalidRequest)).collect();
        }
        if self.fenced.contains_key(&c.object_key) {
            return c.batches.iter().map(|_| fail(ErrorCode::KafkaStorageError)).collect();
        }
        let numbered = if numbers.iter().any(|&n| n != 0) { numbers.to_vec() } else { vec![] };
        let mut same = (c.clone(), if flags.contains(&true) { flags.to_vec() } else { vec![] }, numbered);
        same.0.deadline_ms = None;
        if let Some(f) = self.files.get(&c.object_key) {
            if f.first.as_ref() != Some(&same) {
                return c.batches.iter().map(|_| fail(ErrorCode::InvalidRequest)).collect();
            }
            // A repeat: the first answers; offsets and times as first given, the log start as now.
            return f
                .answers
                .iter()
                .zip(&c.batches)
                .map(|(a, b)| match a {
                    Ok(x) => Ok(CommittedBatch {
                        log_start_offset: self.live(&b.tp).map_or(-1, |p| p.lso),
                        log_append_time: if x.is_duplicate { x.log_append_time } else { f.committed_at },
                        ..*x
                    }),
                    Err(code) => fail(*code),
                })
                .collect();
        }
        let mut live = 0;
        let mut out = vec![];
        for (i, b) in c.batches.iter().enumerate() {
            let txn = flags.get(i).copied().unwrap_or(false);
            let number = if txn { numbers.get(i).copied().unwrap_or(0) } else { 0 };
            let r = self.commit_batch(now, c, b, txn, number);
            if matches!(r, Ok(CommittedBatch { is_duplicate: false, .. })) {
                live += i64::from(b.size);
            }
            out.push(r);
        }
        self.files.insert(
            c.object_key.clone(),
            File {
                size: c.file_size,
                owners: c.owner_ids.clone(),
                live,
                marked: (live == 0).then_some(now),
                committed_at: now,
                first: Some(same),
                answers: out.iter().map(|r| r.clone().map_err(|f| f.code)).collect(),
            },
        );
        out
    }

    fn commit_batch(
        &mut self,
        now: i64,
        c: &CommitFile,
        b: &CommitBatch,
        txn: bool,
        number: u64,
    ) -> Result<CommittedBatch, Failure> {
        if b.magic != 2 || !(0..=1).contains(&b.timestamp_type) {
            return fail(ErrorCode::CorruptMessage);
        }
        if b.size <= 0 || b.byte_offset < 0 || i64::from(b.byte_offset) + i64::from(b.size) > c.file_size {
            return fail(ErrorCode::InvalidRequest);
        }
        if b.base_offset < 0 || b.last_offset < b.base_offset || b.last_offset - b.base_offset >= i64::from(i32::MAX) {
            return fail(ErrorCode::CorruptMessage);
        }
        let count = b.last_offset - b.base_offset + 1;
        if b.producer_id < -1 {
            return fail(ErrorCode::InvalidRequest);
        }
        let idem = b.producer_id >= 0;
        if idem {
            if b.producer_epoch < 0 || b.base_sequence < 0 || b.last_sequence < 0 {
                return fail(ErrorCode::InvalidRequest);
            }
            // Count the sequences one by one (mod 2^31), the naive way.
            let span = (i64::from(b.last_sequence) - i64::from(b.base_sequence)).rem_euclid(1 << 31) + 1;
            if span != count {
                return fail(ErrorCode::CorruptMessage);
            }
        }
        let Some(part) = self.live(&b.tp).cloned() else { return fail(ErrorCode::UnknownTopicOrPartition) };
        let key = (b.tp, b.producer_id);
        if idem {
            match self.producers.get(&key) {
                None if b.base_sequence != 0 => return fail(ErrorCode::OutOfOrderSequenceNumber),
                None => {}
                Some(p) if b.producer_epoch < p.epoch => return fail(ErrorCode::InvalidProducerEpoch),
                Some(p) if b.producer_epoch > p.epoch && b.base_sequence != 0 => {
                    return fail(ErrorCode::OutOfOrderSequenceNumber)
                }
                Some(p) if b.producer_epoch > p.epoch => {}
                Some(p) => {
                    if let Some(d) = p.batches.iter().find(|d| d.0 == b.base_sequence && d.1 == b.last_sequence) {
                        return Ok(CommittedBatch {
                            assigned_base_offset: d.2,
                            log_append_time: d.3,
                            log_start_offset: part.lso,
                            is_duplicate: true,
                        });
                    }
                    let last = p.batches.last().unwrap().1;
                    let expected = if last == i32::MAX { 0 } else { last + 1 };
                    if b.base_sequence != expected {
                        return fail(ErrorCode::OutOfOrderSequenceNumber);
                    }
                }
            }
        }
        if txn && !idem {
            return fail(ErrorCode::InvalidRecord);
        }
        let open = part.open.contains_key(&b.producer_id);
        if idem && open && !txn {
            return fail(ErrorCode::InvalidTxnState);
        }
        if number != 0 {
            let other = part.open.get(&b.producer_id).is_some_and(|o| o.2 != 0 && o.2 != number);
            let ended = !open && self.producers.get(&key).is_some_and(|p| p.ended >= number);
            if other || ended {
                return fail(ErrorCode::InvalidTxnState);
            }
        }
        let base = part.hwm;
        let id = (i64::from(self.metadata_partition) << 47) | self.next_batch_id;
        self.next_batch_id += 1;
        let rec = BatchRecord {
            batch_id: id,
            object_key: c.object_key.clone(),
            magic: b.magic,
            byte_offset: b.byte_offset,
            byte_size: b.size,
            base_offset: base,
            last_offset: base + count - 1,
            log_append_time: now,
            batch_max_timestamp: b.batch_max_timestamp,
            timestamp_type: b.timestamp_type,
        };
        let p = self.parts.get_mut(&b.tp).unwrap();
        p.batches.push(rec);
        p.hwm += count;
        p.bytes += i64::from(b.size);
        if txn && !open {
            p.open.insert(b.producer_id, (base, b.producer_epoch, number));
            p.open_by_offset.insert(base, b.producer_id);
        }
        let lso = p.lso;
        if idem {
            let entry =
                self.producers.entry(key).or_insert(Producer { epoch: b.producer_epoch, batches: vec![], ended: 0 });
            if entry.epoch != b.producer_epoch {
                entry.epoch = b.producer_epoch;
                entry.batches.clear();
            }
            entry.batches.push((b.base_sequence, b.last_sequence, base, now));
            if entry.batches.len() > KEPT {
                entry.batches.remove(0);
            }
        }
        Ok(CommittedBatch {
            assigned_base_offset: base,
            log_append_time: now,
            log_start_offset: lso,
            is_duplicate: false,
        })
    }

    // ------------------------------------------------------------------ queries

    /// ListOffsets; `committed`: read_committed. Markers count as batches (their time is when they
    /// were written).
    pub fn list_offsets(&self, tp: &TopicPartition, ts: i64, committed: bool) -> Result<OffsetAndTimestamp, Failure> {
        let Some(p) = self.live(tp) else { return fail(ErrorCode::UnknownTopicOrPartition) };
        let end = if committed { p.stable() } else { p.hwm };
        let none = OffsetAndTimestamp { offset: -1, timestamp: -1 };
        let live: Vec<&BatchRecord> = p.batches.iter().filter(|b| b.last_offset >= p.lso).collect();
        let pick = |b: Option<&&BatchRecord>| {
            b.filter(|b| b.base_offset < end)
                .map_or(none, |b| OffsetAndTimestamp { offset: b.base_offset.max(p.lso), timestamp: eff(b) })
        };
        match ts {
            -2 | -4 => Ok(OffsetAndTimestamp { offset: p.lso, timestamp: -1 }),
            -1 => Ok(OffsetAndTimestamp { offset: end, timestamp: -1 }),
            -5 => Ok(none),
            -3 => {
                let mut best: Option<&&BatchRecord> = None;
                for b in &live {
                    if best.is_none_or(|x| eff(b) > eff(x)) {
                        best = Some(b);
                    }
                }
                Ok(pick(best))
            }
            t if t >= 0 => Ok(pick(live.iter().find(|b| eff(b) >= t))),
            _ => fail(ErrorCode::InvalidRequest),
        }
    }

    /// FindBatches over several partitions sharing the request limits; `committed`: read_committed.
    pub fn find_batches(
        &self,
        fetch_max_bytes: i32,
        max_batches: i32,
        reqs: &[(TopicPartition, i64, i32)],
        committed: bool,
    ) -> Vec<PartitionBatches> {
        let mut remaining = i64::from(fetch_max_bytes.max(0));
        let mut any = false;
        let mut left = MAX_BATCHES_PER_FETCH;
        let per = if max_batches <= 0 { usize::MAX } else { max_batches as usize };
        let mut out = vec![];
        for &(tp, offset, max_part) in reqs {
            let Some(p) = self.live(&tp) else {
                out.push(PartitionBatches {
                    error: Some(Failure::new(ErrorCode::UnknownTopicOrPartition, "")),
                    log_start_offset: -1,
                    high_watermark: -1,
                    last_stable_offset: -1,
                    batches: vec![],
                    markers: vec![],
                    aborted: vec![],
                });
                continue;
            };
            let mut r = PartitionBatches {
                error: None,
                log_start_offset: p.lso,
                high_watermark: p.hwm,
                last_stable_offset: p.stable(),
                batches: vec![],
                markers: vec![],
                aborted: vec![],
            };
            let end = if committed { p.stable() } else { i64::MAX };
            if offset < p.lso || offset > p.hwm {
                r.error = Some(Failure::new(ErrorCode::OffsetOutOfRange, ""));
            } else if max_part < 0 {
                r.error = Some(Failure::new(ErrorCode::InvalidRequest, ""));
            } else {
                let limit = i64::from(max_part).min(remaining);
                let mut taken = 0;
                for b in p.batches.iter().filter(|b| b.last_offset >= offset) {
                    if r.batches.len() >= per || left == 0 || b.base_offset >= end {
                        break;
                    }
                    let first = r.batches.is_empty() && !any;
                    if taken + i64::from(b.byte_size) > limit && !first {
                        break;
                    }
                    taken += i64::from(b.byte_size);
                    left -= 1;
                    r.batches.push(b.clone());
                }
                remaining = (remaining - taken).max(0);
                any |= !r.batches.is_empty();
                r.markers = r
                    .batches
                    .iter()
                    .filter(|b| b.object_key.is_empty())
                    .map(|b| (b.base_offset, p.markers[&b.base_offset]))
                    .collect();
                if let (true, Some(last)) = (committed, r.batches.last()) {
                    let upper = last.last_offset + 1;
                    for (_, &(pid, first, stable)) in p.aborted.range(offset.max(0)..) {
                        if first < upper {
                            r.aborted.push(partition_txns::AbortedTxn { producer_id: pid, first_offset: first });
                        }
                        if stable >= upper {
                            break;
                        }
                    }
                }
            }
            out.push(r);
        }
        out
    }

    pub fn describe(&self, key: &str) -> FileState {
        let f = self.files.get(key);
        FileState { known: f.is_some(), has_live_batches: f.is_some_and(|f| f.marked.is_none()) }
    }

    pub fn to_delete(&self, limit: usize) -> Vec<FileToDelete> {
        let mut v: Vec<FileToDelete> = self
            .files
            .iter()
            .filter_map(|(k, f)| {
                f.marked.map(|at| FileToDelete {
                    object_key: k.clone(),
                    marked_for_deletion_at: at,
                    file_size: f.size,
                    owner_ids: f.owners.clone(),
                })
            })
            .collect();
        v.sort_by(|a, b| (a.marked_for_deletion_at, &a.object_key).cmp(&(b.marked_for_deletion_at, &b.object_key)));
        v.truncate(limit.min(MAX_FILES_TO_DELETE));
        v
    }

    pub fn known_keys(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    pub fn fenced_keys(&self) -> Vec<String> {
        self.fenced.keys().cloned().collect()
    }

    /// The client's view of what a producer's next batch may look like: (epoch, last base seq,
    /// last last seq) of its newest batch on `tp`.
    pub fn producer_tail(&self, tp: &TopicPartition, pid: i64) -> Option<(i16, i32, i32)> {
        self.producers.get(&(*tp, pid)).and_then(|p| p.batches.last().map(|b| (p.epoch, b.0, b.1)))
    }

    /// A producer's batches a retry may repeat (not the entry a marker leaves).
    pub fn producer_history(&self, tp: &TopicPartition, pid: i64) -> Vec<(i16, i32, i32)> {
        self.producers
            .get(&(*tp, pid))
            .map(|p| p.batches.iter().filter(|b| b.0 >= 0).map(|b| (p.epoch, b.0, b.1)).collect())
            .unwrap_or_default()
    }

    pub fn hwm(&self, tp: &TopicPartition) -> Option<(i64, i64)> {
        self.live(tp).map(|p| (p.lso, p.hwm))
    }
}

/// Kafka's ranges for the broker-enforced settings: sizes and durations at least 0, timestamp type
/// 0 (CreateTime) or 1 (LogAppendTime).
fn settings_ok(s: &TopicSettings) -> bool {
    s.max_message_bytes.is_none_or(|v| v >= 0)
        && s.timestamp_type.is_none_or(|v| v == 0 || v == 1)
        && s.timestamp_before_max_ms.is_none_or(|v| v >= 0)
        && s.timestamp_after_max_ms.is_none_or(|v| v >= 0)
}
