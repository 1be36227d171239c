//! Prometheus metrics of a broker shim: the instruments, the object-store wrapper that counts and
//! times every storage request, and the `/metrics` listener (`metrics_addr`).
//!
//! Owns every metric name of the crate (all `diskless_broker_*`, units in the name, `_total`
//! counters) and the process's one set of instruments ([`get`]): a process runs one broker, so the
//! produce pipeline, the fetch cache and the cleaner bump them without being handed a handle. Hot
//! paths only increment counters, move gauges and observe histograms (a short lock inside
//! prometheus-client, never across an await). The commit backlog (segments uploaded and not yet
//! committed or failed) is a small map of upload times, one entry per segment in flight (at most
//! `produce.max_parallel_uploads`), read when Prometheus scrapes. It imports nothing of the crate
//! and must not change what a request does.

pub mod http;
pub mod object_store;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// An object-store operation: `put`, `get`, `delete`, `list`, `copy`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Operation {
    pub operation: &'static str,
}

/// `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub result: &'static str,
}

/// Why a Kafka request frame was refused (the Kafka listener's names for it).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Malformed {
    pub reason: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// Latency buckets from 100 µs to ~26 s (×2).
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

pub struct Metrics {
    registry: Registry,
    // Produce.
    pub produce_duration: Histogram,
    pub produced_batches: Family<Outcome, Counter>,
    pub commit_duration: Histogram,
    pub segment_bytes: Histogram,
    pub segment_batches: Histogram,
    pub segments_abandoned: Counter,
    pub uploads_in_flight: Gauge,
    backlog_segments: Gauge,
    backlog_oldest_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    backlog: Mutex<BTreeMap<u64, Instant>>,
    backlog_ids: AtomicU64,
    // Fetch.
    pub fetch_cache_hits: Counter,
    pub fetch_cache_misses: Counter,
    /// The batch-coordinate cache (`cluster::coordinates`): entries, and fetched partitions served
    /// from it or asked of the coordinator cluster.
    pub coordinate_cache_entries: Gauge,
    pub coordinate_cache_hits: Counter,
    pub coordinate_cache_misses: Counter,
    /// Object reads (`fetch::reads`): ranges awaited from another fetch's GET; catch-up reads and
    /// their bytes in flight under the budget.
    pub fetch_reads_joined: Counter,
    pub catch_up_reads: Counter,
    pub catch_up_read_bytes_in_flight: Gauge,
    /// Fetches parked until data arrives, their wake-ups, and the partitions whose marks this
    /// broker keeps (`cluster::marks`); watch streams (re)opened and resets received.
    pub fetches_parked: Gauge,
    pub fetch_wakeups: Counter,
    pub fetches_unread: Counter,
    pub watched_partitions: Gauge,
    pub watch_reconnects: Counter,
    pub watch_resets: Counter,
    // Object storage.
    pub store_requests: Family<Operation, Counter>,
    pub store_errors: Family<Operation, Counter>,
    pub store_duration: HistogramFamily<Operation>,
    // Cleaner.
    pub cleaner_last_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub cleaner_failures: Counter,
    pub cleaner_files_deleted: Counter,
    pub cleaner_orphans_deleted: Counter,
    pub cleaner_backlog_files: Gauge,
    // Consolidation.
    pub consolidated_batches: Counter,
    pub consolidated_bytes: Counter,
    pub consolidation_failures: Counter,
    // Consumer groups.
    pub offset_commit_seconds: Histogram,
    // The Kafka listener.
    pub malformed_requests: Family<Malformed, Counter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's instruments.
pub fn get() -> &'static Metrics {
    &METRICS
}

impl Metrics {
    fn new() -> Metrics {
        let m = Metrics::registered();
        // Series that count events exist from the start, at 0, so rates and alerts see them.
        for operation in ["put", "get", "delete", "list", "copy"] {
            let op = Operation { operation };
            let _ = m.store_requests.get_or_create(&op);
            let _ = m.store_errors.get_or_create(&op);
            let _ = m.store_duration.get_or_create(&op);
        }
        for result in ["ok", "error"] {
            let _ = m.produced_batches.get_or_create(&Outcome { result });
        }

        m
    }

    fn registered() -> Metrics {
        let mut r = Registry::default();
        macro_rules! reg {
            ($name:literal, $help:literal, $metric:expr) => {{
                let m = $metric;
                r.register($name, $help, m.clone());
                m
            }};
        }
        Metrics {
            produce_duration: reg!(
                "diskless_broker_produce_duration_seconds",
                "Time from a record batch's submission to its result (committed, or failed)",
                latency()
            ),
            produced_batches: reg!(
                "diskless_broker_produce_batches",
                "Record batches produced, by result (ok: committed with an offset)",
                Family::default()
            ),
            malformed_requests: reg!(
                "diskless_broker_kafka_malformed_requests",
                "Kafka request frames refused because they do not parse (the connection is closed), by reason",
                Family::default()
            ),
            offset_commit_seconds: reg!(
                "diskless_broker_offset_commit_duration_seconds",
                "Time of one OffsetCommit's CommitOffsets to the coordinator cluster (one Raft entry)",
                latency()
            ),
            commit_duration: reg!(
                "diskless_broker_commit_duration_seconds",
                "Time of one WAL segment's CommitFile to the coordinator cluster",
                latency()
            ),
            segment_bytes: reg!(
                "diskless_broker_segment_bytes",
                "Size of each WAL segment sealed for upload",
                Histogram::new(exponential_buckets(1024.0, 4.0, 11))
            ),
            segment_batches: reg!(
                "diskless_broker_segment_batches",
                "Record batches in each WAL segment sealed for upload",
                Histogram::new(exponential_buckets(1.0, 4.0, 10))
            ),
            segments_abandoned: reg!(
                "diskless_broker_segments_abandoned",
                "WAL segments abandoned because their commit deadline passed before their turn",
                Counter::default()
            ),
            uploads_in_flight: reg!(
                "diskless_broker_uploads_in_flight",
                "WAL segment uploads to object storage under way",
                Gauge::default()
            ),
            backlog_segments: reg!(
                "diskless_broker_commit_backlog_segments",
                "WAL segments uploaded and not yet committed or failed",
                Gauge::default()
            ),
            backlog_oldest_age: reg!(
                "diskless_broker_commit_backlog_oldest_age_seconds",
                "Age of the oldest WAL segment uploaded and not yet committed or failed (0: none)",
                Gauge::default()
            ),
            backlog: Mutex::default(),
            backlog_ids: AtomicU64::new(0),
            fetch_cache_hits: reg!(
                "diskless_broker_fetch_cache_hits",
                "Batch byte ranges served from the fetch cache",
                Counter::default()
            ),
            fetch_cache_misses: reg!(
                "diskless_broker_fetch_cache_misses",
                "Batch byte ranges not in the fetch cache (read from object storage)",
                Counter::default()
            ),
            coordinate_cache_entries: reg!(
                "diskless_broker_coordinate_cache_entries",
                "Batch coordinates cached (own commits, the watch streams, FindBatches answers)",
                Gauge::default()
            ),
            coordinate_cache_hits: reg!(
                "diskless_broker_coordinate_cache_hits",
                "Fetched partitions served from the batch-coordinate cache, without FindBatches",
                Counter::default()
            ),
            coordinate_cache_misses: reg!(
                "diskless_broker_coordinate_cache_misses",
                "Fetched partitions with data to read whose batches were asked of the coordinator cluster (FindBatches)",
                Counter::default()
            ),
            fetch_reads_joined: reg!(
                "diskless_broker_fetch_reads_joined",
                "Object reads a fetch awaited from another fetch's GET of the same range instead of reading again",
                Counter::default()
            ),
            catch_up_reads: reg!(
                "diskless_broker_catch_up_reads",
                "Object GETs of old data (appended more than fetch.catch_up_age_ms ago), held to the catch-up budget",
                Counter::default()
            ),
            catch_up_read_bytes_in_flight: reg!(
                "diskless_broker_catch_up_read_bytes_in_flight",
                "Bytes of catch-up reads under way (at most fetch.catch_up_bytes_in_flight)",
                Gauge::default()
            ),
            fetches_parked: reg!(
                "diskless_broker_fetches_parked",
                "Fetches waiting for data (min_bytes not reached), woken by commits and watch streams",
                Gauge::default()
            ),
            fetch_wakeups: reg!(
                "diskless_broker_fetch_wakeups",
                "Parked fetches woken before their max_wait (a partition moved, or changes may have been missed)",
                Counter::default()
            ),
            fetches_unread: reg!(
                "diskless_broker_fetches_unread",
                "Fetches that parked without a first read: every partition known to be at its fetch offset",
                Counter::default()
            ),
            watched_partitions: reg!(
                "diskless_broker_watched_partitions",
                "Partitions whose high watermark and log start this broker keeps for parked fetches",
                Gauge::default()
            ),
            watch_reconnects: reg!(
                "diskless_broker_watch_reconnects",
                "WatchPartitions streams to the coordinator cluster lost and opened again",
                Counter::default()
            ),
            watch_resets: reg!(
                "diskless_broker_watch_resets",
                "Resets received on WatchPartitions streams (changes may have been missed; parked fetches read again)",
                Counter::default()
            ),
            store_requests: reg!(
                "diskless_broker_object_store_requests",
                "Object storage requests, by operation",
                Family::default()
            ),
            store_errors: reg!(
                "diskless_broker_object_store_errors",
                "Object storage requests that failed, by operation",
                Family::default()
            ),
            store_duration: reg!(
                "diskless_broker_object_store_request_duration_seconds",
                "Time of one object storage request, by operation",
                HistogramFamily::new_with_constructor(latency as fn() -> Histogram)
            ),
            cleaner_last_success: reg!(
                "diskless_broker_cleaner_last_success_timestamp_seconds",
                "When the cleaner last finished a pass without error (Unix time; 0: never)",
                Gauge::default()
            ),
            cleaner_failures: reg!(
                "diskless_broker_cleaner_failures",
                "Cleaner passes (released files or orphan scan) that failed",
                Counter::default()
            ),
            consolidated_batches: reg!(
                "diskless_broker_consolidated_batches",
                "Batches moved into consolidated objects (ReplaceBatches)",
                Counter::default()
            ),
            consolidated_bytes: reg!(
                "diskless_broker_consolidated_bytes",
                "Bytes written into consolidated objects",
                Counter::default()
            ),
            consolidation_failures: reg!(
                "diskless_broker_consolidation_failures",
                "Consolidation jobs that failed (retried next round)",
                Counter::default()
            ),
            cleaner_files_deleted: reg!(
                "diskless_broker_cleaner_files_deleted",
                "Released WAL segments deleted and confirmed",
                Counter::default()
            ),
            cleaner_orphans_deleted: reg!(
                "diskless_broker_cleaner_orphans_deleted",
                "Orphan WAL segments (no coordinator knows them) fenced and deleted",
                Counter::default()
            ),
            cleaner_backlog_files: reg!(
                "diskless_broker_cleaner_backlog_files",
                "Released files the last pass listed and kept (grace period not over, or not fenced yet)",
                Gauge::default()
            ),
            registry: r,
        }
    }

    /// Every metric in the Prometheus text format (version 0.0.4), the commit backlog sampled now.
    pub fn encode(&self) -> String {
        {
            let backlog = self.backlog.lock().unwrap_or_else(|e| e.into_inner());
            self.backlog_segments.set(backlog.len() as i64);
            let oldest = backlog.values().min().map_or(0.0, |t| t.elapsed().as_secs_f64());
            self.backlog_oldest_age.set(oldest);
        }
        let mut out = String::with_capacity(8 << 10);
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }

    /// A segment was uploaded: it is in the commit backlog until the guard is dropped.
    pub fn uploaded(&'static self) -> InBacklog {
        let id = self.backlog_ids.fetch_add(1, Ordering::Relaxed);
        self.backlog.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Instant::now());
        InBacklog(id)
    }

    /// A cleaner pass finished without error.
    pub fn cleaner_succeeded(&self) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.cleaner_last_success.set(now);
    }
}

/// A segment in the commit backlog, until dropped (committed, failed or abandoned).
#[derive(Debug)]
pub struct InBacklog(u64);

impl Drop for InBacklog {
    fn drop(&mut self) {
        get().backlog.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.0);
    }
}

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_counts_segments_until_their_guard_goes() {
        let m = get();
        let g = m.uploaded();
        let text = m.encode();
        assert!(text.contains("# TYPE diskless_broker_commit_backlog_segments gauge"), "{text}");
        assert!(!text.contains("diskless_broker_commit_backlog_segments 0\n"), "{text}");
        drop(g);
        for line in text.lines().filter(|l| l.starts_with("# TYPE ") && l.ends_with(" counter")) {
            assert!(line.split(' ').nth(2).is_some_and(|n| n.ends_with("_total")), "{line}");
        }
    }
}
