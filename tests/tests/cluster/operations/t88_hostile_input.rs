//! Bad input never stops a broker and never reaches the log, against a real broker process:
//! - the reported requests (a 30-byte DescribeGroups whose array count is 0x7f7f7f7f, which made
//!   the broker ask for 68 GB and abort; frames of 0 and 1 byte, which panicked the connection
//!   task) close their connection, are counted, and the broker keeps serving;
//! - producers' batches that lie (a record count of 2^31 - 1 over one record), carry garbage
//!   (compressed or not), are too large, or are zip bombs are refused with Kafka's codes per
//!   partition, the rest of the request is answered, nothing of them is stored, and the
//!   partition goes on serving;
//! - thousands of mutated and random frames for every API and version the broker advertises:
//!   it stays up, its address space does not balloon (an allocation sized by a count from the
//!   wire shows in VmPeak even when it is never touched), no task panics, and a well-formed
//!   produce and fetch work after each API's round.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use diskless_broker_shim::validate::build::{self, Spec};
use diskless_broker_shim::validate::decompress::Codec;
use diskless_cluster_tests::kafka_wire::kafka_request;
use diskless_cluster_tests::*;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A broker with a Kafka listener and metrics, on a 3-node quorum.
async fn broker(c: &Cluster) -> (BrokerProc, String) {
    let metrics = format!("127.0.0.1:{}", free_port());
    let options = BrokerOptions {
        kafka: true,
        commit_interval_ms: 20,
        extra_toml: format!("metrics_addr = \"{metrics}\""),
        ..BrokerOptions::default()
    };
    (BrokerProc::start(c, "a", &TestStorage::Local(c.path("objects")), &options).await, metrics)
}

/// Sends raw bytes; `true` when the broker closed the connection without answering.
async fn closes(addr: &str, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("send");
    let mut buf = [0u8; 64];
    matches!(tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as i32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// A figure of the process's `/proc/PID/status` in KiB: `VmPeak` (peak address space) or `VmHWM`
/// (peak resident memory).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status.lines().find(|l| l.starts_with(field)).expect("the field");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a figure in kB")
}

fn produce_request(topic: &str, batches: Vec<Vec<u8>>) -> ProduceRequest {
    let partitions = batches
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            produce_request::PartitionProduceData::default().with_index(i as i32).with_records(Some(Bytes::from(b)))
        })
        .collect();
    ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(partitions),
    ])
}

/// One Produce v9 of one batch per partition; each partition's (error code, base offset).
async fn produce(addr: &str, topic: &str, batches: Vec<Vec<u8>>) -> Vec<(i16, i64, Option<String>)> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let r: ProduceResponse = kafka_request(&mut s, ApiKey::Produce, 9, 1, &produce_request(topic, batches)).await;
    let mut out: Vec<_> = r.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, (p.error_code, p.base_offset, p.error_message.as_ref().map(|m| m.to_string()))))
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// Produces one good batch to partition 0 until it is acknowledged (the topic may be new to the
/// broker); its base offset.
async fn produce_good(addr: &str, topic: &str, tag: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = produce(addr, topic, vec![batch_of(&[tag.to_string()])]).await;
        if r[0].0 == 0 {
            return r[0].1;
        }
        assert!(Instant::now() < deadline, "a good batch is refused: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reported_requests_close_their_connection_and_the_broker_keeps_serving() {
    let c = Cluster::start(3, Options::default()).await;
    let (broker, metrics) = broker(&c).await;
    let addr = broker.kafka_addr.clone().unwrap();
    let mut client = broker.client().await;
    create_topic_via(&mut client, "t", 1).await;
    assert_eq!(produce_good(&addr, "t", "first").await, 0);

    // DescribeGroups v0: header (api 15, version 0, correlation 1, null client id), then 16 bytes
    // of 0x7f: an array count of 2139062143 group names.
    let mut body = vec![0, 15, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    body.extend([0x7f; 16]);
    let request = frame(&body);
    assert_eq!(request.len(), 30);
    assert!(closes(&addr, &request).await, "the 30-byte request");
    for n in 0..8 {
        assert!(closes(&addr, &frame(&vec![0u8; n])).await, "a {n}-byte frame");
    }
    assert!(closes(&addr, &(-5i32).to_be_bytes()).await, "a negative size");
    assert!(closes(&addr, &(200i32 << 20).to_be_bytes()).await, "a frame over socket.request.max.bytes");
    assert!(broker.is_running(), "{}", broker.log_tail());
    assert_eq!(produce_good(&addr, "t", "after").await, 1, "the broker keeps serving");
    let log = broker.log_text();
    assert!(!log.contains("panicked"), "a task panicked: {}", broker.log_tail());

    let (_, text) = scrape(&metrics).await.expect("scrape the broker");
    let count = |reason: &str| {
        metric_value(&text, &format!("diskless_broker_kafka_malformed_requests_total{{reason=\"{reason}\"}}"))
            .unwrap_or(0.0)
    };
    assert_eq!(count("body"), 1.0, "the DescribeGroups body");
    assert_eq!(count("too_short"), 8.0, "frames of 0 to 7 bytes");
    assert_eq!(count("too_large"), 2.0, "negative and oversized sizes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_garbage_and_oversized_batches_are_refused_per_partition_and_never_stored() {
    let c = Cluster::start(3, Options::default()).await;
    let (broker, _) = broker(&c).await;
    let addr = broker.kafka_addr.clone().unwrap();
    let mut client = broker.client().await;
    create_topic_via(&mut client, "t", 2).await;
    assert_eq!(produce_good(&addr, "t", "first").await, 0);

    let now = 1_700_000_000_000;
    let garbage: Vec<u8> = (0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let mut lying = Spec::new(Codec::None, 1, now);
    (lying.record_count, lying.last_offset_delta) = (i32::MAX, i32::MAX - 1);
    let with_codec_bits = |codec: Codec| {
        let mut b = build::batch(&Spec::new(Codec::None, 10, now), &garbage);
        b[21..23].copy_from_slice(&(codec as i16).to_be_bytes());
        build::seal(&mut b);
        b
    };
    let mut crc = batch_of(&["x".into()]);
    crc[40] ^= 1;
    let mut control = Spec::new(Codec::None, 1, now);
    control.flags = 1 << 5;
    let cases: Vec<(&str, Vec<u8>, i16)> = vec![
        ("2^31 - 1 records claimed, one present", build::batch(&lying, &build::records(1, 4)), 87),
        ("gzip garbage", with_codec_bits(Codec::Gzip), 2),
        ("zstd garbage", with_codec_bits(Codec::Zstd), 2),
        ("snappy garbage", with_codec_bits(Codec::Snappy), 2),
        ("lz4 garbage", with_codec_bits(Codec::Lz4), 2),
        ("uncompressed garbage records", build::batch(&Spec::new(Codec::None, 10, now), &garbage), 87),
        ("a 2 MiB record", build::batch(&Spec::new(Codec::None, 1, now), &build::records(1, 2 << 20)), 10),
        ("a zstd bomb", build::batch(&Spec::new(Codec::Zstd, 1, now), &build::records(1, 256 << 20)), 10),
        ("a wrong CRC", crc, 2),
        ("a control batch", build::batch(&control, &build::records(1, 4)), 87),
        ("two batches", [batch_of(&["a".into()]), batch_of(&["b".into()])].concat(), 87),
    ];
    let mut expected_end = 1;
    for (what, bad, code) in cases {
        // Partition 0 gets the bad batch, partition 1 a good one in the same request.
        let r = produce(&addr, "t", vec![bad, batch_of(&[format!("beside {what}")])]).await;
        assert_eq!(r[0].0, code, "{what}: {r:?}");
        assert!(r[0].2.as_deref().is_some_and(|m| !m.is_empty()), "{what}: a message says why");
        assert_eq!(r[1].0, 0, "{what}: the rest of the request is served: {r:?}");
        // Nothing of it moved partition 0: the next good batch takes the next offset.
        assert_eq!(produce_good(&addr, "t", what).await, expected_end, "{what}");
        expected_end += 1;
    }
    let mut client = broker.client().await;
    let got = consume_all(&mut client, "t", 0).await.expect("partition 0 still serves");
    assert_eq!(got.len() as i64, expected_end, "only the good batches are there");
    assert!(broker.is_running());
}

/// A request of `api` at `version` as a client would send it, but with empty fields.
fn default_body(api: ApiKey, version: i16) -> Option<BytesMut> {
    let mut b = BytesMut::new();
    macro_rules! enc {
        ($t:ty) => {
            <$t>::default().encode(&mut b, version).ok()
        };
    }
    let ok = match api {
        ApiKey::Produce => enc!(ProduceRequest),
        ApiKey::Fetch => enc!(FetchRequest),
        ApiKey::ListOffsets => enc!(ListOffsetsRequest),
        ApiKey::Metadata => enc!(MetadataRequest),
        ApiKey::OffsetCommit => enc!(OffsetCommitRequest),
        ApiKey::OffsetFetch => enc!(OffsetFetchRequest),
        ApiKey::FindCoordinator => enc!(FindCoordinatorRequest),
        ApiKey::JoinGroup => enc!(JoinGroupRequest),
        ApiKey::Heartbeat => enc!(HeartbeatRequest),
        ApiKey::LeaveGroup => enc!(LeaveGroupRequest),
        ApiKey::SyncGroup => enc!(SyncGroupRequest),
        ApiKey::DescribeGroups => enc!(DescribeGroupsRequest),
        ApiKey::ListGroups => enc!(ListGroupsRequest),
        ApiKey::SaslHandshake => enc!(SaslHandshakeRequest),
        ApiKey::ApiVersions => enc!(ApiVersionsRequest),
        ApiKey::CreateTopics => enc!(CreateTopicsRequest),
        ApiKey::DeleteTopics => enc!(DeleteTopicsRequest),
        ApiKey::DeleteRecords => enc!(DeleteRecordsRequest),
        ApiKey::InitProducerId => enc!(InitProducerIdRequest),
        ApiKey::DeleteGroups => enc!(DeleteGroupsRequest),
        ApiKey::OffsetDelete => enc!(OffsetDeleteRequest),
        ApiKey::SaslAuthenticate => enc!(SaslAuthenticateRequest),
        _ => None,
    };
    ok.map(|_| b)
}

/// Random but the same on every run.
struct Rng(fastrand::Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n.max(1))
    }
}

/// A request header for `api`/`version` followed by `body` mutated `rng`'s way: counts set to
/// 0x7f7f7f7f or -1, bytes flipped, cut short, or garbage appended.
fn mutated(rng: &mut Rng, api: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(rng.next() as i32)
        .with_client_id(Some(StrBytes::from_static_str("hostile")));
    let mut out = BytesMut::new();
    header.encode(&mut out, api.request_header_version(version)).expect("header");
    let mut b = body.to_vec();
    for _ in 0..1 + rng.below(3) {
        match rng.below(5) {
            0 if b.len() >= 4 => {
                let at = rng.below(b.len() - 3);
                b[at..at + 4].copy_from_slice(&[0x7f; 4]);
            }
            1 if !b.is_empty() => {
                let at = rng.below(b.len());
                b[at] = if rng.next() & 1 == 0 { 0xff } else { rng.next() as u8 };
            }
            2 => b.truncate(rng.below(b.len() + 1)),
            3 => b.extend((0..rng.below(64)).map(|_| rng.next() as u8)),
            _ => b.insert(rng.below(b.len() + 1), 0x7f),
        }
    }
    out.extend_from_slice(&b);
    frame(&out)
}

/// Sends frames over one connection, reconnecting whenever the broker closes it. A frame may
/// also get no answer for a while (a Produce with acks=0, a JoinGroup waiting for its rebalance,
/// a Fetch waiting for data): after a second the connection is dropped and counted.
struct Hammer {
    addr: String,
    conn: Option<TcpStream>,
    unanswered: Vec<(ApiKey, i16)>,
}

impl Hammer {
    async fn send(&mut self, api: ApiKey, version: i16, f: &[u8]) {
        if self.conn.is_none() {
            self.conn = Some(TcpStream::connect(&self.addr).await.expect("the broker accepts connections"));
        }
        let Some(s) = self.conn.as_mut() else { return };
        if s.write_all(f).await.is_err() {
            self.conn = None;
            return;
        }
        let answered = tokio::time::timeout(Duration::from_secs(1), async {
            let len = s.read_i32().await.ok()?;
            let mut buf = vec![0u8; usize::try_from(len).ok()?.min(64 << 20)];
            s.read_exact(&mut buf).await.ok()
        })
        .await;
        match answered {
            Ok(Some(_)) => {}
            Ok(None) => self.conn = None,
            Err(_) => {
                self.unanswered.push((api, version));
                self.conn = None;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_mutated_frames_for_every_api_and_version_leave_the_broker_up_and_bounded() {
    let c = Cluster::start(3, Options::default()).await;
    let (broker, _) = broker(&c).await;
    let addr = broker.kafka_addr.clone().unwrap();
    let mut client = broker.client().await;
    create_topic_via(&mut client, "t", 1).await;
    let mut offset = produce_good(&addr, "t", "first").await;
    let pid = broker.pid().expect("broker pid");
    let (peak_before, resident_before) = (status_kib(pid, "VmPeak:"), status_kib(pid, "VmHWM:"));

    let mut s = TcpStream::connect(&addr).await.unwrap();
    let versions: ApiVersionsResponse =
        kafka_request(&mut s, ApiKey::ApiVersions, 3, 1, &ApiVersionsRequest::default()).await;
    let mut rng = Rng(fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15));
    let mut hammer = Hammer { addr: addr.clone(), conn: None, unanswered: vec![] };
    let mut frames = 0usize;
    for k in &versions.api_keys {
        let api = ApiKey::try_from(k.api_key).expect("an advertised API");
        for version in k.min_version..=k.max_version {
            let base = default_body(api, version).map(|b| b.to_vec()).unwrap_or_default();
            for _ in 0..12 {
                hammer.send(api, version, &mutated(&mut rng, api, version, &base)).await;
                frames += 1;
            }
        }
        // After each API's round: still up, still producing in order.
        assert!(broker.is_running(), "after {api:?}: {}", broker.log_tail());
        offset += 1;
        assert_eq!(produce_good(&addr, "t", &format!("after {api:?}")).await, offset);
    }
    // Wholly random frames: any header, any length up to 4 KiB.
    for _ in 0..1500 {
        let n = rng.below(4096);
        let body: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        hammer.send(ApiKey::ApiVersions, -1, &frame(&body)).await;
        frames += 1;
    }
    assert!(frames > 2500, "{frames} frames");
    // Only requests Kafka lets wait may go unanswered.
    eprintln!("{} of {frames} frames unanswered after 1 s: {:?}", hammer.unanswered.len(), hammer.unanswered);
    let may_wait = [ApiKey::Produce, ApiKey::Fetch, ApiKey::JoinGroup, ApiKey::SyncGroup];
    assert!(hammer.unanswered.iter().all(|(api, _)| may_wait.contains(api)), "{:?}", hammer.unanswered);
    assert!(broker.is_running(), "{}", broker.log_tail());
    offset += 1;
    assert_eq!(produce_good(&addr, "t", "at the end").await, offset);
    let mut client = broker.client().await;
    assert_eq!(consume_all(&mut client, "t", 0).await.expect("fetch").len() as i64, offset + 1);
    // An allocation sized by a count off the wire (0x7f7f7f7f elements: gigabytes) shows in the
    // peak address space even when never touched. The allowance is glibc's: each thread that
    // allocates may reserve a 64 MiB arena (up to 8 per core) and a blocking thread's stack.
    let reserved = status_kib(pid, "VmPeak:").saturating_sub(peak_before);
    assert!(reserved < 2 << 20, "the broker's peak address space grew by {reserved} KiB over {frames} frames");
    let resident = status_kib(pid, "VmHWM:").saturating_sub(resident_before);
    assert!(resident < 256 << 10, "the broker's peak resident memory grew by {resident} KiB over {frames} frames");
    assert!(!broker.log_text().contains("panicked"), "a task panicked: {}", broker.log_tail());
}
