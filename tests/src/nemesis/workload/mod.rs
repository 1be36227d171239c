//! The workload: concurrent clients doing what real ones do, each operation recorded in the
//! history (invoke, then ok / fail / unknown).
//!
//! - Producers through the broker's gRPC API and through its Kafka listener, idempotent or not.
//!   They retry as real clients do: an idempotent producer re-sends the same bytes with the same
//!   sequence after any error or unknown outcome, and starts a new epoch (sequence 0) when it gives
//!   up on a batch; a plain producer re-sends only after a definite failure (after an unknown
//!   outcome it moves on: a re-send would be a legitimate duplicate).
//! - Consumers reading every partition, mostly from where they stopped, sometimes from the start.
//! - Strict readers: ListOffsets (latest, earliest) through a coordinator node and a broker.
//! - An admin client: DeleteRecords on the long-lived topics, topic create / produce / delete.
//! - Tail consumers, one per broker: Kafka long polls over every long-lived partition, reading on
//!   after the rest stops until the run ends the tail phase.
//! - Transactional producers and `read_committed` consumers, on a topic of their own
//!   (`transactions`).
//! - Share consumers (KIP-932), in one share group over the first long-lived topic (`share`).
//! - KIP-848 consumer-group members committing their positions (`members`).
//!
//! Every value is unique (`<process>-<n>-<i>`, key `k<value>`), so the checker can tell each
//! record's origin. It must not judge results: it records them.
//!
//! The files, one per client kind: `produce` (producers), `consume` (consumers and the recorded
//! read they share with the others), `strict` (strict readers and the recorded ListOffsets),
//! `admin` (the admin client and the recorded topic operations), `tail` (tail consumers). This one holds what they share:
//! the topics, the mix of workers, the context, the request timeout and the Kafka connections.

mod admin;
mod consume;
mod members;
mod produce;
pub mod share;
mod strict;
pub mod tail;
pub mod transactions;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::history::History;
use super::kafka_client::KafkaClient;
use super::rng::Rng;
use super::system::System;

pub use admin::{admin, list_topics};
pub use consume::{consumer, decode, read};
pub use members::member as kip848_member;
pub use produce::producer;
pub use share::share_consumer;
pub use strict::{list_offsets_broker, list_offsets_coordinator, strict_reader};
pub use tail::{tail_consumer, TailPositions, WAIT_MS as TAIL_WAIT_MS};
pub use transactions::{committed_reader, txn_producer, CommittedReads};

/// A topic the workload writes to.
#[derive(Debug, Clone)]
pub struct Topic {
    pub name: String,
    pub id: [u8; 16],
    pub partitions: i32,
}

/// How many workers of each kind.
#[derive(Debug, Clone)]
pub struct Mix {
    pub grpc_producers: usize,
    pub grpc_idempotent_producers: usize,
    pub kafka_producers: usize,
    pub kafka_idempotent_producers: usize,
    pub consumers: usize,
    pub kafka_consumers: usize,
    pub strict_readers: usize,
    pub admin: bool,
    /// One tail consumer per broker.
    pub tail_consumers: bool,
    /// Transactional producers (each its own transactional id) and `read_committed` consumers,
    /// on the transactional topic.
    pub txn_producers: usize,
    pub committed_readers: usize,
    /// Share consumers (KIP-932) of the first long-lived topic, in one share group.
    pub share_consumers: usize,
    /// KIP-848 consumer-group members of the first long-lived topic, in one group, committing.
    pub kip848_members: usize,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            grpc_producers: 2,
            grpc_idempotent_producers: 2,
            kafka_producers: 1,
            kafka_idempotent_producers: 1,
            consumers: 1,
            kafka_consumers: 1,
            strict_readers: 2,
            admin: true,
            tail_consumers: true,
            txn_producers: 2,
            committed_readers: 1,
            share_consumers: 2,
            kip848_members: 2,
        }
    }
}

/// What every worker shares.
pub struct Ctx {
    pub history: Arc<History>,
    pub system: Arc<System>,
    /// The long-lived topics (never deleted).
    pub topics: Vec<Topic>,
    /// The transactional workload's topic (never deleted, read `read_committed`), if it runs.
    pub txn_topic: Option<Topic>,
    pub stop: watch::Receiver<bool>,
    /// Ends the tail consumers, which read on after `stop` until they have caught up.
    pub tail_stop: watch::Receiver<bool>,
    pub tail_positions: TailPositions,
}

impl Ctx {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps, returning early when the run stops.
    async fn pause(&self, d: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    /// Sleeps, returning early when the tail phase ends.
    async fn pause_tail(&self, d: Duration) {
        let mut stop = self.tail_stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    fn pick_partition(&self, rng: &mut Rng) -> (Topic, i32) {
        let t = rng.pick(&self.topics).clone();
        let p = rng.below(t.partitions as usize) as i32;
        (t, p)
    }
}

/// How long a client waits for one answer before calling the outcome unknown. Kafka's
/// `request.timeout.ms` is 30 s; a shorter one makes more unknown outcomes, which is the point.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Codes that leave a write's outcome unknown: REQUEST_TIMED_OUT, and UNKNOWN_SERVER_ERROR (a
/// server that cannot tell).
fn unknown_code(code: i32) -> bool {
    matches!(code, 7 | -1)
}

async fn kafka_client<'a>(
    ctx: &Ctx,
    clients: &'a mut [Option<KafkaClient>],
    broker: usize,
) -> Result<&'a mut KafkaClient, String> {
    if clients[broker].is_none() {
        let c = tokio::time::timeout(REQUEST_TIMEOUT, KafkaClient::connect(&ctx.system.brokers[broker].kafka_addr))
            .await
            .map_err(|_| "connect: no answer".to_string())?
            .map_err(|e| format!("connect: {e:#}"))?;
        let mut c = c;
        // As a real client does first: Metadata, to learn the partitions (and their leader: the
        // broker itself).
        if let Some(t) = ctx.topics.first() {
            match tokio::time::timeout(REQUEST_TIMEOUT, c.partitions(&t.name)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("metadata: {e:#}")),
                Err(_) => return Err("metadata: no answer".into()),
            }
        }
        clients[broker] = Some(c);
    }
    Ok(clients[broker].as_mut().expect("just connected"))
}
