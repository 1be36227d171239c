use super::command::{AlterTopic, ErrorCode, Op, Outcome, TIMESTAMP_LOG_APPEND_TIME};
use super::fixture::*;

fn at(tp: super::TopicPartition, ts: i64) -> super::CommitBatch {
    let mut b = batch(tp, 1);
    b.batch_max_timestamp = ts;
    b
}

#[test]
fn retention_ms_deletes_the_oldest_batches_by_timestamp() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 1, Some(1_000), None).unwrap();
    for ts in [100, 200, 5_000, 150, 6_000] {
        f.commit_one(at(tp(1, 0), ts)).unwrap();
    }
    f.now = 5_500; // expire before 4_500
    let r = f.retention(100);
    assert_eq!((r.batches_deleted, r.more), (2, false));
    // 150 is older but sits behind 5_000: retention stops at the first batch that stays.
    assert_eq!(f.offsets(tp(1, 0)), (2, 5));
}

#[test]
fn log_append_time_batches_expire_by_their_commit_time() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 1, Some(1_000), None).unwrap();
    f.now = 10_000;
    let mut b = at(tp(1, 0), 1);
    b.timestamp_type = TIMESTAMP_LOG_APPEND_TIME;
    f.commit_one(b).unwrap();
    f.now = 10_500;
    assert_eq!(f.retention(100).batches_deleted, 0);
    f.now = 11_001;
    assert_eq!(f.retention(100).batches_deleted, 1);
}

#[test]
fn retention_bytes_keeps_the_partition_under_its_limit() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 1, Some(-1), Some(250)).unwrap();
    for _ in 0..5 {
        f.commit_one(batch(tp(1, 0), 1)).unwrap(); // 100 bytes each
    }
    f.retention(100);
    // Kafka's rule: delete while the rest still holds at least retention.bytes: 500 → 300 → 200 stops.
    assert_eq!(f.offsets(tp(1, 0)), (2, 5));
}

#[test]
fn unlimited_retention_keeps_everything() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 1, Some(-1), Some(-1)).unwrap();
    f.commit_one(at(tp(1, 0), 0)).unwrap();
    f.now = i64::MAX;
    assert_eq!(f.retention(100).batches_deleted, 0);
    assert_eq!(f.offsets(tp(1, 0)), (0, 1));
}

#[test]
fn work_per_command_is_bounded_and_resumes_where_it_stopped() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 4, Some(0), None).unwrap();
    for p in 0..4 {
        for _ in 0..3 {
            f.commit_one(at(tp(1, p), 0)).unwrap();
        }
    }
    f.now = 1_000_000;
    let mut commands = 0;
    let mut deleted = 0;
    loop {
        let r = f.retention(2);
        assert!(r.batches_deleted + r.partitions_examined <= 2);
        deleted += r.batches_deleted;
        commands += 1;
        if !r.more {
            break;
        }
        assert!(commands < 100);
    }
    assert_eq!(deleted, 12);
    for p in 0..4 {
        assert_eq!(f.offsets(tp(1, p)), (3, 3));
    }
}

#[test]
fn altering_retention_takes_effect_on_the_next_pass() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 1, Some(-1), None).unwrap();
    f.commit_one(at(tp(1, 0), 0)).unwrap();
    f.now = 1_000_000;
    assert_eq!(f.retention(100).batches_deleted, 0);
    let op = Op::AlterTopicConfigs(vec![
        AlterTopic { topic_id: topic_id(1), retention_ms: Some(10), retention_bytes: None }.into(),
        AlterTopic { topic_id: topic_id(2), retention_ms: Some(10), retention_bytes: None }.into(),
        AlterTopic { topic_id: topic_id(1), retention_ms: Some(-3), retention_bytes: None }.into(),
    ]);
    let Outcome::Topics(r) = f.apply(op) else { panic!() };
    let codes: Vec<_> = r.iter().map(|(_, r)| code(r)).collect();
    assert_eq!(codes, [ErrorCode::None, ErrorCode::UnknownTopicId, ErrorCode::InvalidConfig]);
    assert_eq!(f.retention(100).batches_deleted, 1);
}

#[test]
fn idle_producer_states_expire_and_active_ones_keep_their_duplicate_detection() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 1, Some(-1), Some(-1)).unwrap();
    let t = tp(1, 0);
    f.now = 1_000;
    f.commit_one(idem(t, 7, 0, 0, 1)).unwrap(); // idle from now on
    f.commit_one(idem(t, 8, 0, 0, 1)).unwrap();
    f.now = 5_000;
    f.commit_one(idem(t, 8, 0, 1, 1)).unwrap(); // producer 8 appends again

    // Expiration 4 s: producer 7 (last append at 1 s) goes, producer 8 (5 s) stays.
    f.now = 5_000 + 3_999;
    let r = f.retention_expiring_producers(100, 4_000);
    assert_eq!((r.producers_expired, r.more), (1, false));
    assert!(f.commit_one(idem(t, 8, 0, 1, 1)).unwrap().is_duplicate, "producer 8 still recognises retries");
    // Producer 7 is forgotten: a retry of its batch is a new producer's first batch...
    assert!(!f.commit_one(idem(t, 7, 0, 0, 1)).unwrap().is_duplicate);
    // ...and nothing expires while expiration is off.
    f.now = i64::MAX / 2;
    assert_eq!(f.retention(100).producers_expired, 0);
}

#[test]
fn producer_expiration_resumes_where_the_budget_ran_out() {
    let mut f = Fixture::new();
    f.create_with(1, "t", 2, Some(-1), Some(-1)).unwrap();
    for pid in 0..10 {
        f.commit_one(idem(tp(1, (pid % 2) as i32), pid, 0, 0, 1)).unwrap();
    }
    f.now += 10_000;
    // Each command first walks the 2 partitions (2 units), then examines producer states.
    let mut expired = 0;
    let mut commands = 0;
    loop {
        let r = f.retention_expiring_producers(4, 1_000);
        expired += r.producers_expired;
        commands += 1;
        if !r.more {
            break;
        }
    }
    assert_eq!(expired, 10);
    // 2 partitions + 10 states = 12 units at 4 per command, the first one partly spent on partitions.
    assert_eq!(commands, 3);
}
