//! CommitFile: a file's batches checked (`convert::commit_size`, `convert::commit_batch`), split by
//! the metadata partition owning each batch, each part committed on its partition's leader
//! (`node::Write::Commit`: gathered there with the partition's concurrent commits), the answers
//! merged back per batch in request order, with the log index each part applied at (`applied`,
//! which the caller's later FindBatches waits for).
//!
//! Owns the call's wire conversions and which partitions record the file (its owners). The rules
//! of a commit (offsets, duplicates, fencing, the deadline) are the state machine's
//! (`state_machine::commit_file`).

use diskless_proto::v1::*;
use diskless_proto::{merge_part, split_by_partition};
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::fan_out::no_result;
use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{RouteError, Write};
use crate::server::convert::{self, failure_fields, part_failure};
use crate::state_machine::{CommitBatch, CommitFile, CommittedBatch, Failure, FileToCommit, Outcome};

fn commit_error(f: &Failure) -> commit_file_response::CommitBatchResult {
    let (error_code, error_message) = failure_fields(f);
    commit_file_response::CommitBatchResult {
        error_code,
        error_message,
        assigned_base_offset: -1,
        log_append_time: -1,
        log_start_offset: -1,
        is_duplicate: false,
    }
}

fn commit_result(r: &Result<CommittedBatch, Failure>) -> commit_file_response::CommitBatchResult {
    match r {
        Ok(c) => commit_file_response::CommitBatchResult {
            error_code: 0,
            error_message: None,
            assigned_base_offset: c.assigned_base_offset,
            log_append_time: c.log_append_time,
            log_start_offset: c.log_start_offset,
            is_duplicate: c.is_duplicate,
        },
        Err(f) => commit_error(f),
    }
}

impl CoordinatorApi {
    pub(super) async fn serve_commit_file(
        &self,
        request: Request<CommitFileRequest>,
    ) -> Result<Response<CommitFileResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let object_format = match convert::commit_size(req.batches.len(), req.file_size)
            .and_then(|()| convert::int8(req.object_format, "object format"))
        {
            Ok(f) => f,
            Err(f) => {
                let batches = req.batches.iter().map(|_| commit_error(&f)).collect();
                return Ok(Response::new(CommitFileResponse { throttle_time_ms: 0, batches, applied: vec![] }));
            }
        };
        let batches: Vec<Result<CommitBatch, Failure>> = req.batches.iter().map(convert::commit_batch).collect();
        let mut results: Vec<Option<commit_file_response::CommitBatchResult>> =
            batches.iter().map(|b| b.as_ref().err().map(commit_error)).collect();
        let mut parts = split_by_partition(&batches, |b| b.as_ref().ok().map(|b| self.owner(&b.tp)));
        let mut owner_ids = req.owner_ids;
        if owner_ids.is_empty() {
            // Not split by the client: the owners are the metadata partitions its batches go to.
            owner_ids = parts.keys().map(|&g| g as i32).collect();
            if owner_ids.is_empty() {
                owner_ids = vec![0];
            }
        }
        if parts.is_empty() {
            // Record the file anyway (it is garbage at once), so the cleaner deletes the object; in
            // a metadata partition it names as an owner, which alone may accept it.
            let owner = owner_ids.iter().find(|&&o| o >= 0 && (o as u32) < self.node.num_partitions());
            parts.insert(owner.map_or(0, |&o| o as u32), vec![]);
        }
        let outs = join_all(parts.iter().map(|(&g, idxs)| {
            let mut transactional: Vec<bool> =
                idxs.iter().filter(|&&i| batches[i].is_ok()).map(|&i| req.batches[i].is_transactional).collect();
            let mut txn_numbers: Vec<u64> =
                idxs.iter().filter(|&&i| batches[i].is_ok()).map(|&i| req.batches[i].txn_number).collect();
            if !transactional.contains(&true) {
                transactional.clear();
            }
            if txn_numbers.iter().all(|&n| n == 0) {
                txn_numbers.clear();
            }
            let file = CommitFile {
                deadline_ms: None, // set by Node::commit
                object_key: req.object_key.clone(),
                object_format,
                file_size: req.file_size,
                uploader_broker_id: req.uploader_broker_id,
                owner_ids: owner_ids.clone(),
                batches: idxs.iter().filter_map(|&i| batches[i].clone().ok()).collect(),
            };
            self.node.on_leader(g, Write::Commit(FileToCommit { file, transactional, txn_numbers }), timeout, hop)
        }))
        .await;
        let mut applied = vec![];
        for ((&g, idxs), out) in parts.iter().zip(outs) {
            let answer = out.and_then(|(outcome, index)| match outcome {
                Outcome::CommitFile(rs) => {
                    applied.push(AppliedIndex { metadata_partition: g, index });
                    Ok(rs.iter().map(commit_result).collect())
                }
                other => Err(RouteError::unexpected(g, &other)),
            });
            merge_part(&mut results, idxs, answer, |f| commit_error(&part_failure(f)));
        }
        let batches = results.into_iter().map(|r| r.unwrap_or_else(|| commit_result(&no_result()))).collect();
        Ok(Response::new(CommitFileResponse { throttle_time_ms: 0, batches, applied }))
    }
}
