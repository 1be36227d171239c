//! Committing a file: its batches split by metadata partition (`diskless_proto::split_by_partition`,
//! owner by `metadata_partition_for`), each part sent straight to its partition's leader in one
//! request per leader node (8 partitions over 3 nodes: 3 requests, not 8), the answers merged back
//! in request order (`diskless_proto::merge_part`). A part refused because the node no longer
//! leads the partition was not applied, so it is sent again once after learning the new leaders,
//! within the commit's deadline. It must never send a part again whose outcome is unknown (the
//! transport failed, or the answer miscounted): that batch is answered REQUEST_TIMED_OUT.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::{commit_file_response, CommitFileRequest, CommitFileResponse};
use diskless_proto::{merge_part, metadata_partition_for, split_by_partition, ErrorCode};

use super::ClusterClient;

/// Less time than this left before a commit's deadline: the commit is not sent.
pub const MIN_COMMIT_WINDOW: Duration = Duration::from_millis(100);

/// The header that makes a node serve every part of a request itself (no forwarding).
const LOCAL_HEADER: &str = "x-diskless-local";

impl ClusterClient {
    /// Commits a file, sending each metadata partition's part straight to that partition's leader
    /// (no forwarding hop), in one request per leader node carrying the parts of every partition
    /// it leads. A part refused because the node is no longer the leader was not applied, so it is
    /// sent again once after learning the new leaders — unless `deadline` is (nearly) past: no part
    /// is sent after it, and a resent part carries only the time left. Per-batch results come back
    /// in request order; a part whose outcome is unknown gets REQUEST_TIMED_OUT. Empty `owner_ids`
    /// are filled in from the batches.
    pub async fn commit_file(&self, req: CommitFileRequest, deadline: Instant) -> CommitFileResponse {
        let n = self.num_metadata_partitions;
        let mut parts = split_by_partition(&req.batches, |b| {
            Some(
                <[u8; 16]>::try_from(b.topic_id.as_slice())
                    .map(|t| metadata_partition_for(&t, b.partition_index.max(0), n))
                    .unwrap_or(0),
            )
        });
        if parts.is_empty() {
            // An empty file is recorded (garbage at once) by an owner it names.
            let owner = req.owner_ids.iter().find(|&&o| o >= 0 && (o as u32) < n);
            parts.insert(owner.map_or(0, |&o| o as u32), vec![]);
        }
        let mut req = req;
        if req.owner_ids.is_empty() {
            // Each part is sent to its metadata partition directly, so the owners must be named:
            // all of them.
            req.owner_ids = parts.keys().map(|&mp| mp as i32).collect();
        }
        let mut results: Vec<Option<commit_file_response::CommitBatchResult>> = vec![None; req.batches.len()];
        let mut applied = vec![];
        let mut pending: Vec<(u32, Vec<usize>)> = parts.into_iter().collect();
        for attempt in 0..2 {
            // One request per leader node, carrying the parts of every metadata partition it leads.
            let mut by_node: BTreeMap<Option<String>, Vec<(u32, Vec<usize>)>> = BTreeMap::new();
            for (mp, idxs) in pending {
                by_node.entry(self.leader_of(mp)).or_default().push((mp, idxs));
            }
            let outs = futures_util::future::join_all(by_node.iter().map(|(node, parts)| {
                let sub = CommitFileRequest {
                    batches: parts.iter().flat_map(|(_, idxs)| idxs.iter().map(|&i| req.batches[i].clone())).collect(),
                    ..req.clone()
                };
                self.commit_on(node.as_deref(), sub)
            }))
            .await;
            let mut retry = vec![];
            for ((_, parts), out) in by_node.into_iter().zip(outs) {
                let sent: usize = parts.iter().map(|(_, idxs)| idxs.len()).sum();
                let resp = match out {
                    Ok(resp) if resp.batches.len() == sent => resp,
                    // Unreachable, or an answer that does not add up: nothing is known of any part.
                    _ => {
                        for (mp, idxs) in parts {
                            merge_part(&mut results, &idxs, Err(()), |_| unknown_outcome(mp));
                        }
                        continue;
                    }
                };
                // The node's answers are its parts' answers, one after the other.
                let mut answers = resp.batches.into_iter();
                for (mp, idxs) in parts {
                    let answers: Vec<_> = answers.by_ref().take(idxs.len()).collect();
                    // Refused by a node that does not lead the partition: nothing applied.
                    let not_leader = !idxs.is_empty()
                        && answers.iter().all(|b| b.error_code == ErrorCode::NotLeaderOrFollower.wire());
                    if not_leader && attempt == 0 {
                        retry.push((mp, idxs));
                        continue;
                    }
                    merge_part(&mut results, &idxs, Ok::<_, ()>(answers), |_| unknown_outcome(mp));
                }
                applied.extend(resp.applied);
            }
            if retry.is_empty() {
                break;
            }
            self.refresh_leaders().await;
            let left = deadline.saturating_duration_since(Instant::now());
            if left < MIN_COMMIT_WINDOW {
                // Too late to send it again: it stays refused (NOT_LEADER_OR_FOLLOWER, nothing applied).
                for (mp, idxs) in retry {
                    for &i in &idxs {
                        results[i] = Some(not_leader_in_time(mp));
                    }
                }
                break;
            }
            req.timeout_ms = req.timeout_ms.min(left.as_millis().min(i32::MAX as u128) as i32);
            pending = retry;
        }
        let batches = results.into_iter().map(|r| r.unwrap_or_else(|| unknown_outcome(0))).collect();
        CommitFileResponse { throttle_time_ms: 0, batches, applied }
    }

    /// Sends commit parts to the node at `leader`, which serves each itself (never forwarding: a
    /// part it does not lead is refused, nothing applied), or, with no leader known, to any node,
    /// which routes each part.
    async fn commit_on(
        &self,
        leader: Option<&str>,
        sub: CommitFileRequest,
    ) -> Result<CommitFileResponse, tonic::Status> {
        // Bounded: a blackholed leader must not stall the broker's commits for minutes.
        let deadline = Duration::from_millis(sub.timeout_ms.max(1000) as u64 + 5_000);
        if let Some(ch) = leader.and_then(|a| self.channel_to(a)) {
            let mut r = tonic::Request::new(sub);
            r.metadata_mut().insert(LOCAL_HEADER, tonic::metadata::MetadataValue::from_static("1"));
            r.set_timeout(deadline);
            match CoordinatorServiceClient::new(ch).commit_file(r).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) => {
                    // Delivered or not, we cannot tell: never re-sent (the caller reports an
                    // unknown outcome); learn where the leaders are now for the next commits.
                    self.refresh_leaders().await;
                    return Err(s);
                }
            }
        }
        self.call_once(|mut c| async move {
            let mut r = tonic::Request::new(sub);
            r.set_timeout(deadline);
            c.commit_file(r).await
        })
        .await
    }
}

/// A batch whose part was refused by a node that was not the leader and not sent again in time.
fn not_leader_in_time(mp: u32) -> commit_file_response::CommitBatchResult {
    commit_file_response::CommitBatchResult {
        error_code: ErrorCode::NotLeaderOrFollower.wire(),
        error_message: Some(format!(
            "metadata partition {mp}'s leader moved and the commit's deadline left no time to send it again"
        )),
        assigned_base_offset: -1,
        log_append_time: -1,
        log_start_offset: -1,
        is_duplicate: false,
    }
}

/// A batch whose commit may or may not have happened.
fn unknown_outcome(mp: u32) -> commit_file_response::CommitBatchResult {
    commit_file_response::CommitBatchResult {
        error_code: ErrorCode::RequestTimedOut.wire(),
        error_message: Some(format!("metadata partition {mp} did not confirm the commit; its outcome is unknown")),
        assigned_base_offset: -1,
        log_append_time: -1,
        log_start_offset: -1,
        is_duplicate: false,
    }
}
