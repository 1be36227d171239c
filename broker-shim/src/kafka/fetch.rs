//! Fetch: each topic authorized (READ) and its name resolved through the catalog, clients of another rack pointed at a broker of
//! theirs (KIP-392's preferred read replica), the rest read by the fetcher (`crate::fetch`). A
//! fetch short of `min_bytes` parks until one of its partitions' high watermark moves past what
//! it read (this broker's commits and the cluster's watch streams, `cluster::marks`) or
//! `max_wait_ms` passes (at most 30 s), as Kafka's `DelayedFetch` waits in its purgatory. A
//! fetch whose partitions are all known to be at its offsets (`Marks::caught_up`) parks without a
//! first read: an idle consumer costs the coordinator cluster nothing. Every partition asked for gets
//! one answer: an error when the fetcher gave it none. `read_committed` (v4+) reads up to the last
//! stable offset and answers the aborted transactions of what it returns, as Kafka's
//! `FetchIsolation.TXN_COMMITTED`; such a fetch at the last stable offset parks as one at the high
//! watermark does (the marker that ends a transaction moves the high watermark). It must not read
//! object storage or the coordinator cluster itself.

use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;

use super::response::{encode, Reply};
use super::session::Session;
use crate::authz::Operation;
use crate::cluster::marks::Woken;
use crate::error::KafkaError;
use crate::fetch::FetchPartition;

/// In the parked-fetches gauge while alive.
struct Parked;

impl Parked {
    fn new() -> Parked {
        crate::metrics::get().fetches_parked.inc();
        Parked
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        crate::metrics::get().fetches_parked.dec();
    }
}

/// The longest a fetch waits for data.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

pub(super) async fn fetch(l: &Session, header: &RequestHeader, req: FetchRequest) -> Reply {
    let v = header.request_api_version;
    // Resolve names once; remember unknown ones.
    struct Want {
        topic: TopicName,
        partition: i32,
        resolved: Result<FetchPartition, KafkaError>,
    }
    let mut wants = vec![];
    let read_committed = v >= 4 && req.isolation_level == 1;
    let access = l.access().await;
    for t in &req.topics {
        let topic = l.topic(&access, Operation::Read, t.topic.as_str()).await;
        for p in &t.partitions {
            let resolved = topic.clone().and_then(|tm| {
                l.partition(&tm, p.partition)?;
                l.leader_epoch(if v >= 9 { p.current_leader_epoch } else { -1 })?;
                Ok(FetchPartition {
                    topic_id: tm.id,
                    partition: p.partition,
                    offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    read_committed,
                })
            });
            wants.push(Want { topic: t.topic.clone(), partition: p.partition, resolved });
        }
    }
    // KIP-392: a client in another rack than this broker's is pointed at a live broker of its own
    // rack, when there is one (`preferred_read_replica`, no records); the others are served here.
    let client_rack = if v >= 11 { req.rack_id.to_string() } else { String::new() };
    let (me, live) = (l.shim.registry.me(), l.shim.registry.brokers());
    let mut preferred: Vec<Option<i32>> = vec![];
    for w in &wants {
        let p = match &w.resolved {
            Ok(f) => crate::registry::preferred_replica(&me, &live, &client_rack, &f.topic_id, f.partition),
            Err(_) => None,
        };
        preferred.push(p);
    }
    let asks: Vec<FetchPartition> = wants
        .iter()
        .zip(&preferred)
        .filter(|(_, p)| p.is_none())
        .filter_map(|(w, _)| w.resolved.as_ref().ok().copied())
        .collect();
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_FETCH_WAIT);
    let max_bytes = if req.max_bytes <= 0 { i32::MAX } else { req.max_bytes };
    // A fetch that cannot be answered yet parks: its interest is taken before each read (so no
    // change after the read is missed), then it waits until one of its partitions moves past what
    // the read saw (`cluster::marks`), or the deadline.
    let marks = l.shim.cluster.marks();
    let mut seen = vec![];
    let mut parked = None;
    let mut first = true;
    let fetched = loop {
        let waiter = marks.waiter(asks.iter().map(|a| (a.topic_id, a.partition)));
        // A first look: when every partition is known to be at its fetch offset, nothing is read.
        let known: Option<Vec<crate::fetch::Fetched>> = if first && !asks.is_empty() {
            asks.iter()
                .map(|a| {
                    // read_committed: only while no transaction is open (the answer names the last
                    // stable offset, here the high watermark). The watch announces transactional
                    // batches only to a broker that caches coordinates.
                    let settled = !read_committed
                        || (l.shim.cluster.coordinates().enabled() && marks.settled(a.topic_id, a.partition));
                    marks
                        .caught_up(a.topic_id, a.partition, a.offset)
                        .filter(|_| settled)
                        .map(|(hwm, log_start)| crate::fetch::Fetched::empty(None, hwm, log_start))
                })
                .collect()
        } else {
            None
        };
        first = false;
        let r = match known {
            Some(v) => {
                crate::metrics::get().fetches_unread.inc();
                Ok(v)
            }
            None if asks.is_empty() => Ok(vec![]),
            None => l.shim.fetcher.fetch_after(&asks, max_bytes, &seen).await,
        };
        // As Kafka's ReplicaManager, an error anywhere answers at once.
        let refused = wants.iter().any(|w| w.resolved.is_err());
        let done = match &r {
            Err(_) => true,
            Ok(_) if refused => true,
            Ok(v) => {
                let bytes: usize = v.iter().map(|f| f.records.len()).sum();
                bytes >= req.min_bytes.max(1) as usize
                    || v.iter().any(|f| f.error.is_some())
                    || preferred.iter().any(Option::is_some)
            }
        };
        if done || Instant::now() >= deadline {
            break r;
        }
        let answered: Vec<i64> = match &r {
            Ok(v) => v.iter().map(|f| f.high_watermark).collect(),
            Err(_) => vec![-1; asks.len()],
        };
        // Batches below the high watermark (read_committed: the last stable offset) not returned
        // (every replica asked was behind the leader): the marks already say more than the read,
        // so the wait is a short poll. A read_committed fetch held back by an open transaction
        // waits for the marker, which moves the high watermark.
        let behind = match &r {
            Ok(v) => v.iter().zip(&asks).any(|(f, a)| {
                let end = if read_committed { f.last_stable_offset } else { f.high_watermark };
                f.records.is_empty() && end > a.offset
            }),
            Err(_) => false,
        };
        parked.get_or_insert_with(Parked::new);
        match waiter.wait(&answered, deadline.into(), behind).await {
            Woken::Moved(at) => {
                crate::metrics::get().fetch_wakeups.inc();
                seen = at;
            }
            Woken::Deadline => break r,
        }
    };
    drop(parked);
    let mut fetched = match fetched {
        Ok(v) => v.into_iter(),
        Err(e) => {
            // The coordinator cluster is unreachable: every partition gets the retriable error.
            vec![crate::fetch::Fetched::empty(Some(e), -1, -1); asks.len()].into_iter()
        }
    };
    let mut responses: Vec<fetch_response::FetchableTopicResponse> = vec![];
    for (w, preferred) in wants.into_iter().zip(preferred) {
        let data = match (w.resolved, preferred) {
            (Ok(_), Some(replica)) => fetch_response::PartitionData::default()
                .with_partition_index(w.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_preferred_read_replica(kafka_protocol::messages::BrokerId(replica))
                .with_records(Some(Bytes::new())),
            (Err(e), _) => fetch_response::PartitionData::default()
                .with_partition_index(w.partition)
                .with_error_code(e.code.code())
                .with_high_watermark(-1),
            (Ok(_), None) => {
                // One answer per partition asked for; a short answer fails the partitions left
                // without one, never the connection.
                let f = fetched.next().unwrap_or_else(|| {
                    tracing::warn!(partition = w.partition, "the fetcher answered fewer partitions than asked");
                    let e = KafkaError::new(ErrorCode::UnknownServerError, "no answer for the partition");
                    crate::fetch::Fetched::empty(Some(e), -1, -1)
                });
                let mut d = fetch_response::PartitionData::default()
                    .with_partition_index(w.partition)
                    .with_error_code(f.error.as_ref().map_or(ErrorCode::None, |e| e.code).code())
                    .with_high_watermark(f.high_watermark)
                    .with_last_stable_offset(f.last_stable_offset)
                    .with_records(Some(f.records));
                if read_committed {
                    let aborted = f
                        .aborted
                        .iter()
                        .map(|&(producer_id, first_offset)| {
                            fetch_response::AbortedTransaction::default()
                                .with_producer_id(ProducerId(producer_id))
                                .with_first_offset(first_offset)
                        })
                        .collect();
                    d = d.with_aborted_transactions(Some(aborted));
                }
                if v >= 5 {
                    d = d.with_log_start_offset(f.log_start_offset);
                }
                if v >= 11 {
                    d = d.with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1));
                }
                d
            }
        };
        match responses.last_mut() {
            Some(last) if last.topic == w.topic => last.partitions.push(data),
            _ => responses.push(
                fetch_response::FetchableTopicResponse::default().with_topic(w.topic).with_partitions(vec![data]),
            ),
        }
    }
    encode(ApiKey::Fetch, header, v, &FetchResponse::default().with_responses(responses))
}
