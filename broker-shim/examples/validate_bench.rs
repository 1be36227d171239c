//! What validating a producer's batch costs the broker, per codec, on one core: the record-by-
//! record validation (`validate::validate`: CRC, every record decoded, decompressed as a stream)
//! beside the header-and-CRC check the broker did before it (`record_batch::validate`), in
//! MiB/s of the batch as sent and of its records uncompressed.
//!
//!   cargo run --release -p diskless-broker-shim --example validate_bench [seconds per figure]
//!
//! The batches: 1,000 records of 100-byte values (text-like, compressible about 3:1), keys
//! `k0..k999`, the shape of a busy producer's batch (about 110 KiB uncompressed).

use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_broker_shim::validate::build::{self, Spec};
use diskless_broker_shim::validate::decompress::Codec;
use diskless_broker_shim::validate::{self, Limits};
use diskless_broker_shim::wal::record_batch;

const NOW: i64 = 1_700_000_000_000;

/// Runs `f` repeatedly for `secs`; returns runs per second.
fn rate(secs: f64, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        for _ in 0..16 {
            f();
        }
        n += 16;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let words = ["offset", "segment", "broker", "commit", "object", "diskless", "partition", "raft "];
    let mut records = vec![];
    for i in 0..1000 {
        let value: String = (0..100)
            .map(|j| {
                let w = words[(i * 7 + j / 9) % words.len()].as_bytes();
                w[j % w.len()] as char
            })
            .collect();
        records.extend(validate::records::encode_record(
            i as i64,
            i as i32,
            Some(format!("k{i}").as_bytes()),
            Some(value.as_bytes()),
            &[],
        ));
    }
    let raw = records.len() as f64;
    println!("records: 1000, {:.0} KiB uncompressed; {secs} s per figure, one thread", raw / 1024.0);
    println!("| codec | batch KiB | header + CRC only (MiB/s sent) | full validation (MiB/s sent) | full validation (MiB/s uncompressed) | full / header-only |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let limits = Limits::default();
    for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let batch = Bytes::from(build::batch(&Spec::new(codec, 1000, NOW), &records));
        let sent = batch.len() as f64;
        validate::validate(batch.clone(), &limits, NOW, "b-0").expect("a valid batch");
        let header_only = rate(secs, || {
            record_batch::validate(&batch).expect("valid");
        });
        let full = rate(secs, || {
            validate::validate(batch.clone(), &limits, NOW, "b-0").expect("valid");
        });
        let mib = |per_s: f64, bytes: f64| per_s * bytes / f64::from(1 << 20);
        println!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.2} |",
            codec.name(),
            sent / 1024.0,
            mib(header_only, sent),
            mib(full, sent),
            mib(full, raw),
            full / header_only
        );
    }
}
