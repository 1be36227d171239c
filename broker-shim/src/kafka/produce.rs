//! Produce: acks checked, a transactional producer's batches verified against its ongoing
//! transaction (WRITE on the transactional id; KIP-890 part 1) or, from v12 (transactions v2,
//! KIP-890 part 2), their partitions added to it first, as Kafka's `ReplicaManager` has the
//! transaction coordinator add them; each topic authorized (WRITE), each partition's records checked to be
//! exactly one valid batch (`crate::validate`) and enqueued on the producer *before the next
//! request is read* (so a pipelining producer keeps its order); the answer waits for the commits.
//! acks=0 sends no answer, and a failure closes the connection. It must not commit anything
//! itself: the producer (`crate::produce`) does, in seal order.

use std::sync::Arc;

use diskless_proto::ErrorCode;
use futures_util::future::join_all;
use kafka_protocol::messages::*;

use super::response::{encode, message};
use super::response::{ready, Pending};
use super::session::Session;
use crate::authz::{Operation, Resource};
use crate::cluster::TopicMeta;
use crate::error::KafkaError;
use crate::produce::{Producer, Waiting};

pub(super) async fn produce(l: Arc<Session>, header: RequestHeader, req: ProduceRequest) -> Pending {
    let v = header.request_api_version;
    let acks = req.acks;
    let refuse_all = |code: ErrorCode, why: &str| {
        let responses = req
            .topic_data
            .iter()
            .map(|t| {
                produce_response::TopicProduceResponse::default().with_name(t.name.clone()).with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            produce_response::PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code.code())
                                .with_base_offset(-1)
                                .with_error_message(if v >= 8 { message(why) } else { None })
                        })
                        .collect(),
                )
            })
            .collect();
        ProduceResponse::default().with_responses(responses)
    };
    if !(-1..=1).contains(&acks) {
        let body = refuse_all(ErrorCode::InvalidRequiredAcks, "acks must be -1, 0 or 1");
        return ready(encode(ApiKey::Produce, &header, v, &body));
    }
    let access = l.access().await;
    // A transactional producer's batches are checked against its transaction's state, read once
    // for the request (KIP-890 part 1: the partition is in the ongoing transaction).
    let mut txn: Option<TxnContext> = None;
    if let Some(id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) {
        let refusal = if id.is_empty() {
            Some((ErrorCode::InvalidRequest, "an empty transactional id"))
        } else if !access.allowed(Operation::Write, Resource::TransactionalId, &id) {
            Some((ErrorCode::TransactionalIdAuthorizationFailed, "not authorized to WRITE this transactional id"))
        } else {
            None
        };
        if let Some((code, why)) = refusal {
            let body = refuse_all(code, why);
            return ready(if acks == 0 {
                Err(anyhow::anyhow!("a transactional Produce with acks=0 was refused: closing the connection"))
            } else {
                encode(ApiKey::Produce, &header, v, &body)
            });
        }
        txn = Some(TxnContext { id, state: Err(UNREAD) });
    }
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for t in req.topic_data {
        let topic = l.topic(&access, Operation::Write, t.name.as_str()).await;
        topics.push((t, topic));
    }
    if let Some(txn) = txn.as_mut() {
        txn.state = if v >= 12 {
            added_implicitly(&l, &txn.id, &topics).await
        } else {
            l.shim.transactions.describe(&txn.id).await.map_err(|_| UNREAD)
        };
    }

    // Enqueue every batch now, in request order; wait for the commits in the future.
    type Waits = Result<Vec<Waiting>, KafkaError>;
    let mut plan: Vec<(TopicName, Vec<(i32, Waits, bool)>)> = vec![];
    for (t, topic) in topics {
        let mut parts = vec![];
        for p in t.partition_data {
            let mut log_append_time = false;
            let waits = async {
                let topic = topic.clone()?;
                l.partition(&topic, p.index)?;
                let records = p.records.unwrap_or_default();
                let (waits, lat) =
                    submit_partition(&l.shim.producer, v, &topic, p.index, records, txn.as_ref()).await?;
                log_append_time = lat;
                Ok(waits)
            }
            .await;
            parts.push((p.index, waits, log_append_time));
        }
        plan.push((t.name, parts));
    }
    Box::pin(async move {
        let mut responses = vec![];
        let mut failed = 0usize;
        for (topic, parts) in plan {
            let mut out = vec![];
            for (index, waits, lat) in parts {
                let result = match waits {
                    Err(e) => Err(e),
                    Ok(waits) => {
                        // The first batch's offsets, or the first error.
                        let results = join_all(waits).await;
                        let first_error = results.iter().find_map(|r| r.as_ref().err()).cloned();
                        match (first_error, results.into_iter().next()) {
                            (Some(e), _) => Err(e),
                            (None, Some(first)) => first,
                            (None, None) => {
                                Err(KafkaError::new(ErrorCode::UnknownServerError, "no batch was produced"))
                            }
                        }
                    }
                };
                let mut r = produce_response::PartitionProduceResponse::default().with_index(index);
                match result {
                    Ok(a) => {
                        r = r
                            .with_error_code(ErrorCode::None.code())
                            .with_base_offset(a.base_offset)
                            .with_log_append_time_ms(if lat { a.log_append_time } else { -1 });
                        if v >= 5 {
                            r = r.with_log_start_offset(a.log_start_offset);
                        }
                    }
                    Err(e) => {
                        if e.code == ErrorCode::UnknownTopicOrPartition {
                            l.shim.cluster.forget_topic(topic.as_str());
                        }
                        failed += 1;
                        r = r.with_error_code(e.code.code()).with_base_offset(-1);
                        if v >= 8 {
                            let record_errors = e
                                .record_errors
                                .iter()
                                .map(|(i, m)| {
                                    produce_response::BatchIndexAndErrorMessage::default()
                                        .with_batch_index(*i)
                                        .with_batch_index_error_message(message(m.clone()))
                                })
                                .collect();
                            r = r.with_error_message(message(e.message)).with_record_errors(record_errors);
                        }
                    }
                }
                out.push(r);
            }
            responses
                .push(produce_response::TopicProduceResponse::default().with_name(topic).with_partition_responses(out));
        }
        if acks == 0 {
            // No answer is sent: a failure closes the connection (as Kafka's broker does), so the
            // producer notices, reconnects and refreshes its metadata.
            anyhow::ensure!(
                failed == 0,
                "a Produce with acks=0 failed for {failed} partition(s): closing the connection"
            );
            return Ok(None);
        }
        encode(ApiKey::Produce, &header, v, &ProduceResponse::default().with_responses(responses))
    })
}

/// One partition's records of a Produce request (v3+): exactly one record batch, as
/// `ProduceRequest.validateRecords` requires, validated record by record (`crate::validate`)
/// before it is enqueued; zstd only from v7. Returns the batch's future and whether the stored
/// batch carries LogAppendTime.
async fn submit_partition(
    producer: &Producer,
    version: i16,
    topic: &TopicMeta,
    partition: i32,
    records: bytes::Bytes,
    txn: Option<&TxnContext>,
) -> Result<(Vec<Waiting>, bool), KafkaError> {
    let name = format!("{}-{partition}", topic.name);
    let batch = crate::validate::one_batch(version, records, &name)?;
    let mut validated = producer.validate(vec![batch], producer.limits_for(&topic.overrides), name).await?;
    for b in validated.iter_mut().filter(|b| b.header.is_transactional()) {
        let Some(txn) = txn else {
            return Err(KafkaError::new(
                ErrorCode::TransactionalIdAuthorizationFailed,
                "a transactional record batch needs a Produce request with its transactional id",
            ));
        };
        b.txn_number = txn.verify(b.header.producer_id, b.header.producer_epoch, (topic.id, partition))?;
    }
    let log_append_time = validated.iter().any(|b| b.header.timestamp_type == 1);
    Ok((producer.submit_all(topic.id, partition, validated).await?, log_append_time))
}

/// A transactional Produce's transaction, as stored when the request was read (v0–v11, which
/// only verify), or once its partitions were added to it (v12+, transactions v2).
struct TxnContext {
    id: String,
    state: Result<Option<diskless_proto::v1::Transaction>, (ErrorCode, &'static str)>,
}

/// The transaction's state could not be read. Nothing was committed: the producer may send the
/// batches again.
const UNREAD: (ErrorCode, &str) = (ErrorCode::RequestTimedOut, "the transaction's state could not be read");

/// Produce v12+ (transactions v2, KIP-890 part 2): the partitions of the request's transactional
/// batches added to their producer's transaction, as Kafka's partition leader has the
/// coordinator add them (`AddPartitionsToTxnManager`, with its error mapping: a fenced producer
/// reads INVALID_PRODUCER_EPOCH; a coordinator out of reach, which Kafka answers
/// NOT_ENOUGH_REPLICAS, is REQUEST_TIMED_OUT here, retriable alike). Batches that do not parse, and partitions that do not
/// exist or may not be written, are left for the checks that refuse them.
async fn added_implicitly(
    l: &Session,
    id: &str,
    topics: &[(produce_request::TopicProduceData, Result<TopicMeta, KafkaError>)],
) -> Result<Option<diskless_proto::v1::Transaction>, (ErrorCode, &'static str)> {
    let mut producer = None;
    let mut partitions = vec![];
    for (t, topic) in topics {
        let Ok(topic) = topic else { continue };
        for p in &t.partition_data {
            let Some(records) = p.records.as_deref() else { continue };
            let Ok(h) = crate::wal::record_batch::parse(records) else { continue };
            if h.is_transactional() && l.partition(topic, p.index).is_ok() {
                // One producer per request; a batch of another is refused by its verification.
                producer.get_or_insert((h.producer_id, h.producer_epoch));
                partitions.push((topic.id, p.index));
            }
        }
    }
    let Some((producer_id, epoch)) = producer else {
        return l.shim.transactions.describe(id).await.map_err(|_| UNREAD);
    };
    match l.shim.transactions.add_implicitly(id, producer_id, epoch, &partitions).await {
        Ok(t) => Ok(Some(t)),
        Err(ErrorCode::ProducerFenced) => {
            Err((ErrorCode::InvalidProducerEpoch, "the producer's epoch is not its transactional id's"))
        }
        Err(ErrorCode::CoordinatorNotAvailable | ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoadInProgress) => {
            Err((ErrorCode::RequestTimedOut, "the transaction's state could not be read or stored"))
        }
        Err(code) => Err((code, "the partition could not be added to the producer's transaction")),
    }
}

impl TxnContext {
    /// The number of the batch's transaction, or why it is not part of one.
    fn verify(
        &self,
        producer_id: i64,
        epoch: i16,
        p: crate::coordinators::transactions::TxnPartition,
    ) -> Result<u64, KafkaError> {
        let refused = |code: ErrorCode, why: &str| KafkaError::new(code, why.to_string());
        match &self.state {
            Err((code, why)) => Err(refused(*code, why)),
            Ok(None) => Err(refused(ErrorCode::InvalidTxnState, "the transactional id has no transaction")),
            Ok(Some(t)) => crate::coordinators::transactions::verify_in(t, producer_id, epoch, &p).map_err(|code| {
                refused(code, "the batch is not part of its producer's ongoing transaction (was the partition added?)")
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::{BufMut, Bytes, BytesMut};

    use super::*;
    use crate::produce::testing::producer;
    use crate::produce::ProduceConfig;
    use crate::wal::record_batch::tests::fake_batch;

    #[tokio::test]
    async fn a_partition_gets_exactly_one_whole_batch_or_nothing_of_it_is_committed() {
        let config = ProduceConfig { commit_interval_ms: 1, ..ProduceConfig::default() };
        let (p, tasks, fake, storage) = producer(config, true, Duration::from_secs(600));
        let topic = TopicMeta {
            id: [1; 16],
            name: "t".into(),
            partitions: 1,
            retention_ms: -1,
            retention_bytes: -1,
            overrides: Default::default(),
        };
        let mut damaged = fake_batch(2, -1, -1);
        damaged[30] ^= 1; // breaks the CRC
        let two = [fake_batch(3, -1, -1), fake_batch(2, -1, -1)].concat();
        let cut = fake_batch(2, -1, -1)[..40].to_vec();
        let partial_second = [fake_batch(3, -1, -1), cut.clone()].concat();
        for (records, code) in [
            (damaged, ErrorCode::CorruptMessage),
            (two, ErrorCode::InvalidRecord),
            (partial_second, ErrorCode::InvalidRecord),
            (cut, ErrorCode::CorruptMessage),
            (vec![], ErrorCode::InvalidRecord),
        ] {
            let mut b = BytesMut::new();
            b.put_slice(&records);
            let r = submit_partition(&p, 9, &topic, 0, b.freeze(), None).await;
            assert_eq!(r.err().map(|e| e.code), Some(code));
        }
        // zstd needs Produce v7.
        let mut zstd = fake_batch(1, -1, -1);
        zstd[22] |= 4;
        let r = submit_partition(&p, 6, &topic, 0, Bytes::from(zstd), None).await;
        assert_eq!(r.err().map(|e| e.code), Some(ErrorCode::UnsupportedCompressionType));
        // A good request goes through.
        let (waits, lat) = submit_partition(&p, 9, &topic, 0, Bytes::from(fake_batch(3, -1, -1)), None).await.unwrap();
        assert!(!lat);
        for w in waits {
            w.await.unwrap();
        }
        drop(p);
        tasks.join().await;
        let commits = fake.commits();
        assert_eq!(commits.len(), 1, "only the good request was committed");
        assert_eq!(commits[0].batches.len(), 1);
        assert_eq!(storage.list("").await.unwrap().len(), 1);
    }
}
