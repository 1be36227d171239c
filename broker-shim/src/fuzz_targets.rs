//! Entry points of the coverage-guided fuzz targets (`fuzz/`): each hands arbitrary bytes to one
//! parser of the broker's hostile input, as the broker runs it, and checks what that parser
//! promises besides not panicking. The broker never calls these.

use bytes::Bytes;
use kafka_protocol::messages::RequestKind;

use crate::validate::build::{self, Spec};
use crate::validate::decompress::Codec;
use crate::validate::{self, Limits};
use crate::wal::{record_batch, segment};

/// A time well inside what fuzzed timestamps reach.
const NOW_MS: i64 = 1_700_000_000_000;

fn limits() -> Limits {
    Limits { max_message_bytes: 1 << 20, max_uncompressed_bytes: 4 << 20, ..Limits::default() }
}

/// A batch that passed validation is stored as it is: it must read back as a valid stored batch
/// with the same header, validate again unchanged, and take offset injection.
fn check_accepted(v: &validate::Validated, limits: &Limits) {
    let stored = record_batch::validate(&v.bytes).expect("an accepted batch is a valid stored batch");
    assert_eq!(stored, v.header, "the header handed on is the stored one");
    let again = validate::validate(v.bytes.clone(), limits, NOW_MS, "f-0").expect("validation is idempotent");
    assert_eq!(again.bytes, v.bytes, "a validated batch needs no second rewrite");
    let mut copy = v.bytes.to_vec();
    record_batch::inject(&mut copy, 42, Some(NOW_MS)).expect("injection into a valid batch");
    assert!(record_batch::validate(&copy).is_ok(), "injection keeps the CRC valid");
}

/// A request frame (after its size prefix) through header and body decoding, and a Produce's
/// records through the broker's checks and validation.
pub fn kafka_request(data: &[u8]) {
    let Ok((header, body)) = crate::kafka::decode_request(Bytes::copy_from_slice(data)) else { return };
    if let RequestKind::Produce(req) = body {
        for t in req.topic_data {
            for p in t.partition_data {
                let records = p.records.unwrap_or_default();
                if let Ok(batch) = validate::one_batch(header.request_api_version, records, "f-0") {
                    if let Ok(v) = validate::validate(batch, &limits(), NOW_MS, "f-0") {
                        check_accepted(&v, &limits());
                    }
                }
            }
        }
    }
}

/// One record batch as a producer sent it.
pub fn record_batch(data: &[u8]) {
    let limits = limits();
    if let Ok(v) = validate::validate(Bytes::copy_from_slice(data), &limits, NOW_MS, "f-0") {
        check_accepted(&v, &limits);
    }
}

/// Records (raw bytes the fuzzer shapes) inside a well-formed batch of any codec: the first byte
/// picks the codec and flags, the next two the record count; the batch's framing and CRC are
/// right, so the fuzzer explores record decoding, compressed or not.
pub fn records_in_batch(data: &[u8]) {
    let [pick, n0, n1, records @ ..] = data else { return };
    let codec = Codec::from_id(pick % 5).unwrap_or(Codec::None);
    let count = i32::from(u16::from_be_bytes([*n0, *n1]) % 4096);
    let mut spec = Spec::new(codec, count, NOW_MS - 1000);
    if pick & 0x80 != 0 {
        (spec.producer_id, spec.producer_epoch, spec.base_sequence) = (5, 0, 0);
    }
    let limits = Limits { timestamp_before_max_ms: Some(10_000), timestamp_after_max_ms: Some(10_000), ..limits() };
    let batch = Bytes::from(build::batch(&spec, records));
    if let Ok(v) = validate::validate(batch, &limits, NOW_MS, "f-0") {
        assert_eq!(v.header.record_count, count);
        check_accepted(&v, &limits);
    }
}

/// A WAL segment object as read back from object storage, and each batch it holds through the
/// fetch path's offset injection.
pub fn wal_segment(data: &[u8]) {
    let Ok(batches) = segment::validate(data) else { return };
    for (at, len, header) in batches {
        let mut b = data[at..at + len].to_vec();
        record_batch::inject(&mut b, 7, (header.timestamp_type == 1).then_some(NOW_MS)).expect("a valid batch");
        assert_eq!(record_batch::validate(&b).map(|h| h.base_offset), Ok(7));
    }
}

/// Starting inputs for the targets above (`fuzz/run.sh --seeds` writes them under
/// `fuzz/seeds/`): well-formed inputs of each kind, so the fuzzer starts from the real shapes.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    const CODECS: [Codec; 5] = [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];
    let mut out = vec![];
    let batches: Vec<Vec<u8>> = CODECS
        .iter()
        .flat_map(|&c| [1, 7].map(|n| build::batch(&Spec::new(c, n, NOW_MS), &build::records(n, 12))))
        .collect();
    for b in &batches {
        out.push(("record_batch", b.clone()));
    }
    let mut idem = Spec::new(Codec::None, 3, NOW_MS);
    (idem.producer_id, idem.producer_epoch, idem.base_sequence) = (9, 1, 30);
    out.push(("record_batch", build::batch(&idem, &build::records(3, 5))));
    for c in CODECS {
        let mut input = vec![c as u8, 0, 4];
        input.extend(build::records(4, 9));
        out.push(("records_in_batch", input));
    }
    let mut segment = vec![segment::VERSION];
    for b in batches.iter().take(4) {
        segment.extend_from_slice(b);
    }
    out.push(("wal_segment", segment));

    // Requests: a header, then a body as a client encodes it.
    let request = |api: ApiKey, version: i16, body: &dyn Fn(&mut bytes::BytesMut) -> anyhow::Result<()>| {
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .with_client_id(Some(StrBytes::from_static_str("seed")));
        let mut b = bytes::BytesMut::new();
        header.encode(&mut b, api.request_header_version(version)).ok()?;
        body(&mut b).ok()?;
        Some(b.to_vec())
    };
    let topic = || TopicName(StrBytes::from_static_str("t"));
    for version in [3, 7, 9, 12] {
        let produce = ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![
            produce_request::TopicProduceData::default().with_name(topic()).with_partition_data(
                batches
                    .iter()
                    .take(3)
                    .enumerate()
                    .map(|(i, b)| {
                        produce_request::PartitionProduceData::default()
                            .with_index(i as i32)
                            .with_records(Some(Bytes::from(b.clone())))
                    })
                    .collect(),
            ),
        ]);
        out.extend(request(ApiKey::Produce, version, &|b| produce.encode(b, version)).map(|r| ("kafka_request", r)));
    }
    for version in [4, 12] {
        let fetch =
            FetchRequest::default().with_max_wait_ms(100).with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic(topic())
                .with_partitions(vec![fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(5)])]);
        out.extend(request(ApiKey::Fetch, version, &|b| fetch.encode(b, version)).map(|r| ("kafka_request", r)));
    }
    for version in [0, 4, 12] {
        let metadata = MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(topic()))]));
        out.extend(request(ApiKey::Metadata, version, &|b| metadata.encode(b, version)).map(|r| ("kafka_request", r)));
    }
    for version in [0, 5] {
        let describe = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(StrBytes::from_static_str("g")), GroupId(StrBytes::from_static_str("h"))]);
        out.extend(
            request(ApiKey::DescribeGroups, version, &|b| describe.encode(b, version)).map(|r| ("kafka_request", r)),
        );
    }
    for version in [0, 3] {
        let versions = ApiVersionsRequest::default();
        out.extend(
            request(ApiKey::ApiVersions, version, &|b| versions.encode(b, version)).map(|r| ("kafka_request", r)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_is_well_formed_input_for_its_target() {
        let seeds = seeds();
        for (target, bytes) in &seeds {
            match *target {
                "kafka_request" => {
                    let (_, body) = crate::kafka::decode_request(Bytes::from(bytes.clone())).unwrap();
                    kafka_request(bytes);
                    let _ = body;
                }
                "record_batch" => {
                    validate::validate(Bytes::from(bytes.clone()), &limits(), NOW_MS, "f-0").unwrap();
                    record_batch(bytes);
                }
                "records_in_batch" => records_in_batch(bytes),
                "wal_segment" => {
                    assert!(!segment::validate(bytes).unwrap().is_empty());
                    wal_segment(bytes);
                }
                other => panic!("a seed for an unknown target {other}"),
            }
        }
        for t in ["kafka_request", "record_batch", "records_in_batch", "wal_segment"] {
            assert!(seeds.iter().any(|(s, _)| *s == t), "no seed for {t}");
        }
    }
}
