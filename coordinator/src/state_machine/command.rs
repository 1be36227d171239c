//! What the state machine applies (the Raft log entry's content) and what it answers.
//!
//! A [`Command`] is a client request stamped by the proposer with the time ("now", the
//! LogAppendTime of a commit) and, for operations that delete, a work budget. Both are in the
//! entry, so every replica applies the same bytes to the same result: the state machine never reads
//! a clock. Validation and offset assignment happen at apply, not at proposal, so pipelined
//! proposals need no speculative state on the leader; the batches a commit accepts, with the
//! offsets they were given, are what KIP-1164 calls a `DisklessFileCommittedRecord`.
//!
//! Commands are encoded with bincode; the enum's variant order is part of the log format and must
//! only ever be appended to.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::acls::{AclBinding, AclFilter};
pub use super::failure::{ErrorCode, Failure};
use super::keys::TopicPartition;
use super::records::{GroupRecord, ShareStateRecord, TxnRecord};
use super::replace_batches::{ReplaceBatches, Replaced};
use super::topic_settings::{SettingChange, TopicSettings};

/// A command, stamped by the proposer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// Milliseconds since the Unix epoch on the proposer's clock when it proposed the entry.
    pub now_ms: i64,
    pub op: Op,
}

/// The operations, in KIP-1164's words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// DisklessDeleteTopics.
    DeleteTopics { topic_ids: Vec<Uuid>, budget: u32 },
    /// DisklessCommitFile: the part of one file's batches this metadata partition owns.
    CommitFile(CommitFile),
    /// DisklessDeleteRecords.
    DeleteRecords { partitions: Vec<DeleteRecordsPartition>, budget: u32 },
    /// The broker deleted these objects; forget them (each file record becomes a tombstone, so a
    /// late repeat of its commit is refused).
    ConfirmFilesDeleted { object_keys: Vec<String> },
    /// Finish pending deletions, then forget tombstones (fenced object keys) older than
    /// `fenced_object_retention_ms` (negative: never), then delete batches beyond retention, then
    /// expire producer states idle for `producer_expiration_ms` (negative: never), doing at most
    /// `budget` units of work (one per batch deleted, per tombstone forgotten, per partition
    /// examined and per producer state examined).
    EnforceRetention { budget: u32, producer_expiration_ms: i64, fenced_object_retention_ms: i64 },
    /// Does nothing; lets a new leader commit an entry of its term, and tests probe the log.
    Noop,
    /// Hand a broker the next `count` producer ids (Kafka's AllocateProducerIds, KIP-730): ids are
    /// unique across brokers and restarts because one counter, in metadata partition 0, gives them.
    AllocateProducerIds { broker_id: i32, count: u32 },
    /// Before the broker deletes these objects: answers per key whether this metadata partition
    /// still has live batches in it, released it (and when), or does not know it — in which case
    /// the key is recorded as fenced, so a commit of it that reaches the log later is refused.
    /// Being a log entry, the fence is ordered with every commit: none can slip past it.
    FenceObjects { object_keys: Vec<String> },
    /// A group coordinator (a broker) records a consumer group: its generation and members, by
    /// compare-and-set on the version the broker read (0: none stored), else ILLEGAL_GENERATION.
    StoreGroup { group_id: String, group: GroupRecord, expected_version: u64 },
    /// OffsetCommit, fenced at apply by the stored group's generation and members.
    CommitOffsets(CommitOffsets),
    /// DeleteGroups: groups without members lose their record and every committed offset.
    DeleteGroups { group_ids: Vec<String> },
    /// OffsetDelete: a group without members forgets the offsets of these partitions.
    DeleteOffsets { group_id: String, partitions: Vec<TopicPartition> },
    /// `offsets.retention.minutes`: committed offsets of groups without members that have seen no
    /// commit (and no group change) for `retention_ms` are forgotten, then groups left without
    /// members or offsets; at most `budget` offsets examined per command, from a stored cursor.
    ExpireOffsets { retention_ms: i64, budget: u32 },
    /// A broker registers (metadata partition 0 only): refused while another incarnation at another
    /// address holds the id with a lease still running at the entry's "now".
    RegisterBroker(RegisterBroker),
    /// A registered broker extends its lease; refused (STALE_BROKER_EPOCH) when the lease lapsed
    /// or another incarnation holds the id: the broker registers again.
    BrokerHeartbeat { broker_id: i32, incarnation: u64, lease_ms: i64 },
    /// A broker shutting down cleanly gives its id back.
    UnregisterBroker { broker_id: i32, incarnation: u64 },
    /// DisklessCreatePartitions (each metadata partition creates the partitions it owns), with
    /// the settings the brokers enforce (`topic_settings`), which a new topic takes (an existing
    /// one keeps its own).
    CreatePartitions(Vec<TopicToCreate>),
    /// AlterTopicConfigs of retention and of the settings the brokers enforce.
    AlterTopicConfigs(Vec<TopicToAlter>),
    /// CreateAcls (metadata partition 0 only).
    CreateAcls(Vec<AclBinding>),
    /// DeleteAcls (metadata partition 0 only).
    DeleteAcls(Vec<AclFilter>),
    /// Several DisklessCommitFile requests in one log entry, applied one after the other exactly
    /// as separate entries would be (the leader gathers concurrent commits: group commit); their
    /// batches may be transactional.
    CommitFiles(Vec<FileToCommit>),
    /// DisklessEndTransaction: a COMMIT or ABORT marker for a producer's transaction on each
    /// partition named (see `partition_txns`).
    EndTransaction(Vec<TxnMarker>),
    /// The broker coordinating a transactional id stores its transaction's state: applied only if
    /// the stored version is `expected_version` (0: none stored), else
    /// TRANSACTION_COORDINATOR_FENCED (see `transactional_ids`).
    StoreTxn { transactional_id: String, record: TxnRecord, expected_version: u64 },
    /// The broker coordinating a transactional id forgets it (Kafka's
    /// `transactional.id.expiration.ms`): its record is deleted if it is at `expected_version`
    /// and no transaction is open in it (see `transactional_ids`).
    ExpireTxn { transactional_id: String, expected_version: u64 },
    /// A broker stores a share group's state of one partition: applied only if the stored version
    /// is `expected_version` (0: none stored), else FENCED_STATE_EPOCH (see `share_states`).
    StoreShareState { group_id: String, tp: TopicPartition, record: ShareStateRecord, expected_version: u64 },
    /// A share group's states of these topics (all when empty) are deleted
    /// (DeleteShareGroupOffsets).
    DeleteShareStates { group_id: String, topic_ids: Vec<Uuid> },
    /// Object consolidation's atomic replace: committed batches of one partition, copied into a
    /// new object, move there, offsets and all else kept (see `replace_batches`).
    ReplaceBatches(ReplaceBatches),
}

/// A file's commit whose batches may be transactional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileToCommit {
    pub file: CommitFile,
    /// Per batch, in order: whether it is transactional. Empty: none is.
    pub transactional: Vec<bool>,
    /// Per batch, in order: the number of its transaction (`TxnRecord::txn_number`; 0: not
    /// said). Empty: none said.
    pub txn_numbers: Vec<u64>,
}

impl From<CommitFile> for FileToCommit {
    fn from(file: CommitFile) -> Self {
        FileToCommit { file, transactional: vec![], txn_numbers: vec![] }
    }
}

/// A transaction marker to write on one partition (Kafka's WriteTxnMarkers entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMarker {
    pub tp: TopicPartition,
    pub producer_id: i64,
    /// The epoch the transaction ends with (transactions v2: the transaction's epoch + 1).
    pub producer_epoch: i16,
    /// COMMIT, else ABORT.
    pub commit: bool,
    pub coordinator_epoch: i32,
    /// The number of the transaction it ends (`TxnRecord::txn_number`; 0: not said, the epoch
    /// alone fences).
    pub txn_number: u64,
}

/// A broker's registration: who it is, where clients reach it, for how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterBroker {
    pub broker_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub incarnation: u64,
    pub lease_ms: i64,
    /// Every Kafka listener by name (empty: one listener, `host` and `port`).
    pub listeners: Vec<NamedListener>,
}

/// An OffsetCommit for one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitOffsets {
    pub group_id: String,
    /// -1 with an empty member id: a commit from outside any generation (manual assignment),
    /// allowed only while the group has no members.
    pub generation: i32,
    pub member_id: String,
    pub offsets: Vec<OffsetCommit>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetCommit {
    pub tp: TopicPartition,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Kafka's defaults for topics created without settings.
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
pub const DEFAULT_RETENTION_BYTES: i64 = -1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateTopic {
    pub topic_id: Uuid,
    pub name: String,
    /// The topic's total number of partitions after the command.
    pub num_partitions: i32,
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlterTopic {
    pub topic_id: Uuid,
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
}

/// A topic to create (or grow) with the settings a new topic takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicToCreate {
    pub topic: CreateTopic,
    pub settings: TopicSettings,
}

/// A topic's retention (the fields given change) and settings (the changes given, in order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicToAlter {
    pub topic: AlterTopic,
    pub settings: Vec<SettingChange>,
}

impl From<CreateTopic> for TopicToCreate {
    /// A topic with the default settings.
    fn from(topic: CreateTopic) -> Self {
        TopicToCreate { topic, settings: TopicSettings::default() }
    }
}

impl From<AlterTopic> for TopicToAlter {
    /// A change of retention only.
    fn from(topic: AlterTopic) -> Self {
        TopicToAlter { topic, settings: vec![] }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeleteRecordsPartition {
    pub tp: TopicPartition,
    /// Records below this offset go; -1 means the high watermark.
    pub offset: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitFile {
    /// After this time (the command's "now"), the commit is refused whole and nothing of it is
    /// recorded: a commit that waited too long can never apply once its caller gave up (and the
    /// cleaners' grace periods outlast the deadline). `None`: no deadline.
    pub deadline_ms: Option<i64>,
    pub object_key: String,
    pub object_format: i8,
    pub file_size: i64,
    pub uploader_broker_id: i32,
    pub owner_ids: Vec<i32>,
    pub batches: Vec<CommitBatch>,
}

/// `WRITE_AHEAD_MULTI_SEGMENT`, the only object format so far.
pub const OBJECT_FORMAT_WAL_MULTI_SEGMENT: i8 = 1;

/// One batch's coordinates, as the broker reports them (KIP-1164 DisklessCommitBatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitBatch {
    pub magic: i8,
    pub request_id: i32,
    pub tp: TopicPartition,
    pub byte_offset: i32,
    pub size: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub batch_max_timestamp: i64,
    pub timestamp_type: i8,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub last_sequence: i32,
}

pub use super::records::{NamedListener, MAGIC_V2, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME};

/// What applying a command answered.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Outcome {
    /// Per topic, in request order (CreatePartitions, DeleteTopics, AlterTopicConfigs).
    Topics(Vec<(Uuid, Result<(), Failure>)>),
    /// Per batch, in request order.
    CommitFile(Vec<Result<CommittedBatch, Failure>>),
    /// Per partition, in request order: the new log start offset.
    DeleteRecords(Vec<(TopicPartition, Result<i64, Failure>)>),
    /// Per object key, in request order.
    ConfirmFilesDeleted(Vec<(String, Result<(), Failure>)>),
    EnforceRetention(RetentionReport),
    #[default]
    Noop,
    /// Per file of a CommitFiles, in order: per batch, in request order.
    CommitFiles(Vec<Vec<Result<CommittedBatch, Failure>>>),
    /// A block of producer ids: the first, and how many.
    ProducerIds(Result<ProducerIdBlock, Failure>),
    /// Per object key, in request order.
    FenceObjects(Vec<(String, Result<FenceAnswer, Failure>)>),
    /// StoreGroup: the group as stored (its new version).
    Group(Result<GroupRecord, Failure>),
    /// Per offset of CommitOffsets or DeleteOffsets, in request order.
    Offsets(Vec<Result<(), Failure>>),
    /// Per group of DeleteGroups, in request order.
    Groups(Vec<Result<(), Failure>>),
    /// ExpireOffsets: offsets and groups forgotten; whether work is left.
    ExpireOffsets {
        offsets_expired: u64,
        groups_expired: u64,
        more: bool,
    },
    /// RegisterBroker, BrokerHeartbeat: the lease's end; UnregisterBroker: 0.
    Broker(Result<i64, Failure>),
    /// CreateAcls: per binding, in request order.
    AclsCreated(Vec<Result<(), Failure>>),
    /// DeleteAcls: per filter, in request order, the bindings it matched and removed.
    AclsDeleted(Vec<Result<Vec<AclBinding>, Failure>>),
    /// EndTransaction: per marker, in request order, the offset the marker was written at (`None`:
    /// the producer had no open transaction there, so nothing was written).
    EndTransaction(Vec<Result<Option<i64>, Failure>>),
    /// StoreTxn: the record as stored (its version and times set), or why not.
    Txn(Result<TxnRecord, Failure>),
    /// ExpireTxn: the record is gone, or why not.
    TxnExpired(Result<(), Failure>),
    /// StoreShareState: the record as stored (its version and time set), or why not.
    ShareState(Result<ShareStateRecord, Failure>),
    /// DeleteShareStates.
    ShareStatesDeleted(Result<(), Failure>),
    /// ReplaceBatches: per batch, in request order, whether it moved; or why nothing did.
    ReplaceBatches(Result<Vec<Replaced>, Failure>),
}

/// Producer ids `[first, first + len)`, for one broker to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdBlock {
    pub first: i64,
    pub len: u32,
}

/// What a metadata partition answers when asked to fence an object key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FenceAnswer {
    /// The file still has live batches here: it must not be deleted.
    Live,
    /// The file lost its last live batch here at `marked_at`; it waits for the broker to delete it.
    Released { marked_at: i64 },
    /// This metadata partition does not know the object (any more): a commit of it is refused
    /// until the tombstone made at `fenced_at` is forgotten.
    Fenced { fenced_at: i64 },
}

/// A batch the commit accepted, or recognised as a retry of one it accepted before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedBatch {
    pub assigned_base_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub is_duplicate: bool,
}

/// What one EnforceRetention command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RetentionReport {
    pub batches_deleted: u64,
    pub partitions_examined: u64,
    pub producers_expired: u64,
    pub fenced_forgotten: u64,
    /// Work is left: call again.
    pub more: bool,
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match &self.op {
            Op::CreatePartitions(t) => return write!(f, "CreatePartitions({} topics) at {}", t.len(), self.now_ms),
            Op::DeleteTopics { topic_ids, .. } => {
                return write!(f, "DeleteTopics({}) at {}", topic_ids.len(), self.now_ms)
            }
            Op::CommitFile(c) => {
                return write!(f, "CommitFile({}, {} batches) at {}", c.object_key, c.batches.len(), self.now_ms)
            }
            Op::DeleteRecords { partitions, .. } => {
                return write!(f, "DeleteRecords({} partitions) at {}", partitions.len(), self.now_ms)
            }
            Op::AlterTopicConfigs(_) => "AlterTopicConfigs",
            Op::CreateAcls(b) => return write!(f, "CreateAcls({}) at {}", b.len(), self.now_ms),
            Op::DeleteAcls(d) => return write!(f, "DeleteAcls({} filters) at {}", d.len(), self.now_ms),
            Op::ConfirmFilesDeleted { .. } => "ConfirmFilesDeleted",
            Op::EnforceRetention { .. } => "EnforceRetention",
            Op::Noop => "Noop",
            Op::CommitFiles(files) => return write!(f, "CommitFiles({} files) at {}", files.len(), self.now_ms),
            Op::EndTransaction(m) => return write!(f, "EndTransaction({} markers) at {}", m.len(), self.now_ms),
            Op::AllocateProducerIds { .. } => "AllocateProducerIds",
            Op::FenceObjects { object_keys } => {
                return write!(f, "FenceObjects({} keys) at {}", object_keys.len(), self.now_ms)
            }
            Op::StoreGroup { .. } => "StoreGroup",
            Op::StoreTxn { transactional_id, record, .. } => {
                return write!(f, "StoreTxn({transactional_id}, {}) at {}", record.state.name(), self.now_ms)
            }
            Op::ExpireTxn { transactional_id, .. } => {
                return write!(f, "ExpireTxn({transactional_id}) at {}", self.now_ms)
            }
            Op::StoreShareState { group_id, tp, .. } => {
                return write!(f, "StoreShareState({group_id}, {tp}) at {}", self.now_ms)
            }
            Op::DeleteShareStates { .. } => "DeleteShareStates",
            Op::ReplaceBatches(r) => {
                return write!(
                    f,
                    "ReplaceBatches({}, {}, {} batches) at {}",
                    r.object_key,
                    r.tp,
                    r.batches.len(),
                    self.now_ms
                )
            }
            Op::CommitOffsets(c) => {
                return write!(f, "CommitOffsets({}, {} offsets) at {}", c.group_id, c.offsets.len(), self.now_ms)
            }
            Op::DeleteGroups { .. } => "DeleteGroups",
            Op::DeleteOffsets { .. } => "DeleteOffsets",
            Op::ExpireOffsets { .. } => "ExpireOffsets",
            Op::RegisterBroker(r) => return write!(f, "RegisterBroker({}) at {}", r.broker_id, self.now_ms),
            Op::BrokerHeartbeat { broker_id, .. } => {
                return write!(f, "BrokerHeartbeat({broker_id}) at {}", self.now_ms)
            }
            Op::UnregisterBroker { broker_id, .. } => {
                return write!(f, "UnregisterBroker({broker_id}) at {}", self.now_ms)
            }
        };
        write!(f, "{name} at {}", self.now_ms)
    }
}
