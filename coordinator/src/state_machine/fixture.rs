//! Test fixture: a state machine over a fresh RocksDB, and builders for commands.

use tempfile::TempDir;
use uuid::Uuid;

use super::command::*;
use super::keys::TopicPartition;
use super::queries::{FetchBudget, OffsetAndTimestamp, PartitionBatches};
use super::{FileState, FileToDelete, StateMachine};
use crate::storage::{Db, HotKeys, Txn};

pub struct Fixture {
    _dir: TempDir,
    pub db: Db,
    pub sm: StateMachine,
    /// Applies go through the hot-key cache, as on a node.
    hot: HotKeys,
    pub now: i64,
    next_key: u32,
}

pub fn topic_id(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

pub fn tp(topic: u8, partition: i32) -> TopicPartition {
    TopicPartition { topic_id: topic_id(topic), partition }
}

/// A plain (non-idempotent) CreateTime batch of `records` records, 100 bytes.
pub fn batch(tp: TopicPartition, records: i64) -> CommitBatch {
    CommitBatch {
        magic: 2,
        request_id: 0,
        tp,
        byte_offset: 0,
        size: 100,
        base_offset: 0,
        last_offset: records - 1,
        batch_max_timestamp: 1_000,
        timestamp_type: TIMESTAMP_CREATE_TIME,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
    }
}

/// An idempotent batch of producer `pid`.
pub fn idem(tp: TopicPartition, pid: i64, epoch: i16, base_seq: i32, records: i32) -> CommitBatch {
    CommitBatch {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: base_seq,
        last_sequence: base_seq.wrapping_add(records - 1) & i32::MAX,
        ..batch(tp, i64::from(records))
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::metadata_partition(0, 1)
    }

    pub fn metadata_partition(metadata_partition: u32, num_metadata_partitions: u32) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open(dir.path()).expect("open db");
        Fixture {
            _dir: dir,
            db,
            sm: StateMachine::new(metadata_partition, num_metadata_partitions),
            hot: StateMachine::hot_keys(),
            now: 1_000_000,
            next_key: 0,
        }
    }

    pub fn apply(&mut self, op: Op) -> Outcome {
        let mut txn = Txn::with_hot(&self.db, &mut self.hot);
        let out = self.sm.apply(&mut txn, &Command { now_ms: self.now, op }).expect("apply");
        txn.commit(false).expect("write");
        out
    }

    pub fn create(&mut self, topic: u8, partitions: i32) -> Result<(), Failure> {
        self.create_with(topic, &format!("topic-{topic}"), partitions, None, None)
    }

    pub fn create_with(
        &mut self,
        topic: u8,
        name: &str,
        partitions: i32,
        retention_ms: Option<i64>,
        retention_bytes: Option<i64>,
    ) -> Result<(), Failure> {
        let op = Op::CreatePartitions(vec![CreateTopic {
            topic_id: topic_id(topic),
            name: name.to_string(),
            num_partitions: partitions,
            retention_ms,
            retention_bytes,
        }
        .into()]);
        let Outcome::Topics(mut r) = self.apply(op) else { panic!("wrong outcome") };
        r.remove(0).1
    }

    pub fn fresh_key(&mut self) -> String {
        self.next_key += 1;
        format!("wal/{:08}", self.next_key)
    }

    /// Commits `batches` in a new file laid out back to back; returns the object key too.
    pub fn commit(&mut self, batches: Vec<CommitBatch>) -> (String, Vec<Result<CommittedBatch, Failure>>) {
        let key = self.fresh_key();
        let r = self.commit_as(&key, batches);
        (key, r)
    }

    pub fn commit_as(&mut self, key: &str, mut batches: Vec<CommitBatch>) -> Vec<Result<CommittedBatch, Failure>> {
        let mut at = 0;
        for b in &mut batches {
            b.byte_offset = at;
            at += b.size.max(0);
        }
        let c = CommitFile {
            deadline_ms: None,
            object_key: key.to_string(),
            object_format: OBJECT_FORMAT_WAL_MULTI_SEGMENT,
            file_size: i64::from(at),
            uploader_broker_id: 1,
            owner_ids: vec![self.sm.metadata_partition() as i32],
            batches,
        };
        let Outcome::CommitFile(r) = self.apply(Op::CommitFile(c)) else { panic!("wrong outcome") };
        r
    }

    pub fn commit_one(&mut self, b: CommitBatch) -> Result<CommittedBatch, Failure> {
        self.commit(vec![b]).1.remove(0)
    }

    /// Commits `batches` (each with its transactional flag) in a new file, as `CommitFiles`.
    pub fn commit_txn(&mut self, batches: Vec<(CommitBatch, bool)>) -> Vec<Result<CommittedBatch, Failure>> {
        self.commit_numbered(batches.into_iter().map(|(b, t)| (b, t, 0)).collect())
    }

    /// [`Fixture::commit_txn`] with each batch's transaction number.
    pub fn commit_numbered(&mut self, batches: Vec<(CommitBatch, bool, u64)>) -> Vec<Result<CommittedBatch, Failure>> {
        let key = self.fresh_key();
        let mut at = 0;
        let txn_numbers: Vec<u64> = batches.iter().map(|b| b.2).collect();
        let (mut bs, flags): (Vec<CommitBatch>, Vec<bool>) = batches.into_iter().map(|(b, t, _)| (b, t)).unzip();
        for b in &mut bs {
            b.byte_offset = at;
            at += b.size.max(0);
        }
        let file = CommitFile {
            deadline_ms: None,
            object_key: key,
            object_format: OBJECT_FORMAT_WAL_MULTI_SEGMENT,
            file_size: i64::from(at),
            uploader_broker_id: 1,
            owner_ids: vec![self.sm.metadata_partition() as i32],
            batches: bs,
        };
        let Outcome::CommitFiles(mut r) =
            self.apply(Op::CommitFiles(vec![FileToCommit { file, transactional: flags, txn_numbers }]))
        else {
            panic!("wrong outcome")
        };
        r.remove(0)
    }

    /// One transactional batch of producer `pid`.
    pub fn commit_in_txn(&mut self, b: CommitBatch) -> Result<CommittedBatch, Failure> {
        self.commit_txn(vec![(b, true)]).remove(0)
    }

    /// EndTransaction with one marker: the offset it was written at, if any.
    pub fn end_txn(&mut self, tp: TopicPartition, pid: i64, epoch: i16, commit: bool) -> Result<Option<i64>, Failure> {
        self.end_numbered(tp, pid, epoch, commit, 0)
    }

    /// [`Fixture::end_txn`] with the transaction's number.
    pub fn end_numbered(
        &mut self,
        tp: TopicPartition,
        pid: i64,
        epoch: i16,
        commit: bool,
        txn_number: u64,
    ) -> Result<Option<i64>, Failure> {
        let m = TxnMarker { tp, producer_id: pid, producer_epoch: epoch, commit, coordinator_epoch: 3, txn_number };
        let Outcome::EndTransaction(mut r) = self.apply(Op::EndTransaction(vec![m])) else { panic!("wrong outcome") };
        r.remove(0)
    }

    pub fn delete_records(&mut self, tp: TopicPartition, offset: i64, budget: u32) -> Result<i64, Failure> {
        let op = Op::DeleteRecords { partitions: vec![DeleteRecordsPartition { tp, offset }], budget };
        let Outcome::DeleteRecords(mut r) = self.apply(op) else { panic!("wrong outcome") };
        r.remove(0).1
    }

    pub fn delete_topic(&mut self, topic: u8, budget: u32) -> Result<(), Failure> {
        let Outcome::Topics(mut r) = self.apply(Op::DeleteTopics { topic_ids: vec![topic_id(topic)], budget }) else {
            panic!("wrong outcome")
        };
        r.remove(0).1
    }

    /// EnforceRetention with producer states never expiring.
    pub fn retention(&mut self, budget: u32) -> RetentionReport {
        self.retention_expiring_producers(budget, -1)
    }

    pub fn retention_expiring_producers(&mut self, budget: u32, producer_expiration_ms: i64) -> RetentionReport {
        self.retention_full(budget, producer_expiration_ms, -1)
    }

    pub fn retention_full(
        &mut self,
        budget: u32,
        producer_expiration_ms: i64,
        fenced_object_retention_ms: i64,
    ) -> RetentionReport {
        let op = Op::EnforceRetention { budget, producer_expiration_ms, fenced_object_retention_ms };
        let Outcome::EnforceRetention(r) = self.apply(op) else { panic!("wrong outcome") };
        r
    }

    /// FenceObjects of `keys`: each key's answer.
    pub fn fence(&mut self, keys: &[&str]) -> Vec<Result<FenceAnswer, Failure>> {
        let op = Op::FenceObjects { object_keys: keys.iter().map(|k| k.to_string()).collect() };
        let Outcome::FenceObjects(r) = self.apply(op) else { panic!("wrong outcome") };
        r.into_iter().map(|(_, r)| r).collect()
    }

    /// ConfirmFilesDeleted of `keys`: each key's error code.
    pub fn confirm(&mut self, keys: &[&str]) -> Vec<ErrorCode> {
        let op = Op::ConfirmFilesDeleted { object_keys: keys.iter().map(|k| k.to_string()).collect() };
        let Outcome::ConfirmFilesDeleted(r) = self.apply(op) else { panic!("wrong outcome") };
        r.iter().map(|(_, r)| code(r)).collect()
    }

    pub fn list_offsets(&self, tp: TopicPartition, ts: i64) -> Result<OffsetAndTimestamp, Failure> {
        self.sm.list_offsets(&self.db.read(), &tp, ts, false).expect("read")
    }

    /// ListOffsets with `read_committed`.
    pub fn list_committed(&self, tp: TopicPartition, ts: i64) -> Result<OffsetAndTimestamp, Failure> {
        self.sm.list_offsets(&self.db.read(), &tp, ts, true).expect("read")
    }

    pub fn find(&self, tp: TopicPartition, offset: i64, max_bytes: i32) -> PartitionBatches {
        let mut budget = FetchBudget::new(i32::MAX, 0);
        self.sm.find_batches(&self.db.read(), &tp, offset, max_bytes, &mut budget, false).expect("read")
    }

    /// FindBatches with `read_committed`.
    pub fn find_committed(&self, tp: TopicPartition, offset: i64) -> PartitionBatches {
        let mut budget = FetchBudget::new(i32::MAX, 0);
        self.sm.find_batches(&self.db.read(), &tp, offset, i32::MAX, &mut budget, true).expect("read")
    }

    pub fn describe(&self, key: &str) -> FileState {
        self.sm.describe_file(&self.db.read(), key).expect("read")
    }

    pub fn to_delete(&self) -> Vec<FileToDelete> {
        self.sm.files_to_delete(&self.db.read(), 1000).expect("read")
    }

    pub fn offsets(&self, tp: TopicPartition) -> (i64, i64) {
        (self.list_offsets(tp, -2).unwrap().offset, self.list_offsets(tp, -1).unwrap().offset)
    }
}

pub fn code<T: std::fmt::Debug>(r: &Result<T, Failure>) -> ErrorCode {
    match r {
        Ok(_) => ErrorCode::None,
        Err(f) => f.code,
    }
}
