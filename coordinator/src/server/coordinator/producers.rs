//! DescribeProducers: the producers each partition keeps state for (Kafka's
//! `ReplicaManager.activeProducerState`), a strict read on each owning metadata partition's leader
//! through the fan-out.
//!
//! Owns the call's wire conversions; what a producer's state is belongs to the state machine
//! (`state_machine::queries::describe_producers`).

use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::fan_out::no_result;
use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Read, RouteError};
use crate::server::convert::{self, result_fields};
use crate::state_machine::{Failure, ProducerDescription, TopicPartition};

fn active_producer(p: &ProducerDescription) -> describe_producers_response::ActiveProducer {
    describe_producers_response::ActiveProducer {
        producer_id: p.producer_id,
        producer_epoch: i32::from(p.producer_epoch),
        last_sequence: p.last_sequence,
        last_timestamp: p.last_timestamp,
        current_txn_start_offset: p.current_txn_start_offset,
    }
}

impl CoordinatorApi {
    pub(super) async fn serve_describe_producers(
        &self,
        request: Request<DescribeProducersRequest>,
    ) -> Result<Response<DescribeProducersResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let flat: Vec<Result<TopicPartition, Failure>> =
            req.partitions.iter().map(|p| convert::tp(&p.topic_id, p.partition_index)).collect();
        let results = self
            .per_partition(
                &flat,
                |tp| tp,
                |g, tps| async move {
                    match self.read(g, Read::Producers(tps), timeout, hop).await? {
                        Answer::Producers(rs) => Ok(rs),
                        other => Err(RouteError::unexpected(g, &other)),
                    }
                },
            )
            .await;
        let partitions = req
            .partitions
            .iter()
            .zip(results.into_iter().chain(std::iter::repeat_with(no_result)))
            .map(|(p, r)| {
                let (error_code, error_message) = result_fields(&r);
                describe_producers_response::Partition {
                    topic_id: p.topic_id.clone(),
                    partition_index: p.partition_index,
                    error_code,
                    error_message,
                    producers: r.map(|ps| ps.iter().map(active_producer).collect()).unwrap_or_default(),
                }
            })
            .collect();
        Ok(Response::new(DescribeProducersResponse { partitions }))
    }
}
