//! DisklessDeleteRecords: move log start offsets forward.
//!
//! `-1` means the high watermark; another negative offset, or one above the high watermark, is
//! `OFFSET_OUT_OF_RANGE`. An offset at or below the current log start changes nothing. The new log
//! start is visible at once; the batches wholly below it go through the purge queue.

use super::command::{DeleteRecordsPartition, ErrorCode, Failure};
use super::keys::TopicPartition;
use super::purge::{self, Progress};
use super::{tables, StateMachine};
use crate::storage::{StorageError, Txn};

pub fn apply(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    partitions: &[DeleteRecordsPartition],
    mut budget: u32,
) -> Result<Vec<(TopicPartition, Result<i64, Failure>)>, StorageError> {
    let mut out = Vec::with_capacity(partitions.len());
    for p in partitions {
        out.push((p.tp, delete(sm, txn, p)?));
    }
    purge::run(sm, txn, now, &mut budget, &mut Progress::default())?;
    Ok(out)
}

fn delete(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    p: &DeleteRecordsPartition,
) -> Result<Result<i64, Failure>, StorageError> {
    let keys = &sm.keys;
    let part = if p.tp.partition < 0 { None } else { tables::live_partition(txn, keys, &p.tp)? };
    let Some(mut part) = part else {
        return Ok(Err(Failure::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("this coordinator does not host partition {}", p.tp),
        )));
    };
    let target = if p.offset == -1 { part.high_watermark } else { p.offset };
    if target < 0 || target > part.high_watermark {
        return Ok(Err(Failure::new(
            ErrorCode::OffsetOutOfRange,
            format!(
                "cannot delete records of {} below offset {}: the high watermark is {}",
                p.tp, p.offset, part.high_watermark
            ),
        )));
    }
    if target > part.log_start_offset {
        part.log_start_offset = target;
        tables::put(txn, keys.partition(&p.tp), &part)?;
        purge::enqueue_if_needed(sm, txn, &p.tp, &part)?;
    }
    Ok(Ok(part.log_start_offset))
}
