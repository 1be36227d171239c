//! A group's committed offsets written to the cluster (CommitOffsets on the group's metadata
//! partition, fenced there at apply by the stored group), for OffsetCommit, TxnOffsetCommit's end
//! and nothing else: one request, one answer per offset in order.
//!
//! It decides nothing about who may commit (`coordinators::groups::offsets` checks the member).

use diskless_proto::v1::{CommitOffsetsRequest, GroupOffset};
use diskless_proto::ErrorCode;

use super::ClusterClient;

const TIMEOUT_MS: i32 = 15_000;

impl ClusterClient {
    /// Commits `offsets` of `group_id` as member `member_id` of `generation` (the cluster's
    /// `TXN_OFFSETS_GENERATION`: a committed transaction's, not fenced again). Per offset, in
    /// order, its code: routing and availability problems, an answer that did not come or fell
    /// short, are COORDINATOR_NOT_AVAILABLE (whether they were written is unknown; the client
    /// retries).
    pub async fn commit_group_offsets(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<GroupOffset>,
    ) -> Vec<ErrorCode> {
        let n = offsets.len();
        let request = CommitOffsetsRequest {
            group_id: group_id.to_string(),
            generation_id: generation,
            member_id: member_id.to_string(),
            offsets,
            timeout_ms: TIMEOUT_MS,
        };
        let started = std::time::Instant::now();
        let r = self
            .call(|mut c| {
                let request = request.clone();
                async move { c.commit_offsets(request).await }
            })
            .await;
        crate::metrics::get().offset_commit_seconds.observe(started.elapsed().as_secs_f64());
        let mut codes: Vec<ErrorCode> = match r {
            Ok(resp) => resp.offsets.iter().map(|o| group_code(o.error_code)).collect(),
            Err(status) => {
                tracing::info!(group = group_id, %status, "committing offsets: coordinator cluster unavailable");
                vec![]
            }
        };
        codes.resize(n, ErrorCode::CoordinatorNotAvailable);
        codes.truncate(n);
        codes
    }
}

/// A coordinator-cluster answer as a group coordinator's Kafka error: routing and availability
/// problems become COORDINATOR_NOT_AVAILABLE, which clients retry after finding the coordinator.
pub fn group_code(code: i32) -> ErrorCode {
    match ErrorCode::from_wire(code) {
        ErrorCode::NotLeaderOrFollower | ErrorCode::RequestTimedOut | ErrorCode::ReplicaNotAvailable => {
            ErrorCode::CoordinatorNotAvailable
        }
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_and_availability_answers_are_coordinator_not_available_and_the_rest_kept() {
        assert_eq!(group_code(ErrorCode::NotLeaderOrFollower.code().into()), ErrorCode::CoordinatorNotAvailable);
        assert_eq!(group_code(ErrorCode::RequestTimedOut.code().into()), ErrorCode::CoordinatorNotAvailable);
        assert_eq!(group_code(ErrorCode::IllegalGeneration.code().into()), ErrorCode::IllegalGeneration);
        assert_eq!(group_code(0), ErrorCode::None);
    }
}
