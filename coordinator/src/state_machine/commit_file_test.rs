use super::command::{CommitBatch, ErrorCode, Op, Outcome, TIMESTAMP_LOG_APPEND_TIME};
use super::fixture::*;
use super::records::BATCH_ID_COUNTER_BITS;

#[test]
fn offsets_are_assigned_contiguously_from_the_high_watermark() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    f.now = 5_000;
    let (_, r) = f.commit(vec![batch(tp(1, 0), 3), batch(tp(1, 1), 2), batch(tp(1, 0), 4)]);
    let r: Vec<_> = r.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(r.iter().map(|c| c.assigned_base_offset).collect::<Vec<_>>(), [0, 0, 3]);
    assert!(r.iter().all(|c| c.log_append_time == 5_000 && c.log_start_offset == 0 && !c.is_duplicate));
    assert_eq!(f.offsets(tp(1, 0)), (0, 7));
    assert_eq!(f.offsets(tp(1, 1)), (0, 2));
    let found = f.find(tp(1, 0), 0, i32::MAX);
    let ranges: Vec<_> = found.batches.iter().map(|b| (b.base_offset, b.last_offset)).collect();
    assert_eq!(ranges, [(0, 2), (3, 6)]);
}

#[test]
fn unknown_topic_or_partition_is_refused_per_batch() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let (_, r) = f.commit(vec![batch(tp(2, 0), 1), batch(tp(1, 5), 1), batch(tp(1, -1), 1), batch(tp(1, 0), 1)]);
    let codes: Vec<_> = r.iter().map(code).collect();
    use ErrorCode::*;
    assert_eq!(codes, [UnknownTopicOrPartition, UnknownTopicOrPartition, UnknownTopicOrPartition, None]);
    assert_eq!(r[3].as_ref().unwrap().assigned_base_offset, 0);
}

#[test]
fn malformed_batches_are_refused_and_change_nothing() {
    use ErrorCode::*;
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    let cases = [
        (
            {
                let mut b = batch(t, 1);
                b.size = 0;
                b
            },
            InvalidRequest,
        ),
        (
            {
                let mut b = batch(t, 1);
                b.size = -4;
                b
            },
            InvalidRequest,
        ),
        (
            {
                let mut b = batch(t, 3);
                b.last_offset = -1;
                b
            },
            CorruptMessage,
        ),
        (
            {
                let mut b = batch(t, 1);
                b.base_offset = -1;
                b
            },
            CorruptMessage,
        ),
        (
            {
                let mut b = batch(t, 1);
                b.magic = 1;
                b
            },
            CorruptMessage,
        ),
        (
            {
                let mut b = batch(t, 1);
                b.timestamp_type = 7;
                b
            },
            CorruptMessage,
        ),
        (
            {
                let mut b = idem(t, 5, 0, 0, 3);
                b.last_sequence = 5;
                b
            },
            CorruptMessage,
        ),
        (
            {
                let mut b = idem(t, 5, 0, 0, 1);
                b.producer_epoch = -1;
                b
            },
            InvalidRequest,
        ),
        (
            {
                let mut b = batch(t, 1);
                b.producer_id = -7;
                b
            },
            InvalidRequest,
        ),
        (
            {
                let mut b = batch(t, 1);
                b.last_offset = i64::from(i32::MAX) + 5;
                b
            },
            CorruptMessage,
        ),
    ];
    for (b, want) in cases {
        let r = f.commit_one(b);
        assert_eq!(code(&r), want, "{b:?}");
    }
    assert_eq!(f.offsets(t), (0, 0), "nothing was appended");
    assert!(f.find(t, 0, i32::MAX).batches.is_empty());
}

#[test]
fn a_byte_range_outside_the_file_is_refused() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let mut b = batch(tp(1, 0), 1);
    b.byte_offset = 50;
    let c = super::command::CommitFile {
        deadline_ms: None,
        object_key: "k".into(),
        object_format: 1,
        file_size: 120,
        uploader_broker_id: 1,
        owner_ids: vec![0],
        batches: vec![b],
    };
    let super::Outcome::CommitFile(r) = f.apply(super::Op::CommitFile(c)) else { panic!() };
    assert_eq!(code(&r[0]), ErrorCode::InvalidRequest);
}

#[test]
fn a_bad_batch_does_not_stop_the_others() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let mut bad = batch(tp(1, 0), 1);
    bad.magic = 0;
    let (key, r) = f.commit(vec![batch(tp(1, 0), 2), bad, batch(tp(1, 0), 2)]);
    assert_eq!(r.iter().map(code).collect::<Vec<_>>(), [ErrorCode::None, ErrorCode::CorruptMessage, ErrorCode::None]);
    assert_eq!(r[2].as_ref().unwrap().assigned_base_offset, 2);
    assert!(f.describe(&key).has_live_batches);
}

#[test]
fn a_file_with_no_accepted_batch_is_marked_for_deletion_at_once() {
    let mut f = Fixture::new();
    f.now = 42;
    let (key, r) = f.commit(vec![batch(tp(9, 0), 1)]);
    assert_eq!(code(&r[0]), ErrorCode::UnknownTopicOrPartition);
    let d = f.describe(&key);
    assert!(d.known && !d.has_live_batches);
    let marked = f.to_delete();
    assert_eq!(marked.len(), 1);
    assert_eq!((marked[0].object_key.as_str(), marked[0].marked_for_deletion_at), (key.as_str(), 42));
    // An empty commit too.
    let (key2, r2) = f.commit(vec![]);
    assert!(r2.is_empty());
    assert!(f.describe(&key2).known && !f.describe(&key2).has_live_batches);
}

#[test]
fn an_object_key_already_known_is_refused_without_touching_the_file() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let (key, _) = f.commit(vec![batch(tp(1, 0), 1)]);
    let r = f.commit_as(&key, vec![batch(tp(1, 0), 5)]);
    assert_eq!(code(&r[0]), ErrorCode::InvalidRequest);
    assert_eq!(f.offsets(tp(1, 0)), (0, 1));
    assert!(f.describe(&key).has_live_batches);
    assert!(f.to_delete().is_empty());
}

#[test]
fn file_level_problems_refuse_every_batch() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let r = f.commit_as("", vec![batch(tp(1, 0), 1), batch(tp(1, 0), 1)]);
    assert!(r.iter().all(|r| code(r) == ErrorCode::InvalidRequest));
    let c = super::command::CommitFile {
        deadline_ms: None,
        object_key: "k".into(),
        object_format: 9,
        file_size: 100,
        uploader_broker_id: 1,
        owner_ids: vec![],
        batches: vec![batch(tp(1, 0), 1)],
    };
    let super::Outcome::CommitFile(r) = f.apply(super::Op::CommitFile(c)) else { panic!() };
    assert_eq!(code(&r[0]), ErrorCode::InvalidRequest);
    assert!(!f.describe("k").known);
    assert_eq!(f.offsets(tp(1, 0)), (0, 0));
}

#[test]
fn a_retried_idempotent_batch_gets_its_original_offset_and_time() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.now = 100;
    let first = f.commit_one(idem(t, 7, 0, 0, 3)).unwrap();
    f.now = 200;
    f.commit_one(idem(t, 7, 0, 3, 2)).unwrap();
    f.now = 300;
    let (key, r) = f.commit(vec![idem(t, 7, 0, 0, 3)]);
    let dup = r[0].clone().unwrap();
    assert!(dup.is_duplicate);
    assert_eq!((dup.assigned_base_offset, dup.log_append_time), (first.assigned_base_offset, 100));
    assert_eq!(f.offsets(t), (0, 5), "nothing appended");
    assert!(!f.describe(&key).has_live_batches, "a file of duplicates only is garbage");
}

#[test]
fn sequence_gaps_old_epochs_and_new_epochs_follow_kafka() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    assert_eq!(code(&f.commit_one(idem(t, 7, 0, 1, 1))), ErrorCode::OutOfOrderSequenceNumber, "new producer not at 0");
    f.commit_one(idem(t, 7, 2, 0, 1)).unwrap();
    assert_eq!(code(&f.commit_one(idem(t, 7, 2, 2, 1))), ErrorCode::OutOfOrderSequenceNumber, "gap");
    assert_eq!(code(&f.commit_one(idem(t, 7, 1, 1, 1))), ErrorCode::InvalidProducerEpoch, "older epoch");
    assert_eq!(code(&f.commit_one(idem(t, 7, 3, 1, 1))), ErrorCode::OutOfOrderSequenceNumber, "new epoch not at 0");
    f.commit_one(idem(t, 7, 3, 0, 1)).unwrap();
    assert_eq!(code(&f.commit_one(idem(t, 7, 2, 1, 1))), ErrorCode::InvalidProducerEpoch, "fenced after the bump");
    assert_eq!(f.offsets(t), (0, 2));
}

#[test]
fn several_batches_of_one_producer_in_one_request_are_checked_in_order() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    let (_, r) = f.commit(vec![idem(t, 7, 0, 0, 2), idem(t, 7, 0, 2, 2), idem(t, 7, 0, 0, 2), idem(t, 7, 0, 9, 1)]);
    assert_eq!(r[0].as_ref().unwrap().assigned_base_offset, 0);
    assert_eq!(r[1].as_ref().unwrap().assigned_base_offset, 2);
    assert!(r[2].as_ref().unwrap().is_duplicate);
    assert_eq!(code(&r[3]), ErrorCode::OutOfOrderSequenceNumber);
}

#[test]
fn sequences_wrap_from_max_to_zero() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.commit_one(idem(t, 7, 0, 0, i32::MAX)).unwrap(); // sequences 0 ..= MAX-1
    f.commit_one(idem(t, 7, 0, i32::MAX, 2)).unwrap(); // MAX, then 0
    assert_eq!(f.commit_one(idem(t, 7, 0, 1, 1)).unwrap().assigned_base_offset, i64::from(i32::MAX) + 2);
}

#[test]
fn producers_are_tracked_per_partition() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    f.commit_one(idem(tp(1, 0), 7, 0, 0, 1)).unwrap();
    assert!(!f.commit_one(idem(tp(1, 1), 7, 0, 0, 1)).unwrap().is_duplicate);
}

#[test]
fn log_append_time_batches_use_the_commit_time() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    f.now = 77_000;
    let mut b = batch(tp(1, 0), 1);
    b.timestamp_type = TIMESTAMP_LOG_APPEND_TIME;
    b.batch_max_timestamp = 5;
    f.commit_one(b).unwrap();
    let found = f.find(tp(1, 0), 0, i32::MAX).batches;
    assert_eq!(found[0].log_append_time, 77_000);
    assert_eq!(f.list_offsets(tp(1, 0), -3).unwrap().timestamp, 77_000);
}

#[test]
fn batch_ids_are_unique_and_carry_the_metadata_partition() {
    let mut f = Fixture::metadata_partition(3, 4);
    f.create(1, 64).unwrap();
    let owned: Vec<_> = (0..64).filter(|&p| f.sm.owns(&tp(1, p))).collect();
    assert!(!owned.is_empty());
    for _ in 0..3 {
        f.commit(owned.iter().map(|&p| batch(tp(1, p), 1)).collect());
    }
    let mut ids: Vec<i64> =
        owned.iter().flat_map(|&p| f.find(tp(1, p), 0, i32::MAX).batches).map(|b| b.batch_id).collect();
    assert!(ids.iter().all(|id| id >> BATCH_ID_COUNTER_BITS == 3));
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n);
}

#[test]
fn a_commit_past_its_deadline_is_refused_whole_and_not_recorded() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    f.now = 5_000;
    let c = super::command::CommitFile {
        deadline_ms: Some(4_999),
        object_key: "late".into(),
        object_format: 1,
        file_size: 100,
        uploader_broker_id: 1,
        owner_ids: vec![0],
        batches: vec![batch(tp(1, 0), 1)],
    };
    let super::Outcome::CommitFile(r) = f.apply(super::Op::CommitFile(c.clone())) else { panic!() };
    assert_eq!(code(&r[0]), ErrorCode::RequestTimedOut);
    assert_eq!(f.offsets(tp(1, 0)), (0, 0));
    assert!(!f.describe("late").known, "not recorded: the orphan reconciler deletes the object");
    // At the deadline itself it still applies.
    let on_time = super::command::CommitFile { deadline_ms: Some(5_000), ..c };
    let super::Outcome::CommitFile(r) = f.apply(super::Op::CommitFile(on_time)) else { panic!() };
    assert_eq!(code(&r[0]), ErrorCode::None);
}

#[test]
fn a_repeated_commit_gets_the_original_answers_and_changes_nothing() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let t = tp(1, 0);
    f.now = 100;
    f.commit_one(idem(t, 7, 0, 0, 2)).unwrap();
    f.now = 200;
    let mut bad = batch(t, 1);
    bad.magic = 0;
    // Appended, a duplicate of the batch committed at 100, refused, appended.
    let batches = vec![batch(t, 3), idem(t, 7, 0, 0, 2), bad, batch(t, 1)];
    let (key, first) = f.commit(batches.clone());
    assert_eq!(
        first.iter().map(code).collect::<Vec<_>>(),
        [ErrorCode::None, ErrorCode::None, ErrorCode::CorruptMessage, ErrorCode::None]
    );
    let state = (f.offsets(t), f.find(t, 0, i32::MAX).batches, f.describe(&key), f.to_delete());
    f.now = 300;
    let again = f.commit_as(&key, batches);
    assert_eq!(again.iter().map(code).collect::<Vec<_>>(), first.iter().map(code).collect::<Vec<_>>());
    for (a, b) in again.iter().zip(&first) {
        if let (Ok(a), Ok(b)) = (a, b) {
            assert_eq!(a, b, "the original offset, append time and duplicate flag");
        }
    }
    assert_eq!(again[0].as_ref().unwrap().log_append_time, 200, "the first commit's time, not now");
    assert_eq!((f.offsets(t), f.find(t, 0, i32::MAX).batches, f.describe(&key), f.to_delete()), state);
}

#[test]
fn a_repeat_reports_the_current_log_start_offset() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    let (key, first) = f.commit(vec![batch(tp(1, 0), 2)]);
    assert_eq!(first[0].as_ref().unwrap().log_start_offset, 0);
    f.delete_records(tp(1, 0), 1, 100).unwrap();
    let again = f.commit_as(&key, vec![batch(tp(1, 0), 2)]);
    let again = again[0].as_ref().unwrap();
    assert_eq!((again.assigned_base_offset, again.log_start_offset), (0, 1));
}

#[test]
fn a_commit_under_a_known_key_with_other_content_is_still_refused() {
    let mut f = Fixture::new();
    f.create(1, 2).unwrap();
    let (key, _) = f.commit(vec![batch(tp(1, 0), 1)]);
    for other in [vec![batch(tp(1, 1), 1)], vec![batch(tp(1, 0), 1), batch(tp(1, 0), 1)], vec![]] {
        let r = f.commit_as(&key, other);
        assert!(r.iter().all(|r| code(r) == ErrorCode::InvalidRequest), "{r:?}");
    }
    assert_eq!(f.offsets(tp(1, 0)), (0, 1));
    assert_eq!(f.offsets(tp(1, 1)), (0, 0));
}

#[test]
fn a_commit_under_a_known_key_differing_in_any_one_field_is_refused_but_a_new_deadline_is_a_repeat() {
    // Two metadata partitions, so that the owner list can change and stay valid.
    let mut f = Fixture::metadata_partition(0, 2);
    f.create(1, 16).unwrap();
    let mine: Vec<i32> = (0..16).filter(|&p| f.sm.owns(&tp(1, p))).collect();
    let (p, q) = (tp(1, mine[0]), tp(1, mine[1]));
    let first = file_for("wal/x", vec![0], vec![idem(p, 7, 0, 0, 2), batch(q, 1)]);
    let Outcome::CommitFile(r) = f.apply(Op::CommitFile(first.clone())) else { panic!() };
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let state = (f.offsets(p), f.offsets(q), f.find(p, 0, i32::MAX).batches);
    type Change = fn(&mut super::command::CommitFile);
    let changes: [(&str, Change); 16] = [
        ("file size", |c| c.file_size += 1),
        ("uploader", |c| c.uploader_broker_id = 2),
        ("owners", |c| c.owner_ids = vec![0, 1]),
        ("magic", |c| c.batches[1].magic = 1),
        ("request id", |c| c.batches[1].request_id = 5),
        ("topic", |c| c.batches[1].tp.topic_id = topic_id(2)),
        ("partition", |c| c.batches[1].tp.partition += 16),
        ("byte offset", |c| c.batches[1].byte_offset -= 1),
        ("size", |c| c.batches[1].size -= 1),
        ("base offset", |c| c.batches[1].base_offset = 1 << 40),
        ("last offset", |c| c.batches[1].last_offset += 1 << 33),
        ("max timestamp", |c| c.batches[1].batch_max_timestamp = -(1 << 50)),
        ("timestamp type", |c| c.batches[1].timestamp_type = 1),
        ("producer", |c| c.batches[0].producer_id = 8),
        ("epoch", |c| c.batches[0].producer_epoch = 1),
        ("sequences", |c| {
            c.batches[0].base_sequence += 1;
            c.batches[0].last_sequence += 1
        }),
    ];
    for (what, change) in changes {
        let mut other = first.clone();
        change(&mut other);
        let Outcome::CommitFile(r) = f.apply(Op::CommitFile(other)) else { panic!() };
        assert!(r.iter().all(|r| code(r) == ErrorCode::InvalidRequest), "{what}: {r:?}");
    }
    let mut repeat = first.clone();
    repeat.deadline_ms = Some(f.now + 1);
    let Outcome::CommitFile(again) = f.apply(Op::CommitFile(repeat)) else { panic!() };
    assert_eq!(again, r);
    assert_eq!((f.offsets(p), f.offsets(q), f.find(p, 0, i32::MAX).batches), state);
}

fn file_for(key: &str, owner_ids: Vec<i32>, batches: Vec<CommitBatch>) -> super::command::CommitFile {
    super::command::CommitFile {
        deadline_ms: None,
        object_key: key.into(),
        object_format: 1,
        file_size: 100 * batches.len() as i64,
        uploader_broker_id: 1,
        owner_ids,
        batches: batches
            .into_iter()
            .enumerate()
            .map(|(i, b)| CommitBatch { byte_offset: i as i32 * 100, ..b })
            .collect(),
    }
}

#[test]
fn a_commit_part_sent_to_a_metadata_partition_its_owners_do_not_name_is_refused_whole() {
    let mut f = Fixture::metadata_partition(1, 4);
    f.create(1, 64).unwrap();
    let mine = (0..64).find(|&p| f.sm.owns(&tp(1, p))).unwrap();
    for (owners, want) in [
        (vec![0, 2], ErrorCode::InvalidRequest), // not this metadata partition
        (vec![], ErrorCode::InvalidRequest),
        (vec![1, 4], ErrorCode::InvalidRequest), // no metadata partition 4
        (vec![1, -1], ErrorCode::InvalidRequest),
        (vec![1, 1], ErrorCode::InvalidRequest),
        (vec![3, 1], ErrorCode::None),
    ] {
        let key = f.fresh_key();
        let super::Outcome::CommitFile(r) =
            f.apply(super::Op::CommitFile(file_for(&key, owners.clone(), vec![batch(tp(1, mine), 1)])))
        else {
            panic!()
        };
        assert_eq!(code(&r[0]), want, "owners {owners:?}");
        assert_eq!(f.describe(&key).known, want == ErrorCode::None, "owners {owners:?}: recorded only when accepted");
    }
    assert_eq!(f.offsets(tp(1, mine)), (0, 1));
}
