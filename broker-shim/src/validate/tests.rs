use bytes::Bytes;
use diskless_proto::ErrorCode;

use super::build::{batch, records, seal, Spec};
use super::decompress::Codec;
use super::records::{encode_record, put_varint};
use super::*;

const CODECS: [Codec; 5] = [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];
const NOW: i64 = 1_700_000_000_000;

fn check(b: Vec<u8>) -> Result<Validated, KafkaError> {
    check_with(b, &Limits::default())
}

fn check_with(b: Vec<u8>, limits: &Limits) -> Result<Validated, KafkaError> {
    validate(Bytes::from(b), limits, NOW, "t-0")
}

fn code(r: Result<Validated, KafkaError>) -> ErrorCode {
    match r {
        Ok(_) => ErrorCode::None,
        Err(e) => e.code,
    }
}

#[test]
fn well_formed_batches_of_every_codec_pass_unchanged() {
    for codec in CODECS {
        for n in [1, 2, 300] {
            let b = batch(&Spec::new(codec, n, NOW), &records(n, 20));
            let v = check(b.clone()).unwrap_or_else(|e| panic!("{codec:?} {n}: {e}"));
            assert_eq!(&v.bytes[..], &b[..], "{codec:?}: stored as sent");
            assert_eq!(v.header.record_count, n);
            assert_eq!(v.header.compression, codec as u8);
        }
    }
    // An idempotent batch.
    let mut s = Spec::new(Codec::None, 3, NOW);
    (s.producer_id, s.producer_epoch, s.base_sequence) = (7, 0, 10);
    assert_eq!(check(batch(&s, &records(3, 1))).unwrap().header.last_sequence(), 12);
}

#[test]
fn batches_from_kafka_protocols_encoder_pass() {
    use kafka_protocol::records::Compression;
    let recs: Vec<_> =
        (0..50).map(|i| (Some(Bytes::from(format!("k{i}"))), Some(Bytes::from(vec![b'x'; i])))).collect();
    for c in [Compression::None, Compression::Gzip, Compression::Snappy] {
        let b = crate::records::encode(&recs, NOW, c, crate::records::NOT_IDEMPOTENT).unwrap();
        check(b.to_vec()).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    }
}

#[test]
fn a_batch_that_lies_about_its_record_count_is_refused() {
    // The reported attack: 2^31 - 1 records claimed, one present.
    let mut s = Spec::new(Codec::None, 1, NOW);
    (s.record_count, s.last_offset_delta) = (i32::MAX, i32::MAX - 1);
    for codec in CODECS {
        s.codec = codec;
        let r = check(batch(&s, &records(1, 5)));
        assert_eq!(code(r), ErrorCode::InvalidRecord, "{codec:?}");
    }
    // More records than claimed; a count that disagrees with the offset span; none at all.
    let s = Spec::new(Codec::Gzip, 2, NOW);
    assert_eq!(code(check(batch(&s, &records(3, 5)))), ErrorCode::InvalidRecord);
    let mut s = Spec::new(Codec::None, 3, NOW);
    s.last_offset_delta = 5;
    assert_eq!(code(check(batch(&s, &records(3, 5)))), ErrorCode::InvalidRecord);
    let s = Spec::new(Codec::None, 0, NOW);
    assert_eq!(code(check(batch(&s, &[]))), ErrorCode::InvalidRecord);
    let mut s = Spec::new(Codec::None, 1, NOW);
    s.record_count = -1;
    assert_eq!(code(check(batch(&s, &records(1, 5)))), ErrorCode::InvalidRecord);
}

#[test]
fn garbage_compressed_or_not_is_refused_and_never_stored() {
    let garbage: Vec<u8> = (0..4000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    for codec in CODECS {
        let mut s = Spec::new(codec, 10, NOW);
        s.codec = Codec::None; // the garbage goes in as the codec's "compressed" bytes
        let mut b = batch(&s, &garbage);
        let attributes = codec as i16;
        b[21..23].copy_from_slice(&attributes.to_be_bytes());
        seal(&mut b);
        let c = code(check(b));
        let want = if codec == Codec::None { ErrorCode::InvalidRecord } else { ErrorCode::CorruptMessage };
        assert_eq!(c, want, "{codec:?}");
    }
    // Valid compression of garbage records.
    for codec in CODECS {
        let r = check(batch(&Spec::new(codec, 10, NOW), &garbage));
        assert_eq!(code(r), ErrorCode::InvalidRecord, "{codec:?}");
    }
}

#[test]
fn size_limits_are_kafkas() {
    let big = batch(&Spec::new(Codec::None, 1, NOW), &records(1, 2 << 20));
    let e = check(big.clone()).unwrap_err();
    assert_eq!(e.code, ErrorCode::MessageTooLarge);
    assert!(e.message.contains("exceeds the maximum configured value of 1048588"), "{e}");
    let roomy = Limits { max_message_bytes: 4 << 20, max_uncompressed_bytes: 4 << 20, ..Limits::default() };
    check_with(big, &roomy).unwrap();
    // A zip bomb: 64 MiB of zeros in a few KiB, over the decompressed bound.
    let zeros = records(1, 64 << 20);
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let bomb = batch(&Spec::new(codec, 1, NOW), &zeros);
        assert!(bomb.len() < 4 << 20, "{codec:?}");
        let limits = Limits { max_message_bytes: 4 << 20, ..Limits::default() };
        let e = check_with(bomb, &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::MessageTooLarge, "{codec:?}: {e}");
        assert!(e.message.contains("decompresses to more than"), "{e}");
    }
}

#[test]
fn header_faults_get_kafkas_codes() {
    let good = batch(&Spec::new(Codec::None, 2, NOW), &records(2, 3));
    type Damage = fn(&mut Vec<u8>);
    let cases: [(&str, Damage, ErrorCode); 4] = [
        ("crc", |b| b[30] ^= 1, ErrorCode::CorruptMessage),
        ("magic", |b| b[16] = 1, ErrorCode::InvalidRecord),
        ("length", |b| b[11] ^= 1, ErrorCode::CorruptMessage),
        ("short", |b| b.truncate(40), ErrorCode::CorruptMessage),
    ];
    for (what, damage, want) in cases {
        let mut b = good.clone();
        damage(&mut b);
        assert_eq!(code(check(b)), want, "{what}");
    }
    let refuse = |edit: &dyn Fn(&mut Spec), want: ErrorCode, what: &str| {
        let mut s = Spec::new(Codec::None, 2, NOW);
        edit(&mut s);
        assert_eq!(code(check(batch(&s, &records(2, 3)))), want, "{what}");
    };
    refuse(&|s| s.base_offset = 5, ErrorCode::InvalidRecord, "base offset");
    refuse(&|s| s.flags = 1 << 5, ErrorCode::InvalidRecord, "control batch");
    refuse(&|s| s.flags = 1 << 4, ErrorCode::InvalidRecord, "transactional without a producer");
    let mut s = Spec::new(Codec::None, 2, NOW);
    (s.flags, s.producer_id, s.producer_epoch, s.base_sequence) = (1 << 4, 3, 0, 0);
    // Valid here; the producer refuses it unless the Kafka listener verified its transaction.
    assert!(check(batch(&s, &records(2, 3))).is_ok(), "transactional");
    refuse(
        &|s| (s.producer_id, s.producer_epoch, s.base_sequence) = (3, 0, -1),
        ErrorCode::InvalidRecord,
        "no sequence",
    );
    refuse(&|s| (s.producer_id, s.producer_epoch, s.base_sequence) = (3, -1, 0), ErrorCode::InvalidRecord, "no epoch");
    refuse(&|s| s.producer_id = -7, ErrorCode::InvalidRecord, "producer id");
    let mut b = good.clone();
    b[22] |= 5;
    seal(&mut b);
    assert_eq!(code(check(b)), ErrorCode::UnsupportedCompressionType);
}

#[test]
fn records_with_wrong_offsets_or_a_lying_length_are_invalid() {
    let mut r = encode_record(0, 0, None, Some(b"a"), &[]);
    r.extend(encode_record(1, 5, None, Some(b"b"), &[]));
    assert_eq!(code(check(batch(&Spec::new(Codec::Gzip, 2, NOW), &r))), ErrorCode::InvalidRecord);
    // A record whose length covers one byte more than its fields.
    let mut body = vec![0u8];
    put_varint(&mut body, 0);
    put_varint(&mut body, 0);
    put_varint(&mut body, -1);
    put_varint(&mut body, -1);
    put_varint(&mut body, 0);
    body.push(0);
    let mut r = vec![];
    put_varint(&mut r, body.len() as i64);
    r.extend(body);
    assert_eq!(code(check(batch(&Spec::new(Codec::None, 1, NOW), &r))), ErrorCode::InvalidRecord);
}

#[test]
fn timestamps_are_checked_as_kafka_checks_them_and_the_max_is_set_right() {
    let limits = Limits { timestamp_before_max_ms: Some(1000), timestamp_after_max_ms: Some(500), ..Limits::default() };
    check_with(batch(&Spec::new(Codec::None, 3, NOW - 1000), &records(3, 1)), &limits).unwrap();
    let e = check_with(batch(&Spec::new(Codec::Zstd, 3, NOW - 1001), &records(3, 1)), &limits).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidTimestamp);
    assert_eq!(e.record_errors.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0], "only the first is too early");
    assert!(e.record_errors[0].1.contains("out of range"), "{e:?}");
    let e = check_with(batch(&Spec::new(Codec::None, 3, NOW + 500), &records(3, 1)), &limits).unwrap_err();
    assert_eq!(e.record_errors.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1, 2]);
    // No limits: anything goes; -1 ("no timestamp") is never checked.
    check(batch(&Spec::new(Codec::None, 3, 0), &records(3, 1))).unwrap();
    // The producer may not pick LogAppendTime.
    let mut s = Spec::new(Codec::None, 2, NOW);
    s.flags = 1 << 3;
    assert_eq!(code(check(batch(&s, &records(2, 1)))), ErrorCode::InvalidTimestamp);
    // A LogAppendTime topic sets the bit itself; the time comes at commit.
    let lat = Limits { log_append_time: true, ..Limits::default() };
    let v = check_with(batch(&Spec::new(Codec::None, 2, NOW), &records(2, 1)), &lat).unwrap();
    assert_eq!(v.header.timestamp_type, 1);
    record_batch::validate(&v.bytes).unwrap();
    // A max timestamp that is not the records' largest is set right, CRC and all.
    let mut s = Spec::new(Codec::Lz4, 4, NOW);
    s.max_timestamp = 5;
    let v = check(batch(&s, &records(4, 1))).unwrap();
    assert_eq!(v.header.max_timestamp, NOW + 3);
    assert_eq!(record_batch::validate(&v.bytes).unwrap().max_timestamp, NOW + 3);
}

#[test]
fn no_byte_string_panics_the_validator() {
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d); // random, the same every run
    let mut next = move || rng.u64(..);
    for codec in CODECS {
        let good = batch(&Spec::new(codec, 20, NOW), &records(20, 30));
        for _ in 0..300 {
            let mut b = good.clone();
            for _ in 0..1 + next() % 4 {
                let i = HEADER_LEN + next() as usize % (b.len() - HEADER_LEN);
                b[i] = next() as u8;
            }
            seal(&mut b); // past the CRC, into the records
            let _ = check(b);
        }
        for cut in 0..good.len() {
            let _ = check(good[..cut].to_vec());
        }
    }
}

#[tokio::test]
async fn the_validator_runs_compressed_batches_off_the_async_threads_in_order() {
    let v = Validator::new(1);
    let batches: Vec<Bytes> =
        CODECS.iter().map(|c| Bytes::from(batch(&Spec::new(*c, 5, NOW), &records(5, 9)))).collect();
    let out = v.validate_all(batches.clone(), Limits::default(), "t-0".into()).await.unwrap();
    assert_eq!(out.iter().map(|b| b.bytes.clone()).collect::<Vec<_>>(), batches);
    let mut bad = batches.clone();
    bad.push(Bytes::from_static(b"nonsense"));
    assert!(v.validate_all(bad, Limits::default(), "t-0".into()).await.is_err());
}

#[test]
fn a_topics_settings_override_the_brokers_and_a_batch_size_is_held_to_one_segment() {
    let broker = Limits::default();
    assert_eq!(broker.with_overrides(&Overrides::default(), 8 << 20), broker);
    let o = Overrides {
        max_message_bytes: Some(2000),
        log_append_time: Some(true),
        timestamp_before_max_ms: Some(10),
        timestamp_after_max_ms: None,
    };
    let l = broker.with_overrides(&o, 8 << 20);
    assert_eq!(l.max_message_bytes, 2000);
    assert!(l.log_append_time);
    assert_eq!((l.timestamp_before_max_ms, l.timestamp_after_max_ms), (Some(10), None));
    // Larger than this broker's segment: held to it; the decompression bound never below it.
    let big = Overrides { max_message_bytes: Some(i32::MAX), ..Overrides::default() };
    let l = broker.with_overrides(&big, 64 << 20);
    assert_eq!(l.max_message_bytes, 64 << 20);
    assert_eq!(l.max_uncompressed_bytes, 64 << 20);
    // A 2000-byte limit refuses a larger batch with MESSAGE_TOO_LARGE.
    let b = Bytes::from(batch(&Spec::new(Codec::None, 3, NOW), &records(3, 900)));
    assert!(b.len() > 2000);
    let err = validate(b, &broker.with_overrides(&o, 8 << 20), NOW, "t-0").unwrap_err();
    assert_eq!(err.code, ErrorCode::MessageTooLarge);
}
