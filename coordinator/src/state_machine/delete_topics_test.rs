use super::command::ErrorCode;
use super::fixture::*;

#[test]
fn an_unknown_topic_is_unknown_topic_id() {
    let mut f = Fixture::new();
    assert_eq!(code(&f.delete_topic(5, 10)), ErrorCode::UnknownTopicId);
}

#[test]
fn deleting_a_topic_removes_partitions_batches_and_producers_and_releases_files() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    f.create(2, 1).unwrap();
    let shared = f.commit(vec![idem(tp(1, 0), 7, 0, 0, 1), batch(tp(1, 1), 1), batch(tp(2, 0), 1)]).0;
    let own = f.commit(vec![batch(tp(1, 0), 1)]).0;
    f.now = 5;
    assert_eq!(f.delete_topic(1, 1000), Ok(()));
    for p in 0..2 {
        assert_eq!(code(&f.list_offsets(tp(1, p), -1)), ErrorCode::UnknownTopicOrPartition);
        assert_eq!(f.find(tp(1, p), 0, 100).error.unwrap().code, ErrorCode::UnknownTopicOrPartition);
    }
    assert_eq!(code(&f.commit_one(batch(tp(1, 0), 1))), ErrorCode::UnknownTopicOrPartition);
    assert!(f.describe(&shared).has_live_batches, "topic 2 still has a batch in it");
    assert!(!f.describe(&own).has_live_batches);
    assert_eq!(code(&f.delete_topic(1, 10)), ErrorCode::UnknownTopicId);
    // Producer state went with it.
    let producer = crate::storage::KvRead::get(&f.db.read(), &f.sm.keys.producer(&tp(1, 0), 7)).unwrap();
    assert_eq!(producer, None);
    // And the id is never used again.
    assert_eq!(code(&f.create(1, 1)), ErrorCode::UnknownTopicId);
}
