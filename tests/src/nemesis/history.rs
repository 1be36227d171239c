//! The history of a fault run: every operation (invoke, then ok / fail / info = unknown outcome)
//! and every fault (start, heal), with microsecond timestamps from one monotonic clock, written as
//! JSON lines to a file as they happen and kept in memory for the checker.
//!
//! Owns the event types and their file format (`load` reads a file back, so a failing run's
//! history can be checked again offline). It must not judge anything: that is the checker's job.

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The process number the nemesis writes under.
pub const NEMESIS: u32 = 0;
/// The process number of the final reads and checks, after every fault is healed.
pub const FINAL: u32 = u32::MAX;

/// How an operation reached the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// The broker's gRPC API (`BrokerService`).
    Grpc,
    /// The broker's Kafka listener.
    Kafka,
    /// A coordinator node's gRPC API (`CoordinatorService`), directly.
    Coordinator,
}

/// An idempotent producer's identity and the batch's first sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerSeq {
    pub id: i64,
    pub epoch: i16,
    pub seq: i32,
}

/// What a worker asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "kebab-case")]
pub enum Op {
    /// One record batch of `values` (keys `k<value>`) to one partition.
    Produce {
        via: Via,
        /// Broker number (or node id for `Via::Coordinator`).
        target: u64,
        topic: String,
        partition: i32,
        values: Vec<String>,
        producer: Option<ProducerSeq>,
        /// The transaction the batch belongs to (`<transactional id>#<n>`), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        txn: Option<String>,
    },
    /// Records of one partition from `offset` on. `wait_ms` > 0: a tail consumer's long poll
    /// (a Fetch that may park up to that long for data), one of several partitions asked together.
    /// `isolation` 1: `read_committed` (aborted transactions and control records dropped, as a
    /// Kafka consumer drops them).
    Read {
        via: Via,
        target: u64,
        topic: String,
        partition: i32,
        offset: i64,
        #[serde(default)]
        wait_ms: i32,
        #[serde(default, skip_serializing_if = "is_zero")]
        isolation: i8,
    },
    /// EndTxn of transaction `txn` (`<transactional id>#<n>`): COMMIT or ABORT.
    EndTxn {
        via: Via,
        target: u64,
        txn: String,
        commit: bool,
        /// EndTxn v5 (transactions v2: the producer's epoch bumped by the end).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        v2: bool,
    },
    /// A strict (linearizable) ListOffsets: latest (-1) or earliest (-2).
    ListOffsets {
        via: Via,
        target: u64,
        topic: String,
        partition: i32,
        timestamp: i64,
    },
    DeleteRecords {
        via: Via,
        target: u64,
        topic: String,
        partition: i32,
        offset: i64,
    },
    CreateTopic {
        via: Via,
        target: u64,
        topic: String,
        partitions: i32,
    },
    DeleteTopic {
        via: Via,
        target: u64,
        topic: String,
    },
    /// Every topic's name (ListTopics on a coordinator node).
    ListTopics {
        via: Via,
        target: u64,
    },
    /// A KIP-848 member's OffsetCommit (v9, with its member epoch) of one partition.
    CommitOffset {
        group: String,
        topic: String,
        partition: i32,
        offset: i64,
        epoch: i32,
    },
    /// OffsetFetch of one partition's committed offset (answered as `Res::Offset`; -1: none).
    FetchCommitted {
        group: String,
        topic: String,
        partition: i32,
    },
    /// A share consumer's ShareFetch (KIP-932) of every partition of `topic` in share group
    /// `group`, carrying ACCEPT acknowledgements of `acks` (partition, first, last offset).
    ShareFetch {
        target: u64,
        group: String,
        topic: String,
        session_epoch: i32,
        acks: Vec<(i32, i64, i64)>,
    },
}

impl Op {
    /// The operation's kind, for summaries.
    pub fn kind(&self) -> String {
        let (name, via) = match self {
            Op::Produce { via, txn: Some(_), .. } => ("produce-transactional", via),
            Op::Produce { via, producer, .. } => {
                (if producer.is_some() { "produce-idempotent" } else { "produce" }, via)
            }
            Op::Read { via, isolation: 1, .. } => ("read-committed", via),
            Op::Read { via, wait_ms, .. } => (if *wait_ms > 0 { "tail-read" } else { "read" }, via),
            Op::EndTxn { via, commit, v2, .. } => (
                match (*commit, *v2) {
                    (true, false) => "end-txn-commit",
                    (false, false) => "end-txn-abort",
                    (true, true) => "end-txn-commit-v2",
                    (false, true) => "end-txn-abort-v2",
                },
                via,
            ),
            Op::ListOffsets { via, timestamp, .. } => {
                (if *timestamp == -2 { "list-offsets-earliest" } else { "list-offsets-latest" }, via)
            }
            Op::DeleteRecords { via, .. } => ("delete-records", via),
            Op::CreateTopic { via, .. } => ("create-topic", via),
            Op::DeleteTopic { via, .. } => ("delete-topic", via),
            Op::ListTopics { via, .. } => ("list-topics", via),
            Op::CommitOffset { .. } => return "offset-commit-v9/kafka".into(),
            Op::FetchCommitted { .. } => return "offset-fetch/kafka".into(),
            Op::ShareFetch { acks, .. } => {
                return if acks.is_empty() { "share-fetch/kafka".into() } else { "share-fetch-ack/kafka".into() }
            }
        };
        let via = match via {
            Via::Grpc => "grpc",
            Via::Kafka => "kafka",
            Via::Coordinator => "coordinator",
        };
        format!("{name}/{via}")
    }
}

fn is_zero(v: &i8) -> bool {
    *v == 0
}

/// One record as read: offset, key, value (lossy UTF-8; our values are ASCII, anything else is
/// damage and will not match).
pub type Rec = (i64, String, String);

/// What an operation returned when it succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "kebab-case")]
pub enum Res {
    /// Produce: the base offset. ListOffsets: the offset. DeleteRecords: the new log start.
    Offset {
        offset: i64,
    },
    /// Read: the records returned, and the partition's high watermark and log start then.
    Records {
        records: Vec<Rec>,
        high_watermark: i64,
        log_start: i64,
        /// `read_committed` reads: the last stable offset the answer gave.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_stable_offset: Option<i64>,
    },
    /// ListTopics: names, with each one's id (hex) and partition count at the same index.
    Topics {
        names: Vec<String>,
        #[serde(default)]
        ids: Vec<String>,
        #[serde(default)]
        partitions: Vec<i32>,
    },
    /// ShareFetch: the records acquired (partition, offset, value, delivery count), and each
    /// acknowledged partition's acknowledgement error code.
    Shared {
        acquired: Vec<(i32, i64, String, i32)>,
        ack_codes: Vec<(i32, i16)>,
    },
    Done,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Body {
    Invoke {
        id: u64,
        op: Op,
    },
    Ok {
        id: u64,
        res: Res,
    },
    /// Definitely did not happen.
    Fail {
        id: u64,
        error: String,
    },
    /// May or may not have happened (a timeout, a lost connection, REQUEST_TIMED_OUT).
    Info {
        id: u64,
        error: String,
    },
    FaultStart {
        id: u64,
        fault: String,
        target: String,
    },
    FaultHeal {
        id: u64,
        fault: String,
        target: String,
    },
    /// A phase of the run, for readers of the file.
    Note {
        text: String,
    },
}

impl Body {
    fn ended(id: u64, outcome: Outcome) -> Body {
        match outcome {
            Outcome::Ok(res) => Body::Ok { id, res },
            Outcome::Fail(error) => Body::Fail { id, error },
            Outcome::Unknown(error) => Body::Info { id, error },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Microseconds since the run started.
    pub t: u64,
    /// The worker (1..), the nemesis (0) or the final phase (`u32::MAX`).
    pub p: u32,
    #[serde(flatten)]
    pub body: Body,
}

/// How an operation ended, as the worker saw it.
#[derive(Debug, Clone)]
pub enum Outcome {
    Ok(Res),
    Fail(String),
    Unknown(String),
}

struct Inner {
    file: Option<BufWriter<std::fs::File>>,
    events: Vec<Event>,
    next_id: u64,
}

/// The run's history, shared by every worker and the nemesis.
pub struct History {
    start: Instant,
    inner: Mutex<Inner>,
}

impl History {
    /// A history written to `path` (created, truncated) as events arrive.
    pub fn create(path: &Path) -> anyhow::Result<History> {
        let file = std::fs::File::create(path).map_err(|e| anyhow::anyhow!("create {}: {e}", path.display()))?;
        Ok(History {
            start: Instant::now(),
            inner: Mutex::new(Inner { file: Some(BufWriter::new(file)), events: vec![], next_id: 1 }),
        })
    }

    /// A history kept in memory only (tests of the checker).
    pub fn in_memory() -> History {
        History { start: Instant::now(), inner: Mutex::new(Inner { file: None, events: vec![], next_id: 1 }) }
    }

    /// Microseconds since the run started.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(inner: &mut Inner, e: Event) {
        if let Some(f) = inner.file.as_mut() {
            // A history that cannot be written is a broken run, not a finding: say so loudly.
            let line = serde_json::to_string(&e).expect("events serialize");
            if let Err(err) = writeln!(f, "{line}") {
                eprintln!("nemesis: writing the history failed: {err}");
            }
        }
        inner.events.push(e);
    }

    fn record(&self, p: u32, body: impl FnOnce(u64) -> Body) -> u64 {
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        // The timestamp is taken under the lock, so the file is in time order.
        let e = Event { t: self.now(), p, body: body(id) };
        Self::push(&mut inner, e);
        id
    }

    /// Records the start of an operation; returns its id.
    pub fn invoke(&self, p: u32, op: Op) -> u64 {
        self.record(p, |id| Body::Invoke { id, op })
    }

    /// Records how operation `id` ended.
    pub fn complete(&self, p: u32, id: u64, outcome: Outcome) {
        let mut inner = self.lock();
        let e = Event { t: self.now(), p, body: Body::ended(id, outcome) };
        Self::push(&mut inner, e);
    }

    /// Records a whole operation once it has ended: its invoke at `invoked` (from [`History::now`]
    /// when it was sent), then its outcome. For the tail consumers' many reads, whose empty
    /// answers are not worth a line: an operation recorded so may follow later events in the file.
    pub fn ended(&self, p: u32, op: Op, invoked: u64, outcome: Outcome) {
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        Self::push(&mut inner, Event { t: invoked, p, body: Body::Invoke { id, op } });
        let e = Event { t: self.now(), p, body: Body::ended(id, outcome) };
        Self::push(&mut inner, e);
    }

    /// Records a fault starting; returns its id for [`History::fault_healed`].
    pub fn fault_started(&self, fault: &str, target: &str) -> u64 {
        self.record(NEMESIS, |id| Body::FaultStart { id, fault: fault.into(), target: target.into() })
    }

    pub fn fault_healed(&self, id: u64, fault: &str, target: &str) {
        let mut inner = self.lock();
        let e = Event {
            t: self.now(),
            p: NEMESIS,
            body: Body::FaultHeal { id, fault: fault.into(), target: target.into() },
        };
        Self::push(&mut inner, e);
    }

    pub fn note(&self, text: impl Into<String>) {
        let mut inner = self.lock();
        let e = Event { t: self.now(), p: NEMESIS, body: Body::Note { text: text.into() } };
        Self::push(&mut inner, e);
    }

    /// Every event so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        self.lock().events.clone()
    }

    pub fn flush(&self) {
        if let Some(f) = self.lock().file.as_mut() {
            let _ = f.flush();
        }
    }

    /// Reads a history file back.
    pub fn load(path: &Path) -> anyhow::Result<Vec<Event>> {
        let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("open {}: {e}", path.display()))?;
        let mut out = vec![];
        for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            out.push(
                serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("{} line {}: {e}", path.display(), n + 1))?,
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        let h = History::create(&path).unwrap();
        let op = Op::Produce {
            via: Via::Kafka,
            target: 1,
            topic: "t".into(),
            partition: 2,
            values: vec!["a".into()],
            producer: Some(ProducerSeq { id: 7, epoch: 0, seq: 3 }),
            txn: Some("t#1".into()),
        };
        let id = h.invoke(3, op);
        h.complete(
            3,
            id,
            Outcome::Ok(Res::Records {
                records: vec![(4, "ka".into(), "a".into())],
                high_watermark: 5,
                log_start: 0,
                last_stable_offset: Some(5),
            }),
        );
        let f = h.fault_started("kill-node", "n1");
        h.fault_healed(f, "kill-node", "n1");
        h.complete(3, id, Outcome::Unknown("timeout".into()));
        h.flush();
        assert_eq!(History::load(&path).unwrap(), h.events());
        assert_eq!(h.events().len(), 5);
    }
}
