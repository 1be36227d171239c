//! Transactions v2 (KIP-890 part 2, `transaction.version` 2): the transitions a client of the
//! v2 protocol drives, as Kafka 4's `TransactionCoordinator.endTransaction` (its TV2 branch) and
//! `handleAddPartitionsToTransaction` (called by a partition leader for Produce v12+ and by the
//! group coordinator for TxnOffsetCommit v5+) apply them.
//!
//! - **EndTxn v5+** ends the ongoing transaction with the producer's epoch + 1 (PrepareX stored
//!   with it, the markers written with it, CompleteX stored) and answers the new epoch, which the
//!   client's next transaction uses: a batch of the ended transaction that arrives late carries
//!   the old epoch and is fenced, at the add here and at the partition (the marker moved the
//!   producer's epoch there). At the last epoch the completion moves the id to a new producer id
//!   (`TransactionCoordinator::complete`). A retry of an end already done (the epoch one below,
//!   or the old producer id at the last epoch once it moved) is answered again with the current
//!   id and epoch; an ABORT with no transaction ongoing still bumps the epoch (a client that sent
//!   records may not know whether they were added), a COMMIT then is INVALID_TXN_STATE.
//! - **The implicit add**: a Produce v12+ or TxnOffsetCommit v5+ adds its partitions or group to
//!   the producer's transaction itself (there is no AddPartitionsToTxn nor AddOffsetsToTxn in v2),
//!   beginning one when none is ongoing, if the producer id and epoch are the stored ones
//!   (`TransactionCoordinator::add`).
//!
//! The request's version decides which protocol a call speaks, as in Kafka; nothing stored says
//! it. This module must not speak the Kafka protocol (`kafka::transactions` maps the errors).

use diskless_proto::v1::Transaction;
use diskless_proto::ErrorCode;

use super::coordinator::{
    is_prepare, TransactionCoordinator, TxnPartition, COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, PREPARE_ABORT,
    PREPARE_COMMIT,
};

/// The epoch before the last: an end at it moves the id to a new producer id.
const LAST_BUMPABLE: i16 = i16::MAX - 1;

impl TransactionCoordinator {
    /// EndTxn v5+: returns the producer id and epoch the client continues with.
    pub async fn end_txn_v2(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(i64, i16), ErrorCode> {
        let _serial = self.lock(id).lock().await;
        let Some(mut t) = self.load(id).await? else { return Err(ErrorCode::InvalidProducerIdMapping) };
        if is_prepare(&t.state) {
            // An end another broker left prepared (this client's, retried): its outcome is
            // decided; finish it, then judge the request against what it left.
            t = self.complete(id, t).await?;
        }
        let current = t.producer_epoch;
        let asked = i32::from(epoch);
        let retry_on_overflow =
            t.producer_id != producer_id && t.last_producer_id == producer_id && epoch == LAST_BUMPABLE && current == 0;
        if t.producer_id != producer_id && !retry_on_overflow {
            return Err(ErrorCode::InvalidProducerIdMapping);
        }
        let retry = retry_on_overflow || current == asked + 1;
        let answer = |t: &Transaction| Ok((t.producer_id, t.producer_epoch as i16));
        match t.state.as_str() {
            ONGOING if asked == current => {
                let wanted = if commit { PREPARE_COMMIT } else { PREPARE_ABORT };
                let done = self.prepare_bumped(id, t, wanted).await?;
                answer(&done)
            }
            COMPLETE_COMMIT if retry && commit => answer(&t),
            COMPLETE_ABORT if retry && !commit => answer(&t),
            COMPLETE_COMMIT | COMPLETE_ABORT if retry => Err(ErrorCode::InvalidTxnState),
            EMPTY | COMPLETE_COMMIT | COMPLETE_ABORT if asked == current => {
                if commit {
                    return Err(ErrorCode::InvalidTxnState);
                }
                // Nothing ongoing: an abort with no partitions, the epoch bumped all the same.
                let done = self
                    .prepare_bumped(id, Transaction { partitions: vec![], groups: vec![], ..t }, PREPARE_ABORT)
                    .await?;
                answer(&done)
            }
            _ => Err(ErrorCode::ProducerFenced),
        }
    }

    /// Stores `t` as `prepare` with its epoch bumped (the old one kept as the last), writes the
    /// markers with the new epoch and stores the Complete state, which it returns.
    async fn prepare_bumped(&self, id: &str, t: Transaction, prepare: &str) -> Result<Transaction, ErrorCode> {
        let read = t.clone();
        let prepared = Transaction {
            state: prepare.to_string(),
            last_producer_id: t.producer_id,
            last_producer_epoch: t.producer_epoch,
            // At the last epoch the completion moves the id to a new producer id.
            producer_epoch: (t.producer_epoch + 1).min(i32::from(i16::MAX)),
            ..t
        };
        let prepared = self.put(id, prepared, Some(&read)).await?;
        self.complete(id, prepared).await
    }

    /// Produce v12+: the partitions of a transactional produce added to the producer's
    /// transaction (begun if none is ongoing); returns the transaction, whose number the batches
    /// carry.
    pub async fn add_implicitly(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<Transaction, ErrorCode> {
        self.add(id, (producer_id, epoch), partitions, None, false).await
    }
}
