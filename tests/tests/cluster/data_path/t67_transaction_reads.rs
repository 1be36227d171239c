//! Reading transactions through the broker (the partition side): a transactional batch
//! committed between plain records holds the partition's last stable offset — a `read_committed`
//! fetch gets only what precedes it, a `read_uncommitted` one everything — and once its
//! transaction is aborted, a `read_committed` fetch gets the partition's records, the ABORT control
//! batch the broker builds from the marker, and the aborted transaction to skip, which real
//! clients (confluent-kafka and kafka-python consumers, `read_committed`) do: they deliver the
//! plain records and not the aborted ones. A committed transaction's records are delivered.
//!
//! The transactional batches are written as a transactional producer's broker will write them
//! (a segment in the store, CommitFile with `is_transactional`, EndTransaction), since the
//! transaction coordinator is not built yet.

use std::time::{Duration, Instant};

use bytes::Bytes;
use diskless_broker_shim::records::{self, Idempotence};
use diskless_cluster_tests::nemesis::kafka_client::{Fetched, KafkaClient};
use diskless_cluster_tests::*;
use diskless_proto::v1::*;
use kafka_protocol::records::RecordBatchDecoder;

const TOPIC: &str = "txn-reads";
const PRODUCER: i64 = 7_000;

/// Every record of a fetch answer: (offset, value, control).
fn records_of(f: &Fetched) -> Vec<(i64, String, bool)> {
    let mut out = vec![];
    let mut bytes = f.records.clone();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).expect("record batches");
        for r in set.records {
            let value = r.value.map(|v| String::from_utf8_lossy(&v).into_owned()).unwrap_or_default();
            out.push((r.offset, if r.control { String::new() } else { value }, r.control));
        }
    }
    out
}

/// Produces one plain record through the broker; its offset.
async fn produce_plain(client: &mut KafkaClient, value: &str) -> i64 {
    let batch = records::encode(
        &[(None, Some(Bytes::from(value.to_string())))],
        1_000,
        kafka_protocol::records::Compression::None,
        records::NOT_IDEMPOTENT,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.produce(TOPIC, 0, batch.clone()).await {
            Ok((0, offset)) => return offset,
            other => assert!(Instant::now() < deadline, "produce {value}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes a transactional batch of `values` (producer `PRODUCER`, `epoch`, from sequence `seq`) as
/// a segment of the store, and commits it as a broker would; the offset it was given.
async fn commit_transactional(
    c: &Cluster,
    objects: &std::path::Path,
    topic_id: &[u8],
    key: &str,
    epoch: i16,
    seq: i32,
    values: &[&str],
) -> i64 {
    let recs: Vec<(Option<Bytes>, Option<Bytes>)> =
        values.iter().map(|v| (None, Some(Bytes::from(v.to_string())))).collect();
    let idem = Idempotence { producer_id: PRODUCER, producer_epoch: epoch, base_sequence: seq };
    let batch = records::encode_transactional(&recs, 2_000, idem).unwrap();
    let mut object = vec![0u8];
    object.extend_from_slice(&batch);
    let path = objects.join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &object).unwrap();
    let n = values.len() as i64;
    let req = CommitFileRequest {
        object_key: key.into(),
        object_format: 1,
        file_size: object.len() as i64,
        owner_ids: vec![],
        batches: vec![commit_file_request::CommitBatch {
            producer_id: PRODUCER,
            producer_epoch: i32::from(epoch),
            base_sequence: seq,
            last_sequence: seq + n as i32 - 1,
            is_transactional: true,
            txn_number: 0,
            batch_max_timestamp: 2_000 + n - 1,
            ..batch_of(topic_id, n, 1, batch.len() as i32)
        }],
        timeout_ms: 10_000,
        uploader_broker_id: 1,
    };
    let r = c.client(1).await.commit_file(req).await.expect("commit").into_inner();
    assert_eq!(r.batches[0].error_code, 0, "{:?}", r.batches[0].error_message);
    r.batches[0].assigned_base_offset
}

fn batch_of(topic_id: &[u8], records: i64, at: i32, size: i32) -> commit_file_request::CommitBatch {
    batch(topic_id, 0, records, at, size)
}

async fn end(c: &Cluster, topic_id: &[u8], epoch: i32, commit: bool) -> i64 {
    let marker = end_transaction_request::Marker {
        topic_id: topic_id.to_vec(),
        partition_index: 0,
        producer_id: PRODUCER,
        producer_epoch: epoch,
        commit,
        coordinator_epoch: 1,
        txn_number: 0,
    };
    let r = c
        .client(2)
        .await
        .end_transaction(EndTransactionRequest { markers: vec![marker], timeout_ms: 10_000 })
        .await
        .expect("end transaction")
        .into_inner();
    assert_eq!(r.markers[0].error_code, 0, "{:?}", r.markers[0].error_message);
    r.markers[0].offset
}

/// A fetch from 0 until its answer reaches `hwm` (the broker learns of commits it did not make
/// through its watch).
async fn fetch_until(client: &mut KafkaClient, hwm: i64) -> Fetched {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let f = client.fetch(TOPIC, 0, 0).await.expect("fetch");
        if f.error_code == 0 && f.high_watermark >= hwm {
            return f;
        }
        assert!(Instant::now() < deadline, "the broker never showed high watermark {hwm}: {f:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_an_open_transaction_and_skips_an_aborted_one_with_real_clients() {
    let c = Cluster::start(3, Options::default()).await;
    let objects = c.path("objects");
    let options = BrokerOptions { kafka: true, commit_interval_ms: 50, ..BrokerOptions::default() };
    let broker = BrokerProc::start(&c, "b", &TestStorage::Local(objects.clone()), &options).await;
    let addr = broker.kafka_addr.clone().unwrap();
    create_topic_via(&mut broker.client().await, TOPIC, 1).await;
    let topics = c
        .client(1)
        .await
        .list_topics(ListTopicsRequest { names: vec![TOPIC.into()], timeout_ms: 10_000 })
        .await
        .expect("list topics")
        .into_inner();
    let topic_id = topics.topics[0].topic_id.clone();
    let mut producer = KafkaClient::connect(&addr).await.unwrap();
    let mut uncommitted = KafkaClient::connect(&addr).await.unwrap();
    let mut committed = KafkaClient::connect(&addr).await.unwrap().read_committed();

    // p-0 at 0; an open transaction at 1..2; p-1 at 3.
    assert_eq!(produce_plain(&mut producer, "p-0").await, 0);
    assert_eq!(commit_transactional(&c, &objects, &topic_id, "txn/aborted", 0, 0, &["t-0", "t-1"]).await, 1);
    assert_eq!(produce_plain(&mut producer, "p-1").await, 3);
    let f = fetch_until(&mut uncommitted, 4).await;
    let values: Vec<String> = records_of(&f).into_iter().map(|r| r.1).collect();
    assert_eq!(values, vec!["p-0", "t-0", "t-1", "p-1"], "read_uncommitted reads everything");
    let f = fetch_until(&mut committed, 4).await;
    assert_eq!(f.last_stable_offset, 1, "{f:?}");
    let values: Vec<String> = records_of(&f).into_iter().map(|r| r.1).collect();
    assert_eq!(values, vec!["p-0"], "read_committed stops at the open transaction");

    // Aborted: the marker at 4.
    assert_eq!(end(&c, &topic_id, 1, false).await, 4);
    let f = fetch_until(&mut committed, 5).await;
    assert_eq!((f.last_stable_offset, f.aborted.clone()), (5, vec![(PRODUCER, 1)]), "{f:?}");
    let got = records_of(&f);
    assert_eq!(got.last(), Some(&(4, String::new(), true)), "the ABORT control batch: {got:?}");

    // A committed transaction of the next epoch: 5..6, its marker at 7, then p-2 at 8.
    assert_eq!(commit_transactional(&c, &objects, &topic_id, "txn/committed", 1, 0, &["c-0", "c-1"]).await, 5);
    assert_eq!(end(&c, &topic_id, 2, true).await, 7);
    assert_eq!(produce_plain(&mut producer, "p-2").await, 8);

    if kafka_clients_available() {
        let out = run_python_checks(
            "transaction_reads.py",
            vec![addr.clone(), TOPIC.into()],
            "all transaction read checks passed",
        )
        .await;
        println!("{out}");
    }
}
