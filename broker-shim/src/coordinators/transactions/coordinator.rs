//! `TransactionCoordinator`: the transitions of Kafka's `TransactionCoordinator` and
//! `TransactionMetadata` for the transactional ids this broker coordinates, each made durable in
//! the coordinator cluster by compare-and-set before it is answered.
//!
//! Every call reads the id's state first (on its metadata partition's leader), so nothing of a
//! transactional id lives only in this broker's memory: a broker that takes an id over continues
//! it, finishing an end another broker left half done (PrepareCommit or PrepareAbort stored, some
//! markers written: the markers are written again, which ends nothing twice, then the Complete
//! state is stored). Every transition is a write of the coordinator runtime (`runtime`), which
//! reads the id again before it (`fresh_for` zero) and stores by compare-and-set on the version it
//! read; a transition stores only if the id is still as the call read it. Calls for one id are
//! serialized here (striped locks); two brokers that both believe they coordinate an id are
//! serialized by the version: the later store is refused and its client told
//! CONCURRENT_TRANSACTIONS, and retries.
//!
//! Transactions v1 (KIP-98 with KIP-360 and KIP-890 part 1), as librdkafka, aiokafka,
//! kafka-python and KafkaJS speak it: one producer epoch across transactions, bumped by
//! InitProducerId and by the abort of a transaction that timed out (fencing its producer).
//! Transactions v2's transitions (an epoch bump at every end) are `v2`'s, over the same record. Each transaction gets a number
//! (`Transaction.txn_number`), which its verified batches and its markers carry: a marker so ends
//! only its own transaction, and a batch of an ended transaction is refused (see the coordinator's
//! `partition_txns`). It must not speak the Kafka protocol nor decide ownership (the Kafka handlers
//! check `Registry::owns_group` over the id).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use diskless_proto::v1::{transaction, PendingOffset, Transaction};
use diskless_proto::ErrorCode;

use super::config::TxnConfig;
use super::store::{Listed, Marker, Records, TxnStore};
use crate::coordinators::runtime::{Runtime, Settings};
use crate::error::KafkaError;
use crate::incarnation::Incarnation;

/// A partition of a transaction: topic id and index.
pub type TxnPartition = ([u8; 16], i32);

pub(super) const EMPTY: &str = "Empty";
pub(super) const ONGOING: &str = "Ongoing";
pub(super) const PREPARE_COMMIT: &str = "PrepareCommit";
pub(super) const PREPARE_ABORT: &str = "PrepareAbort";
pub(super) const COMPLETE_COMMIT: &str = "CompleteCommit";
pub(super) const COMPLETE_ABORT: &str = "CompleteAbort";
const PREPARE_EPOCH_FENCE: &str = "PrepareEpochFence";

/// How long an end of a transaction keeps writing markers that fail for a retriable reason.
const MARKER_PATIENCE: Duration = Duration::from_secs(20);
const LOCK_STRIPES: usize = 64;
/// How many times an add refused because another broker stored the id is tried again (20 ms
/// apart, about Kafka's `add.partitions.to.txn.retry.backoff.max.ms`).
const ADD_RETRIES: usize = 5;

/// The transactional ids this broker coordinates.
pub struct TransactionCoordinator {
    store: Arc<dyn TxnStore>,
    /// The ids' states, read before every write and stored under this broker's incarnation.
    runtime: Runtime<String, Transaction, ()>,
    config: TxnConfig,
    locks: Vec<tokio::sync::Mutex<()>>,
}

/// Whether `now` is the state `read` was, but for what the cluster stamps on a store (version,
/// owner, times): nothing else was stored since `read`.
fn same(now: &Transaction, read: &Transaction) -> bool {
    let bare =
        |t: &Transaction| Transaction { version: 0, owner: String::new(), updated_ms: 0, started_ms: 0, ..t.clone() };
    bare(now) == bare(read)
}

pub(super) fn is_prepare(state: &str) -> bool {
    matches!(state, PREPARE_COMMIT | PREPARE_ABORT | PREPARE_EPOCH_FENCE)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Kafka's checks of the producer a request names against the id's state.
pub(super) fn check_producer(t: &Transaction, producer_id: i64, epoch: i16) -> Result<(), ErrorCode> {
    if t.producer_id != producer_id {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    if t.producer_epoch != i32::from(epoch) {
        return Err(ErrorCode::ProducerFenced);
    }
    Ok(())
}

/// Whether a transactional batch of `producer_id` at `epoch` for partition `p` belongs to the
/// ongoing transaction of `t` (KIP-890 part 1's verification): its number if so.
pub fn verify_in(t: &Transaction, producer_id: i64, epoch: i16, p: &TxnPartition) -> Result<u64, ErrorCode> {
    if t.producer_id != producer_id {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    if t.producer_epoch != i32::from(epoch) {
        return Err(ErrorCode::InvalidProducerEpoch);
    }
    if t.state != ONGOING || !has(t, p) {
        return Err(ErrorCode::InvalidTxnState);
    }
    Ok(t.txn_number)
}

fn has(t: &Transaction, p: &TxnPartition) -> bool {
    t.partitions.iter().any(|q| q.topic_id == p.0 && q.partition_index == p.1)
}

impl TransactionCoordinator {
    /// The coordinator of this broker process (`me`).
    pub fn new(store: Arc<dyn TxnStore>, config: TxnConfig, me: &Incarnation) -> Arc<TransactionCoordinator> {
        let records = Arc::new(Records { store: store.clone(), identity: me.tag() });
        let settings = Settings {
            fresh_for: Some(Duration::ZERO),
            load_failed: ErrorCode::CoordinatorNotAvailable,
            fenced: ErrorCode::ConcurrentTransactions,
            ..Settings::default()
        };
        let runtime = Runtime::new(records, settings, Box::new(|_, _| ()));
        let locks = (0..LOCK_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect();
        Arc::new(TransactionCoordinator { store, runtime, config, locks })
    }

    pub(super) fn lock(&self, id: &str) -> &tokio::sync::Mutex<()> {
        let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        &self.locks[(h % LOCK_STRIPES as u64) as usize]
    }

    pub(super) async fn load(&self, id: &str) -> Result<Option<Transaction>, ErrorCode> {
        self.store.load(id).await.map_err(|e| {
            tracing::info!(transactional_id = id, error = %e, "loading a transactional id failed");
            ErrorCode::CoordinatorNotAvailable
        })
    }

    /// Runs `op` on the state of `id` as stored now (`None`: nothing is), and stores what it
    /// changed before answering: a write of the runtime, run again on what is stored when another
    /// broker stored meanwhile.
    async fn change<R: Send + 'static>(
        &self,
        id: &str,
        mut op: impl FnMut(&mut Option<Transaction>) -> Result<R, ErrorCode> + Send + 'static,
    ) -> Result<R, ErrorCode> {
        let r = self.runtime.write(&id.to_string(), move |s, _| op(s).map_err(|c| KafkaError::new(c, c.name()))).await;
        r.map_err(|e| {
            if e.message != e.code.name() {
                tracing::info!(transactional_id = id, code = %e.code, message = e.message, "storing a transactional id failed");
            }
            e.code
        })
    }

    /// Stores `next` in place of `read`, the state this call read of `id`, if nothing else was
    /// stored since (else CONCURRENT_TRANSACTIONS: the client retries, this broker reads the id
    /// again); `None`: only if nothing is stored. Returns `next`.
    pub(super) async fn put(
        &self,
        id: &str,
        next: Transaction,
        read: Option<&Transaction>,
    ) -> Result<Transaction, ErrorCode> {
        let read = read.cloned();
        self.change(id, move |now| {
            let unchanged = match (now.as_ref(), read.as_ref()) {
                (Some(now), Some(read)) => same(now, read),
                (None, None) => true,
                _ => false,
            };
            if !unchanged {
                return Err(ErrorCode::ConcurrentTransactions);
            }
            *now = Some(next.clone());
            Ok(next.clone())
        })
        .await
    }

    /// Writes the markers of a prepared end, again until every partition answered (a partition
    /// gone, or whose producer moved to a later epoch, has nothing left to end), then stores the
    /// Complete state. Returns what was stored.
    pub(super) async fn complete(&self, id: &str, t: Transaction) -> Result<Transaction, ErrorCode> {
        let commit = t.state == PREPARE_COMMIT;
        let epoch = i16::try_from(t.producer_epoch).map_err(|_| ErrorCode::UnknownServerError)?;
        let mut left: Vec<Marker> = t
            .partitions
            .iter()
            .filter_map(|p| {
                Some(Marker {
                    topic_id: p.topic_id.as_slice().try_into().ok()?,
                    partition: p.partition_index,
                    producer_id: t.producer_id,
                    producer_epoch: epoch,
                    commit,
                    txn_number: t.txn_number,
                    // Informational in a marker (Kafka's clients do not judge it): the low 31 bits
                    // of the version, never negative.
                    coordinator_epoch: (t.version & 0x7fff_ffff) as i32,
                })
            })
            .collect();
        let deadline = tokio::time::Instant::now() + MARKER_PATIENCE;
        let mut pause = Duration::from_millis(20);
        while !left.is_empty() {
            let retry = match self.store.end(left.clone()).await {
                Ok(codes) => left
                    .into_iter()
                    .zip(codes)
                    .filter(|(_, c)| {
                        !matches!(
                            c,
                            ErrorCode::None | ErrorCode::UnknownTopicOrPartition | ErrorCode::InvalidProducerEpoch
                        )
                    })
                    .map(|(m, _)| m)
                    .collect(),
                Err(e) => {
                    tracing::info!(transactional_id = id, error = %e, "writing markers failed");
                    left
                }
            };
            left = retry;
            if left.is_empty() {
                break;
            }
            if tokio::time::Instant::now() + pause > deadline {
                tracing::warn!(
                    transactional_id = id,
                    left = left.len(),
                    "markers not written yet; the end stays prepared"
                );
                return Err(ErrorCode::CoordinatorNotAvailable);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
        if commit && !t.pending_offsets.is_empty() {
            // Only while the end is still the one prepared: a broker that took long to write the
            // markers must not commit offsets after the producer's later transactions did (the
            // store below would be refused, but the offsets would be written).
            match self.load(id).await? {
                Some(now) if same(&now, &t) => self.commit_offsets(id, &t).await?,
                _ => return Err(ErrorCode::ConcurrentTransactions),
            }
        }
        let read = t.clone();
        let mut done = Transaction {
            state: if commit { COMPLETE_COMMIT } else { COMPLETE_ABORT }.to_string(),
            partitions: vec![],
            groups: vec![],
            pending_offsets: vec![],
            ..t
        };
        if done.producer_epoch >= i32::from(i16::MAX) {
            // The epoch is exhausted (transactions v2 bump it at every end): the id moves to a new
            // producer id at epoch 0, Kafka's `nextProducerId`; the old one is kept as the last, so
            // a client retrying this end is answered the new one.
            let fresh = self.store.new_producer_id().await.map_err(|_| ErrorCode::CoordinatorNotAvailable)?;
            done.last_producer_id = done.producer_id;
            done.last_producer_epoch = i32::from(i16::MAX) - 1;
            done.producer_id = fresh;
            done.producer_epoch = 0;
        }
        self.put(id, done, Some(&read)).await
    }

    /// A committing transaction's offsets, into their groups (again, if a broker that finished
    /// this end before died: the same offsets).
    async fn commit_offsets(&self, id: &str, t: &Transaction) -> Result<(), ErrorCode> {
        let mut by_group: std::collections::BTreeMap<&str, Vec<PendingOffset>> = Default::default();
        for o in &t.pending_offsets {
            by_group.entry(o.group_id.as_str()).or_default().push(o.clone());
        }
        for (group, offsets) in by_group {
            match self.store.commit_offsets(group, offsets).await {
                // A partition deleted since has no offset to keep.
                Ok(codes)
                    if codes.iter().all(|c| matches!(c, ErrorCode::None | ErrorCode::UnknownTopicOrPartition)) => {}
                Ok(codes) => {
                    tracing::info!(transactional_id = id, group, ?codes, "committing a transaction's offsets failed");
                    return Err(ErrorCode::CoordinatorNotAvailable);
                }
                Err(e) => {
                    tracing::info!(transactional_id = id, group, error = %e, "committing a transaction's offsets failed");
                    return Err(ErrorCode::CoordinatorNotAvailable);
                }
            }
        }
        Ok(())
    }

    /// Aborts the ongoing transaction of `t` with the producer's epoch bumped, so its producer is
    /// fenced (a transaction that timed out, or a new producer's InitProducerId).
    async fn fence_abort(&self, id: &str, t: Transaction) -> Result<Transaction, ErrorCode> {
        let read = t.clone();
        // At the last epoch the completion moves the id to a new producer id.
        let bumped = (t.producer_epoch + 1).min(i32::from(i16::MAX));
        let prepared = Transaction {
            state: PREPARE_ABORT.to_string(),
            last_producer_id: t.producer_id,
            last_producer_epoch: t.producer_epoch,
            producer_epoch: bumped,
            ..t
        };
        let prepared = self.put(id, prepared, Some(&read)).await?;
        self.complete(id, prepared).await
    }

    /// The state of `id` with no end left half done (finished first if one was).
    pub(super) async fn settled(&self, id: &str) -> Result<Option<Transaction>, ErrorCode> {
        match self.load(id).await? {
            Some(t) if is_prepare(&t.state) => Ok(Some(self.complete(id, t).await?)),
            other => Ok(other),
        }
    }

    /// InitProducerId with a transactional id: a new producer id, or the epoch bumped (an ongoing
    /// transaction aborted first, its producer fenced). `expected`: KIP-360's producer id and epoch
    /// of a producer recovering (its own retry is answered again; another's is PRODUCER_FENCED).
    pub async fn init_producer_id(
        &self,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ErrorCode> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(ErrorCode::InvalidTransactionTimeout);
        }
        let _serial = self.lock(id).lock().await;
        let mut current = self.settled(id).await?;
        if let Some(t) = current.clone().filter(|t| t.state == ONGOING) {
            current = Some(self.fence_abort(id, t).await?);
        }
        let Some(t) = current else {
            if expected.is_some() {
                return Err(ErrorCode::InvalidProducerIdMapping);
            }
            let producer_id = self.store.new_producer_id().await.map_err(|_| ErrorCode::CoordinatorNotAvailable)?;
            let fresh = Transaction {
                producer_id,
                producer_epoch: 0,
                last_producer_id: -1,
                last_producer_epoch: -1,
                timeout_ms,
                state: EMPTY.to_string(),
                txn_number: 0,
                started_ms: -1,
                ..Transaction::default()
            };
            let stored = self.put(id, fresh, None).await?;
            return Ok((stored.producer_id, 0));
        };
        if let Some((pid, epoch)) = expected {
            let epoch = i32::from(epoch);
            // Kafka's `prepareIncrementProducerEpoch`: the epoch before the last bump is a retry
            // of the call that bumped it, or a producer recovering after its transaction was
            // aborted for it (timed out): answered the current epoch, which it goes on with.
            let settled = matches!(t.state.as_str(), EMPTY | COMPLETE_COMMIT | COMPLETE_ABORT);
            let retry = pid == t.last_producer_id && epoch == t.last_producer_epoch && settled;
            if retry {
                return Ok((t.producer_id, t.producer_epoch as i16));
            }
            if pid != t.producer_id || epoch != t.producer_epoch {
                return Err(ErrorCode::ProducerFenced);
            }
        }
        let (producer_id, producer_epoch) = if t.producer_epoch >= i32::from(i16::MAX) - 1 {
            (self.store.new_producer_id().await.map_err(|_| ErrorCode::CoordinatorNotAvailable)?, 0)
        } else {
            (t.producer_id, t.producer_epoch + 1)
        };
        let read = t.clone();
        let next = Transaction {
            last_producer_id: t.producer_id,
            last_producer_epoch: t.producer_epoch,
            producer_id,
            producer_epoch,
            timeout_ms,
            state: EMPTY.to_string(),
            partitions: vec![],
            groups: vec![],
            pending_offsets: vec![],
            ..t
        };
        let stored = self.put(id, next, Some(&read)).await?;
        Ok((stored.producer_id, stored.producer_epoch as i16))
    }

    /// Adds partitions and consumer groups to the producer's transaction, beginning one (a new
    /// number) when none is ongoing, and returns the transaction. Nothing is stored when all are
    /// in it already. Another broker storing the id meanwhile (a transactions v2 produce adds its
    /// partitions on the broker it reaches) is waited out a few times, as Kafka's partition
    /// leader retries CONCURRENT_TRANSACTIONS for 100 ms, before CONCURRENT_TRANSACTIONS is told.
    ///
    /// `owner`: the call came to the id's coordinator (AddPartitionsToTxn, AddOffsetsToTxn), which
    /// finishes an end left prepared first. Any other broker (the implicit adds of transactions
    /// v2) leaves ends to the coordinator, as Kafka's partition leaders do: an end in progress is
    /// CONCURRENT_TRANSACTIONS (the client retries), or fences a producer of an older epoch.
    pub(super) async fn add(
        &self,
        id: &str,
        (producer_id, epoch): (i64, i16),
        partitions: &[TxnPartition],
        group: Option<&str>,
        owner: bool,
    ) -> Result<Transaction, ErrorCode> {
        let _serial = self.lock(id).lock().await;
        let mut tries = 0;
        loop {
            let t = if owner { self.settled(id).await? } else { self.load(id).await? };
            let Some(t) = t else { return Err(ErrorCode::InvalidProducerIdMapping) };
            check_producer(&t, producer_id, epoch)?;
            if is_prepare(&t.state) {
                if tries < ADD_RETRIES {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                return Err(ErrorCode::ConcurrentTransactions);
            }
            let ongoing = t.state == ONGOING;
            let group_in = group.is_none_or(|g| t.groups.iter().any(|h| h == g));
            if ongoing && group_in && partitions.iter().all(|p| has(&t, p)) {
                return Ok(t);
            }
            let read = t.clone();
            let mut next = if ongoing {
                t
            } else {
                Transaction {
                    state: ONGOING.to_string(),
                    txn_number: t.txn_number + 1,
                    partitions: vec![],
                    groups: vec![],
                    ..t
                }
            };
            for p in partitions {
                if !has(&next, p) {
                    next.partitions.push(transaction::Partition { topic_id: p.0.to_vec(), partition_index: p.1 });
                }
            }
            if let Some(g) = group.filter(|_| !group_in) {
                next.groups.push(g.to_string());
            }
            match self.put(id, next, Some(&read)).await {
                Err(ErrorCode::ConcurrentTransactions) if tries < ADD_RETRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                r => return r,
            }
        }
    }

    /// AddPartitionsToTxn (v0–v3, from a producer).
    pub async fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<(), ErrorCode> {
        self.add(id, (producer_id, epoch), partitions, None, true).await.map(|_| ())
    }

    /// AddOffsetsToTxn: the group whose offsets the transaction commits.
    pub async fn add_offsets(&self, id: &str, producer_id: i64, epoch: i16, group_id: &str) -> Result<(), ErrorCode> {
        self.add(id, (producer_id, epoch), &[], Some(group_id), true).await.map(|_| ())
    }

    /// TxnOffsetCommit: `offsets` of `group_id` (added by AddOffsetsToTxn, or here when
    /// `add_group`: TxnOffsetCommit v5+, transactions v2) kept with the transaction, committed to
    /// the group at its COMMIT, dropped at its ABORT; a later offset of the same partition
    /// replaces an earlier one. The caller checked the group member.
    pub async fn stage_offsets(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group_id: &str,
        offsets: Vec<PendingOffset>,
        add_group: bool,
    ) -> Result<(), ErrorCode> {
        if add_group {
            self.add(id, (producer_id, epoch), &[], Some(group_id), false).await?;
        }
        let _serial = self.lock(id).lock().await;
        // This broker coordinates the group, maybe not the transactional id: the id's own
        // coordinator may store between the read and the store here, so a refused store is tried
        // again on what was stored.
        let mut tries = 0;
        loop {
            let Some(mut t) = self.load(id).await? else { return Err(ErrorCode::InvalidProducerIdMapping) };
            let read = t.clone();
            check_producer(&t, producer_id, epoch)?;
            if t.state != ONGOING || !t.groups.iter().any(|g| g == group_id) {
                return Err(ErrorCode::InvalidTxnState);
            }
            for o in offsets.iter().cloned() {
                let same = |p: &PendingOffset| {
                    p.group_id == o.group_id && p.topic_id == o.topic_id && p.partition_index == o.partition_index
                };
                match t.pending_offsets.iter_mut().find(|p| same(p)) {
                    Some(p) => *p = o,
                    None => t.pending_offsets.push(o),
                }
            }
            match self.put(id, t, Some(&read)).await {
                Err(ErrorCode::ConcurrentTransactions) if tries < 3 => tries += 1,
                r => return r.map(|_| ()),
            }
        }
    }

    /// EndTxn (v0–v4): PrepareCommit or PrepareAbort stored, the markers written, then the
    /// Complete state stored. A retry of an end already done is answered NONE again.
    pub async fn end_txn(&self, id: &str, producer_id: i64, epoch: i16, commit: bool) -> Result<(), ErrorCode> {
        let _serial = self.lock(id).lock().await;
        let Some(t) = self.load(id).await? else { return Err(ErrorCode::InvalidProducerIdMapping) };
        check_producer(&t, producer_id, epoch)?;
        let wanted = if commit { PREPARE_COMMIT } else { PREPARE_ABORT };
        let t = match t.state.as_str() {
            ONGOING => {
                let read = t.clone();
                self.put(id, Transaction { state: wanted.to_string(), ..t }, Some(&read)).await?
            }
            s if s == wanted => t,
            COMPLETE_COMMIT if commit => return Ok(()),
            COMPLETE_ABORT if !commit => return Ok(()),
            s if is_prepare(s) => {
                self.complete(id, t).await?;
                return Err(ErrorCode::InvalidTxnState);
            }
            _ => return Err(ErrorCode::InvalidTxnState),
        };
        self.complete(id, t).await.map(|_| ())
    }

    /// The check of a transactional Produce (KIP-890 part 1): the producer's transaction is
    /// ongoing and holds every partition. Returns the transaction's number, which the batches
    /// carry to the cluster.
    pub async fn verify(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<u64, ErrorCode> {
        let Some(t) = self.load(id).await? else { return Err(ErrorCode::InvalidTxnState) };
        let mut number = 0;
        for p in partitions {
            number = verify_in(&t, producer_id, epoch, p)?;
        }
        Ok(number)
    }

    /// The stored state of `id` (DescribeTransactions).
    pub async fn describe(&self, id: &str) -> Result<Option<Transaction>, ErrorCode> {
        self.load(id).await
    }

    /// Every stored transactional id the cluster could list (ListTransactions), and why some may
    /// be missing.
    pub async fn list(&self) -> Result<Listed, ErrorCode> {
        self.store.list().await.map_err(|_| ErrorCode::CoordinatorNotAvailable)
    }

    /// The partitions (topic id, index) of `group_id` with offsets a transaction not ended yet
    /// will commit or drop (KIP-447: OffsetFetch with `require_stable` answers them
    /// UNSTABLE_OFFSET_COMMIT). COORDINATOR_LOAD_IN_PROGRESS when some transactional ids could not
    /// be listed: their pending offsets are unknown.
    pub async fn pending_offsets(&self, group_id: &str) -> Result<HashSet<TxnPartition>, ErrorCode> {
        let listed = self.list().await?;
        if listed.missing.is_some() {
            return Err(ErrorCode::CoordinatorLoadInProgress);
        }
        Ok(listed
            .transactions
            .iter()
            .filter(|(_, t)| t.state == ONGOING || is_prepare(&t.state))
            .flat_map(|(_, t)| t.pending_offsets.iter())
            .filter(|o| o.group_id == group_id)
            .filter_map(|o| Some((o.topic_id.as_slice().try_into().ok()?, o.partition_index)))
            .collect())
    }

    /// One pass of the timer over the ids `owns` says this broker coordinates: ends left prepared
    /// are finished, ongoing transactions past their timeout aborted (their producer fenced), and
    /// ids idle past `id_expiration_ms` forgotten.
    pub async fn check(&self, owns: &(dyn Fn(&str) -> bool + Send + Sync)) {
        // What could be listed is checked: a metadata partition out of reach does not stall the
        // others' expired transactions.
        // States are read again before every write: nothing needs keeping between calls.
        self.runtime.prune(Duration::ZERO);
        let all = match self.store.list().await {
            Ok(Listed { transactions, missing }) => {
                if let Some(why) = missing {
                    tracing::debug!(why, "some transactional ids could not be listed");
                }
                transactions
            }
            Err(e) => {
                tracing::info!(error = %e, "listing transactional ids failed");
                return;
            }
        };
        let now = now_ms();
        let idle = |t: &Transaction| {
            matches!(t.state.as_str(), EMPTY | COMPLETE_COMMIT | COMPLETE_ABORT)
                && now > t.updated_ms.saturating_add(self.config.id_expiration_ms)
        };
        for (id, t) in all.into_iter().filter(|(id, _)| owns(id)) {
            let expired = t.state == ONGOING && t.started_ms >= 0 && now > t.started_ms + i64::from(t.timeout_ms);
            if !(expired || is_prepare(&t.state) || idle(&t)) {
                continue;
            }
            let _serial = self.lock(&id).lock().await;
            // Read again under the lock: a call may have moved it since the listing.
            let r = match self.load(&id).await {
                Ok(Some(t)) if is_prepare(&t.state) => self.complete(&id, t).await.map(|_| "completed"),
                Ok(Some(t)) if t.state == ONGOING && now > t.started_ms + i64::from(t.timeout_ms) => {
                    self.fence_abort(&id, t).await.map(|_| "aborted (timed out)")
                }
                // Kafka's transactional.id.expiration.ms: an id idle that long is forgotten.
                Ok(Some(t)) if idle(&t) => match self.store.expire(&id, t.version).await {
                    Ok(()) => Ok("expired (idle)"),
                    Err(e) => {
                        tracing::info!(transactional_id = id, error = %e, "expiring a transactional id failed");
                        Ok("moved on")
                    }
                },
                Ok(_) => Ok("moved on"),
                Err(e) => Err(e),
            };
            match r {
                Ok(what) => tracing::info!(transactional_id = id, what, "transaction checked"),
                Err(code) => tracing::info!(transactional_id = id, %code, "transaction check failed"),
            }
        }
    }

    /// The timer: [`TransactionCoordinator::check`] every `abort_check_interval_ms` until `stop`.
    pub async fn run(
        self: Arc<Self>,
        owns: Arc<dyn Fn(&str) -> bool + Send + Sync>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut every = tokio::time::interval(Duration::from_millis(self.config.abort_check_interval_ms.max(100)));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => self.check(owns.as_ref()).await,
                _ = stop.changed() => return,
            }
        }
    }
}
