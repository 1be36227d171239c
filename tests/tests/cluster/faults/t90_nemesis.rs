//! The fault suite's short run, in `cargo test` so CI runs it on every change: a seeded nemesis
//! injects at least 100 mixed faults (about 100 s) into a 3-node cluster with two brokers while
//! producers, consumers, strict readers and an admin client work; then everything is healed and
//! the checker judges the history and the live system. Any anomaly fails the test, and the
//! history and every process's log are kept (the path is printed).
//!
//! `DISKLESS_NEMESIS_SEED=<n>` replays a seed; `DISKLESS_KEEP_TEST_DIRS=1` keeps the files of a
//! passing run too; long runs: `tests/nemesis.sh`.

use std::time::Duration;

use diskless_cluster_tests::nemesis;

/// The seed CI uses unless told otherwise (a fixed one, so a failure replays as it happened).
const DEFAULT_SEED: u64 = 90_001;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_mixed_faults_lose_duplicate_or_reorder_no_acknowledged_record() {
    let seed = std::env::var("DISKLESS_NEMESIS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    let mut config = nemesis::Config::new(seed, Duration::from_secs(100));
    config.min_faults = 100;
    config.keep = std::env::var_os("DISKLESS_KEEP_TEST_DIRS").is_some();
    let result = nemesis::run(config).await.expect("the fault run could not be set up");
    println!("{}", result.summary.text);
    let kept = result.kept.as_ref().map(|p| format!("history and logs kept in {}", p.display())).unwrap_or_default();
    assert!(result.faults >= 100, "only {} faults injected; {kept}", result.faults);
    assert!(
        result.anomalies.is_empty(),
        "the fault run with seed {seed} found {} anomalies; {kept}\n{}",
        result.anomalies.len(),
        result.summary.text
    );
}
