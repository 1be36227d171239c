//! Reading this broker's own writes from any replica: per metadata partition, the highest Raft
//! index its commits (and the reads it saw) were applied at; every FindBatches carries them as
//! `min_applied`, and a replica answers only once it has applied that far. Indexes only grow.

use diskless_proto::v1::GroupIndex;

use super::ClusterClient;

impl ClusterClient {
    /// Remembers the indexes a commit was applied at.
    pub fn record_applied(&self, applied: &[GroupIndex]) {
        let mut map = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        for at in applied {
            let e = map.entry(at.metadata_partition).or_insert(0);
            *e = (*e).max(at.index);
        }
    }

    /// The indexes a replica must have applied to show this broker's own commits.
    pub fn min_applied(&self) -> Vec<GroupIndex> {
        let map = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(&metadata_partition, &index)| GroupIndex { metadata_partition, index }).collect()
    }
}
