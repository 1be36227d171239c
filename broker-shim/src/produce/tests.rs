use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use diskless_proto::ErrorCode;

use super::testing::producer;
use super::Waiting;
use crate::produce::ProduceConfig;
use crate::wal::record_batch::tests::fake_batch;

const TOPIC: [u8; 16] = [7; 16];

fn config(buffer_max_bytes: usize, max_parallel_uploads: usize, commit_interval_ms: u64) -> ProduceConfig {
    ProduceConfig { commit_interval_ms, buffer_max_bytes, max_parallel_uploads, ..ProduceConfig::default() }
}

/// A valid batch of about 600 bytes (two do not fit in a 1024-byte segment).
fn big_batch() -> Bytes {
    let b = Bytes::from(fake_batch(70, -1, -1));
    assert!((520..1000).contains(&b.len()), "{}", b.len());
    b
}

#[tokio::test]
async fn at_most_max_parallel_uploads_segments_are_uploaded_and_unresolved_while_commits_stall() {
    let (p, tasks, fake, storage) = producer(config(1024, 2, 1), false, Duration::from_secs(600));
    let mut waiting: Vec<Waiting> = vec![];
    for partition in 0..6 {
        waiting.push(p.submit(TOPIC, partition, big_batch()).await.unwrap());
    }
    fake.until("the first commit arrives", |f| f.commits().len() == 1).await;
    // The coordinator stalls: give the pipeline time to run ahead if it could.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(storage.list("wal/").await.unwrap().len(), 2, "only two segments may wait for their commit");
    assert_eq!(fake.commits().len(), 1, "commits go one at a time, in order");

    fake.gate.add_permits(100);
    for w in waiting {
        w.await.unwrap();
    }
    assert_eq!(fake.commits().len(), 6);
    assert!(fake.max_unresolved.load(Ordering::SeqCst) <= 2, "{:?}", fake.max_unresolved);
    drop(p);
    tasks.join().await;
}

#[tokio::test]
async fn a_segment_whose_commit_deadline_passes_before_its_turn_is_abandoned_not_committed() {
    let deadline = Duration::from_secs(2);
    let (p, tasks, fake, storage) = producer(config(1024, 4, 1), false, deadline);
    let first = p.submit(TOPIC, 0, big_batch()).await.unwrap();
    fake.until("the first segment's commit arrives", |f| f.commits().len() == 1).await;
    assert!(fake.commits()[0].timeout_ms as u128 <= deadline.as_millis(), "the coordinator gets only the time left");
    let second = p.submit(TOPIC, 1, big_batch()).await.unwrap();
    let store = storage.clone();
    let uploaded = async move || store.list("wal/").await.unwrap().len() == 2;
    while !uploaded().await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The second segment's deadline (from its upload start) passes while the first commit stalls.
    tokio::time::sleep(deadline + Duration::from_millis(200)).await;
    fake.gate.add_permits(100);

    first.await.unwrap();
    let e = second.await.unwrap_err();
    assert_eq!(e.code, ErrorCode::RequestTimedOut, "{e}");
    assert!(e.code.retriable());
    assert_eq!(fake.commits().len(), 1, "no commit was sent for the late segment");
    assert_eq!(p.stats.abandoned.load(Ordering::Relaxed), 1);
    let store = storage.clone();
    let left = async move || store.list("wal/").await.unwrap().len();
    while left().await != 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(p);
    tasks.join().await;
}

#[tokio::test]
async fn a_segment_never_exceeds_buffer_max_bytes_and_a_larger_submission_is_refused() {
    let (p, tasks, fake, _storage) = producer(config(1024, 4, 200), true, Duration::from_secs(600));
    let mut waiting = vec![];
    for partition in 0..3 {
        waiting.push(p.submit(TOPIC, partition, big_batch()).await.unwrap());
    }
    for w in waiting {
        w.await.unwrap();
    }
    let sizes: Vec<i64> = fake.commits().iter().map(|c| c.file_size).collect();
    assert!(sizes.iter().all(|&s| s <= 1024), "segment sizes {sizes:?}");
    assert_eq!(sizes.len(), 3);
    // One batch over the limit, and a partition's batches together over it.
    let huge = Bytes::from(fake_batch(400, -1, -1));
    assert_eq!(p.submit(TOPIC, 0, huge).await.err().map(|e| e.code), Some(ErrorCode::RecordListTooLarge));
    let two = p.validate(vec![big_batch(), big_batch()], p.limits(), "t-0".into()).await.unwrap();
    assert_eq!(p.submit_all(TOPIC, 0, two).await.err().map(|e| e.code), Some(ErrorCode::RecordListTooLarge));
    drop(p);
    tasks.join().await;
    assert_eq!(fake.commits().len(), 3, "nothing of the refused submissions was committed");
}

#[tokio::test]
async fn a_call_with_one_bad_batch_enqueues_none_of_its_batches() {
    let (p, tasks, fake, storage) = producer(config(1 << 20, 4, 1), true, Duration::from_secs(600));
    let mut bad = fake_batch(2, -1, -1);
    bad[20] ^= 0xff; // CRC
    let r = p.validate(vec![Bytes::from(fake_batch(1, -1, -1)), Bytes::from(bad)], p.limits(), "t-0".into()).await;
    assert_eq!(r.err().map(|e| e.code), Some(ErrorCode::CorruptMessage));
    drop(p);
    tasks.join().await;
    assert!(fake.commits().is_empty());
    assert!(storage.list("wal/").await.unwrap().is_empty());
}

#[test]
fn a_segment_closes_at_the_next_tick_of_the_grid_not_an_interval_after_its_first_batch() {
    use super::next_tick;
    use std::time::Instant;
    let origin = Instant::now();
    let tick = Duration::from_millis(250);
    // Just after the origin, late in a tick, on a tick: the next tick strictly after.
    assert_eq!(next_tick(origin, tick, origin), origin + tick);
    assert_eq!(next_tick(origin, tick, origin + Duration::from_millis(1)), origin + tick);
    assert_eq!(next_tick(origin, tick, origin + Duration::from_millis(249)), origin + tick);
    assert_eq!(next_tick(origin, tick, origin + tick), origin + tick * 2);
    assert_eq!(next_tick(origin, tick, origin + Duration::from_millis(1_130)), origin + tick * 5);
    // Before the origin (cannot happen, but must not panic): the first tick.
    assert_eq!(next_tick(origin + tick, tick, origin), origin + tick * 2);
}
