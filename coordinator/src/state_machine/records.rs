//! The values stored in a metadata partition's tables (see `keys` for where each lives).
//!
//! Values are bincode-encoded serde structs. Changing a struct changes the on-disk format: add a
//! new table or a versioned variant instead of editing a field in place.

use serde::{Deserialize, Serialize};

use super::failure::ErrorCode;
use super::keys::TopicPartition;

/// Record batch format v2, the only one diskless topics store.
pub const MAGIC_V2: i8 = 2;

/// Timestamp types of a record batch.
pub const TIMESTAMP_CREATE_TIME: i8 = 0;
pub const TIMESTAMP_LOG_APPEND_TIME: i8 = 1;

/// A broker's named Kafka listener and the address it advertises.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedListener {
    pub name: String,
    pub host: String,
    pub port: i32,
}

/// The time index's chunks as a partition's record keeps them (`time_index` maintains them).
/// Chunk levels above the batches.
pub const LEVELS: usize = 3;

/// The chunk being filled at one level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenChunk {
    pub count: u32,
    pub chunk: Chunk,
}

impl OpenChunk {
    pub const EMPTY: OpenChunk =
        OpenChunk { count: 0, chunk: Chunk { first_last_offset: -1, max_timestamp: i64::MIN, max_base_offset: -1 } };
}

/// A run of consecutive batches: the last offset of its first batch, and its largest timestamp
/// with the base offset of the first batch that has it. (Its own last offset is in its key.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    pub first_last_offset: i64,
    pub max_timestamp: i64,
    pub max_base_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub name: String,
    /// The topic's total partition count (across every metadata partition).
    pub num_partitions: i32,
    pub retention_ms: i64,
    pub retention_bytes: i64,
}

/// One topic-partition owned by this metadata partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Bytes of the batches still stored (a batch goes when it is wholly below the log start).
    pub byte_size: i64,
    /// The topic was deleted; the partition waits in the purge queue and answers as unknown.
    pub deleted: bool,
    /// The timestamp index's chunks still being filled, one per level.
    pub open_chunks: [OpenChunk; LEVELS],
}

impl PartitionRecord {
    pub fn new() -> PartitionRecord {
        PartitionRecord {
            log_start_offset: 0,
            high_watermark: 0,
            byte_size: 0,
            deleted: false,
            open_chunks: [OpenChunk::EMPTY; LEVELS],
        }
    }
}

impl Default for PartitionRecord {
    fn default() -> Self {
        Self::new()
    }
}

/// One committed batch: where its bytes are and the offsets it was given. Keyed by its last offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRecord {
    /// Unique in the cluster: the metadata partition id in the high bits, a counter below.
    pub batch_id: i64,
    pub object_key: String,
    pub magic: i8,
    pub byte_offset: i32,
    pub byte_size: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_append_time: i64,
    pub batch_max_timestamp: i64,
    pub timestamp_type: i8,
}

/// A [`BatchRecord`] borrowing its object key, for writing one without copying the key (it
/// encodes to the same bytes).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BatchRecordRef<'a> {
    pub batch_id: i64,
    pub object_key: &'a str,
    pub magic: i8,
    pub byte_offset: i32,
    pub byte_size: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_append_time: i64,
    pub batch_max_timestamp: i64,
    pub timestamp_type: i8,
}

impl BatchRecordRef<'_> {
    pub fn effective_timestamp(&self) -> i64 {
        effective_timestamp(self.timestamp_type, self.log_append_time, self.batch_max_timestamp)
    }
}

impl BatchRecord {
    /// A transaction marker: a control batch with no object bytes (see [`MarkerRecord`]).
    pub fn is_marker(&self) -> bool {
        self.object_key.is_empty()
    }

    /// The timestamp the batch counts as for time lookups and retention: the log append time for
    /// LogAppendTime batches, the batch's max timestamp for CreateTime ones.
    pub fn effective_timestamp(&self) -> i64 {
        effective_timestamp(self.timestamp_type, self.log_append_time, self.batch_max_timestamp)
    }
}

pub fn effective_timestamp(timestamp_type: i8, log_append_time: i64, batch_max_timestamp: i64) -> i64 {
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME {
        log_append_time
    } else {
        batch_max_timestamp
    }
}

/// Bits of a batch id below the metadata partition id.
pub const BATCH_ID_COUNTER_BITS: u32 = 47;

/// A producer's state on one partition: its epoch and its last batches (Kafka keeps 5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerRecord {
    pub epoch: i16,
    /// Oldest first, at most [`PRODUCER_BATCHES_KEPT`].
    pub batches: Vec<ProducerBatch>,
    /// The number of the last transaction a marker ended for this producer on this partition (0:
    /// none): a late batch of it, or of an older one, is refused instead of opening a transaction
    /// no marker will end.
    pub ended_txn: u64,
}

pub const PRODUCER_BATCHES_KEPT: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerBatch {
    pub base_sequence: i32,
    pub last_sequence: i32,
    pub assigned_base_offset: i64,
    pub log_append_time: i64,
}

/// A producer's open transaction on one partition (table `U`): where it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTxnRecord {
    /// The offset of the transaction's first batch on this partition.
    pub first_offset: i64,
    /// The epoch of that batch.
    pub producer_epoch: i16,
    /// The transaction's number (`TxnRecord::txn_number`); 0 when the commit did not say.
    pub txn_number: u64,
}

/// An aborted transaction of one partition (table `E`, keyed by its ABORT marker's offset):
/// Kafka's `AbortedTxn`, which `read_committed` consumers need to skip its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxnRecord {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The partition's last stable offset once this transaction had ended (a fetch's search for
    /// aborted transactions stops at the first marker whose value reaches the fetch's end).
    pub last_stable_offset: i64,
}

/// A transaction marker (table `C`): the control batch at its offset holds no object bytes (its
/// `BatchRecord` has an empty object key); the broker builds it from this when it is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerRecord {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// COMMIT, else ABORT.
    pub commit: bool,
    /// The epoch of the transaction coordinator that wrote it (in the control record's value).
    pub coordinator_epoch: i32,
}

/// A WAL segment object as this metadata partition knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub object_format: i8,
    pub file_size: i64,
    pub uploader_broker_id: i32,
    pub owner_ids: Vec<i32>,
    pub committed_at: i64,
    /// Bytes of this metadata partition's batches in the file that are still stored.
    pub live_bytes: i64,
    /// When the file lost its last live batch here; it waits in the `D` table until the broker
    /// confirms the object is deleted.
    pub marked_for_deletion_at: Option<i64>,
}

/// What a commit of a file answered, kept beside the file record (table `R`) so that a repeat of
/// the same commit (its reply was lost) is answered the same way instead of being refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRecord {
    /// A CRC-32C of everything the commit carried but its deadline: a repeat must match it (see
    /// `commit_file::checksum` for why 32 bits are enough).
    pub checksum: u32,
    /// Per batch, in request order.
    pub results: Vec<StoredResult>,
}

/// One batch's answer, compactly: the log append time of an appended batch is the file's commit
/// time, and the error message is not kept (only its code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoredResult {
    Appended {
        base_offset: i64,
    },
    /// A retry of a batch the producer had appended before, with that batch's offset and time.
    Duplicate {
        base_offset: i64,
        log_append_time: i64,
    },
    Failed {
        code: ErrorCode,
    },
}

/// An object key no commit may use any more (table `X`): the cleaner fenced it before deleting
/// the object, or confirmed the object deleted. Kept for the node's `fenced_object_retention_ms`,
/// which outlasts every way a commit of the key can still reach the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencedRecord {
    pub fenced_at: i64,
}

/// A consumer group as its coordinator (a broker) last stored it: the generation and members of
/// the last completed rebalance. Committed offsets are fenced against it at apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub generation: i32,
    pub protocol_type: String,
    /// The chosen assignment protocol (e.g. "range"), if the group has one.
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<MemberRecord>,
    /// When it was stored (the command's "now"): the group is empty since then if it has no members.
    pub updated_ms: i64,
    /// Which coordinator (a broker's id and process incarnation) stored it: named in a refusal,
    /// and a resend of its own store (the same group) is answered what is stored.
    pub coordinator: String,
    /// Its version (`versioned`): every store gives it the next one, so a coordinator storing by
    /// compare-and-set names the version it read.
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub member_id: String,
    /// Static membership (KIP-345): the member's `group.instance.id`.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// The member's subscription (its protocol metadata for the chosen protocol).
    pub subscription: Vec<u8>,
    pub assignment: Vec<u8>,
    /// A KIP-848 member's epoch (see `groups::fence`); 0 for classic members.
    pub member_epoch: i32,
}

/// A committed offset (Kafka's OffsetAndMetadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRecord {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    /// When it was committed (the command's "now").
    pub commit_ms: i64,
}

/// A transactional id's state (table `J` of the metadata partition its id maps to): Kafka's
/// `TransactionMetadata`, as the broker coordinating the id last stored it. The owner decides
/// every transition; the state machine only keeps the version (a compare-and-set) and the times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The producer id and epoch before the last bump (-1: none), so a client retrying the
    /// InitProducerId that bumped them is answered again (KIP-360).
    pub last_producer_id: i64,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The transaction's number, counted per transactional id: a transactional batch and its
    /// marker carry it, so a marker ends only its own transaction on a partition.
    pub txn_number: u64,
    /// The partitions the transaction wrote to (AddPartitionsToTxn).
    pub partitions: Vec<TopicPartition>,
    /// The consumer groups whose offsets it commits (AddOffsetsToTxn).
    pub groups: Vec<String>,
    /// When the transaction began (the "now" of the store that made it Ongoing), -1 when none is.
    pub started_ms: i64,
    /// When it was last stored (the command's "now").
    pub updated_ms: i64,
    /// The broker (id and process incarnation) that stored it.
    pub owner: String,
    /// Counted by the state machine: 1 for the first store, then one more per store.
    pub version: u64,
    /// TxnOffsetCommit's offsets, committed to their groups at the transaction's COMMIT.
    pub pending_offsets: Vec<PendingOffset>,
}

/// A share group's state of one partition (table `s` of the group's metadata partition): Kafka's
/// share-partition state (`ShareGroupOffset` in `__share_group_state`) with the acquisitions,
/// which Kafka keeps only in its partition leader's memory. The broker decides every transition;
/// the state machine keeps the version (a compare-and-set), the time, and bounds its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareStateRecord {
    pub state_epoch: i32,
    /// Every offset below it is acknowledged or archived.
    pub start_offset: i64,
    /// The records at and above `start_offset` that were handed out: in order, disjoint.
    pub ranges: Vec<ShareRange>,
    pub version: u64,
    pub updated_ms: i64,
    /// The broker (id and process incarnation) that stored it.
    pub owner: String,
}

/// Records `[first, last]` of a share-partition state, all in one state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareRange {
    pub first: i64,
    pub last: i64,
    /// Kafka's `RecordState` id: 0 available, 1 acquired, 2 acknowledged, 4 archived.
    pub state: i8,
    pub delivery_count: i32,
    /// The member holding an acquired range, and until when (the broker's clock).
    pub member_id: String,
    pub lock_until_ms: i64,
}

/// An offset a transaction commits to a consumer group when it commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingOffset {
    pub group_id: String,
    pub tp: TopicPartition,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Kafka's `TransactionState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// The id was fenced by a newer producer's InitProducerId while a transaction was ongoing:
    /// its abort is under way (Kafka's PrepareEpochFence).
    PrepareEpochFence,
}

impl TxnState {
    /// Kafka's name for it, as DescribeTransactions and ListTransactions answer.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
            TxnState::PrepareEpochFence,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

/// A registered broker (the registry lives in metadata partition 0): where clients reach it and
/// until when its lease runs. Live while the time of the entry being applied (or of a read) is
/// before `lease_until_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    /// The advertised Kafka listener.
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Drawn by the broker process when it starts: tells a restart from a second process.
    pub incarnation: u64,
    /// When this incarnation registered (the command's "now").
    pub registered_ms: i64,
    /// The lease: the command's "now" of the last registration or heartbeat plus its lease.
    pub lease_until_ms: i64,
    /// Every Kafka listener by name, as registered (empty: one listener, `host` and `port`).
    pub listeners: Vec<NamedListener>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::codec;

    #[test]
    fn a_batch_record_ref_encodes_as_the_record() {
        let r = BatchRecord {
            batch_id: 1 << 47 | 5,
            object_key: "wal/0000-1111".into(),
            magic: 2,
            byte_offset: 7,
            byte_size: 16_384,
            base_offset: 100,
            last_offset: 109,
            log_append_time: 1_700_000_000_000,
            batch_max_timestamp: -1,
            timestamp_type: 1,
        };
        let by_ref = BatchRecordRef {
            batch_id: r.batch_id,
            object_key: &r.object_key,
            magic: r.magic,
            byte_offset: r.byte_offset,
            byte_size: r.byte_size,
            base_offset: r.base_offset,
            last_offset: r.last_offset,
            log_append_time: r.log_append_time,
            batch_max_timestamp: r.batch_max_timestamp,
            timestamp_type: r.timestamp_type,
        };
        assert_eq!(codec::encode(&by_ref).unwrap(), codec::encode(&r).unwrap());
        assert_eq!(by_ref.effective_timestamp(), r.effective_timestamp());
    }
}
