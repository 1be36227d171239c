//! Where a transactional id's state is kept and its markers are written: the coordinator cluster
//! (StoreTransaction by compare-and-set, DescribeTransactions, ListTransactions, EndTransaction),
//! behind a trait so the coordinator's tests run without a cluster; and [`Records`], the
//! coordinator runtime's view of it (the state by id, stored by compare-and-set).

use std::sync::Arc;

use diskless_proto::v1::{
    end_transaction_request, DescribeTransactionsRequest, EndTransactionRequest, GroupOffset, ListTransactionsRequest,
    PendingOffset, StoreTransactionRequest, Transaction,
};
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use crate::cluster::ClusterClient;
pub use crate::coordinators::cluster_error::StoreError;
use crate::coordinators::runtime;
use crate::producer_ids::ProducerIds;

/// One marker to write: a partition of the transaction, and how it ends there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub txn_number: u64,
    pub coordinator_epoch: i32,
}

pub trait TxnStore: Send + Sync + 'static {
    /// The stored state of `id`, read on its metadata partition's leader.
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Transaction>, StoreError>>;
    /// Stores `t` if the stored version is `expected` (0: none); returns it as stored.
    fn store<'a>(
        &'a self,
        id: &'a str,
        t: Transaction,
        expected: u64,
    ) -> BoxFuture<'a, Result<Transaction, StoreError>>;
    /// Forgets `id` if the stored version is `expected` and no transaction is open in it.
    fn expire<'a>(&'a self, id: &'a str, expected: u64) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Every stored transactional id.
    fn list(&self) -> BoxFuture<'_, Result<Listed, StoreError>>;
    /// Writes the markers; per marker, its error code (0: written, or nothing to end).
    fn end(&self, markers: Vec<Marker>) -> BoxFuture<'_, Result<Vec<ErrorCode>, StoreError>>;
    /// A producer id no one else was or will be given.
    fn new_producer_id(&self) -> BoxFuture<'_, Result<i64, StoreError>>;
    /// Commits a committed transaction's offsets to `group_id` (not fenced by generation: the
    /// member was checked at TxnOffsetCommit); per offset, its error code.
    fn commit_offsets<'a>(
        &'a self,
        group_id: &'a str,
        offsets: Vec<PendingOffset>,
    ) -> BoxFuture<'a, Result<Vec<ErrorCode>, StoreError>>;
}

const TIMEOUT_MS: i32 = 10_000;

/// The runtime's store of transactional ids: their state as a [`TxnStore`] keeps it, stored
/// under this broker's identity (`owner`).
pub(super) struct Records {
    pub store: Arc<dyn TxnStore>,
    pub identity: String,
}

impl runtime::Store<String, Transaction> for Records {
    fn load<'a>(&'a self, id: &'a String) -> BoxFuture<'a, Result<Option<(Transaction, u64)>, runtime::StoreError>> {
        Box::pin(async move {
            let t = self.store.load(id).await.map_err(|e| e.for_runtime(ErrorCode::TransactionCoordinatorFenced))?;
            Ok(t.map(|t| {
                let version = t.version;
                (t, version)
            }))
        })
    }

    fn store<'a>(
        &'a self,
        id: &'a String,
        t: &'a Transaction,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64, runtime::StoreError>> {
        Box::pin(async move {
            let t = Transaction { owner: self.identity.clone(), ..t.clone() };
            self.store
                .store(id, t, expected)
                .await
                .map(|stored| stored.version)
                .map_err(|e| e.for_runtime(ErrorCode::TransactionCoordinatorFenced))
        })
    }
}

/// Every transactional id the cluster could list, and why some may be missing (a metadata
/// partition that did not answer).
#[derive(Debug, Default)]
pub struct Listed {
    pub transactions: Vec<(String, Transaction)>,
    pub missing: Option<String>,
}

/// The cluster, and the broker's blocks of producer ids.
pub struct ClusterTxnStore {
    pub cluster: Arc<ClusterClient>,
    pub producer_ids: Arc<ProducerIds>,
}

impl ClusterTxnStore {
    /// StoreTransaction: `t` stored over version `expected`, or (`None`) the id expired at it;
    /// the record as stored.
    async fn store_transaction(
        &self,
        id: &str,
        t: Option<Transaction>,
        expected: u64,
    ) -> Result<Option<Transaction>, StoreError> {
        let req = StoreTransactionRequest {
            transactional_id: id.to_string(),
            expire: t.is_none(),
            transaction: t,
            expected_version: expected,
            timeout_ms: TIMEOUT_MS,
        };
        let r = self
            .cluster
            .call(|mut c| {
                let req = req.clone();
                async move { c.store_transaction(req).await }
            })
            .await
            .map_err(|s| StoreError::unavailable(&s))?;
        StoreError::check(r.error_code, r.error_message)?;
        Ok(r.transaction)
    }
}

impl TxnStore for ClusterTxnStore {
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Transaction>, StoreError>> {
        Box::pin(async move {
            let req = DescribeTransactionsRequest { transactional_ids: vec![id.to_string()], timeout_ms: TIMEOUT_MS };
            let r = self
                .cluster
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.describe_transactions(req).await }
                })
                .await
                .map_err(|s| StoreError::unavailable(&s))?;
            let Some(one) = r.results.into_iter().next() else {
                return Err(StoreError::Unavailable("DescribeTransactions answered nothing".into()));
            };
            StoreError::check(one.error_code, one.error_message)?;
            Ok(one.transaction)
        })
    }

    fn store<'a>(
        &'a self,
        id: &'a str,
        t: Transaction,
        expected: u64,
    ) -> BoxFuture<'a, Result<Transaction, StoreError>> {
        Box::pin(async move {
            let stored = self.store_transaction(id, Some(t), expected).await?;
            stored.ok_or_else(|| StoreError::Unavailable("StoreTransaction answered no record".into()))
        })
    }

    fn expire<'a>(&'a self, id: &'a str, expected: u64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.store_transaction(id, None, expected).await.map(|_| ()) })
    }

    fn list(&self) -> BoxFuture<'_, Result<Listed, StoreError>> {
        Box::pin(async move {
            let req = ListTransactionsRequest { timeout_ms: TIMEOUT_MS };
            let r = self
                .cluster
                .call(|mut c| async move { c.list_transactions(req).await })
                .await
                .map_err(|s| StoreError::unavailable(&s))?;
            // Metadata partitions that did not answer leave their ids out; the others' stand.
            let missing = (r.error_code != 0).then(|| r.error_message.unwrap_or_default());
            let transactions =
                r.transactions.into_iter().filter_map(|e| Some((e.transactional_id, e.transaction?))).collect();
            Ok(Listed { transactions, missing })
        })
    }

    fn end(&self, markers: Vec<Marker>) -> BoxFuture<'_, Result<Vec<ErrorCode>, StoreError>> {
        Box::pin(async move {
            let req = EndTransactionRequest {
                markers: markers
                    .iter()
                    .map(|m| end_transaction_request::Marker {
                        topic_id: m.topic_id.to_vec(),
                        partition_index: m.partition,
                        producer_id: m.producer_id,
                        producer_epoch: i32::from(m.producer_epoch),
                        commit: m.commit,
                        coordinator_epoch: m.coordinator_epoch,
                        txn_number: m.txn_number,
                    })
                    .collect(),
                timeout_ms: TIMEOUT_MS,
            };
            let r = self
                .cluster
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.end_transaction(req).await }
                })
                .await
                .map_err(|s| StoreError::unavailable(&s))?;
            let mut codes: Vec<ErrorCode> = r.markers.iter().map(|m| ErrorCode::from_wire(m.error_code)).collect();
            codes.resize(markers.len(), ErrorCode::RequestTimedOut);
            Ok(codes)
        })
    }

    fn new_producer_id(&self) -> BoxFuture<'_, Result<i64, StoreError>> {
        Box::pin(async move { self.producer_ids.next().await.map_err(|e| StoreError::Unavailable(e.message)) })
    }

    fn commit_offsets<'a>(
        &'a self,
        group_id: &'a str,
        offsets: Vec<PendingOffset>,
    ) -> BoxFuture<'a, Result<Vec<ErrorCode>, StoreError>> {
        Box::pin(async move {
            let offsets = offsets
                .into_iter()
                .map(|o| GroupOffset {
                    topic_id: o.topic_id,
                    partition: o.partition_index,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata,
                    ..Default::default()
                })
                .collect();
            Ok(self.cluster.commit_group_offsets(group_id, TXN_OFFSETS_GENERATION, "", offsets).await)
        })
    }
}

/// The generation of a transaction's offsets committed at its COMMIT (the coordinator cluster's
/// `TXN_OFFSETS_GENERATION`: not fenced again).
pub const TXN_OFFSETS_GENERATION: i32 = i32::MIN;
