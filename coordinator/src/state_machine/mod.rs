//! The deterministic core: one metadata partition's state, as KIP-1164 metadata records applied to
//! RocksDB keys.
//!
//! Owns: the meaning of every state key (`keys`, `records`), applying [`Command`]s in a
//! transaction ([`StateMachine::apply`]) and answering queries from a consistent view. Input is
//! the command alone: "now" and work budgets travel in it, so replicas that apply the same log hold
//! byte-identical state ([`StateMachine::digest`] proves it). It must not read a clock, draw random
//! numbers, do I/O besides its storage handle, or iterate a hash map in an order that reaches the
//! output.
//!
//! Storage errors are returned, never papered over: a replica that cannot read or write its state
//! must stop applying.

pub mod changes;
pub mod command;
mod failure;
pub mod keys;
pub mod queries;
pub mod records;

pub mod acls;
mod alter_configs;
mod commit_file;
mod create_partitions;
mod delete_records;
mod delete_topics;
mod files;
mod groups;
pub mod partition_txns;
mod producer_ids;
mod producer_state;
mod purge;
mod registry;
pub mod replace_batches;
mod retention;
pub mod share_states;
mod tables;
mod time_index;
pub mod topic_settings;
pub mod transactional_ids;
mod versioned;

#[cfg(test)]
mod acls_test;
#[cfg(test)]
mod commit_file_test;
#[cfg(test)]
mod create_partitions_test;
#[cfg(test)]
mod delete_records_test;
#[cfg(test)]
mod delete_topics_test;
#[cfg(test)]
mod files_test;
#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod groups_test;
#[cfg(test)]
mod partition_txns_test;
#[cfg(test)]
mod producer_ids_test;
#[cfg(test)]
mod queries_test;
#[cfg(test)]
mod registry_test;
#[cfg(test)]
mod replace_batches_test;
#[cfg(test)]
mod retention_test;
#[cfg(test)]
mod share_states_test;
#[cfg(test)]
mod transactional_ids_test;

pub use acls::{AclBinding, AclFilter, ACL_AUTHORITY, MAX_ACLS_PER_OP};
pub use command::{
    AlterTopic, Command, CommitBatch, CommitFile, CommitOffsets, CommittedBatch, CreateTopic, DeleteRecordsPartition,
    ErrorCode, Failure, FenceAnswer, FileToCommit, NamedListener, OffsetCommit, Op, Outcome, ProducerIdBlock,
    RegisterBroker, RetentionReport, TopicToAlter, TopicToCreate, TxnMarker,
};
pub use create_partitions::{validate_topic_name, MAX_PARTITIONS};
pub use files::{FileState, FileToDelete, MAX_FILES_TO_DELETE};
pub use groups::TXN_OFFSETS_GENERATION;
pub use keys::TopicPartition;
pub use producer_ids::{MAX_PRODUCER_ID_BLOCK, PRODUCER_ID_AUTHORITY};
pub use queries::{
    FetchBudget, OffsetAndTimestamp, PartitionBatches, ProducerDescription, MAX_BATCHES_PER_FETCH,
    MAX_PRODUCERS_DESCRIBED,
};
pub use records::{BatchRecord, MarkerRecord};
pub use records::{BrokerRecord, GroupRecord, MemberRecord, OffsetRecord, PendingOffset, TxnRecord, TxnState};
pub use records::{ShareRange, ShareStateRecord};
pub use registry::{MAX_BROKER_LEASE_MS, REGISTRY_AUTHORITY};
pub use replace_batches::{ReplaceBatches, Replaced, ReplacedBatch, MAX_REPLACED_BATCHES};
pub use time_index::FANOUT as TIME_INDEX_FANOUT;
pub use topic_settings::{SettingChange, TopicSettings};

use sha2::{Digest, Sha256};

use crate::storage::{HotKeys, KvRead, StorageError, Txn};
use keys::Keys;

/// The memory budget of one metadata partition's hot-key cache ([`StateMachine::hot_keys`]).
pub const HOT_KEYS_MAX_BYTES: usize = 8 << 20;

/// A topic as the catalog holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicInfo {
    pub topic_id: uuid::Uuid,
    pub name: String,
    pub num_partitions: i32,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    /// The settings the brokers enforce.
    pub settings: TopicSettings,
}

/// One metadata partition's state machine. Holds no state of its own beyond which partition it
/// is: the state is in the storage it is handed.
#[derive(Debug, Clone)]
pub struct StateMachine {
    metadata_partition: u32,
    num_metadata_partitions: u32,
    keys: Keys,
}

impl StateMachine {
    /// The state machine of metadata partition `metadata_partition` of `num_metadata_partitions`.
    pub fn new(metadata_partition: u32, num_metadata_partitions: u32) -> StateMachine {
        assert!(
            metadata_partition < num_metadata_partitions,
            "metadata partition {metadata_partition} of {num_metadata_partitions}"
        );
        StateMachine { metadata_partition, num_metadata_partitions, keys: Keys::new(metadata_partition) }
    }

    /// Which metadata partition this is.
    pub fn metadata_partition(&self) -> u32 {
        self.metadata_partition
    }

    /// Whether this metadata partition owns `tp`.
    pub fn owns(&self, tp: &TopicPartition) -> bool {
        tp.partition >= 0
            && diskless_proto::metadata_partition_for(
                tp.topic_id.as_bytes(),
                tp.partition,
                self.num_metadata_partitions,
            ) == self.metadata_partition
    }

    /// An empty cache of the hot keys (see `keys`), for the transactions that apply commands:
    /// the applying side keeps one per metadata partition, across commands. It holds at most
    /// [`HOT_KEYS_MAX_BYTES`] (about 50,000 partition or producer states).
    pub fn hot_keys() -> HotKeys {
        HotKeys::new(keys::is_hot, HOT_KEYS_MAX_BYTES)
    }

    /// Applies one command in `txn`. The caller writes the transaction (with its own bookkeeping,
    /// such as the last applied log index) as one atomic batch; it may apply several commands in
    /// one transaction, which ends in the same state as one transaction per command.
    pub fn apply(&self, txn: &mut Txn<'_>, cmd: &Command) -> Result<Outcome, StorageError> {
        let now = cmd.now_ms;
        Ok(match &cmd.op {
            Op::CreatePartitions(topics) => Outcome::Topics(create_partitions::apply(self, txn, topics)?),
            Op::DeleteTopics { topic_ids, budget } => {
                Outcome::Topics(delete_topics::apply(self, txn, now, topic_ids, *budget)?)
            }
            Op::CommitFile(c) => Outcome::CommitFile(commit_file::apply(self, txn, now, c, &[], &[])?),
            Op::CommitFiles(files) => {
                let mut out = Vec::with_capacity(files.len());
                for c in files {
                    out.push(commit_file::apply(self, txn, now, &c.file, &c.transactional, &c.txn_numbers)?);
                }
                Outcome::CommitFiles(out)
            }
            Op::EndTransaction(markers) => Outcome::EndTransaction(partition_txns::apply(self, txn, now, markers)?),
            Op::StoreTxn { transactional_id, record, expected_version } => {
                Outcome::Txn(transactional_ids::store(self, txn, now, transactional_id, record, *expected_version)?)
            }
            Op::ExpireTxn { transactional_id, expected_version } => {
                Outcome::TxnExpired(transactional_ids::expire(self, txn, transactional_id, *expected_version)?)
            }
            Op::StoreShareState { group_id, tp, record, expected_version } => {
                Outcome::ShareState(share_states::store(self, txn, now, group_id, tp, record, *expected_version)?)
            }
            Op::DeleteShareStates { group_id, topic_ids } => {
                Outcome::ShareStatesDeleted(share_states::delete(self, txn, group_id, topic_ids)?)
            }
            Op::ReplaceBatches(r) => Outcome::ReplaceBatches(replace_batches::apply(self, txn, now, r)?),
            Op::DeleteRecords { partitions, budget } => {
                Outcome::DeleteRecords(delete_records::apply(self, txn, now, partitions, *budget)?)
            }
            Op::AlterTopicConfigs(topics) => Outcome::Topics(alter_configs::apply(self, txn, topics)?),
            Op::CreateAcls(bindings) => Outcome::AclsCreated(acls::create(self, txn, bindings)?),
            Op::DeleteAcls(filters) => Outcome::AclsDeleted(acls::delete(self, txn, filters)?),
            Op::ConfirmFilesDeleted { object_keys } => {
                Outcome::ConfirmFilesDeleted(files::confirm_deleted(self, txn, now, object_keys)?)
            }
            Op::EnforceRetention { budget, producer_expiration_ms, fenced_object_retention_ms } => {
                Outcome::EnforceRetention(retention::apply(
                    self,
                    txn,
                    now,
                    *budget,
                    *producer_expiration_ms,
                    *fenced_object_retention_ms,
                )?)
            }
            Op::Noop => Outcome::Noop,
            Op::AllocateProducerIds { broker_id: _, count } => {
                Outcome::ProducerIds(producer_ids::allocate(self, txn, *count)?)
            }
            Op::FenceObjects { object_keys } => Outcome::FenceObjects(files::fence(self, txn, now, object_keys)?),
            Op::StoreGroup { group_id, group, expected_version } => {
                Outcome::Group(groups::store(self, txn, now, group_id, group, *expected_version)?)
            }
            Op::CommitOffsets(c) => Outcome::Offsets(groups::commit(self, txn, now, c)?),
            Op::DeleteGroups { group_ids } => Outcome::Groups(groups::delete_groups(self, txn, group_ids)?),
            Op::DeleteOffsets { group_id, partitions } => {
                Outcome::Offsets(groups::delete_offsets(self, txn, group_id, partitions)?)
            }
            Op::ExpireOffsets { retention_ms, budget } => {
                let (offsets_expired, groups_expired, more) = groups::expire(self, txn, now, *retention_ms, *budget)?;
                Outcome::ExpireOffsets { offsets_expired, groups_expired, more }
            }
            Op::RegisterBroker(r) => Outcome::Broker(registry::register(self, txn, now, r)?),
            Op::BrokerHeartbeat { broker_id, incarnation, lease_ms } => {
                Outcome::Broker(registry::heartbeat(self, txn, now, *broker_id, *incarnation, *lease_ms)?)
            }
            Op::UnregisterBroker { broker_id, incarnation } => {
                Outcome::Broker(registry::unregister(self, txn, now, *broker_id, *incarnation)?)
            }
        })
    }

    /// DisklessListOffsets for one partition (`read_committed`: bounded by the last stable offset).
    pub fn list_offsets(
        &self,
        view: &dyn KvRead,
        tp: &TopicPartition,
        timestamp: i64,
        read_committed: bool,
    ) -> Result<Result<OffsetAndTimestamp, Failure>, StorageError> {
        queries::list_offsets(view, &self.keys, tp, timestamp, read_committed)
    }

    /// DisklessFindBatches for one partition, sharing `budget` with the request's other partitions
    /// (`read_committed`: below the last stable offset, with the aborted transactions).
    pub fn find_batches(
        &self,
        view: &dyn KvRead,
        tp: &TopicPartition,
        offset: i64,
        max_partition_fetch_bytes: i32,
        budget: &mut FetchBudget,
        read_committed: bool,
    ) -> Result<PartitionBatches, StorageError> {
        queries::find_batches(view, &self.keys, tp, offset, max_partition_fetch_bytes, budget, read_committed)
    }

    /// DescribeProducers for one partition: the producers it keeps state for.
    pub fn describe_producers(
        &self,
        view: &dyn KvRead,
        tp: &TopicPartition,
    ) -> Result<Result<Vec<ProducerDescription>, Failure>, StorageError> {
        queries::describe_producers(view, &self.keys, tp)
    }

    /// An operator's figures of one partition: log start, high watermark, bytes, batches.
    pub fn describe_partition(
        &self,
        view: &dyn KvRead,
        tp: &TopicPartition,
    ) -> Result<Result<queries::PartitionFigures, Failure>, StorageError> {
        queries::describe_partition(view, &self.keys, tp)
    }

    /// Whether this metadata partition holds consumer group `group_id`.
    pub fn holds_group(&self, group_id: &str) -> bool {
        diskless_proto::metadata_partition_for_group(group_id, self.num_metadata_partitions) == self.metadata_partition
    }

    /// A consumer group as stored, if it is.
    pub fn consumer_group(&self, view: &dyn KvRead, group_id: &str) -> Result<Option<GroupRecord>, StorageError> {
        groups::group(view, &self.keys, group_id)
    }

    /// OffsetFetch: the committed offsets of `partitions`, or all of the group's when `None`.
    pub fn fetch_offsets(
        &self,
        view: &dyn KvRead,
        group_id: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Vec<(TopicPartition, Option<OffsetRecord>)>, StorageError> {
        groups::fetch(view, &self.keys, group_id, partitions)
    }

    /// Every group this metadata partition holds (with its record, if it has one), by id.
    pub fn list_groups(&self, view: &dyn KvRead) -> Result<Vec<(String, Option<GroupRecord>)>, StorageError> {
        groups::list(view, &self.keys)
    }

    /// The stored state of transactional id `id`, if any.
    pub fn transaction(&self, view: &dyn KvRead, id: &str) -> Result<Option<TxnRecord>, StorageError> {
        transactional_ids::get(view, &self.keys, id)
    }

    /// Every transactional id this metadata partition holds, in id order.
    pub fn list_transactions(&self, view: &dyn KvRead) -> Result<Vec<(String, TxnRecord)>, StorageError> {
        transactional_ids::list(view, &self.keys)
    }

    /// Every share-partition state of share group `group_id`, or `only` one partition's.
    pub fn share_states(
        &self,
        view: &dyn KvRead,
        group_id: &str,
        only: Option<&TopicPartition>,
    ) -> Result<Vec<(TopicPartition, ShareStateRecord)>, StorageError> {
        match only {
            None => share_states::list(view, &self.keys, group_id),
            Some(tp) => Ok(share_states::get(view, &self.keys, group_id, tp)?.map(|r| (*tp, r)).into_iter().collect()),
        }
    }

    /// Every broker of the registry with its record, by id, live or not (metadata partition 0;
    /// empty elsewhere). Live ones: `lease_until_ms > now`, see [`StateMachine::live_brokers`].
    pub fn brokers(&self, view: &dyn KvRead) -> Result<Vec<(i32, BrokerRecord)>, StorageError> {
        registry::all(view, &self.keys)
    }

    /// The brokers whose lease runs at `now` (the reader's clock: a read is not a log entry), by
    /// id.
    pub fn live_brokers(&self, view: &dyn KvRead, now_ms: i64) -> Result<Vec<(i32, BrokerRecord)>, StorageError> {
        Ok(registry::all(view, &self.keys)?.into_iter().filter(|(_, b)| b.lease_until_ms > now_ms).collect())
    }

    /// The broker registry's generation: how many times its live set changed (see `registry`).
    pub fn registry_generation(&self, view: &dyn KvRead) -> Result<u64, StorageError> {
        registry::generation(view, &self.keys)
    }

    /// DisklessDescribeFiles for one object key.
    pub fn describe_file(&self, view: &dyn KvRead, object_key: &str) -> Result<FileState, StorageError> {
        files::describe(view, &self.keys, object_key)
    }

    /// Files waiting for the broker to delete them, oldest first.
    pub fn files_to_delete(&self, view: &dyn KvRead, limit: usize) -> Result<Vec<FileToDelete>, StorageError> {
        files::to_delete(view, &self.keys, limit)
    }

    /// Every topic of the catalog, by topic id: (id, name, partitions, retention.ms,
    /// retention.bytes).
    pub fn topics(&self, view: &dyn KvRead) -> Result<Vec<TopicInfo>, StorageError> {
        let (from, to) = self.keys.table(keys::TOPIC);
        let mut out = vec![];
        view.scan(&from, &to, &mut |k, v| {
            let id = uuid::Uuid::from_slice(&k[5..])
                .map_err(|e| StorageError::Corrupt { key: crate::storage::display_key(k), reason: e.to_string() })?;
            let t: records::TopicRecord = crate::storage::codec::decode(k, v)?;
            out.push(TopicInfo {
                topic_id: id,
                name: t.name,
                num_partitions: t.num_partitions,
                retention_ms: t.retention_ms,
                retention_bytes: t.retention_bytes,
                settings: TopicSettings::default(),
            });
            Ok(true)
        })?;
        for t in &mut out {
            t.settings = topic_settings::get(view, &self.keys, &t.topic_id)?;
        }
        Ok(out)
    }

    /// DescribeAcls: the bindings matching `filter` (metadata partition 0 only).
    pub fn describe_acls(
        &self,
        view: &dyn KvRead,
        filter: &AclFilter,
    ) -> Result<Result<Vec<AclBinding>, Failure>, StorageError> {
        acls::describe(self, view, filter)
    }

    /// A topic's name and partition count, if the topic exists.
    pub fn topic(&self, view: &dyn KvRead, topic_id: &uuid::Uuid) -> Result<Option<(String, i32)>, StorageError> {
        Ok(tables::topic(view, &self.keys, topic_id)?.map(|t| (t.name, t.num_partitions)))
    }

    /// SHA-256 over every key and value of this metadata partition's state, in key order (but the
    /// Raft layer's applied-index record). Two replicas that applied the same log have the same
    /// digest.
    pub fn digest(&self, view: &dyn KvRead) -> Result<[u8; 32], StorageError> {
        let (from, to) = self.keys.metadata_partition_range();
        let applied = self.keys.applied();
        let mut h = Sha256::new();
        view.scan(&from, &to, &mut |k, v| {
            if k == applied.as_slice() {
                return Ok(true);
            }
            h.update((k.len() as u64).to_be_bytes());
            h.update(k);
            h.update((v.len() as u64).to_be_bytes());
            h.update(v);
            Ok(true)
        })?;
        Ok(h.finalize().into())
    }
}
