//! Tail consumers: one per broker, following every long-lived partition from offset 0 with Kafka
//! long polls, as a caught-up consumer reads. One Fetch asks for all the partitions at once
//! (`max_wait_ms` [`WAIT_MS`], `min_bytes` 1), so a fetch with nothing to answer parks in the
//! broker until a commit (its own, or another broker's through the coordinators' watch) moves a
//! high watermark, and what it answers may come from the broker's batch-coordinate cache rather
//! than FindBatches: the two things parked fetches and the coordinate cache added, under every fault.
//!
//! Each partition's answer with records or an error is recorded as a `Read` with `wait_ms` (empty
//! answers, most of them, are not), so the checker can require that every acknowledged record
//! reached every tail consumer. Tail consumers keep reading after the
//! rest of the workload stops, until the run ends the tail phase (`Ctx::tail_stop`); their
//! positions are published in `Ctx::tail_positions` for the run to see when they have caught up.
//! It must not judge results: it records them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{decode, kafka_client, Ctx, REQUEST_TIMEOUT};
use crate::nemesis::history::{Op, Outcome, Res, Via};
use crate::nemesis::kafka_client::{Fetched, KafkaClient};

/// How long a tail consumer's Fetch may park in the broker (librdkafka's `fetch.wait.max.ms`).
pub const WAIT_MS: i32 = 500;

/// One tail consumer, reading every long-lived partition through broker `broker`.
pub async fn tail_consumer(ctx: Arc<Ctx>, process: u32, broker: usize) {
    let mut kafka: Vec<Option<KafkaClient>> = (0..ctx.system.brokers.len()).map(|_| None).collect();
    let mut positions: Vec<(String, i32, i64)> =
        ctx.topics.iter().flat_map(|t| (0..t.partitions).map(|p| (t.name.clone(), p, 0i64))).collect();
    let mut stop = ctx.tail_stop.clone();
    publish(&ctx, process, &positions);
    while !*stop.borrow() {
        // Turn the order each round: the answer's 1 MiB is filled in the order asked, so a busy
        // first partition must not starve the others (Kafka's fetch sessions rotate too).
        if !positions.is_empty() {
            positions.rotate_left(1);
        }
        let invoked = ctx.history.now();
        let answers: Result<Vec<Fetched>, String> = match kafka_client(&ctx, &mut kafka, broker).await {
            Err(e) => Err(e),
            Ok(client) => {
                let wanted = positions.clone();
                let call = client.fetch_many(&wanted, WAIT_MS);
                tokio::select! {
                    r = tokio::time::timeout(REQUEST_TIMEOUT, call) => match r {
                        Err(_) => Err("no answer within the request timeout".into()),
                        Ok(Err(e)) => Err(format!("connection: {e:#}")),
                        Ok(Ok(f)) => Ok(f),
                    },
                    // The tail phase ended with the request in flight: nothing to record.
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        };
        let op = |(topic, partition, offset): &(String, i32, i64)| Op::Read {
            via: Via::Kafka,
            target: broker as u64,
            topic: topic.clone(),
            partition: *partition,
            offset: *offset,
            wait_ms: WAIT_MS,
            isolation: 0,
        };
        let mut failed = false;
        match answers {
            Err(e) => {
                kafka[broker] = None;
                failed = true;
                for p in &positions {
                    ctx.history.ended(process, op(p), invoked, Outcome::Fail(e.clone()));
                }
            }
            Ok(answers) => {
                for (position, f) in positions.iter_mut().zip(answers) {
                    // An empty answer tells the checker nothing: not recorded.
                    if f.error_code == 0 && f.records.is_empty() {
                        continue;
                    }
                    failed |= f.error_code != 0;
                    let asked = op(position);
                    let (outcome, next) = outcome(position.2, f);
                    ctx.history.ended(process, asked, invoked, outcome);
                    position.2 = next;
                }
            }
        }
        publish(&ctx, process, &positions);
        if failed {
            // As a client's retry.backoff.ms after an error.
            ctx.pause_tail(Duration::from_millis(100)).await;
        }
    }
}

fn publish(ctx: &Ctx, process: u32, positions: &[(String, i32, i64)]) {
    let mut shared = ctx.tail_positions.lock().expect("tail positions");
    for (topic, partition, offset) in positions {
        shared.insert((process, topic.clone(), *partition), *offset);
    }
}

/// One partition's answer as recorded, and the position to fetch from next: after the last
/// record returned; the log start if the position fell below it (DeleteRecords, retention);
/// unchanged otherwise.
fn outcome(offset: i64, f: Fetched) -> (Outcome, i64) {
    match f.error_code {
        0 => match decode(Bytes::clone(&f.records)) {
            Err(e) => (Outcome::Fail(format!("undecodable records: {e}")), offset),
            Ok(records) => {
                let next = records.last().map_or(offset, |r| r.0 + 1).max(offset);
                let res = Res::Records {
                    records,
                    high_watermark: f.high_watermark,
                    log_start: f.log_start_offset,
                    last_stable_offset: None,
                };
                (Outcome::Ok(res), next)
            }
        },
        // OFFSET_OUT_OF_RANGE: below the log start moves up to it; past this broker's view of
        // the end stays (the end will come).
        1 if f.log_start_offset > offset => (Outcome::Fail("1".into()), f.log_start_offset),
        code => (Outcome::Fail(code.to_string()), offset),
    }
}

/// Per `(tail process, topic, partition)`: the next offset it will fetch.
pub type TailPositions = std::sync::Mutex<HashMap<(u32, String, i32), i64>>;

/// Waits until every tail consumer's position in every long-lived partition is past the last
/// record acknowledged there, at most `bound`: how long they took (`None`: not within the bound;
/// the checker then names what they missed).
pub async fn caught_up(ctx: &Ctx, bound: Duration) -> Option<Duration> {
    let started = std::time::Instant::now();
    let processes: Vec<u32> = {
        let shared = ctx.tail_positions.lock().expect("tail positions");
        let mut p: Vec<u32> = shared.keys().map(|k| k.0).collect();
        p.sort_unstable();
        p.dedup();
        p
    };
    let ends = acknowledged_ends(ctx);
    loop {
        let behind = {
            let shared = ctx.tail_positions.lock().expect("tail positions");
            processes.iter().any(|p| {
                ends.iter().any(|((topic, partition), end)| {
                    shared.get(&(*p, topic.clone(), *partition)).is_none_or(|at| at < end)
                })
            })
        };
        if !behind {
            return Some(started.elapsed());
        }
        if started.elapsed() >= bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Per long-lived partition, the offset after the last record acknowledged to any producer.
fn acknowledged_ends(ctx: &Ctx) -> HashMap<(String, i32), i64> {
    use crate::nemesis::history::Body;
    let long_lived: std::collections::HashSet<&str> = ctx.topics.iter().map(|t| t.name.as_str()).collect();
    let mut produced: HashMap<u64, ((String, i32), i64)> = HashMap::new();
    let mut ends: HashMap<(String, i32), i64> = HashMap::new();
    for e in ctx.history.events() {
        match e.body {
            Body::Invoke { id, op: Op::Produce { topic, partition, values, .. } }
                if long_lived.contains(topic.as_str()) =>
            {
                produced.insert(id, ((topic, partition), values.len() as i64));
            }
            Body::Ok { id, res: Res::Offset { offset } } => {
                if let Some((tp, n)) = produced.remove(&id) {
                    let end = ends.entry(tp).or_insert(0);
                    *end = (*end).max(offset + n);
                }
            }
            _ => {}
        }
    }
    ends
}
