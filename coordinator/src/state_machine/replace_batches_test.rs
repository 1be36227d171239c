use super::command::{ErrorCode, Op, Outcome, OBJECT_FORMAT_WAL_MULTI_SEGMENT};
use super::fixture::*;
use super::keys::TopicPartition;
use super::records::BatchRecord;
use super::replace_batches::{ReplaceBatches, Replaced, ReplacedBatch};

/// A replace of `batches` (as found) into `key`, laid out back to back.
fn replace_of(key: &str, tp: TopicPartition, batches: &[BatchRecord]) -> ReplaceBatches {
    let mut at = 0;
    let mut sources: Vec<String> = vec![];
    let batches: Vec<ReplacedBatch> = batches
        .iter()
        .map(|b| {
            let source = match sources.iter().position(|s| *s == b.object_key) {
                Some(i) => i,
                None => {
                    sources.push(b.object_key.clone());
                    sources.len() - 1
                }
            } as u32;
            let r = ReplacedBatch {
                last_offset: b.last_offset,
                batch_id: b.batch_id,
                source,
                byte_offset: at,
                byte_size: b.byte_size,
            };
            at += b.byte_size;
            r
        })
        .collect();
    ReplaceBatches {
        object_key: key.to_string(),
        object_format: OBJECT_FORMAT_WAL_MULTI_SEGMENT,
        file_size: i64::from(at),
        uploader_broker_id: 7,
        tp,
        sources,
        batches,
    }
}

fn replace(f: &mut Fixture, r: ReplaceBatches) -> Result<Vec<Replaced>, ErrorCode> {
    let Outcome::ReplaceBatches(out) = f.apply(Op::ReplaceBatches(r)) else { panic!("wrong outcome") };
    out.map_err(|e| e.code)
}

/// Three objects, each with a batch of partition 0 and one of partition 1.
fn three_mixed_objects(f: &mut Fixture) -> Vec<String> {
    f.create(1, 2).unwrap();
    (0..3).map(|_| f.commit(vec![batch(tp(1, 0), 2), batch(tp(1, 1), 3)]).0).collect()
}

#[test]
fn a_replace_moves_the_coordinates_and_keeps_offsets_timestamps_and_ids() {
    let mut f = Fixture::new();
    let wal = three_mixed_objects(&mut f);
    let before = f.find(tp(1, 0), 0, i32::MAX);
    assert_eq!(before.batches.len(), 3);
    let r = replace_of("merged/1", tp(1, 0), &before.batches);
    assert_eq!(replace(&mut f, r), Ok(vec![Replaced::Replaced; 3]));
    let after = f.find(tp(1, 0), 0, i32::MAX);
    assert_eq!((after.log_start_offset, after.high_watermark), (before.log_start_offset, before.high_watermark));
    for (i, (a, b)) in after.batches.iter().zip(&before.batches).enumerate() {
        assert_eq!(a.object_key, "merged/1");
        assert_eq!(a.byte_offset, 100 * i as i32);
        let moved = BatchRecord { object_key: b.object_key.clone(), byte_offset: b.byte_offset, ..a.clone() };
        assert_eq!(&moved, b, "only the coordinates changed");
    }
    // The WAL objects keep partition 1's batches; the new object holds partition 0's bytes.
    for key in &wal {
        assert!(f.describe(key).has_live_batches);
    }
    assert!(f.describe("merged/1").has_live_batches);
    assert!(f.to_delete().is_empty());
}

#[test]
fn an_object_whose_last_batches_moved_is_released_for_deletion() {
    let mut f = Fixture::new();
    let wal = three_mixed_objects(&mut f);
    for p in 0..2 {
        let found = f.find(tp(1, p), 0, i32::MAX);
        let key = format!("merged/p{p}");
        assert_eq!(replace(&mut f, replace_of(&key, tp(1, p), &found.batches)), Ok(vec![Replaced::Replaced; 3]));
    }
    let released: Vec<String> = f.to_delete().into_iter().map(|d| d.object_key).collect();
    assert_eq!(released, wal, "every WAL object lost its last live batch");
    assert!(!f.describe(&wal[0]).has_live_batches);
    // Fencing it now finds it released, so the cleaner deletes it after the grace.
    assert!(matches!(f.fence(&[&wal[0]])[0], Ok(super::command::FenceAnswer::Released { .. })));
}

#[test]
fn batches_that_changed_meanwhile_keep_their_coordinates() {
    let mut f = Fixture::new();
    three_mixed_objects(&mut f);
    let read = f.find(tp(1, 0), 0, i32::MAX).batches;
    // DeleteRecords past the first batch (offsets 0..=1) before the replace applies.
    f.delete_records(tp(1, 0), 2, 0).unwrap();
    let mut r = replace_of("merged/2", tp(1, 0), &read);
    // The third was read with another id (another replace moved something, say).
    r.batches[2].batch_id += 1_000;
    assert_eq!(replace(&mut f, r), Ok(vec![Replaced::Changed, Replaced::Replaced, Replaced::Changed]));
    let now = f.find(tp(1, 0), 2, i32::MAX).batches;
    assert_eq!(now[0].object_key, "merged/2");
    assert_eq!(now[1].object_key, read[2].object_key);
}

#[test]
fn a_replace_of_nothing_left_records_its_object_for_deletion() {
    let mut f = Fixture::new();
    three_mixed_objects(&mut f);
    let read = f.find(tp(1, 0), 0, i32::MAX).batches;
    f.delete_topic(1, 1000).unwrap();
    assert_eq!(replace(&mut f, replace_of("merged/3", tp(1, 0), &read)), Ok(vec![Replaced::Changed; 3]));
    assert!(f.to_delete().iter().any(|d| d.object_key == "merged/3"), "no orphan object");
}

#[test]
fn a_repeat_is_answered_again_and_a_second_replace_moves_the_batches_on() {
    let mut f = Fixture::new();
    three_mixed_objects(&mut f);
    let read = f.find(tp(1, 0), 0, i32::MAX).batches;
    let r = replace_of("merged/4", tp(1, 0), &read);
    assert_eq!(replace(&mut f, r.clone()), Ok(vec![Replaced::Replaced; 3]));
    assert_eq!(replace(&mut f, r), Ok(vec![Replaced::Replaced; 3]), "a resend is answered the same");
    // A later consolidation moves them again: the first merged object is released.
    let read = f.find(tp(1, 0), 0, i32::MAX).batches;
    assert_eq!(replace(&mut f, replace_of("merged/5", tp(1, 0), &read)), Ok(vec![Replaced::Replaced; 3]));
    assert!(f.to_delete().iter().any(|d| d.object_key == "merged/4"));
    assert!(f.describe("merged/5").has_live_batches);
}

#[test]
fn markers_are_never_replaced_and_a_fenced_or_malformed_request_changes_nothing() {
    let mut f = Fixture::new();
    f.create(1, 1).unwrap();
    f.commit_in_txn(idem(tp(1, 0), 5, 0, 0, 2)).unwrap();
    f.end_txn(tp(1, 0), 5, 1, true).unwrap();
    let read = f.find(tp(1, 0), 0, i32::MAX).batches;
    assert_eq!(read.len(), 2);
    assert!(read[1].is_marker());
    let mut r = replace_of("merged/6", tp(1, 0), &read);
    // The marker (no object) named as if copied from the batch's object.
    r.sources.retain(|s| !s.is_empty());
    r.batches[1].source = 0;
    r.batches[1].byte_size = 100;
    r.file_size = 200;
    assert_eq!(replace(&mut f, r), Ok(vec![Replaced::Replaced, Replaced::Changed]));
    // A fenced key: refused whole.
    f.fence(&["gone"]);
    let read = f.find(tp(1, 0), 0, i32::MAX).batches;
    assert_eq!(replace(&mut f, replace_of("gone", tp(1, 0), &read[..1])), Err(ErrorCode::KafkaStorageError));
    // Offsets out of order, a range past the object: INVALID_REQUEST, nothing recorded.
    let mut bad = replace_of("merged/7", tp(1, 0), &read[..1]);
    bad.file_size = 10;
    assert_eq!(replace(&mut f, bad), Err(ErrorCode::InvalidRequest));
    assert!(!f.describe("merged/7").known);
}

#[test]
fn a_batch_another_replace_moved_first_is_not_moved_again() {
    let mut f = Fixture::new();
    three_mixed_objects(&mut f);
    let read = f.find(tp(1, 0), 0, i32::MAX).batches;
    // Two consolidators copied the same batches; the first replace wins.
    assert_eq!(replace(&mut f, replace_of("merged/a", tp(1, 0), &read)), Ok(vec![Replaced::Replaced; 3]));
    assert_eq!(replace(&mut f, replace_of("merged/b", tp(1, 0), &read)), Ok(vec![Replaced::Changed; 3]));
    assert!(f.find(tp(1, 0), 0, i32::MAX).batches.iter().all(|b| b.object_key == "merged/a"));
    assert!(f.to_delete().iter().any(|d| d.object_key == "merged/b"), "the loser's object goes");
}
