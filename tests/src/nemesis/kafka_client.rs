//! A small Kafka client for the fault suite, on the `kafka-protocol` crate the broker uses: one
//! connection, one request at a time (so a timeout leaves nothing half-read behind: the caller
//! drops the client and connects again). ApiVersions (on connect, checking the versions we use),
//! Metadata, InitProducerId, Produce (acks=-1, the caller's record batch bytes as they are, so an
//! idempotent retry re-sends the same bytes), Fetch (one partition, or several in one long poll)
//! and ListOffsets; for transactional producers FindCoordinator, InitProducerId with a
//! transactional id, AddPartitionsToTxn and EndTxn (transactions v1, as librdkafka speaks them),
//! and Produce v12, EndTxn v5 and TxnOffsetCommit v5 (transactions v2, as Kafka 4's Java
//! producer speaks them).
//!
//! It must not retry or interpret errors: callers (the workload) do what real clients do.

use anyhow::Context;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The versions this client speaks (flexible versions, within what the broker accepts).
const API_VERSIONS_V: i16 = 3;
const METADATA_V: i16 = 12;
const INIT_PRODUCER_ID_V: i16 = 4;
const PRODUCE_V: i16 = 9;
const FETCH_V: i16 = 12;
const LIST_OFFSETS_V: i16 = 7;
const FIND_COORDINATOR_V: i16 = 4;
const ADD_PARTITIONS_TO_TXN_V: i16 = 3;
const END_TXN_V: i16 = 3;
/// Transactions v2 (KIP-890 part 2): Produce v12 adds its partitions to the transaction, EndTxn
/// v5 answers the bumped epoch, TxnOffsetCommit v5 adds its group.
const PRODUCE_TXN_V2: i16 = 12;
const END_TXN_TXN_V2: i16 = 5;
const TXN_OFFSET_COMMIT_TXN_V2: i16 = 5;

pub struct KafkaClient {
    stream: TcpStream,
    correlation: i32,
    /// Kafka's isolation level of its fetches: 0 read_uncommitted, 1 read_committed.
    isolation_level: i8,
}

/// One partition's fetch answer.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records: Bytes,
    pub last_stable_offset: i64,
    /// `read_committed`: the aborted transactions of the range (producer id, first offset).
    pub aborted: Vec<(i64, i64)>,
}

impl Fetched {
    /// The records' offsets and values (as text), in order; panics when they do not decode.
    pub fn values(&self) -> Vec<(i64, String)> {
        diskless_broker_shim::records::decode(self.records.clone())
            .expect("the records decode")
            .into_iter()
            .map(|m| (m.offset, String::from_utf8_lossy(m.value.as_deref().unwrap_or_default()).into_owned()))
            .collect()
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

impl KafkaClient {
    /// Connects and checks with ApiVersions that the broker speaks every version used here.
    pub async fn connect(addr: &str) -> anyhow::Result<KafkaClient> {
        let stream = TcpStream::connect(addr).await.with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true)?;
        let mut c = KafkaClient { stream, correlation: 0, isolation_level: 0 };
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("diskless-nemesis"))
            .with_client_software_version(StrBytes::from_static_str("1"));
        let r = c.call(&req, API_VERSIONS_V).await?;
        anyhow::ensure!(r.error_code == 0, "ApiVersions error {}", r.error_code);
        for (key, v) in [
            (ApiKey::Metadata, METADATA_V),
            (ApiKey::InitProducerId, INIT_PRODUCER_ID_V),
            (ApiKey::Produce, PRODUCE_V),
            (ApiKey::Fetch, FETCH_V),
            (ApiKey::ListOffsets, LIST_OFFSETS_V),
            (ApiKey::FindCoordinator, FIND_COORDINATOR_V),
            (ApiKey::AddPartitionsToTxn, ADD_PARTITIONS_TO_TXN_V),
            (ApiKey::EndTxn, END_TXN_V),
            (ApiKey::Produce, PRODUCE_TXN_V2),
            (ApiKey::EndTxn, END_TXN_TXN_V2),
            (ApiKey::TxnOffsetCommit, TXN_OFFSET_COMMIT_TXN_V2),
        ] {
            let ok = r.api_keys.iter().any(|a| a.api_key == key as i16 && a.min_version <= v && v <= a.max_version);
            anyhow::ensure!(ok, "the broker does not speak {key:?} v{v}");
        }
        Ok(c)
    }

    /// Sends one request and reads its answer.
    pub async fn call<R: Request>(&mut self, req: &R, version: i16) -> anyhow::Result<R::Response> {
        self.correlation = self.correlation.wrapping_add(1);
        let key = ApiKey::try_from(R::KEY).map_err(|_| anyhow::anyhow!("unknown API key {}", R::KEY))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("nemesis")));
        let mut body = BytesMut::new();
        header.encode(&mut body, key.request_header_version(version))?;
        req.encode(&mut body, version)?;
        let mut frame = BytesMut::with_capacity(4 + body.len());
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).await.context("send request")?;
        let size = self.stream.read_i32().await.context("read response size")?;
        anyhow::ensure!((0..=256 << 20).contains(&size), "response frame of {size} bytes");
        let mut buf = BytesMut::zeroed(size as usize);
        self.stream.read_exact(&mut buf).await.context("read response")?;
        let mut buf = buf.freeze();
        let rh = ResponseHeader::decode(&mut buf, R::Response::header_version(version))?;
        anyhow::ensure!(
            rh.correlation_id == self.correlation,
            "answer to request {} while waiting for {}",
            rh.correlation_id,
            self.correlation
        );
        let r = R::Response::decode(&mut buf, version)?;
        anyhow::ensure!(!buf.has_remaining(), "{} bytes after the response", buf.remaining());
        Ok(r)
    }

    /// The partition count of `topic` (`None`: the broker does not know it).
    pub async fn partitions(&mut self, topic: &str) -> anyhow::Result<Option<usize>> {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(name(topic)))]));
        let r = self.call(&req, METADATA_V).await?;
        Ok(r.topics.first().filter(|t| t.error_code == 0).map(|t| t.partitions.len()))
    }

    /// InitProducerId without a transactional id: `(error code, producer id, epoch)`.
    pub async fn init_producer_id(&mut self) -> anyhow::Result<(i16, i64, i16)> {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let r = self.call(&req, INIT_PRODUCER_ID_V).await?;
        Ok((r.error_code, r.producer_id.0, r.producer_epoch))
    }

    /// FindCoordinator of transactional id `id`: `(error code, broker id)`.
    pub async fn find_txn_coordinator(&mut self, id: &str) -> anyhow::Result<(i16, i32)> {
        let req = FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![StrBytes::from_string(id.to_string())]);
        let r = self.call(&req, FIND_COORDINATOR_V).await?;
        let c = r.coordinators.first().context("the answer names no coordinator")?;
        Ok((c.error_code, c.node_id.0))
    }

    /// FindCoordinator of consumer group `group`: the coordinating broker's id.
    pub async fn find_group_coordinator(&mut self, group: &str) -> anyhow::Result<i32> {
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
        let r = self.call(&req, FIND_COORDINATOR_V).await?;
        let c = r.coordinators.first().context("the answer names no coordinator")?;
        anyhow::ensure!(c.error_code == 0, "FindCoordinator error {}", c.error_code);
        Ok(c.node_id.0)
    }

    /// InitProducerId for transactional id `id`: `(error code, producer id, epoch)`.
    pub async fn init_transactional_id(&mut self, id: &str, timeout_ms: i32) -> anyhow::Result<(i16, i64, i16)> {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.to_string()))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let r = self.call(&req, INIT_PRODUCER_ID_V).await?;
        Ok((r.error_code, r.producer_id.0, r.producer_epoch))
    }

    /// AddPartitionsToTxn of `partitions` of `topic` to the producer's transaction: the first
    /// error code any partition got (0: all added).
    pub async fn add_partitions_to_txn(
        &mut self,
        id: &str,
        producer: (i64, i16),
        topic: &str,
        partitions: &[i32],
    ) -> anyhow::Result<i16> {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_v3_and_below_producer_id(ProducerId(producer.0))
            .with_v3_and_below_producer_epoch(producer.1)
            .with_v3_and_below_topics(vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(name(topic))
                .with_partitions(partitions.to_vec())]);
        let r = self.call(&req, ADD_PARTITIONS_TO_TXN_V).await?;
        let codes: Vec<i16> = r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
            .collect();
        anyhow::ensure!(
            codes.len() == partitions.len(),
            "the answer names {} of {} partitions",
            codes.len(),
            partitions.len()
        );
        Ok(codes.into_iter().find(|&c| c != 0).unwrap_or(0))
    }

    /// EndTxn: commits or aborts the producer's transaction; its error code.
    pub async fn end_txn(&mut self, id: &str, producer: (i64, i16), commit: bool) -> anyhow::Result<i16> {
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_committed(commit);
        Ok(self.call(&req, END_TXN_V).await?.error_code)
    }

    /// EndTxn v5 (transactions v2): `(error code, producer id, epoch)`, the id and epoch the
    /// producer continues with (-1 on error).
    pub async fn end_txn_v2(
        &mut self,
        id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> anyhow::Result<(i16, i64, i16)> {
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_committed(commit);
        let r = self.call(&req, END_TXN_TXN_V2).await?;
        Ok((r.error_code, r.producer_id.0, r.producer_epoch))
    }

    /// Produce v12 of a transactional batch (transactions v2: no AddPartitionsToTxn before it):
    /// `(error code, base offset)`.
    pub async fn produce_txn_v2(
        &mut self,
        transactional_id: &str,
        topic: &str,
        partition: i32,
        batch: Bytes,
    ) -> anyhow::Result<(i16, i64)> {
        self.produce_at(Some(transactional_id), topic, partition, batch, PRODUCE_TXN_V2).await
    }

    /// TxnOffsetCommit v5 (transactions v2: no AddOffsetsToTxn before it) of `offset` for
    /// partition `partition` of `topic` in group `group`, without a member (as a producer not in
    /// the group sends it): the partition's error code.
    pub async fn txn_offset_commit_v2(
        &mut self,
        id: &str,
        producer: (i64, i16),
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> anyhow::Result<i16> {
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_generation_id(-1)
            .with_topics(vec![txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(partition)
                    .with_committed_offset(offset)])]);
        let r = self.call(&req, TXN_OFFSET_COMMIT_TXN_V2).await?;
        let p = r.topics.first().and_then(|t| t.partitions.first()).context("the answer names no partition")?;
        Ok(p.error_code)
    }

    /// Produces one record batch (acks = all): `(error code, base offset)`.
    pub async fn produce(&mut self, topic: &str, partition: i32, batch: Bytes) -> anyhow::Result<(i16, i64)> {
        self.produce_as(None, topic, partition, batch).await
    }

    /// [`KafkaClient::produce`] of a transactional producer's batch, naming its transactional id.
    pub async fn produce_as(
        &mut self,
        transactional_id: Option<&str>,
        topic: &str,
        partition: i32,
        batch: Bytes,
    ) -> anyhow::Result<(i16, i64)> {
        self.produce_at(transactional_id, topic, partition, batch, PRODUCE_V).await
    }

    async fn produce_at(
        &mut self,
        transactional_id: Option<&str>,
        topic: &str,
        partition: i32,
        batch: Bytes,
        version: i16,
    ) -> anyhow::Result<(i16, i64)> {
        let id = transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.to_string())));
        let req =
            ProduceRequest::default().with_transactional_id(id).with_acks(-1).with_timeout_ms(30_000).with_topic_data(
                vec![produce_request::TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
                    produce_request::PartitionProduceData::default().with_index(partition).with_records(Some(batch)),
                ])],
            );
        let r = self.call(&req, version).await?;
        let p = r
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .context("the produce answer names no partition")?;
        Ok((p.error_code, p.base_offset))
    }

    /// Fetches one partition from `offset` (up to 256 KiB, no waiting).
    /// Its fetches from now on read committed records only (Kafka's `read_committed`, librdkafka's
    /// default).
    pub fn read_committed(mut self) -> KafkaClient {
        self.isolation_level = 1;
        self
    }

    pub async fn fetch(&mut self, topic: &str, partition: i32, offset: i64) -> anyhow::Result<Fetched> {
        self.fetch_waiting(topic, partition, offset, 0).await
    }

    /// Fetches one partition from `offset` (up to 256 KiB), waiting up to `max_wait_ms` for a
    /// first byte as a consumer's long poll does.
    pub async fn fetch_waiting(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> anyhow::Result<Fetched> {
        let mut got = self.fetch_many(&[(topic.to_string(), partition, offset)], max_wait_ms).await?;
        got.pop().context("the fetch answer names no partition")
    }

    /// Fetches several partitions in one request, each from its offset (up to 256 KiB each, 1 MiB
    /// in all), waiting up to `max_wait_ms` for a first byte of any, as a consumer's long poll
    /// does: one answer per partition asked, in the order asked.
    pub async fn fetch_many(
        &mut self,
        wanted: &[(String, i32, i64)],
        max_wait_ms: i32,
    ) -> anyhow::Result<Vec<Fetched>> {
        let mut topics: Vec<fetch_request::FetchTopic> = vec![];
        for (topic, partition, offset) in wanted {
            let p = fetch_request::FetchPartition::default()
                .with_partition(*partition)
                .with_fetch_offset(*offset)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(256 << 10);
            match topics.iter_mut().find(|t| t.topic.0.as_str() == topic.as_str()) {
                Some(t) => t.partitions.push(p),
                None => {
                    topics.push(fetch_request::FetchTopic::default().with_topic(name(topic)).with_partitions(vec![p]))
                }
            }
        }
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(self.isolation_level)
            .with_session_epoch(-1)
            .with_topics(topics);
        let r = self.call(&req, FETCH_V).await?;
        anyhow::ensure!(r.error_code == 0, "fetch error {}", r.error_code);
        wanted
            .iter()
            .map(|(topic, partition, _)| {
                let p = r
                    .responses
                    .iter()
                    .filter(|t| t.topic.0.as_str() == topic.as_str())
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == *partition)
                    .with_context(|| format!("the fetch answer leaves out {topic}/{partition}"))?;
                Ok(Fetched {
                    error_code: p.error_code,
                    high_watermark: p.high_watermark,
                    log_start_offset: p.log_start_offset,
                    records: p.records.clone().unwrap_or_default(),
                    last_stable_offset: p.last_stable_offset,
                    aborted: p
                        .aborted_transactions
                        .iter()
                        .flatten()
                        .map(|a| (a.producer_id.0, a.first_offset))
                        .collect(),
                })
            })
            .collect()
    }

    /// ListOffsets of one partition at `timestamp` (-1 latest, -2 earliest): `(error code, offset)`.
    pub async fn list_offsets(&mut self, topic: &str, partition: i32, timestamp: i64) -> anyhow::Result<(i16, i64)> {
        let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(timestamp),
            ]),
        ]);
        let r = self.call(&req, LIST_OFFSETS_V).await?;
        let p = r.topics.first().and_then(|t| t.partitions.first()).context("the answer names no partition")?;
        Ok((p.error_code, p.offset))
    }
}
