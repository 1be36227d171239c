//! A partition's offsets: ListOffsets (a strict read on each metadata partition's leader: earliest,
//! latest, by timestamp, max timestamp; `read_committed` bounded by the last stable offset) and DeleteRecords (the log start moved at once, the
//! batches below purged later), each per topic-partition through the fan-out.
//!
//! Owns these calls' wire conversions. The rules are the state machine's (`state_machine::queries`,
//! `delete_records`).

use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::fan_out::no_result;
use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Read, RouteError, DELETE_BUDGET};
use crate::server::convert::{self, result_fields};
use crate::state_machine::{DeleteRecordsPartition, Failure, Op, Outcome, TopicPartition};

impl CoordinatorApi {
    pub(super) async fn serve_delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        // Flattened in request order.
        let flat: Vec<Result<DeleteRecordsPartition, Failure>> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    convert::tp(&t.topic_id, p.partition_index)
                        .map(|tp| DeleteRecordsPartition { tp, offset: p.offset })
                })
            })
            .collect();
        let results = self
            .per_partition(
                &flat,
                |p| &p.tp,
                |g, partitions| async move {
                    match self.write(g, Op::DeleteRecords { partitions, budget: DELETE_BUDGET }, timeout, hop).await? {
                        (Outcome::DeleteRecords(rs), _) => Ok(rs.into_iter().map(|(_, r)| r).collect()),
                        (other, _) => Err(RouteError::unexpected(g, &other)),
                    }
                },
            )
            .await;
        let mut results = results.into_iter();
        let topics = req
            .topics
            .iter()
            .map(|t| delete_records_response::DeleteRecordsTopicResult {
                topic_id: t.topic_id.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let r = results.next().unwrap_or_else(no_result);
                        let (error_code, error_message) = result_fields(&r);
                        delete_records_response::DeleteRecordsPartitionResult {
                            partition_index: p.partition_index,
                            low_watermark: *r.as_ref().unwrap_or(&-1),
                            error_code,
                            error_message,
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(DeleteRecordsResponse { throttle_time_ms: 0, topics }))
    }

    pub(super) async fn serve_list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let read_committed = req.isolation_level == super::find_batches::READ_COMMITTED;
        let flat: Vec<Result<(TopicPartition, i64), Failure>> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| convert::tp(&t.topic_id, p.partition_index).map(|tp| (tp, p.timestamp)))
            })
            .collect();
        let results = self
            .per_partition(
                &flat,
                |(tp, _)| tp,
                |g, items| async move {
                    let read =
                        if read_committed { Read::ListOffsetsCommitted(items) } else { Read::ListOffsets(items) };
                    match self.read(g, read, timeout, hop).await? {
                        Answer::ListOffsets(rs) => {
                            Ok(rs.into_iter().map(|r| r.map(|o| (o.timestamp, o.offset))).collect())
                        }
                        other => Err(RouteError::unexpected(g, &other)),
                    }
                },
            )
            .await;
        let mut results = results.into_iter();
        let topics = req
            .topics
            .iter()
            .map(|t| list_offsets_response::ListOffsetsTopicResponse {
                topic_id: t.topic_id.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let r = results.next().unwrap_or_else(no_result);
                        let (error_code, error_message) = result_fields(&r);
                        let (timestamp, offset) = *r.as_ref().unwrap_or(&(-1, -1));
                        list_offsets_response::ListOffsetsPartitionResponse {
                            partition_index: p.partition_index,
                            error_code,
                            error_message,
                            timestamp,
                            offset,
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(ListOffsetsResponse { throttle_time_ms: 0, topics }))
    }
}
