//! Reading this broker's own writes from any replica: per metadata partition, the highest Raft
//! index its commits (and the reads it saw) were applied at; every FindBatches carries them as
//! `min_applied`, and a replica answers only once it has applied that far. Indexes only grow.
//! A commit's new high watermarks go to the marks at once (`marks`), waking this broker's parked
//! fetches before any watch could tell of them, and its batches to the coordinate cache.

use std::sync::Arc;

use diskless_proto::metadata_partition_for;
use diskless_proto::v1::{AppliedIndex, CommitFileRequest, CommitFileResponse};

use super::coordinates::Coordinate;
use super::ClusterClient;

impl ClusterClient {
    /// Remembers the indexes a commit was applied at.
    pub fn record_applied(&self, applied: &[AppliedIndex]) {
        let mut map = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        for at in applied {
            let e = map.entry(at.metadata_partition).or_insert(0);
            *e = (*e).max(at.index);
        }
    }

    /// Remembers what a commit did: the indexes it was applied at, the coordinates of the batches
    /// it appended and the high watermarks they reached.
    pub fn record_commit(&self, req: &CommitFileRequest, resp: &CommitFileResponse) {
        self.record_applied(&resp.applied);
        let n = self.num_metadata_partitions;
        let mut key: Option<Arc<str>> = None;
        for (b, r) in req.batches.iter().zip(&resp.batches) {
            let Ok(topic_id) = <[u8; 16]>::try_from(b.topic_id.as_slice()) else { continue };
            if r.error_code != 0 || r.assigned_base_offset < 0 || b.last_offset < b.base_offset || b.partition_index < 0
            {
                continue;
            }
            let g = metadata_partition_for(&topic_id, b.partition_index, n);
            let Some(at) = resp.applied.iter().find(|a| a.metadata_partition == g) else { continue };
            let hwm = r.assigned_base_offset.saturating_add(b.last_offset - b.base_offset + 1);
            if b.is_transactional {
                self.marks.observe_transactional(topic_id, b.partition_index, at.index);
            }
            if !r.is_duplicate {
                // Before the mark moves: a fetch it wakes finds the batch here.
                let key = key.get_or_insert_with(|| Arc::from(req.object_key.as_str())).clone();
                self.coordinates.insert(
                    topic_id,
                    b.partition_index,
                    Coordinate {
                        object_key: key,
                        magic: b.magic,
                        byte_offset: i64::from(b.byte_offset),
                        byte_size: i64::from(b.size),
                        base_offset: r.assigned_base_offset,
                        last_offset: hwm - 1,
                        log_append_timestamp: r.log_append_time,
                        batch_max_timestamp: b.batch_max_timestamp,
                        timestamp_type: b.timestamp_type,
                        marker: None,
                        transactional: Some(b.is_transactional),
                    },
                    at.index,
                );
            }
            self.marks.observe(topic_id, b.partition_index, Some(hwm), None, at.index);
        }
    }

    /// The indexes a replica must have applied to show this broker's own commits.
    pub fn min_applied(&self) -> Vec<AppliedIndex> {
        let map = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(&metadata_partition, &index)| AppliedIndex { metadata_partition, index }).collect()
    }
}
