//! Producing and consuming through a broker's own gRPC API: batches, retries, reading a partition.

use std::time::{Duration, Instant};

use crate::*;

/// A record batch of `values` (keys `k<value>`), for `BrokerService.Produce`.
pub fn batch_of(values: &[String]) -> Vec<u8> {
    let recs: Vec<_> = values
        .iter()
        .map(|v| (Some(bytes::Bytes::from(format!("k{v}"))), Some(bytes::Bytes::from(v.clone()))))
        .collect();
    kafka_records::encode(&recs, 1_700_000_000_000, Compression::None, NOT_IDEMPOTENT).expect("encode").to_vec()
}

/// An idempotent producer's record batch of `values`.
pub fn idempotent_batch_of(values: &[String], idem: Idempotence) -> Vec<u8> {
    let recs: Vec<_> = values
        .iter()
        .map(|v| (Some(bytes::Bytes::from(format!("k{v}"))), Some(bytes::Bytes::from(v.clone()))))
        .collect();
    kafka_records::encode(&recs, 1_700_000_000_000, Compression::None, idem).expect("encode").to_vec()
}

/// A transactional producer's record batch of `values` (the batch's transactional bit set).
pub fn transactional_batch_of(values: &[String], idem: Idempotence) -> Vec<u8> {
    let recs: Vec<_> = values
        .iter()
        .map(|v| (Some(bytes::Bytes::from(format!("k{v}"))), Some(bytes::Bytes::from(v.clone()))))
        .collect();
    kafka_records::encode_transactional(&recs, 1_700_000_000_000, idem).expect("encode").to_vec()
}

/// Whether a Kafka error code is worth retrying (leadership moves, timeouts, storage hiccups).
pub fn retriable(code: i32) -> bool {
    matches!(code, 6 | 7 | 9 | 56)
}

/// Produces one batch, retrying retriable errors (the same bytes: for idempotent batches the
/// coordinator recognises a retry of a committed one). Panics on other errors.
pub async fn produce_retrying(
    broker: &mut BrokerClient,
    topic: &str,
    partition: i32,
    records: Vec<u8>,
) -> diskless_proto::broker::ProduceResponse {
    use diskless_proto::broker::ProduceRequest;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let req = ProduceRequest { topic: topic.into(), partition, records: records.clone() };
        let r = broker.produce(req).await.expect("produce rpc").into_inner();
        if r.error_code == 0 {
            return r;
        }
        assert!(retriable(r.error_code), "produce to {topic}/{partition}: {} {:?}", r.error_code, r.error_message);
        assert!(Instant::now() < deadline, "produce still failing after a minute: {:?}", r.error_message);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every message of a partition, fetched from offset 0 through `broker`.
pub async fn consume_all(broker: &mut BrokerClient, topic: &str, partition: i32) -> Result<Vec<Message>, String> {
    use diskless_proto::broker::FetchRequest;
    let mut out = vec![];
    let mut offset = 0;
    loop {
        let r = broker
            .fetch(FetchRequest { topic: topic.into(), partition, offset, max_bytes: 4 << 20 })
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        if r.error_code != 0 {
            return Err(format!("fetch error {}: {:?}", r.error_code, r.error_message));
        }
        if r.records.is_empty() {
            return Ok(out);
        }
        let msgs = kafka_records::decode(bytes::Bytes::from(r.records)).map_err(|e| e.to_string())?;
        offset = msgs.last().map_or(offset, |m| m.offset + 1);
        out.extend(msgs);
        if offset >= r.high_watermark {
            return Ok(out);
        }
    }
}

/// Creates a topic through a broker, retrying while the coordinators elect.
pub async fn create_topic_via(broker: &mut BrokerClient, name: &str, partitions: i32) {
    use diskless_proto::broker::CreateTopicRequest;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut retried = false;
    loop {
        let r = broker
            .create_topic(CreateTopicRequest {
                name: name.into(),
                partitions,
                retention_ms: None,
                retention_bytes: None,
            })
            .await
            .expect("create topic rpc")
            .into_inner();
        // TOPIC_ALREADY_EXISTS after a failed try: that try's creation completed after all.
        if r.error_code == 0 || (r.error_code == 36 && retried) {
            return;
        }
        retried = true;
        assert!(Instant::now() < deadline, "create topic {name}: {:?}", r.error_message);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
