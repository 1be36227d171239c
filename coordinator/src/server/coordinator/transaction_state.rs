//! `CoordinatorService`'s transactional-id calls (StoreTransaction, DescribeTransactions,
//! ListTransactions): each id's transaction state, routed to the metadata partition its id maps
//! to (`metadata_partition_for_group`, as consumer groups) and served on its leader.
//!
//! Owns the wire conversions of `Transaction`. The compare-and-set is the state machine's
//! (`state_machine::transactional_ids`); the transitions are the brokers' (their transaction
//! coordinator), not here.

use diskless_proto::v1::*;
use diskless_proto::{metadata_partition_for_group, split_by_partition, ErrorCode};
use futures_util::future::join_all;
use tonic::{Request, Response, Status};

use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Read, RouteError};
use crate::server::convert::{self, failure_fields, result_fields, route_failure};
use crate::state_machine::{Failure, Op, Outcome, PendingOffset, TopicPartition, TxnRecord, TxnState};

/// The record a broker sent; malformed topic ids, epochs or states are refused.
pub fn txn_record(t: Transaction) -> Result<TxnRecord, Failure> {
    let state = TxnState::from_name(&t.state)
        .ok_or_else(|| Failure::new(ErrorCode::InvalidRequest, format!("no transaction state {:?}", t.state)))?;
    let partitions: Result<Vec<TopicPartition>, Failure> =
        t.partitions.iter().map(|p| convert::tp(&p.topic_id, p.partition_index)).collect();
    Ok(TxnRecord {
        producer_id: t.producer_id,
        producer_epoch: convert::narrow(t.producer_epoch, "producer epoch")?,
        last_producer_id: t.last_producer_id,
        last_producer_epoch: convert::narrow(t.last_producer_epoch, "last producer epoch")?,
        timeout_ms: t.timeout_ms,
        state,
        txn_number: t.txn_number,
        partitions: partitions?,
        groups: t.groups,
        started_ms: t.started_ms,
        updated_ms: t.updated_ms,
        owner: t.owner,
        version: t.version,
        pending_offsets: t
            .pending_offsets
            .into_iter()
            .map(|o| {
                Ok(PendingOffset {
                    tp: convert::tp(&o.topic_id, o.partition_index)?,
                    group_id: o.group_id,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata,
                })
            })
            .collect::<Result<_, Failure>>()?,
    })
}

pub fn transaction(r: TxnRecord) -> Transaction {
    Transaction {
        producer_id: r.producer_id,
        producer_epoch: i32::from(r.producer_epoch),
        last_producer_id: r.last_producer_id,
        last_producer_epoch: i32::from(r.last_producer_epoch),
        timeout_ms: r.timeout_ms,
        state: r.state.name().to_string(),
        txn_number: r.txn_number,
        partitions: r
            .partitions
            .iter()
            .map(|tp| transaction::Partition {
                topic_id: tp.topic_id.as_bytes().to_vec(),
                partition_index: tp.partition,
            })
            .collect(),
        groups: r.groups,
        started_ms: r.started_ms,
        updated_ms: r.updated_ms,
        owner: r.owner,
        version: r.version,
        pending_offsets: r
            .pending_offsets
            .into_iter()
            .map(|o| diskless_proto::v1::PendingOffset {
                group_id: o.group_id,
                topic_id: o.tp.topic_id.as_bytes().to_vec(),
                partition_index: o.tp.partition,
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata: o.metadata,
            })
            .collect(),
    }
}

impl CoordinatorApi {
    /// The metadata partition that holds transactional id `id`.
    fn transactional_id_partition(&self, id: &str) -> u32 {
        metadata_partition_for_group(id, self.node.num_partitions())
    }

    pub(super) async fn serve_store_transaction(
        &self,
        request: Request<StoreTransactionRequest>,
    ) -> Result<Response<StoreTransactionResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = self.transactional_id_partition(&req.transactional_id);
        if req.expire {
            let op = Op::ExpireTxn { transactional_id: req.transactional_id, expected_version: req.expected_version };
            let r = match self.write(g, op, timeout, hop).await {
                Ok((Outcome::TxnExpired(r), _)) => r,
                Ok((other, _)) => Err(route_failure(&RouteError::unexpected(g, &other))),
                Err(e) => Err(route_failure(&e)),
            };
            let (error_code, error_message) = result_fields(&r);
            return Ok(Response::new(StoreTransactionResponse { error_code, error_message, transaction: None }));
        }
        let r = match txn_record(req.transaction.unwrap_or_default()) {
            Err(f) => Err(f),
            Ok(record) => {
                let op = Op::StoreTxn {
                    transactional_id: req.transactional_id,
                    record,
                    expected_version: req.expected_version,
                };
                match self.write(g, op, timeout, hop).await {
                    Ok((Outcome::Txn(r), _)) => r,
                    Ok((other, _)) => Err(route_failure(&RouteError::unexpected(g, &other))),
                    Err(e) => Err(route_failure(&e)),
                }
            }
        };
        let (error_code, error_message) = result_fields(&r);
        Ok(Response::new(StoreTransactionResponse { error_code, error_message, transaction: r.ok().map(transaction) }))
    }

    pub(super) async fn serve_describe_transactions(
        &self,
        request: Request<DescribeTransactionsRequest>,
    ) -> Result<Response<DescribeTransactionsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let ids = &req.transactional_ids;
        let parts = split_by_partition(ids, |id| Some(self.transactional_id_partition(id)));
        let outs = join_all(parts.iter().map(|(&g, idxs)| {
            let wanted: Vec<String> = idxs.iter().map(|&i| ids[i].clone()).collect();
            async move {
                match self.read(g, Read::Transactions(wanted), timeout, hop).await? {
                    Answer::Transactions(rs) => Ok(rs),
                    other => Err(RouteError::unexpected(g, &other)),
                }
            }
        }))
        .await;
        let mut results: Vec<describe_transactions_response::Result> = ids
            .iter()
            .map(|id| describe_transactions_response::Result { transactional_id: id.clone(), ..Default::default() })
            .collect();
        for ((_, idxs), out) in parts.iter().zip(outs) {
            match out {
                Ok(rs) => {
                    for (&i, r) in idxs.iter().zip(rs) {
                        results[i].transaction = r.map(transaction);
                    }
                }
                Err(e) => {
                    let (code, message) = failure_fields(&route_failure(&e));
                    for &i in idxs {
                        (results[i].error_code, results[i].error_message) = (code, message.clone());
                    }
                }
            }
        }
        Ok(Response::new(DescribeTransactionsResponse { results }))
    }

    pub(super) async fn serve_list_transactions(
        &self,
        request: Request<ListTransactionsRequest>,
    ) -> Result<Response<ListTransactionsResponse>, Status> {
        let hop = hop_of(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let outs = join_all(self.all_partitions().into_iter().map(|g| async move {
            match self.read(g, Read::ListTransactions, timeout, hop).await? {
                Answer::ListTransactions(rows) => Ok(rows),
                other => Err(RouteError::unexpected(g, &other)),
            }
        }))
        .await;
        let mut all = ListTransactionsResponse::default();
        for out in outs {
            match out {
                Ok(rows) => all.transactions.extend(rows.into_iter().map(|(transactional_id, r)| {
                    list_transactions_response::Entry { transactional_id, transaction: Some(transaction(r)) }
                })),
                Err(e) => (all.error_code, all.error_message) = failure_fields(&route_failure(&e)),
            }
        }
        all.transactions.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(Response::new(all))
    }
}
