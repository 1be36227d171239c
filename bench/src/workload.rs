//! The workloads, run the same way against every system: closed loops of C clients (saturation)
//! or an open loop at a fixed offered rate (latency counted from the intended send time, so
//! queueing shows). Owns what is sent and how it is timed; it must not start or stop systems.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use uuid::Uuid;

use crate::system::{Coord, System};

/// What one workload measured on one system.
#[derive(Debug, Clone)]
pub struct Measured {
    pub hist: Histogram<u64>,
    pub ops: u64,
    pub coords: u64,
    pub errors: u64,
    pub secs: f64,
}

impl Measured {
    fn new() -> Measured {
        Measured { hist: Histogram::new(3).expect("histogram"), ops: 0, coords: 0, errors: 0, secs: 0.0 }
    }

    fn merge(&mut self, o: Measured) {
        self.hist.add(o.hist).expect("same histogram bounds");
        self.ops += o.ops;
        self.coords += o.coords;
        self.errors += o.errors;
    }

    pub fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Random but the same on every run.
struct Rng(fastrand::Rng);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// What one commit carries.
#[derive(Debug, Clone, Copy)]
pub struct CommitShape {
    pub batches: usize,
    /// The topic's partition count.
    pub partitions: i32,
    pub batch_bytes: i64,
    /// `false`: each batch goes to a random partition (a broker with many partitions, a small
    /// file). `true`: the batches cover every partition of the topic, 2–3 each, grouped by
    /// partition as a broker lays out a full file (the reference implementation's production
    /// shape: ~4 MiB, ~1,500 batches over ~600 partitions).
    pub fan_out: bool,
}

impl CommitShape {
    fn coords(&self, rng: &mut Rng) -> Vec<Coord> {
        let n = self.partitions as u64;
        let mut coords: Vec<Coord> = if self.fan_out {
            let start = rng.next() % n;
            (0..self.batches as u64)
                .map(|i| Coord { partition: ((start + i) % n) as i32, records: 10, bytes: self.batch_bytes })
                .collect()
        } else {
            (0..self.batches)
                .map(|_| Coord { partition: (rng.next() % n) as i32, records: 10, bytes: self.batch_bytes })
                .collect()
        };
        if self.fan_out {
            coords.sort_by_key(|c| c.partition);
        }
        coords
    }
}

/// CommitFile of `shape` from `clients` clients, at saturation or at `rate` commits/s offered.
pub async fn commits(
    sys: &System,
    topic: Uuid,
    shape: CommitShape,
    clients: usize,
    duration: Duration,
    rate: Option<f64>,
) -> anyhow::Result<Measured> {
    let batches = shape.batches;
    let run = Uuid::new_v4().simple().to_string();
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = vec![];
    for c in 0..clients {
        let sys = sys.clone();
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = sys.connect(c).await?;
            let mut m = Measured::new();
            let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ ((c as u64 + 1) * 7919));
            let interval = rate.map(|r| Duration::from_secs_f64(clients as f64 / r));
            let mut next = start + interval.map_or(Duration::ZERO, |iv| iv.mul_f64(c as f64 / clients as f64));
            let mut n = 0u64;
            while Instant::now() < deadline {
                if interval.is_some() {
                    tokio::time::sleep_until(next.into()).await;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                let t0 = if interval.is_some() { next } else { Instant::now() };
                n += 1;
                let coords = shape.coords(&mut rng);
                match conn.commit(&format!("bench/{run}/{c}/{n}"), topic, &coords, now_ms()).await {
                    Ok(ok) => {
                        m.ops += 1;
                        m.coords += ok as u64;
                        m.errors += (batches - ok) as u64;
                    }
                    Err(_) => m.errors += batches as u64,
                }
                m.hist.record(t0.elapsed().as_micros().max(1) as u64)?;
                if let Some(iv) = interval {
                    next += iv;
                }
            }
            anyhow::Ok(m)
        }));
    }
    let mut all = Measured::new();
    for t in tasks {
        all.merge(t.await??);
    }
    all.secs = start.elapsed().as_secs_f64();
    Ok(all)
}

/// Reads: FindBatches (up to 10 batches from a random offset) or ListOffsets(latest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    Find { min_index: bool },
    Latest,
}

pub async fn reads(
    sys: &System,
    topic: Uuid,
    partitions: &[(i32, i64)],
    clients: usize,
    duration: Duration,
    kind: Read,
) -> anyhow::Result<Measured> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = vec![];
    for c in 0..clients {
        let sys = sys.clone();
        let partitions = partitions.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut conn = sys.connect(c + 1).await?;
            let mut m = Measured::new();
            let mut rng = Rng::new(0x51_7cc1_b727_220a ^ ((c as u64 + 3) * 104_729));
            if let Read::Find { min_index: true } = kind {
                // A commit of this client's own, whose indexes its reads then wait for.
                let coords = [Coord { partition: partitions[0].0, records: 1, bytes: 16_384 }];
                conn.commit(&format!("bench/minindex/{}/{c}", Uuid::new_v4().simple()), topic, &coords, now_ms())
                    .await?;
            }
            while Instant::now() < deadline {
                let (p, hwm) = partitions[(rng.next() % partitions.len() as u64) as usize];
                let t0 = Instant::now();
                let r = match kind {
                    Read::Find { min_index } => {
                        let offset = if hwm > 0 { (rng.next() % hwm as u64) as i64 } else { 0 };
                        conn.find(topic, p, offset, 10, min_index).await.map(|_| ())
                    }
                    Read::Latest => conn.latest(topic, p).await.map(|_| ()),
                };
                m.hist.record(t0.elapsed().as_micros().max(1) as u64)?;
                match r {
                    Ok(()) => m.ops += 1,
                    Err(_) => m.errors += 1,
                }
            }
            anyhow::Ok(m)
        }));
    }
    let mut all = Measured::new();
    for t in tasks {
        all.merge(t.await??);
    }
    all.secs = start.elapsed().as_secs_f64();
    Ok(all)
}

/// The most requests an open loop keeps in flight; past it the sender waits (and the wait
/// counts in the latency, which runs from the intended send time).
const MAX_IN_FLIGHT: usize = 4096;

/// Reads at a fixed offered rate (open loop): a pacer thread sends request k at `start + k/rate`
/// whether or not earlier ones were answered, over `conns` connections (requests multiplexed on
/// each), and every latency runs from the intended send time. The pacer sleeps with the OS timer
/// (tens of µs late at most), not tokio's 1 ms timer wheel.
pub async fn reads_offered(
    sys: &System,
    topic: Uuid,
    partitions: &[(i32, i64)],
    conns: usize,
    rate: f64,
    duration: Duration,
    kind: Read,
) -> anyhow::Result<Measured> {
    anyhow::ensure!(kind != Read::Find { min_index: true }, "open-loop reads carry no minimum index");
    let mut readers = vec![];
    for c in 0..conns {
        readers.push(sys.connect(c + 1).await?.reader().clone());
    }
    let measured = Arc::new(Mutex::new(Measured::new()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let handle = tokio::runtime::Handle::current();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let partitions = partitions.to_vec();
    let (m2, f2) = (measured.clone(), in_flight.clone());
    let start = Instant::now();
    let pacer = tokio::task::spawn_blocking(move || {
        let deadline = start + duration;
        let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
        for k in 0u64.. {
            let intended = start + interval.mul_f64(k as f64);
            if intended >= deadline {
                break;
            }
            if let Some(wait) = intended.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            while f2.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
                std::thread::sleep(Duration::from_micros(100));
            }
            f2.fetch_add(1, Ordering::AcqRel);
            let reader = readers[k as usize % readers.len()].clone();
            let (p, hwm) = partitions[(rng.next() % partitions.len() as u64) as usize];
            let offset = if hwm > 0 { (rng.next() % hwm as u64) as i64 } else { 0 };
            let (m, f) = (m2.clone(), f2.clone());
            handle.spawn(async move {
                let r = match kind {
                    Read::Find { .. } => reader.find(topic, p, offset, 10, vec![]).await.map(|_| ()),
                    Read::Latest => reader.latest(topic, p).await.map(|_| ()),
                };
                let us = intended.elapsed().as_micros().max(1) as u64;
                if let Ok(mut m) = m.lock() {
                    let _ = m.hist.record(us);
                    match r {
                        Ok(()) => m.ops += 1,
                        Err(_) => m.errors += 1,
                    }
                }
                f.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    pacer.await?;
    // Let the answers still in flight arrive (they count, late as they are).
    let drain_deadline = Instant::now() + Duration::from_secs(30);
    while in_flight.load(Ordering::Acquire) > 0 && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut all = measured.lock().map_err(|_| anyhow::anyhow!("a reader panicked"))?.clone();
    all.errors += in_flight.load(Ordering::Acquire) as u64;
    all.secs = start.elapsed().as_secs_f64();
    Ok(all)
}

/// Fills `partition` with `n` batches (commits of up to 1,000 batches, 4 at a time), printing
/// progress.
pub async fn fill(sys: &System, topic: Uuid, partition: i32, n: u64) -> anyhow::Result<()> {
    if let System::Pg { url, .. } = sys {
        // Setup, not measured: one bulk insert (one file per 1,000 batches), as fast as PostgreSQL goes.
        let c = crate::postgres::connect(url).await?;
        let hwm: i64 = c.query_one(crate::postgres::LOG_OFFSETS, &[&topic, &partition]).await?.get(1);
        let n = n as i64;
        c.batch_execute("SET synchronous_commit = on").await?;
        c.execute(
            "INSERT INTO files(object_key, format, size, uploader, committed_at) \
             SELECT 'fill/' || $1::text || '/' || $2::text || '/' || f, 1, 16384000, 1, 0 FROM generate_series(0, ($3::bigint - 1) / 1000) f",
            &[&topic.to_string(), &partition.to_string(), &n],
        )
        .await?;
        c.execute(
            "INSERT INTO batches(topic_id, partition, base_offset, last_offset, file_id, byte_offset, byte_size, \
               log_append_time, batch_max_timestamp, timestamp_type) \
             SELECT $1::uuid, $2::int, $4::bigint + i, $4::bigint + i, f.file_id, (i % 1000) * 16384, 16384, 0, 0, 0 \
             FROM generate_series(0, $3::bigint - 1) i \
             JOIN files f ON f.object_key = 'fill/' || $1::uuid::text || '/' || $2::int::text || '/' || (i / 1000)",
            &[&topic, &partition, &n, &hwm],
        )
        .await?;
        c.execute(
            "UPDATE logs SET high_watermark = high_watermark + $3::bigint WHERE topic_id = $1 AND partition = $2",
            &[&topic, &partition, &n],
        )
        .await?;
        c.batch_execute("ANALYZE batches; ANALYZE files; ANALYZE logs").await?;
        return Ok(());
    }
    const PER_COMMIT: u64 = 1000;
    let commits = n.div_ceil(PER_COMMIT);
    let started = Instant::now();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = vec![];
    for c in 0..4 {
        let (sys, next) = (sys.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = sys.connect(c).await?;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= commits {
                    return anyhow::Ok(());
                }
                let k = PER_COMMIT.min(n - i * PER_COMMIT) as usize;
                let coords = vec![Coord { partition, records: 1, bytes: 16_384 }; k];
                let ok = conn.commit(&format!("fill/{topic}/{partition}/{i}"), topic, &coords, now_ms()).await?;
                anyhow::ensure!(ok == k, "fill commit refused {} batches", k - ok);
                if i % 500 == 0 && i > 0 {
                    eprintln!(
                        "  filling {} partition {partition}: {} / {n} batches ({:.0} s)",
                        sys.name(),
                        i * PER_COMMIT,
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
