//! Where should the Raft log live? Appending entries and making them durable, two ways, on the
//! same disk, back to back:
//!
//! - `rocksdb`: as the nodes did before the log moved out of RocksDB: each entry a put
//!   in the `raft` column family of the node's RocksDB, written unsynced, then one WAL fsync
//!   (`flush_wal(true)`) for everything written; old entries purged with a range delete, as
//!   openraft's purge does, so memtable flushes and compactions run as in a node.
//! - `segment`: a purpose-built append-only log: preallocated segment files (zero-filled and
//!   synced before the run, so a write never grows the file), each entry framed as
//!   length + CRC32C + bytes and written with one `pwrite`, then one `fdatasync` (the prototype).
//! - `seglog`: the nodes' log since it moved out of RocksDB (`raft::seglog`): the same idea with
//!   its spare segments prepared in the background, switches, purges and segment deletion.
//!
//! Each round writes `--per-sync K` entries of `--size S` bytes, then syncs; every `--purge-every`
//! entries (20,000: a node's `snapshot_after_entries`) the log is purged but for the last `--keep`
//! (1,000). Reported: the round's latency (P50/P99), the process's CPU time per entry (all
//! threads, RocksDB's background work included, from `/proc/self/task/*/schedstat`) and the bytes
//! that reached the block devices (`/sys/block/*/stat`: machine-wide, so measure alone) over the
//! entries' bytes (write amplification; the segments' preallocation comes before and is not
//! counted). `--no-sync` writes without syncing (CPU only; the devices' figure then depends on
//! when the kernel writes back).
//!
//! Run: `cargo run --release -p diskless-coordinator --example log_bench [-- --entries 5000
//! --size 3000 --per-sync 1 --dir /path/on/the/disk/to/test]`. Measure with nothing else running.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use diskless_coordinator::raft::seglog::SegLog;
use diskless_coordinator::storage::{Db, Family};
use hdrhistogram::Histogram;
use rocksdb::WriteBatch;

struct Args {
    entries: u64,
    size: usize,
    per_sync: u64,
    sync: bool,
    dir: Option<PathBuf>,
    only: Option<String>,
    purge_every: u64,
    keep: u64,
}

fn args() -> Args {
    let mut a = Args {
        entries: 5_000,
        size: 3_000,
        per_sync: 1,
        sync: true,
        dir: None,
        only: None,
        purge_every: 20_000,
        keep: 1_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--entries" => a.entries = value().parse().expect("--entries N"),
            "--size" => a.size = value().parse().expect("--size BYTES"),
            "--per-sync" => a.per_sync = value().parse::<u64>().expect("--per-sync K").max(1),
            "--no-sync" => a.sync = false,
            "--dir" => a.dir = Some(PathBuf::from(value())),
            "--only" => a.only = Some(value()),
            "--purge-every" => a.purge_every = value().parse::<u64>().expect("--purge-every N").max(1),
            "--keep" => a.keep = value().parse().expect("--keep N"),
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// Bytes written to the machine's block devices so far (`/sys/block/*/stat`, 512-byte sectors):
/// what reaches the disks, journal and background work included. Machine-wide: measure with
/// nothing else writing.
fn device_write_bytes() -> u64 {
    let mut total = 0;
    if let Ok(devs) = std::fs::read_dir("/sys/block") {
        for d in devs.flatten() {
            let name = d.file_name().to_string_lossy().to_string();
            if name.starts_with("loop") || name.starts_with("ram") {
                continue;
            }
            if let Ok(s) = std::fs::read_to_string(d.path().join("stat")) {
                total += s.split_whitespace().nth(6).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 512;
            }
        }
    }
    total
}

/// CPU time of every thread of this process so far, in nanoseconds.
fn process_cpu_ns() -> u64 {
    let mut total = 0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                total += s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    total
}

/// One way of keeping the log.
trait Log {
    fn append(&mut self, index: u64, entry: &[u8]);
    fn sync(&mut self);
    /// Drops entries below `index`.
    fn purge(&mut self, index: u64);
}

struct RocksLog {
    db: Db,
}

fn log_key(index: u64) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[4] = b'L';
    k[5..].copy_from_slice(&index.to_be_bytes());
    k
}

impl Log for RocksLog {
    fn append(&mut self, index: u64, entry: &[u8]) {
        let mut b = WriteBatch::default();
        self.db.batch_put(&mut b, Family::Raft, &log_key(index), entry);
        self.db.write(b, false).expect("write");
    }
    fn sync(&mut self) {
        self.db.sync_wal().expect("sync WAL");
    }
    fn purge(&mut self, index: u64) {
        let mut b = WriteBatch::default();
        self.db.batch_delete_range(&mut b, Family::Raft, &log_key(0), &log_key(index));
        self.db.write(b, false).expect("purge");
    }
}

/// Preallocated segments of `SEGMENT` bytes; a new one is prepared (zero-filled, synced) before
/// the run so that no append allocates blocks.
struct SegmentLog {
    dir: PathBuf,
    segments: Vec<File>,
    current: usize,
    offset: u64,
    frame: Vec<u8>,
}

const SEGMENT: u64 = 64 << 20;

impl SegmentLog {
    fn open(dir: &Path, bytes_needed: u64) -> SegmentLog {
        std::fs::create_dir_all(dir).expect("segment dir");
        let n = bytes_needed / SEGMENT + 1;
        let zeros = vec![0u8; 1 << 20];
        let segments = (0..n)
            .map(|i| {
                let f = OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .read(true)
                    .write(true)
                    .open(dir.join(format!("{i:08}.seg")))
                    .expect("segment file");
                for chunk in 0..SEGMENT / zeros.len() as u64 {
                    f.write_all_at(&zeros, chunk * zeros.len() as u64).expect("preallocate");
                }
                f.sync_all().expect("sync segment");
                f
            })
            .collect();
        File::open(dir).and_then(|d| d.sync_all()).expect("sync segment dir");
        SegmentLog { dir: dir.to_path_buf(), segments, current: 0, offset: 0, frame: vec![] }
    }
}

impl Log for SegmentLog {
    fn append(&mut self, index: u64, entry: &[u8]) {
        self.frame.clear();
        self.frame.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        self.frame.extend_from_slice(&index.to_le_bytes());
        self.frame.extend_from_slice(&crc32c::crc32c(entry).to_le_bytes());
        self.frame.extend_from_slice(entry);
        if self.offset + self.frame.len() as u64 > SEGMENT {
            self.current += 1;
            self.offset = 0;
        }
        self.segments[self.current].write_all_at(&self.frame, self.offset).expect("append");
        self.offset += self.frame.len() as u64;
    }
    fn sync(&mut self) {
        self.segments[self.current].sync_data().expect("fdatasync");
    }
    fn purge(&mut self, _index: u64) {
        // Whole segments are dropped once every entry in them is purged: nothing per entry.
        let _ = &self.dir;
    }
}

fn run(name: &str, log: &mut dyn Log, a: &Args) {
    // Pseudo-random bytes: RocksDB's LZ4 would shrink a regular pattern to nothing in its files
    // (a node's entries, bincode of ids and offsets, compress a little).
    let mut rng = fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15);
    let entry: Vec<u8> = (0..a.size).map(|_| rng.u8(..)).collect();
    let mut rounds = Histogram::<u64>::new_with_bounds(1, 60_000_000, 2).expect("histogram");
    let cpu0 = process_cpu_ns();
    let written0 = device_write_bytes();
    let t0 = Instant::now();
    let mut index = 1;
    while index <= a.entries {
        let started = Instant::now();
        for _ in 0..a.per_sync {
            log.append(index, &entry);
            index += 1;
        }
        if a.sync {
            log.sync();
        }
        rounds.saturating_record(started.elapsed().as_micros().max(1) as u64);
        if index % a.purge_every < a.per_sync {
            // As a node: a snapshot every `--purge-every` entries (`snapshot_after_entries`,
            // 20,000), then the log purged but for `--keep` (`entries_kept_after_snapshot`).
            log.purge(index.saturating_sub(a.keep));
        }
    }
    let wall = t0.elapsed();
    let cpu = process_cpu_ns() - cpu0;
    let written = device_write_bytes() - written0;
    let n = (index - 1) as f64;
    println!(
        "{name:8} entries {:>6} × {} B, {} per sync{}: round P50 {:>7.3} ms  P99 {:>7.3} ms  | {:>8.0} entries/s | CPU {:>6.1} µs/entry | written {:>4.1}× the entries' bytes",
        index - 1,
        a.size,
        a.per_sync,
        if a.sync { "" } else { " (no sync)" },
        rounds.value_at_quantile(0.5) as f64 / 1000.0,
        rounds.value_at_quantile(0.99) as f64 / 1000.0,
        n / wall.as_secs_f64(),
        cpu as f64 / 1000.0 / n,
        written as f64 / (n * a.size as f64),
    );
}

fn main() {
    let a = args();
    let tmp;
    let base = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir_in(".").expect("temporary directory");
            tmp.path().to_path_buf()
        }
    };
    if a.only.as_deref().is_none_or(|o| o == "rocksdb") {
        let mut rocks = RocksLog { db: Db::open(&base.join("rocksdb")).expect("open RocksDB") };
        run("rocksdb", &mut rocks, &a);
    }
    if a.only.as_deref().is_none_or(|o| o == "segment") {
        let bytes = a.entries * (a.size as u64 + 16);
        let mut seg = SegmentLog::open(&base.join("segment"), bytes);
        run("segment", &mut seg, &a);
    }
    if a.only.as_deref().is_none_or(|o| o == "seglog") {
        let log = SegLog::open(&base.join("seglog"), diskless_coordinator::raft::seglog::DEFAULT_SEGMENT_BYTES)
            .expect("open the segmented log");
        run("seglog", &mut SegLogBench { log, buf: vec![] }, &a);
    }
}

/// The nodes' own log (`raft::seglog`), one metadata partition: segments prepared as it goes (a
/// spare in the background), switched, purged and collected as in a node.
struct SegLogBench {
    log: SegLog,
    buf: Vec<(u64, Vec<u8>)>,
}

impl Log for SegLogBench {
    fn append(&mut self, index: u64, entry: &[u8]) {
        self.buf.clear();
        self.buf.push((index, entry.to_vec()));
        self.log.append(0, &self.buf).expect("append");
    }
    fn sync(&mut self) {
        self.log.sync().expect("sync");
    }
    fn purge(&mut self, index: u64) {
        self.log.purge(0, index.saturating_sub(1)).expect("purge");
    }
}
