//! The fetch path's tests: coordinates of any value, damaged objects, cache evictions, markers.

use super::*;
use crate::storage::StorageConfig;
use crate::wal::record_batch::tests::fake_batch;

#[tokio::test]
async fn a_batch_evicted_from_the_cache_between_planning_and_assembly_is_still_served() {
    let storage = Storage::new(&StorageConfig::Memory).unwrap();
    let batch = fake_batch(3, -1, -1);
    let mut object = vec![0u8];
    object.extend_from_slice(&batch);
    storage.put_new("wal/a", Bytes::from(object)).await.unwrap();
    let reader = Reader::for_tests(storage, 0);
    reader.cache.put("wal/a", 1, Bytes::from(batch.clone()));
    let info = BatchInfo {
        batch_id: 1,
        object_key: "wal/a".into(),
        magic: 2,
        byte_offset: 1,
        byte_size: batch.len() as i64,
        base_offset: 10,
        last_offset: 12,
        log_append_timestamp: 5,
        batch_max_timestamp: 2_000,
        timestamp_type: 0,
        marker: None,
    };
    let gathered = reader.gather([&info].into_iter()).await;
    // A concurrent fetch evicts the range before this one assembles its answer.
    reader.cache.forget_object("wal/a");
    let out = reader.assemble(&[info], &gathered).expect("served from what was gathered");
    let h = record_batch::validate(&out).unwrap();
    assert_eq!(h.record_count, 3);
    assert_eq!(i64::from_be_bytes(out[..8].try_into().unwrap()), 10, "base offset injected");
}

fn info(byte_offset: i64, byte_size: i64, base_offset: i64, last_offset: i64) -> BatchInfo {
    BatchInfo {
        batch_id: 1,
        object_key: "wal/a".into(),
        magic: 2,
        byte_offset,
        byte_size,
        base_offset,
        last_offset,
        log_append_timestamp: 5,
        batch_max_timestamp: 2_000,
        timestamp_type: 0,
        marker: None,
    }
}

/// `object` stored as `wal/a`, and the batches FindBatches named read from it by a fresh reader
/// (empty cache), checked and injected.
async fn serve(object: &[u8], batches: &[BatchInfo]) -> Result<Bytes, KafkaError> {
    let storage = Storage::new(&StorageConfig::Memory).unwrap();
    storage.put_new("wal/a", Bytes::copy_from_slice(object)).await.unwrap();
    let reader = Reader::for_tests(storage, u64::MAX);
    let gathered = reader.gather(batches.iter()).await;
    reader.assemble(batches, &gathered)
}

/// The error names the object and the byte of the batch.
fn names_object_and_byte(r: Result<Bytes, KafkaError>, what: &str) -> KafkaError {
    let e = r.err().unwrap_or_else(|| panic!("{what}: served"));
    assert!(e.message.contains("wal/a") && e.message.contains("byte"), "{what}: {e}");
    e
}

/// One segment: the version byte, then a batch of 3 records (offsets 10 to 12).
fn segment() -> (Vec<u8>, usize) {
    let batch = fake_batch(3, -1, -1);
    let mut object = vec![0u8];
    object.extend_from_slice(&batch);
    (object, batch.len())
}

/// A transaction marker as FindBatches describes it: no object bytes.
fn marker_info(offset: i64, producer_epoch: i32) -> BatchInfo {
    BatchInfo {
        object_key: String::new(),
        byte_offset: 0,
        byte_size: 0,
        base_offset: offset,
        last_offset: offset,
        batch_max_timestamp: 9_000,
        marker: Some(diskless_proto::v1::TxnMarker {
            producer_id: 5,
            producer_epoch,
            commit: false,
            coordinator_epoch: 2,
        }),
        ..info(0, 0, offset, offset)
    }
}

#[tokio::test]
async fn a_transaction_marker_is_served_as_its_control_batch_without_reading_an_object() {
    let (object, len) = segment();
    let out = serve(&object, &[info(1, len as i64, 10, 12), marker_info(13, 1)]).await.expect("served");
    let data = record_batch::framed_len(&out).unwrap();
    let control = record_batch::parse(&out[data..]).expect("a whole control batch after the data");
    assert!(control.is_control() && control.is_transactional());
    assert_eq!((control.base_offset, control.producer_id, control.producer_epoch), (13, 5, 1));
    assert_eq!(control.max_timestamp, 9_000);
    // A marker no partition can hold fails its partition, never the connection.
    for bad in [marker_info(13, 1 << 20), BatchInfo { last_offset: 14, ..marker_info(13, 1) }, marker_info(-1, 1)] {
        let e = serve(&object, &[bad]).await.expect_err("refused");
        assert_eq!(e.code, ErrorCode::CorruptMessage);
    }
    // An empty object key without a marker is not read from anywhere either.
    assert!(serve(&object, &[BatchInfo { marker: None, ..marker_info(13, 1) }]).await.is_err());
}

#[tokio::test]
async fn coordinates_of_any_value_fail_their_partition_naming_the_object_and_byte_never_panicking() {
    let (object, len) = segment();
    let len = len as i64;
    assert!(serve(&object, &[info(1, len, 10, 12)]).await.is_ok());
    let huge = [i64::MIN, -1, 0x7fff_ffff, 0xffff_ffff, 1 << 40, i64::MAX];
    let mut cases = vec![];
    for v in huge {
        cases.push(info(v, len, 10, 12));
        cases.push(info(1, v, 10, 12));
        cases.push(info(v, v, 10, 12));
        cases.push(info(1, len, v, 12));
        cases.push(info(1, len, 10, v));
        if v < 0 || v.checked_add(2).is_none() {
            cases.push(info(1, len, v, v.wrapping_add(2)));
        }
    }
    for size in [0, 1, 60] {
        cases.push(info(1, size, 10, 12));
    }
    cases.push(info(1, len, 12, 10));
    cases.push(info(1, len, -5, i64::MAX));
    cases.push(info(1, len, i64::MIN, i64::MAX));
    // Within a segment's bounds, but past this object's end.
    cases.push(info(1 << 29, len, 10, 12));
    cases.push(info(2, len, 10, 12));
    for b in cases {
        let what = format!("{b:?}");
        let e = names_object_and_byte(serve(&object, &[info(1, len, 10, 12), b]).await, &what);
        assert!(matches!(e.code, ErrorCode::CorruptMessage | ErrorCode::KafkaStorageError), "{what}: {e}");
    }
}

#[tokio::test]
async fn an_object_cut_anywhere_or_damaged_anywhere_fails_its_batch_naming_the_object_and_byte() {
    let (object, len) = segment();
    let b = info(1, len as i64, 10, 12);
    let good = serve(&object, std::slice::from_ref(&b)).await.unwrap();
    for cut in 0..object.len() {
        names_object_and_byte(serve(&object[..cut], std::slice::from_ref(&b)).await, &format!("cut at {cut}"));
    }
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15); // random, the same every run
    for _ in 0..300 {
        let at = 1 + rng.usize(..len);
        let mask = rng.u8(1..);
        let mut bad = object.clone();
        bad[at] ^= mask;
        let what = format!("byte {at} ^ {mask:#04x}");
        let r = serve(&bad, std::slice::from_ref(&b)).await;
        // Kafka's CRC leaves out the base offset (replaced by injection) and the partition
        // leader epoch (passed on as it is).
        match at - 1 {
            0..8 => assert_eq!(r.unwrap(), good, "{what}"),
            12..16 => {
                let out = r.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!((&out[..12], &out[16..]), (&good[..12], &good[16..]), "{what}");
            }
            _ => {
                let e = names_object_and_byte(r, &what);
                assert_eq!(e.code, ErrorCode::CorruptMessage, "{what}: {e}");
            }
        }
    }
    // The batch length field, set to any size.
    for v in [0u32, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff] {
        let mut bad = object.clone();
        bad[9..13].copy_from_slice(&v.to_be_bytes());
        names_object_and_byte(serve(&bad, std::slice::from_ref(&b)).await, &format!("length {v:#x}"));
    }
}

#[tokio::test]
async fn a_cached_range_of_another_size_is_not_served_for_a_batch() {
    let (object, len) = segment();
    let storage = Storage::new(&StorageConfig::Memory).unwrap();
    storage.put_new("wal/a", Bytes::from(object)).await.unwrap();
    let reader = Reader::for_tests(storage, 0);
    reader.cache.put("wal/a", 1, Bytes::from_static(b"short"));
    let b = info(1, len as i64, 10, 12);
    let gathered = reader.gather([&b].into_iter()).await;
    let out = reader.assemble(&[b], &gathered).expect("read from the object");
    assert_eq!(record_batch::validate(&out).unwrap().record_count, 3);
}

#[test]
fn each_partition_asked_for_gets_exactly_one_answer_whatever_the_coordinator_sends() {
    let part = |n| FetchPartition { topic_id: [1; 16], partition: n, offset: 0, max_bytes: 1, read_committed: false };
    let answer = |topic: [u8; 16], n| FindBatchesTopicResponse {
        topic_id: topic.to_vec(),
        partitions: vec![FindBatchesPartitionResponse { partition_index: n, ..Default::default() }],
    };
    let parts = [part(0), part(1), part(2)];
    let got =
        |topics| answers_for(&parts, topics).iter().map(|a| a.as_ref().map(|a| a.partition_index)).collect::<Vec<_>>();
    assert_eq!(got(vec![]), [None, None, None]);
    assert_eq!(got(vec![answer([1; 16], 0)]), [Some(0), None, None]);
    let many = (0..10).map(|n| answer([1; 16], n)).collect();
    assert_eq!(got(many), [Some(0), Some(1), Some(2)]);
    let wrong = vec![answer([1; 16], 1), answer([2; 16], 1), FindBatchesTopicResponse::default()];
    assert_eq!(got(wrong), [None, None, None]);
}
