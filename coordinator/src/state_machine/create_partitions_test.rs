use super::command::ErrorCode;
use super::fixture::*;

#[test]
fn creates_only_the_partitions_this_metadata_partition_owns() {
    let mut f0 = Fixture::metadata_partition(0, 2);
    let mut f1 = Fixture::metadata_partition(1, 2);
    assert_eq!(f0.create(1, 16), Ok(()));
    assert_eq!(f1.create(1, 16), Ok(()));
    for p in 0..16 {
        let owned0 = f0.sm.owns(&tp(1, p));
        assert_ne!(owned0, f1.sm.owns(&tp(1, p)), "exactly one metadata partition owns partition {p}");
        let (host, other) = if owned0 { (&f0, &f1) } else { (&f1, &f0) };
        assert_eq!(host.offsets(tp(1, p)), (0, 0));
        assert_eq!(code(&other.list_offsets(tp(1, p), -1)), ErrorCode::UnknownTopicOrPartition);
    }
}

#[test]
fn same_count_again_is_a_no_op_and_more_partitions_are_added() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    f.commit_one(batch(tp(1, 0), 3)).unwrap();
    assert_eq!(f.create(1, 2), Ok(()));
    assert_eq!(f.offsets(tp(1, 0)), (0, 3), "existing partitions keep their data");
    assert_eq!(code(&f.list_offsets(tp(1, 2), -1)), ErrorCode::UnknownTopicOrPartition);
    assert_eq!(f.create(1, 4), Ok(()));
    assert_eq!(f.offsets(tp(1, 3)), (0, 0));
    assert_eq!(f.offsets(tp(1, 0)), (0, 3));
}

#[test]
fn fewer_partitions_is_invalid_partitions() {
    let mut f = Fixture::new();
    f.create(1, 4).unwrap();
    assert_eq!(code(&f.create(1, 3)), ErrorCode::InvalidPartitions);
    assert_eq!(f.offsets(tp(1, 3)), (0, 0));
}

#[test]
fn partition_counts_out_of_range_are_invalid_partitions() {
    let mut f = Fixture::new();
    for n in [0, -1, super::MAX_PARTITIONS + 1] {
        assert_eq!(code(&f.create(1, n)), ErrorCode::InvalidPartitions, "{n} partitions");
    }
    assert_eq!(code(&f.list_offsets(tp(1, 0), -1)), ErrorCode::UnknownTopicOrPartition);
}

#[test]
fn bad_topic_names_are_invalid_topic_exception() {
    let mut f = Fixture::new();
    let long = "x".repeat(250);
    for name in ["", ".", "..", "a b", "ü", long.as_str()] {
        assert_eq!(code(&f.create_with(1, name, 1, None, None)), ErrorCode::InvalidTopicException, "{name:?}");
    }
    assert_eq!(f.create_with(1, &"x".repeat(249), 1, None, None), Ok(()));
}

#[test]
fn a_name_taken_by_another_topic_id_is_topic_already_exists() {
    let mut f = Fixture::new();
    f.create_with(1, "orders", 1, None, None).unwrap();
    assert_eq!(code(&f.create_with(2, "orders", 1, None, None)), ErrorCode::TopicAlreadyExists);
    assert_eq!(code(&f.create_with(1, "payments", 1, None, None)), ErrorCode::InvalidRequest, "an id keeps its name");
}

#[test]
fn the_zero_uuid_is_refused() {
    let mut f = Fixture::new();
    assert_eq!(code(&f.create(0, 1)), ErrorCode::InvalidRequest);
}

#[test]
fn retention_below_minus_one_is_invalid_config() {
    let mut f = Fixture::new();
    assert_eq!(code(&f.create_with(1, "t", 1, Some(-2), None)), ErrorCode::InvalidConfig);
    assert_eq!(code(&f.create_with(1, "t", 1, None, Some(-5))), ErrorCode::InvalidConfig);
    assert_eq!(f.create_with(1, "t", 1, Some(-1), Some(0)), Ok(()));
}

#[test]
fn a_deleted_topic_id_is_never_reused_but_its_name_is_free_at_once() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    for _ in 0..5 {
        f.commit_one(batch(tp(1, 0), 1)).unwrap();
    }
    f.delete_topic(1, 2).unwrap();
    assert_eq!(code(&f.create(1, 1)), ErrorCode::UnknownTopicId, "purge still pending");
    // The name is free at once, for another id.
    assert_eq!(f.create_with(2, "topic-1", 1, None, None), Ok(()));
    while f.retention(2).more {}
    assert_eq!(code(&f.create_with(1, "again", 1, None, None)), ErrorCode::UnknownTopicId, "purged, still gone");
}

#[test]
fn a_delete_that_arrives_before_the_create_keeps_the_topic_from_ever_appearing() {
    // A metadata partition that never got a topic's creation gets its deletion; the late or stale
    // creation (a retry, the reconciler's) must not bring it back.
    let mut f = Fixture::new();
    assert_eq!(code(&f.delete_topic(3, 10)), ErrorCode::UnknownTopicId);
    assert_eq!(code(&f.create(3, 1)), ErrorCode::UnknownTopicId);
}
