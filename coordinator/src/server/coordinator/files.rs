//! A file's lifecycle after its commit, as the brokers' cleaners drive it: DescribeFiles (does
//! any metadata partition still have live batches in the object?), ListFilesToDelete (released
//! files, from every partition that answers), FenceObjects (an object key fenced in every
//! partition it names, so no commit of it can apply; the answers merged: live anywhere, else all
//! must answer, latest release) and ConfirmFilesDeleted (tombstones once the object is gone).
//! Each runs on every metadata partition's leader (or the ones named).
//!
//! Owns these calls' wire conversions and how the partitions' answers merge. The rules are the
//! state machine's (`state_machine::files`).

use std::collections::{BTreeMap, BTreeSet};

use diskless_proto::merge_part;
use diskless_proto::v1::*;
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::fan_out::no_result;
use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Read, RouteError};
use crate::server::convert::{self, failure_fields, part_failure, route_failure, route_status};
use crate::state_machine::{ErrorCode, Failure, FenceAnswer, Op, Outcome};

/// The answers of every metadata partition named for one object, merged: live anywhere is live
/// (a definite answer, whatever the others said); otherwise every partition must have answered;
/// released anywhere is released, at the latest release.
#[derive(Debug, Clone, Default)]
struct FenceMerge {
    live: bool,
    released_at: Option<i64>,
    error: Option<Failure>,
}

impl FenceMerge {
    fn failed(&mut self, f: Failure) {
        self.error.get_or_insert(f);
    }

    fn add(&mut self, r: Result<FenceAnswer, Failure>) {
        match r {
            Err(f) => self.failed(f),
            Ok(FenceAnswer::Live) => self.live = true,
            Ok(FenceAnswer::Released { marked_at }) => {
                self.released_at = Some(self.released_at.map_or(marked_at, |t| t.max(marked_at)))
            }
            Ok(FenceAnswer::Fenced { .. }) => {}
        }
    }

    fn result(self, object_key: String) -> fence_objects_response::FenceObjectResult {
        let (state, released_at, error) = match (self.live, self.error, self.released_at) {
            (true, _, _) => (ObjectState::Live, -1, None),
            (false, Some(e), _) => (ObjectState::Unspecified, -1, Some(e)),
            (false, None, Some(at)) => (ObjectState::Released, at, None),
            (false, None, None) => (ObjectState::Fenced, -1, None),
        };
        let (error_code, error_message) = error.as_ref().map_or_else(convert::ok_fields, failure_fields);
        fence_objects_response::FenceObjectResult {
            object_key,
            error_code,
            error_message,
            state: state.into(),
            released_at,
        }
    }
}

impl CoordinatorApi {
    pub(super) async fn serve_describe_files(
        &self,
        request: Request<DescribeFilesRequest>,
    ) -> Result<Response<DescribeFilesResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let keys: Vec<String> = req.files.iter().map(|f| f.object_key.clone()).collect();
        let partitions = self.all_partitions();
        let outs = join_all(partitions.iter().map(|&g| {
            let keys = keys.clone();
            async move {
                match self.read(g, Read::DescribeFiles(keys), timeout, hop).await? {
                    Answer::DescribeFiles(states) => Ok(states),
                    other => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        let mut files: Vec<describe_files_response::DescribeFileResult> = keys
            .into_iter()
            .map(|object_key| describe_files_response::DescribeFileResult {
                object_key,
                error_code: 0,
                error_message: None,
                has_live_batches: false,
                known: false,
            })
            .collect();
        let mut errors: Vec<Option<Failure>> = vec![None; files.len()];
        for out in outs {
            match out {
                Ok(states) => {
                    for (f, s) in files.iter_mut().zip(states) {
                        f.has_live_batches |= s.has_live_batches;
                        f.known |= s.known;
                    }
                }
                Err(e) => errors.iter_mut().for_each(|slot| *slot = Some(route_failure(&e))),
            }
        }
        for (f, e) in files.iter_mut().zip(errors) {
            // A live batch anywhere is a definite answer; otherwise every partition must have
            // answered.
            if let (Some(e), false) = (e, f.has_live_batches) {
                (f.error_code, f.error_message) = failure_fields(&e);
            }
        }
        Ok(Response::new(DescribeFilesResponse { throttle_time_ms: 0, files }))
    }

    pub(super) async fn serve_list_files_to_delete(
        &self,
        request: Request<ListFilesToDeleteRequest>,
    ) -> Result<Response<ListFilesToDeleteResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let limit = req.limit.max(0) as usize;
        let partitions = self.all_partitions();
        let outs = join_all(partitions.iter().map(|&g| async move {
            match self.read(g, Read::FilesToDelete { limit: limit as u64 }, timeout, hop).await? {
                Answer::FilesToDelete(files) => Ok(files),
                other => Err(RouteError::unexpected(g, &other)),
            }
        }))
        .await;
        // The partitions that answered are served even when others did not: one unavailable
        // metadata partition must not stop the cleanup of every other one's files.
        let mut files = vec![];
        let mut unavailable = vec![];
        let mut last_error = None;
        for (&g, out) in partitions.iter().zip(outs) {
            match out {
                Ok(fs) => files.extend(fs.into_iter().map(|f| list_files_to_delete_response::FileToDelete {
                    object_key: f.object_key,
                    marked_for_deletion_at: f.marked_for_deletion_at,
                    file_size: f.file_size,
                    owner_ids: f.owner_ids,
                    metadata_partition: g,
                })),
                Err(e) => {
                    tracing::debug!(metadata_partition = g, error = %e, "files to delete: metadata partition did not answer");
                    unavailable.push(g);
                    last_error = Some(e);
                }
            }
        }
        if unavailable.len() == partitions.len() {
            return Err(
                last_error.map_or_else(|| Status::unavailable("no metadata partition answered"), |e| route_status(&e))
            );
        }
        files.sort_by(|a, b| (a.marked_for_deletion_at, &a.object_key).cmp(&(b.marked_for_deletion_at, &b.object_key)));
        files.truncate(limit);
        Ok(Response::new(ListFilesToDeleteResponse { files, unavailable_metadata_partitions: unavailable }))
    }

    pub(super) async fn serve_confirm_files_deleted(
        &self,
        request: Request<ConfirmFilesDeletedRequest>,
    ) -> Result<Response<ConfirmFilesDeletedResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let partitions = self.all_partitions();
        let outs = join_all(partitions.iter().map(|&g| {
            let object_keys = req.object_keys.clone();
            async move {
                match self.write(g, Op::ConfirmFilesDeleted { object_keys }, timeout, hop).await? {
                    (Outcome::ConfirmFilesDeleted(rs), _) => Ok(rs),
                    (other, _) => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        // The first error any metadata partition gave a key is the key's answer.
        let mut errors: Vec<Option<Failure>> = vec![None; req.object_keys.len()];
        for out in outs {
            match out {
                Ok(rs) => {
                    for (slot, (_, r)) in errors.iter_mut().zip(rs) {
                        if let (None, Err(f)) = (&slot, r) {
                            *slot = Some(f);
                        }
                    }
                }
                Err(e) => errors.iter_mut().filter(|s| s.is_none()).for_each(|s| *s = Some(route_failure(&e))),
            }
        }
        let files = req
            .object_keys
            .into_iter()
            .zip(errors)
            .map(|(object_key, e)| {
                let (error_code, error_message) = e.as_ref().map_or_else(convert::ok_fields, failure_fields);
                confirm_files_deleted_response::ConfirmFileResult { object_key, error_code, error_message }
            })
            .collect();
        Ok(Response::new(ConfirmFilesDeletedResponse { files }))
    }

    pub(super) async fn serve_fence_objects(
        &self,
        request: Request<FenceObjectsRequest>,
    ) -> Result<Response<FenceObjectsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let n = self.node.num_partitions();
        // Which objects each metadata partition fences (an object is in every part it names).
        let mut per_partition: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut merged: Vec<FenceMerge> = vec![FenceMerge::default(); req.objects.len()];
        for (i, o) in req.objects.iter().enumerate() {
            let named: BTreeSet<u32> = if o.metadata_partitions.is_empty() {
                self.all_partitions().into_iter().collect()
            } else {
                o.metadata_partitions.iter().copied().collect()
            };
            for g in named {
                if g < n {
                    per_partition.entry(g).or_default().push(i);
                } else {
                    merged[i]
                        .failed(Failure::new(ErrorCode::InvalidRequest, format!("there is no metadata partition {g}")));
                }
            }
        }
        let outs = join_all(per_partition.iter().map(|(&g, idxs)| {
            let object_keys: Vec<String> = idxs.iter().map(|&i| req.objects[i].object_key.clone()).collect();
            async move {
                match self.write(g, Op::FenceObjects { object_keys }, timeout, hop).await? {
                    (Outcome::FenceObjects(rs), _) => Ok(rs.into_iter().map(|(_, r)| r).collect()),
                    (other, _) => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        for ((_, idxs), out) in per_partition.iter().zip(outs) {
            let mut answers: Vec<Option<Result<FenceAnswer, Failure>>> = vec![None; idxs.len()];
            let all: Vec<usize> = (0..idxs.len()).collect();
            merge_part(&mut answers, &all, out, |f| Err(part_failure(f)));
            for (&i, a) in idxs.iter().zip(answers) {
                merged[i].add(a.unwrap_or_else(no_result));
            }
        }
        let objects = req.objects.iter().zip(merged).map(|(o, m)| m.result(o.object_key.clone())).collect();
        Ok(Response::new(FenceObjectsResponse { objects }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(answers: Vec<Result<FenceAnswer, Failure>>, route_error: bool) -> (ObjectState, i64, i32) {
        let mut m = FenceMerge::default();
        for a in answers {
            m.add(a);
        }
        if route_error {
            m.failed(route_failure(&RouteError::Timeout { partition: 3 }));
        }
        let r = m.result("k".into());
        (r.state(), r.released_at, r.error_code)
    }

    #[test]
    fn fence_answers_merge_live_first_then_all_must_answer_then_the_latest_release() {
        use FenceAnswer::*;
        let timeout = ErrorCode::RequestTimedOut.wire();
        // Live anywhere is a definite answer, even when another partition did not answer.
        assert_eq!(merged(vec![Ok(Fenced { fenced_at: 1 }), Ok(Live)], true), (ObjectState::Live, -1, 0));
        // Otherwise one silent partition leaves the state unknown: nothing may be deleted.
        assert_eq!(merged(vec![Ok(Released { marked_at: 5 })], true), (ObjectState::Unspecified, -1, timeout));
        let bad = Failure::new(ErrorCode::InvalidRequest, "bad key");
        assert_eq!(
            merged(vec![Ok(Fenced { fenced_at: 1 }), Err(bad)], false).0,
            ObjectState::Unspecified,
            "a refused key is not fenced"
        );
        // Released anywhere: released, at the latest release.
        assert_eq!(
            merged(
                vec![Ok(Released { marked_at: 9 }), Ok(Fenced { fenced_at: 1 }), Ok(Released { marked_at: 4 })],
                false
            ),
            (ObjectState::Released, 9, 0)
        );
        assert_eq!(
            merged(vec![Ok(Fenced { fenced_at: 1 }), Ok(Fenced { fenced_at: 2 })], false),
            (ObjectState::Fenced, -1, 0)
        );
    }
}
