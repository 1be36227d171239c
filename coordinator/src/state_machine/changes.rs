//! What an applied command changed that a watcher of partitions cares about: high watermarks, log
//! start offsets, deleted topics, whether retention moved log starts, the coordinates of the
//! batches appended (what FindBatches would answer for them, so a watcher can serve reads of them
//! without asking: the broker's batch-coordinate cache), and the batches a replace moved to another
//! object (so such a cache follows them). Derived from the command
//! and its outcome alone (pure, like the rest of the state machine), so every replica derives the
//! same changes for the same entry; `raft::watch` keeps them for `WatchPartitions`.
//!
//! It must not read state: a change is what the entry did, never what the partition holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::command::{Command, CommitFile, CommittedBatch, Failure, Op, Outcome, MAGIC_V2, TIMESTAMP_CREATE_TIME};
use super::keys::TopicPartition;
use super::records::MarkerRecord;
use super::replace_batches::Replaced;

/// A change to one partition (or, `deleted`, to a whole topic: `partition` is then -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionChange {
    pub tp: TopicPartition,
    /// The new high watermark, if it moved.
    pub high_watermark: Option<i64>,
    /// The new log start offset, if it moved.
    pub log_start_offset: Option<i64>,
    pub deleted: bool,
}

/// A batch an entry appended, with the coordinates the state machine stored for it (the fields of
/// FindBatches' `BatchInfo` but its id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendedBatch {
    pub tp: TopicPartition,
    /// Shared by the batches of one object.
    pub object_key: Arc<str>,
    pub magic: i8,
    pub byte_offset: i32,
    pub byte_size: i32,
    /// The assigned offsets.
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_append_time: i64,
    pub batch_max_timestamp: i64,
    pub timestamp_type: i8,
    /// A transaction marker (no object bytes: `object_key` is empty).
    pub marker: Option<MarkerRecord>,
    /// A transactional batch (its records count for `read_committed` readers only once its
    /// transaction commits).
    pub transactional: bool,
}

/// A batch a replace moved: its partition and last offset, and where it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedBatch {
    pub tp: TopicPartition,
    pub last_offset: i64,
    /// Shared by the batches of one replace.
    pub object_key: Arc<str>,
    pub byte_offset: i32,
}

/// What one entry changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// At most one per partition, in partition order.
    pub partitions: Vec<PartitionChange>,
    /// Retention deleted batches: some log start offsets moved.
    pub log_starts_moved: bool,
    /// The batches appended, in the order they were applied.
    pub batches: Vec<AppendedBatch>,
    /// The batches a replace moved to another object.
    pub moved: Vec<MovedBatch>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty() && !self.log_starts_moved && self.batches.is_empty() && self.moved.is_empty()
    }

    /// What the entry costs a bounded history, in partition changes (a batch's coordinates weigh
    /// about two).
    pub fn weight(&self) -> usize {
        self.partitions.len() + 2 * self.batches.len() + self.moved.len()
    }
}

/// The changes `cmd` made, given the outcome it was applied with.
pub fn changes(cmd: &Command, outcome: &Outcome) -> Changes {
    let mut by_tp: BTreeMap<TopicPartition, PartitionChange> = BTreeMap::new();
    let mut log_starts_moved = false;
    let mut batches = vec![];
    let mut moved = vec![];
    match (&cmd.op, outcome) {
        (Op::ReplaceBatches(r), Outcome::ReplaceBatches(Ok(results))) => {
            let key: Arc<str> = Arc::from(r.object_key.as_str());
            for (b, result) in r.batches.iter().zip(results) {
                if *result == Replaced::Replaced {
                    moved.push(MovedBatch {
                        tp: r.tp,
                        last_offset: b.last_offset,
                        object_key: key.clone(),
                        byte_offset: b.byte_offset,
                    });
                }
            }
        }
        (Op::CommitFile(file), Outcome::CommitFile(results)) => committed(&mut by_tp, &mut batches, file, &[], results),
        (Op::CommitFiles(files), Outcome::CommitFiles(per_file)) => {
            for (file, results) in files.iter().zip(per_file) {
                committed(&mut by_tp, &mut batches, &file.file, &file.transactional, results);
            }
        }
        (Op::EndTransaction(markers), Outcome::EndTransaction(results)) => {
            let no_object: Arc<str> = Arc::from("");
            for (m, r) in markers.iter().zip(results) {
                let Ok(Some(offset)) = r else { continue };
                batches.push(AppendedBatch {
                    tp: m.tp,
                    object_key: no_object.clone(),
                    magic: MAGIC_V2,
                    byte_offset: 0,
                    byte_size: 0,
                    base_offset: *offset,
                    last_offset: *offset,
                    log_append_time: cmd.now_ms,
                    batch_max_timestamp: cmd.now_ms,
                    timestamp_type: TIMESTAMP_CREATE_TIME,
                    marker: Some(MarkerRecord {
                        producer_id: m.producer_id,
                        producer_epoch: m.producer_epoch,
                        commit: m.commit,
                        coordinator_epoch: m.coordinator_epoch,
                    }),
                    transactional: true,
                });
                let e = entry(&mut by_tp, m.tp);
                e.high_watermark = Some(e.high_watermark.map_or(offset + 1, |h| h.max(offset + 1)));
            }
        }
        (Op::DeleteRecords { .. }, Outcome::DeleteRecords(results)) => {
            for (tp, r) in results {
                if let Ok(log_start) = r {
                    let c = entry(&mut by_tp, *tp);
                    c.log_start_offset = Some(c.log_start_offset.map_or(*log_start, |l| l.max(*log_start)));
                }
            }
        }
        (Op::DeleteTopics { .. }, Outcome::Topics(results)) => {
            for (topic_id, r) in results {
                if r.is_ok() {
                    entry(&mut by_tp, TopicPartition { topic_id: *topic_id, partition: -1 }).deleted = true;
                }
            }
        }
        (Op::EnforceRetention { .. }, Outcome::EnforceRetention(report)) => {
            log_starts_moved = report.batches_deleted > 0
        }
        _ => {}
    }
    Changes { partitions: by_tp.into_values().collect(), log_starts_moved, batches, moved }
}

fn entry(by_tp: &mut BTreeMap<TopicPartition, PartitionChange>, tp: TopicPartition) -> &mut PartitionChange {
    by_tp.entry(tp).or_insert(PartitionChange { tp, high_watermark: None, log_start_offset: None, deleted: false })
}

/// Appended batches move their partition's high watermark past their last offset and are named
/// with their coordinates (duplicates and refused batches change nothing).
fn committed(
    by_tp: &mut BTreeMap<TopicPartition, PartitionChange>,
    appended: &mut Vec<AppendedBatch>,
    file: &CommitFile,
    transactional: &[bool],
    results: &[Result<CommittedBatch, Failure>],
) {
    let mut key: Option<Arc<str>> = None;
    for (i, (b, r)) in file.batches.iter().zip(results).enumerate() {
        let Ok(c) = r else { continue };
        if c.is_duplicate {
            continue;
        }
        let count = b.last_offset.saturating_sub(b.base_offset).saturating_add(1);
        let hwm = c.assigned_base_offset.saturating_add(count);
        appended.push(AppendedBatch {
            tp: b.tp,
            object_key: key.get_or_insert_with(|| Arc::from(file.object_key.as_str())).clone(),
            magic: b.magic,
            byte_offset: b.byte_offset,
            byte_size: b.size,
            base_offset: c.assigned_base_offset,
            last_offset: hwm - 1,
            log_append_time: c.log_append_time,
            batch_max_timestamp: b.batch_max_timestamp,
            timestamp_type: b.timestamp_type,
            marker: None,
            transactional: transactional.get(i).copied().unwrap_or(false),
        });
        let e = entry(by_tp, b.tp);
        e.high_watermark = Some(e.high_watermark.map_or(hwm, |h| h.max(hwm)));
        if c.log_start_offset >= 0 {
            e.log_start_offset = Some(e.log_start_offset.map_or(c.log_start_offset, |l| l.max(c.log_start_offset)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_machine::command::{CommitBatch, RetentionReport};
    use diskless_proto::ErrorCode;
    use uuid::Uuid;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition { topic_id: Uuid::from_u128(7), partition: p }
    }

    fn batch(p: i32, records: i64) -> CommitBatch {
        CommitBatch {
            magic: 2,
            request_id: 0,
            tp: tp(p),
            byte_offset: 0,
            size: 100,
            base_offset: 0,
            last_offset: records - 1,
            batch_max_timestamp: 0,
            timestamp_type: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            last_sequence: -1,
        }
    }

    fn appended(base: i64, dup: bool) -> Result<CommittedBatch, Failure> {
        Ok(CommittedBatch { assigned_base_offset: base, log_append_time: 1, log_start_offset: 0, is_duplicate: dup })
    }

    fn commit(batches: Vec<CommitBatch>) -> Command {
        Command {
            now_ms: 1,
            op: Op::CommitFile(CommitFile {
                deadline_ms: None,
                object_key: "k".into(),
                object_format: 1,
                file_size: 100,
                uploader_broker_id: 1,
                owner_ids: vec![],
                batches,
            }),
        }
    }

    #[test]
    fn appended_batches_move_the_high_watermark_past_their_last_record_and_duplicates_move_nothing() {
        let cmd = commit(vec![batch(0, 3), batch(1, 5), batch(0, 2), batch(2, 4), batch(3, 1)]);
        let outcome = Outcome::CommitFile(vec![
            appended(10, false),
            appended(0, false),
            appended(13, false),
            appended(40, true),
            Err(Failure::new(ErrorCode::CorruptMessage, "no")),
        ]);
        let c = changes(&cmd, &outcome);
        let hwms: Vec<(i32, Option<i64>)> = c.partitions.iter().map(|p| (p.tp.partition, p.high_watermark)).collect();
        assert_eq!(hwms, vec![(0, Some(15)), (1, Some(5))]);
        assert!(!c.log_starts_moved);
        // The appended batches' coordinates, at their assigned offsets, in the order applied.
        let coords: Vec<(i32, i64, i64, &str)> =
            c.batches.iter().map(|b| (b.tp.partition, b.base_offset, b.last_offset, &*b.object_key)).collect();
        assert_eq!(coords, vec![(0, 10, 12, "k"), (1, 0, 4, "k"), (0, 13, 14, "k")]);
        assert!(c.batches.iter().all(|b| b.log_append_time == 1 && b.byte_size == 100 && !b.transactional));
        // The same as CommitFiles with the second batch transactional: announced as such.
        let Op::CommitFile(file) = cmd.op else { unreachable!() };
        let flags = vec![false, true, false, false, false];
        let v2 = Command {
            now_ms: 1,
            op: Op::CommitFiles(vec![crate::state_machine::FileToCommit {
                file,
                transactional: flags,
                txn_numbers: vec![],
            }]),
        };
        let Outcome::CommitFile(results) = outcome else { unreachable!() };
        let c = changes(&v2, &Outcome::CommitFiles(vec![results]));
        assert_eq!(c.batches.iter().map(|b| b.transactional).collect::<Vec<_>>(), vec![false, true, false]);
    }

    #[test]
    fn a_written_marker_moves_the_high_watermark_and_is_announced_without_object_bytes() {
        use crate::state_machine::command::TxnMarker;
        let marker = |p, commit| TxnMarker {
            tp: tp(p),
            producer_id: 9,
            producer_epoch: 2,
            commit,
            coordinator_epoch: 4,
            txn_number: 0,
        };
        let cmd =
            Command { now_ms: 77, op: Op::EndTransaction(vec![marker(0, true), marker(1, false), marker(2, true)]) };
        let outcome = Outcome::EndTransaction(vec![
            Ok(Some(12)),
            Ok(None),
            Err(Failure::new(ErrorCode::InvalidProducerEpoch, "")),
        ]);
        let c = changes(&cmd, &outcome);
        let hwms: Vec<(i32, Option<i64>)> = c.partitions.iter().map(|p| (p.tp.partition, p.high_watermark)).collect();
        assert_eq!(hwms, vec![(0, Some(13))], "only a written marker moves its partition");
        assert_eq!(c.batches.len(), 1);
        let b = &c.batches[0];
        assert_eq!((b.base_offset, b.last_offset, b.byte_size, &*b.object_key, b.log_append_time), (12, 12, 0, "", 77));
        let m = b.marker.expect("the marker");
        assert_eq!((m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch), (9, 2, true, 4));
    }

    #[test]
    fn a_replace_announces_the_batches_it_moved_and_nothing_else() {
        use crate::state_machine::replace_batches::{ReplaceBatches, ReplacedBatch};
        let moved = |last_offset, byte_offset| ReplacedBatch {
            last_offset,
            batch_id: 1,
            source: 0,
            byte_offset,
            byte_size: 100,
        };
        let cmd = Command {
            now_ms: 5,
            op: Op::ReplaceBatches(ReplaceBatches {
                object_key: "merged".into(),
                object_format: 1,
                file_size: 300,
                uploader_broker_id: 1,
                tp: tp(3),
                sources: vec!["wal".into()],
                batches: vec![moved(4, 0), moved(9, 100), moved(12, 200)],
            }),
        };
        let outcome = Outcome::ReplaceBatches(Ok(vec![Replaced::Replaced, Replaced::Changed, Replaced::Replaced]));
        let c = changes(&cmd, &outcome);
        let got: Vec<(i64, i32, &str)> =
            c.moved.iter().map(|m| (m.last_offset, m.byte_offset, &*m.object_key)).collect();
        assert_eq!(got, vec![(4, 0, "merged"), (12, 200, "merged")]);
        assert!(c.partitions.is_empty() && c.batches.is_empty(), "no offset moves");
        let refused = Outcome::ReplaceBatches(Err(Failure::new(ErrorCode::KafkaStorageError, "")));
        assert!(changes(&cmd, &refused).is_empty());
    }

    #[test]
    fn delete_records_deletions_and_retention_are_changes_and_other_commands_are_not() {
        let dr = Command { now_ms: 1, op: Op::DeleteRecords { partitions: vec![], budget: 1 } };
        let c = changes(
            &dr,
            &Outcome::DeleteRecords(vec![(tp(4), Ok(9)), (tp(5), Err(Failure::new(ErrorCode::OffsetOutOfRange, "")))]),
        );
        assert_eq!(c.partitions.len(), 1);
        assert_eq!((c.partitions[0].tp, c.partitions[0].log_start_offset), (tp(4), Some(9)));

        let del = Command { now_ms: 1, op: Op::DeleteTopics { topic_ids: vec![Uuid::from_u128(7)], budget: 1 } };
        let c = changes(&del, &Outcome::Topics(vec![(Uuid::from_u128(7), Ok(()))]));
        assert!(c.partitions[0].deleted && c.partitions[0].tp.partition == -1);

        let ret = Command {
            now_ms: 1,
            op: Op::EnforceRetention { budget: 1, producer_expiration_ms: 1, fenced_object_retention_ms: 1 },
        };
        let moved = RetentionReport { batches_deleted: 2, ..Default::default() };
        assert!(changes(&ret, &Outcome::EnforceRetention(moved)).log_starts_moved);
        assert!(changes(&ret, &Outcome::EnforceRetention(RetentionReport::default())).is_empty());
        assert!(changes(&Command { now_ms: 1, op: Op::Noop }, &Outcome::Noop).is_empty());
    }
}
