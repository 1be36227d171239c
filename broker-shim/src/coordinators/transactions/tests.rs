//! The transaction coordinator against a fake store that keeps the cluster's compare-and-set.

use crate::incarnation::Incarnation;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use diskless_proto::v1::{PendingOffset, Transaction};
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use super::store::{Listed, Marker, StoreError, TxnStore};
use super::{TransactionCoordinator, TxnConfig};

#[derive(Default)]
struct Fake {
    txns: Mutex<HashMap<String, Transaction>>,
    markers: Mutex<Vec<Marker>>,
    next_id: Mutex<i64>,
    committed: Mutex<Vec<(String, PendingOffset)>>,
    /// Marker writes to fail before one succeeds.
    failing_ends: Mutex<usize>,
}

impl TxnStore for Fake {
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Transaction>, StoreError>> {
        Box::pin(async move { Ok(self.txns.lock().unwrap().get(id).cloned()) })
    }
    fn store<'a>(
        &'a self,
        id: &'a str,
        t: Transaction,
        expected: u64,
    ) -> BoxFuture<'a, Result<Transaction, StoreError>> {
        Box::pin(async move {
            let mut all = self.txns.lock().unwrap();
            let stored = all.get(id).map_or(0, |t| t.version);
            if stored != expected {
                return Err(StoreError::Refused {
                    code: ErrorCode::TransactionCoordinatorFenced,
                    message: String::new(),
                });
            }
            let t = Transaction { version: stored + 1, ..t };
            all.insert(id.to_string(), t.clone());
            Ok(t)
        })
    }
    fn expire<'a>(&'a self, id: &'a str, expected: u64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut all = self.txns.lock().unwrap();
            match all.get(id) {
                Some(t)
                    if t.version == expected
                        && !matches!(t.state.as_str(), "Ongoing" | "PrepareCommit" | "PrepareAbort") =>
                {
                    all.remove(id);
                    Ok(())
                }
                Some(t) if t.version == expected => {
                    Err(StoreError::Refused { code: ErrorCode::InvalidTxnState, message: String::new() })
                }
                _ => Err(StoreError::Refused { code: ErrorCode::TransactionCoordinatorFenced, message: String::new() }),
            }
        })
    }
    fn list(&self) -> BoxFuture<'_, Result<Listed, StoreError>> {
        Box::pin(async move {
            let transactions = self.txns.lock().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            Ok(Listed { transactions, missing: None })
        })
    }
    fn end(&self, markers: Vec<Marker>) -> BoxFuture<'_, Result<Vec<ErrorCode>, StoreError>> {
        Box::pin(async move {
            let mut failing = self.failing_ends.lock().unwrap();
            if *failing > 0 {
                *failing -= 1;
                return Err(StoreError::Unavailable("down".into()));
            }
            let n = markers.len();
            self.markers.lock().unwrap().extend(markers);
            Ok(vec![ErrorCode::None; n])
        })
    }
    fn commit_offsets<'a>(
        &'a self,
        group_id: &'a str,
        offsets: Vec<PendingOffset>,
    ) -> BoxFuture<'a, Result<Vec<ErrorCode>, StoreError>> {
        Box::pin(async move {
            let n = offsets.len();
            self.committed.lock().unwrap().extend(offsets.into_iter().map(|o| (group_id.to_string(), o)));
            Ok(vec![ErrorCode::None; n])
        })
    }
    fn new_producer_id(&self) -> BoxFuture<'_, Result<i64, StoreError>> {
        Box::pin(async move {
            let mut n = self.next_id.lock().unwrap();
            *n += 1;
            Ok(*n + 100)
        })
    }
}

fn coordinator() -> (Arc<Fake>, Arc<TransactionCoordinator>) {
    let fake = Arc::new(Fake::default());
    (fake.clone(), TransactionCoordinator::new(fake, TxnConfig::default(), &Incarnation::new(1)))
}

const P0: ([u8; 16], i32) = ([1; 16], 0);
const P1: ([u8; 16], i32) = ([1; 16], 1);

#[tokio::test]
async fn a_committed_transaction_writes_a_numbered_marker_per_partition_and_ends_complete() {
    let (fake, c) = coordinator();
    let (pid, epoch) = c.init_producer_id("t", 60_000, None).await.unwrap();
    assert_eq!(epoch, 0);
    c.add_partitions("t", pid, epoch, &[P0]).await.unwrap();
    c.add_partitions("t", pid, epoch, &[P0, P1]).await.unwrap();
    assert_eq!(c.verify("t", pid, epoch, &[P1]).await, Ok(1));
    c.end_txn("t", pid, epoch, true).await.unwrap();
    let markers = fake.markers.lock().unwrap().clone();
    assert_eq!(markers.len(), 2);
    assert!(markers.iter().all(|m| m.commit && m.txn_number == 1 && m.producer_epoch == 0 && m.producer_id == pid));
    let t = c.describe("t").await.unwrap().unwrap();
    assert_eq!((t.state.as_str(), t.partitions.len()), ("CompleteCommit", 0));
    // A retried EndTxn is answered again; an abort of the committed one is refused.
    assert_eq!(c.end_txn("t", pid, epoch, true).await, Ok(()));
    assert_eq!(c.end_txn("t", pid, epoch, false).await, Err(ErrorCode::InvalidTxnState));
    // The next transaction has the next number; batches of it are not verified before it starts.
    assert_eq!(c.verify("t", pid, epoch, &[P0]).await, Err(ErrorCode::InvalidTxnState));
    c.add_partitions("t", pid, epoch, &[P0]).await.unwrap();
    assert_eq!(c.verify("t", pid, epoch, &[P0]).await, Ok(2));
    assert_eq!(c.verify("t", pid, epoch, &[P1]).await, Err(ErrorCode::InvalidTxnState), "P1 not added");
}

#[tokio::test]
async fn a_second_init_fences_the_first_producer_and_aborts_its_transaction() {
    let (fake, c) = coordinator();
    let (pid, e0) = c.init_producer_id("t", 60_000, None).await.unwrap();
    c.add_partitions("t", pid, e0, &[P0]).await.unwrap();
    let (pid2, e1) = c.init_producer_id("t", 60_000, None).await.unwrap();
    assert_eq!(pid2, pid, "the same producer id, a later epoch");
    assert!(e1 > e0);
    // The ongoing transaction was aborted with the bumped epoch (its batches fenced).
    let markers = fake.markers.lock().unwrap().clone();
    assert_eq!(markers.len(), 1);
    assert!(!markers[0].commit && markers[0].producer_epoch == e0 + 1 && markers[0].txn_number == 1);
    assert_eq!(c.add_partitions("t", pid, e0, &[P0]).await, Err(ErrorCode::ProducerFenced));
    assert_eq!(c.end_txn("t", pid, e0, true).await, Err(ErrorCode::ProducerFenced));
    assert_eq!(c.verify("t", pid, e0, &[P0]).await, Err(ErrorCode::InvalidProducerEpoch));
    c.add_partitions("t", pid, e1, &[P0]).await.unwrap();
    assert_eq!(c.verify("t", pid, e1, &[P0]).await, Ok(2));
    assert_eq!(c.add_partitions("t", pid + 1, e1, &[P0]).await, Err(ErrorCode::InvalidProducerIdMapping));
}

#[tokio::test]
async fn an_end_left_prepared_is_finished_by_the_next_call_and_a_stale_broker_cannot_store() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 60_000, None).await.unwrap();
    c.add_partitions("t", pid, e, &[P0]).await.unwrap();
    // The cluster refuses markers for longer than the end waits: the end stays prepared.
    *fake.failing_ends.lock().unwrap() = 1_000;
    tokio::time::pause();
    assert_eq!(c.end_txn("t", pid, e, true).await, Err(ErrorCode::CoordinatorNotAvailable));
    assert_eq!(c.describe("t").await.unwrap().unwrap().state, "PrepareCommit");
    *fake.failing_ends.lock().unwrap() = 0;
    // Another broker taking the id over finishes it when the client retries.
    let (_, other) = {
        let c2 = TransactionCoordinator::new(fake.clone(), TxnConfig::default(), &Incarnation::new(2));
        (fake.clone(), c2)
    };
    assert_eq!(other.end_txn("t", pid, e, true).await, Ok(()));
    assert_eq!(other.describe("t").await.unwrap().unwrap().state, "CompleteCommit");
    assert_eq!(fake.markers.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_transaction_past_its_timeout_is_aborted_by_the_timer_and_its_producer_fenced() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 1, None).await.unwrap();
    c.add_partitions("t", pid, e, &[P0]).await.unwrap();
    // The fake keeps started_ms as sent (-1 from init): set it to the past as the cluster would.
    fake.txns.lock().unwrap().get_mut("t").unwrap().started_ms = 1;
    c.check(&|_| false).await;
    assert_eq!(c.describe("t").await.unwrap().unwrap().state, "Ongoing", "not this broker's");
    c.check(&|_| true).await;
    let t = c.describe("t").await.unwrap().unwrap();
    assert_eq!((t.state.as_str(), t.producer_epoch), ("CompleteAbort", i32::from(e) + 1));
    assert_eq!(c.end_txn("t", pid, e, true).await, Err(ErrorCode::ProducerFenced));
}

#[tokio::test]
async fn kip_360_a_producer_recovering_with_its_own_epoch_is_bumped_another_is_fenced() {
    let (_, c) = coordinator();
    let (pid, e0) = c.init_producer_id("t", 60_000, None).await.unwrap();
    let (_, e1) = c.init_producer_id("t", 60_000, Some((pid, e0))).await.unwrap();
    assert_eq!(e1, e0 + 1);
    // Its retry (the answer was lost) is answered again.
    assert_eq!(c.init_producer_id("t", 60_000, Some((pid, e0))).await, Ok((pid, e1)));
    assert_eq!(c.init_producer_id("t", 60_000, Some((pid, e0 + 7))).await, Err(ErrorCode::ProducerFenced));
    assert_eq!(c.init_producer_id("t", 0, None).await, Err(ErrorCode::InvalidTransactionTimeout));
    assert_eq!(c.init_producer_id("t", 900_001, None).await, Err(ErrorCode::InvalidTransactionTimeout));
}

#[tokio::test]
async fn a_transactions_offsets_are_committed_with_it_and_dropped_with_its_abort() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 60_000, None).await.unwrap();
    let offset = |o: i64| PendingOffset {
        group_id: "g".into(),
        topic_id: vec![1; 16],
        partition_index: 0,
        offset: o,
        leader_epoch: -1,
        metadata: None,
    };
    // Offsets of a group not added to the transaction are refused.
    assert_eq!(c.stage_offsets("t", pid, e, "g", vec![offset(5)], false).await, Err(ErrorCode::InvalidTxnState));
    c.add_offsets("t", pid, e, "g").await.unwrap();
    c.stage_offsets("t", pid, e, "g", vec![offset(5)], false).await.unwrap();
    c.stage_offsets("t", pid, e, "g", vec![offset(7)], false).await.unwrap();
    assert_eq!(c.stage_offsets("t", pid, e + 1, "g", vec![offset(9)], false).await, Err(ErrorCode::ProducerFenced));
    assert!(fake.committed.lock().unwrap().is_empty(), "nothing committed before the transaction");
    c.end_txn("t", pid, e, true).await.unwrap();
    let committed = fake.committed.lock().unwrap().clone();
    assert_eq!(committed.iter().map(|(g, o)| (g.as_str(), o.offset)).collect::<Vec<_>>(), vec![("g", 7)]);
    assert!(c.describe("t").await.unwrap().unwrap().pending_offsets.is_empty());
    // An aborted transaction's offsets are dropped.
    c.add_offsets("t", pid, e, "g").await.unwrap();
    c.stage_offsets("t", pid, e, "g", vec![offset(11)], false).await.unwrap();
    c.end_txn("t", pid, e, false).await.unwrap();
    assert_eq!(fake.committed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_idle_transactional_id_is_forgotten_by_the_timer_and_an_open_one_never() {
    let fake = Arc::new(Fake::default());
    let config = TxnConfig { id_expiration_ms: 0, ..TxnConfig::default() };
    let c = TransactionCoordinator::new(fake.clone(), config, &Incarnation::new(1));
    let (pid, e) = c.init_producer_id("idle", 60_000, None).await.unwrap();
    let (pid2, e2) = c.init_producer_id("busy", 60_000, None).await.unwrap();
    c.add_partitions("busy", pid2, e2, &[P0]).await.unwrap();
    // Every stored update is in the past for an expiration of 0 ms.
    for t in fake.txns.lock().unwrap().values_mut() {
        t.updated_ms -= 10;
    }
    c.check(&|_| true).await;
    assert!(c.describe("idle").await.unwrap().is_none(), "the idle id is forgotten");
    assert_eq!(c.describe("busy").await.unwrap().unwrap().state, "Ongoing", "an open transaction stays");
    // Its producer starts over: the id is new to the coordinator.
    assert_eq!(c.add_partitions("idle", pid, e, &[P0]).await, Err(ErrorCode::InvalidProducerIdMapping));
}

#[tokio::test]
async fn v2_an_end_bumps_the_epoch_its_markers_carry_it_and_a_retry_is_answered_again() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 60_000, None).await.unwrap();
    // Produce v12 adds its partitions itself: the first add begins transaction 1.
    let t = c.add_implicitly("t", pid, e, &[P0, P1]).await.unwrap();
    assert_eq!((t.state.as_str(), t.txn_number, t.partitions.len()), ("Ongoing", 1, 2));
    let stored = |fake: &Fake| fake.txns.lock().unwrap()["t"].version;
    let before = stored(&fake);
    assert_eq!(c.add_implicitly("t", pid, e, &[P0]).await.unwrap().txn_number, 1);
    assert_eq!(stored(&fake), before, "nothing stored again");
    assert_eq!(c.end_txn_v2("t", pid, e, true).await, Ok((pid, e + 1)));
    let markers = fake.markers.lock().unwrap().clone();
    assert_eq!(markers.len(), 2);
    assert!(markers.iter().all(|m| m.commit && m.producer_epoch == e + 1 && m.txn_number == 1));
    // The client's retry (its answer lost) is answered the same; an abort of it is refused.
    assert_eq!(c.end_txn_v2("t", pid, e, true).await, Ok((pid, e + 1)));
    assert_eq!(c.end_txn_v2("t", pid, e, false).await, Err(ErrorCode::InvalidTxnState));
    // A late batch of the ended transaction carries the old epoch: fenced.
    assert_eq!(c.add_implicitly("t", pid, e, &[P0]).await.err(), Some(ErrorCode::ProducerFenced));
    // The next transaction, with the new epoch.
    let t = c.add_implicitly("t", pid, e + 1, &[P1]).await.unwrap();
    assert_eq!((t.txn_number, t.producer_epoch), (2, i32::from(e) + 1));
    assert_eq!(c.end_txn_v2("t", pid, e + 1, false).await, Ok((pid, e + 2)));
    assert_eq!(c.end_txn_v2("t", pid, e + 1, false).await, Ok((pid, e + 2)), "an abort's retry");
    assert_eq!(c.end_txn_v2("t", pid, e, false).await, Err(ErrorCode::ProducerFenced), "two epochs back");
    assert_eq!(c.end_txn_v2("t", pid + 1, e + 2, false).await, Err(ErrorCode::InvalidProducerIdMapping));
}

#[tokio::test]
async fn v2_an_abort_with_nothing_ongoing_bumps_the_epoch_and_a_commit_is_refused() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 60_000, None).await.unwrap();
    assert_eq!(c.end_txn_v2("t", pid, e, true).await, Err(ErrorCode::InvalidTxnState));
    assert_eq!(c.end_txn_v2("t", pid, e, false).await, Ok((pid, e + 1)));
    assert!(fake.markers.lock().unwrap().is_empty(), "no partition: no marker");
    let t = c.describe("t").await.unwrap().unwrap();
    assert_eq!((t.state.as_str(), t.producer_epoch), ("CompleteAbort", i32::from(e) + 1));
}

#[tokio::test]
async fn v2_the_last_epoch_moves_the_id_to_a_new_producer_id_and_the_retry_learns_it() {
    let (fake, c) = coordinator();
    let (pid, _) = c.init_producer_id("t", 60_000, None).await.unwrap();
    let last = i16::MAX - 1;
    fake.txns.lock().unwrap().get_mut("t").unwrap().producer_epoch = i32::from(last);
    c.add_implicitly("t", pid, last, &[P0]).await.unwrap();
    let (pid2, e2) = c.end_txn_v2("t", pid, last, true).await.unwrap();
    assert_ne!(pid2, pid);
    assert_eq!(e2, 0);
    // The markers went out with the old producer id at the bumped epoch.
    let markers = fake.markers.lock().unwrap().clone();
    assert_eq!((markers[0].producer_id, markers[0].producer_epoch), (pid, i16::MAX));
    assert_eq!(c.end_txn_v2("t", pid, last, true).await, Ok((pid2, 0)), "the retry learns the new id");
    assert_eq!(c.add_implicitly("t", pid, last, &[P0]).await.err(), Some(ErrorCode::InvalidProducerIdMapping));
    assert_eq!(c.add_implicitly("t", pid2, 0, &[P0]).await.unwrap().txn_number, 2);
}

#[tokio::test]
async fn v2_txn_offset_commit_adds_its_group_and_the_offsets_commit_with_the_transaction() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 60_000, None).await.unwrap();
    let offset = PendingOffset {
        group_id: "g".into(),
        topic_id: vec![1; 16],
        partition_index: 0,
        offset: 42,
        leader_epoch: -1,
        metadata: None,
    };
    // No AddOffsetsToTxn: TxnOffsetCommit v5 begins the transaction and adds the group itself.
    c.stage_offsets("t", pid, e, "g", vec![offset.clone()], true).await.unwrap();
    let t = c.describe("t").await.unwrap().unwrap();
    assert_eq!((t.state.as_str(), t.groups.clone()), ("Ongoing", vec!["g".to_string()]));
    assert_eq!(c.stage_offsets("t", pid, e + 1, "g", vec![offset], true).await, Err(ErrorCode::ProducerFenced));
    assert_eq!(c.end_txn_v2("t", pid, e, true).await, Ok((pid, e + 1)));
    assert_eq!(fake.committed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn v2_a_timed_out_transaction_is_aborted_and_its_producer_learns_the_epoch_by_aborting() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 1, None).await.unwrap();
    c.add_implicitly("t", pid, e, &[P0]).await.unwrap();
    fake.txns.lock().unwrap().get_mut("t").unwrap().started_ms = 1;
    c.check(&|_| true).await;
    // Its batches are fenced; its abort is the retry of the abort the timer made (Kafka 4's rule).
    assert_eq!(c.add_implicitly("t", pid, e, &[P0]).await.err(), Some(ErrorCode::ProducerFenced));
    assert_eq!(c.end_txn_v2("t", pid, e, true).await, Err(ErrorCode::InvalidTxnState));
    assert_eq!(c.end_txn_v2("t", pid, e, false).await, Ok((pid, e + 1)));
    assert_eq!(c.add_implicitly("t", pid, e + 1, &[P0]).await.unwrap().txn_number, 2);
}

#[tokio::test]
async fn an_implicit_add_leaves_an_end_in_progress_to_the_coordinator() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 60_000, None).await.unwrap();
    c.add_partitions("t", pid, e, &[P0]).await.unwrap();
    *fake.failing_ends.lock().unwrap() = 1_000;
    tokio::time::pause();
    assert_eq!(c.end_txn("t", pid, e, true).await, Err(ErrorCode::CoordinatorNotAvailable));
    *fake.failing_ends.lock().unwrap() = 0;
    // Another broker's implicit add (Produce v12) does not finish it: CONCURRENT_TRANSACTIONS.
    let other = TransactionCoordinator::new(fake.clone(), TxnConfig::default(), &Incarnation::new(2));
    assert_eq!(other.add_implicitly("t", pid, e, &[P1]).await.err(), Some(ErrorCode::ConcurrentTransactions));
    assert_eq!(c.describe("t").await.unwrap().unwrap().state, "PrepareCommit");
    assert!(fake.markers.lock().unwrap().is_empty());
    // The coordinator does (the client's EndTxn retried).
    assert_eq!(c.end_txn("t", pid, e, true).await, Ok(()));
    assert_eq!(fake.markers.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn kip_360_a_producer_whose_transaction_timed_out_recovers_with_its_epoch() {
    let (fake, c) = coordinator();
    let (pid, e) = c.init_producer_id("t", 1, None).await.unwrap();
    c.add_partitions("t", pid, e, &[P0]).await.unwrap();
    fake.txns.lock().unwrap().get_mut("t").unwrap().started_ms = 1;
    c.check(&|_| true).await;
    // Kafka answers the epoch the abort bumped to, and the producer goes on with it.
    assert_eq!(c.init_producer_id("t", 60_000, Some((pid, e))).await, Ok((pid, e + 1)));
    c.add_partitions("t", pid, e + 1, &[P0]).await.unwrap();
}
