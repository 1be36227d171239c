//! Transactions end to end with real clients through two brokers: confluent-kafka
//! (librdkafka), aiokafka, kafka-python and KafkaJS transactional producers commit and abort, a second producer of one
//! transactional id fences the first, and `read_committed` consumers see exactly the committed
//! records, and a consume-transform-produce loop with `send_offsets_to_transaction` writes every
//! input record exactly once and commits the group's offsets with its transactions
//! (`tests/python/transactions.py`). Then the transactional id's state as the coordinator
//! cluster keeps it: Complete states, one producer id per transactional id, numbered transactions;
//! and DescribeProducers names the producers that wrote.

use diskless_cluster_tests::*;
use diskless_proto::v1::DescribeTransactionsRequest;
use kafka_protocol::messages::{
    describe_producers_request, ApiKey, DescribeProducersRequest, DescribeProducersResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "txn";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t68_transactional_producers_commit_abort_and_are_fenced() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 20, ..BrokerOptions::default() };
    let storage = TestStorage::Local(c.path("objects"));
    let a = BrokerProc::start(&c, "a", &storage, &options).await;
    let b = BrokerProc::start(&c, "b", &storage, &options).await;
    for t in [TOPIC, "txn-in", "txn-out", "txn-js"] {
        create_topic_via(&mut a.client().await, t, 2).await;
    }
    let brokers = format!("{},{}", a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    let args = vec![brokers.clone(), TOPIC.into(), "txn-in".into(), "txn-out".into()];
    let out = run_python_checks("transactions.py", args, "all transaction checks passed").await;
    println!("{out}");
    let out =
        run_node_checks("transactions.js", vec![brokers, "txn-js".into()], "all KafkaJS transaction checks passed")
            .await;
    println!("{out}");

    let r = c
        .client(1)
        .await
        .describe_transactions(DescribeTransactionsRequest {
            transactional_ids: vec!["tx-a".into(), "tx-f".into(), "tx-aio".into(), "tx-kp".into()],
            timeout_ms: 10_000,
        })
        .await
        .expect("describe")
        .into_inner();
    let states: Vec<(String, String, u64)> = r
        .results
        .iter()
        .map(|x| {
            let t = x.transaction.clone().expect("stored");
            (x.transactional_id.clone(), t.state, t.txn_number)
        })
        .collect();
    assert_eq!(
        states,
        vec![
            ("tx-a".into(), "CompleteCommit".into(), 3),
            ("tx-f".into(), "CompleteCommit".into(), 2),
            ("tx-aio".into(), "CompleteAbort".into(), 2),
            ("tx-kp".into(), "CompleteAbort".into(), 2),
        ],
        "{states:?}"
    );

    // DescribeProducers through the other broker: the transactional producers that wrote to the
    // topic, at their epochs, none with a transaction open; an unknown partition is refused.
    let pid = |id: &str| {
        let t =
            r.results.iter().find(|x| x.transactional_id == id).and_then(|x| x.transaction.clone()).expect("stored");
        (t.producer_id, t.producer_epoch)
    };
    let req = DescribeProducersRequest::default()
        .with_topics(vec![describe_producers_request::TopicRequest::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_indexes(vec![0, 1, 9])]);
    let answer: DescribeProducersResponse =
        kafka_call(b.kafka_addr.as_deref().unwrap(), ApiKey::DescribeProducers, 0, &req).await;
    let parts = &answer.topics[0].partitions;
    assert_eq!(parts.iter().map(|p| p.error_code).collect::<Vec<_>>(), vec![0, 0, 3], "{answer:?}");
    let described: Vec<(i64, i32, i64)> = parts[..2]
        .iter()
        .flat_map(|p| {
            p.active_producers.iter().map(|a| (a.producer_id.0, a.producer_epoch, a.current_txn_start_offset))
        })
        .collect();
    for id in ["tx-a", "tx-aio", "tx-kp"] {
        let (producer_id, epoch) = pid(id);
        assert!(
            described.iter().any(|&(p, e, open)| p == producer_id && e <= epoch && open == -1),
            "{id} ({producer_id}, epoch {epoch}) in {described:?}"
        );
    }
}

/// KIP-447: while a transaction that sent a group's offsets has not ended, OffsetFetch with
/// `require_stable` answers UNSTABLE_OFFSET_COMMIT for those partitions (a consumer taking them
/// over waits instead of reading the old offset and processing again what the transaction
/// covers); once it committed, the offset it sent. Without `require_stable` the last committed
/// offset is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t68_offset_fetch_require_stable_waits_for_a_transactions_pending_offsets() {
    use kafka_protocol::messages::*;
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 20, ..BrokerOptions::default() };
    let a = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    create_topic_via(&mut a.client().await, TOPIC, 2).await;
    let addr = a.kafka_addr.clone().unwrap();
    let text = |v: &str| StrBytes::from_string(v.to_string());
    let (txid, group) = (TransactionalId(text("tx-stable")), GroupId(text("g-stable")));

    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(txid.clone()))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r: InitProducerIdResponse = kafka_call(&addr, ApiKey::InitProducerId, 4, &init).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let (pid, epoch) = (r.producer_id, r.producer_epoch);
    let add = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txid.clone())
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_group_id(group.clone());
    let r: AddOffsetsToTxnResponse = kafka_call(&addr, ApiKey::AddOffsetsToTxn, 3, &add).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(txid.clone())
        .with_group_id(group.clone())
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(text(TOPIC)))
            .with_partitions(vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(5)])]);
    let r: TxnOffsetCommitResponse = kafka_call(&addr, ApiKey::TxnOffsetCommit, 3, &commit).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{r:?}");

    let fetch = |stable: bool| {
        OffsetFetchRequest::default().with_require_stable(stable).with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(group.clone()).with_topics(Some(
                vec![offset_fetch_request::OffsetFetchRequestTopics::default()
                    .with_name(TopicName(text(TOPIC)))
                    .with_partition_indexes(vec![0, 1])],
            )),
        ])
    };
    let fetched = |r: &OffsetFetchResponse| -> Vec<(i64, i16)> {
        r.groups[0].topics[0].partitions.iter().map(|p| (p.committed_offset, p.error_code)).collect()
    };
    let r: OffsetFetchResponse = kafka_call(&addr, ApiKey::OffsetFetch, 8, &fetch(true)).await;
    assert_eq!(fetched(&r), vec![(-1, 88), (-1, 0)], "pending: UNSTABLE_OFFSET_COMMIT for partition 0 only");
    let r: OffsetFetchResponse = kafka_call(&addr, ApiKey::OffsetFetch, 8, &fetch(false)).await;
    assert_eq!(fetched(&r), vec![(-1, 0), (-1, 0)], "without require_stable: the committed offsets (none)");

    let end = EndTxnRequest::default()
        .with_transactional_id(txid)
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_committed(true);
    let r: EndTxnResponse = kafka_call(&addr, ApiKey::EndTxn, 3, &end).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let r: OffsetFetchResponse = kafka_call(&addr, ApiKey::OffsetFetch, 8, &fetch(true)).await;
    assert_eq!(fetched(&r), vec![(5, 0), (-1, 0)], "committed with the transaction");
}

/// Transactions v2 (KIP-890 part 2) on the wire, as Kafka 4's Java producer speaks it once
/// ApiVersions finalizes `transaction.version` at 2 (no such client can be installed here): no
/// AddPartitionsToTxn nor AddOffsetsToTxn (Produce v12 and TxnOffsetCommit v5 add their partition
/// and group, through either broker), EndTxn v5 answers the epoch bumped, and the producer's next
/// transaction uses it from sequence 0. A late batch of an ended transaction is fenced; a retried
/// EndTxn is answered again; an abort with nothing sent still bumps the epoch; `read_committed`
/// reads exactly the committed transaction and the group's offset is the one it committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t68_transactions_v2_bump_the_epoch_at_every_end_and_fence_late_batches() {
    use diskless_cluster_tests::nemesis::kafka_client::KafkaClient;
    use diskless_cluster_tests::nemesis::workload::transactions::committed_only;
    use kafka_protocol::messages::*;
    const TOPIC_V2: &str = "txn-v2";
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 20, ..BrokerOptions::default() };
    let storage = TestStorage::Local(c.path("objects"));
    let a = BrokerProc::start(&c, "a", &storage, &options).await;
    let b = BrokerProc::start(&c, "b", &storage, &options).await;
    create_topic_via(&mut a.client().await, TOPIC_V2, 2).await;
    let addrs = [a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap()];

    // The feature that turns transactions v2 on in Kafka 4's clients.
    let r: ApiVersionsResponse = kafka_call(&addrs[0], ApiKey::ApiVersions, 4, &ApiVersionsRequest::default()).await;
    let tv = r.finalized_features.iter().find(|f| f.name.as_str() == "transaction.version").expect("finalized");
    assert_eq!((tv.min_version_level, tv.max_version_level), (2, 2));
    assert!(r.finalized_features_epoch >= 0, "a Java client ignores features of a negative epoch");
    let sv = r.supported_features.iter().find(|f| f.name.as_str() == "transaction.version").expect("supported");
    assert_eq!((sv.min_version, sv.max_version), (0, 2));
    let end_txn = r.api_keys.iter().find(|k| k.api_key == ApiKey::EndTxn as i16).unwrap();
    assert_eq!(end_txn.max_version, 5);

    // The transactional id's coordinator answers InitProducerId; the other is NOT_COORDINATOR.
    let id = "tx-v2";
    let mut clients = vec![];
    for addr in &addrs {
        clients.push(KafkaClient::connect(addr).await.unwrap());
    }
    // Both brokers name the same coordinator once each sees the other live.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (x, y) =
            (clients[0].find_txn_coordinator(id).await.unwrap(), clients[1].find_txn_coordinator(id).await.unwrap());
        if x.0 == 0 && x == y {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the brokers name {x:?} and {y:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let mut coordinator = None;
    for (i, k) in clients.iter_mut().enumerate() {
        let (code, pid, epoch) = k.init_transactional_id(id, 60_000).await.unwrap();
        if code == 0 {
            coordinator = Some((i, pid, epoch));
            break;
        }
        assert_eq!(code, 16, "NOT_COORDINATOR from the other broker");
    }
    let (co, pid, e0) = coordinator.expect("one broker coordinates the id");
    let other = 1 - co;
    let values = |tag: &str| -> Vec<String> { (0..3).map(|i| format!("{tag}-{i}")).collect() };
    let batch = |tag: &str, epoch: i16, seq: i32| {
        bytes::Bytes::from(transactional_batch_of(
            &values(tag),
            Idempotence { producer_id: pid, producer_epoch: epoch, base_sequence: seq },
        ))
    };

    // Transaction 1: both partitions, one through each broker, and the group's offset.
    let r = clients[co].produce_txn_v2(id, TOPIC_V2, 0, batch("one-p0", e0, 0)).await.unwrap();
    assert_eq!(r.0, 0, "Produce v12 adds partition 0 itself: {r:?}");
    let r = clients[other].produce_txn_v2(id, TOPIC_V2, 1, batch("one-p1", e0, 0)).await.unwrap();
    assert_eq!(r.0, 0, "through the broker that does not coordinate the id: {r:?}");
    let mut group_coordinator = None;
    for (i, k) in clients.iter_mut().enumerate() {
        let code = k.txn_offset_commit_v2(id, (pid, e0), "g-v2", TOPIC_V2, 0, 3).await.unwrap();
        if code == 0 {
            group_coordinator = Some(i);
            break;
        }
        assert_eq!(code, 16, "NOT_COORDINATOR from the group's other broker");
    }
    let gc = group_coordinator.expect("TxnOffsetCommit v5 adds the group itself");
    assert_eq!(clients[co].end_txn_v2(id, (pid, e0), true).await.unwrap(), (0, pid, e0 + 1));
    assert_eq!(clients[co].end_txn_v2(id, (pid, e0), true).await.unwrap(), (0, pid, e0 + 1), "a retry");

    // A late batch of transaction 1 (its epoch) is fenced.
    let r = clients[other].produce_txn_v2(id, TOPIC_V2, 0, batch("late", e0, 3)).await.unwrap();
    assert_eq!(r.0, 47, "INVALID_PRODUCER_EPOCH: {r:?}");

    // Transaction 2 with the new epoch from sequence 0, aborted.
    let e1 = e0 + 1;
    let r = clients[other].produce_txn_v2(id, TOPIC_V2, 0, batch("two-p0", e1, 0)).await.unwrap();
    assert_eq!(r.0, 0, "{r:?}");
    let r = clients[gc].txn_offset_commit_v2(id, (pid, e1), "g-v2", TOPIC_V2, 0, 99).await.unwrap();
    assert_eq!(r, 0);
    assert_eq!(clients[co].end_txn_v2(id, (pid, e1), false).await.unwrap(), (0, pid, e1 + 1));
    // An abort with nothing sent bumps the epoch too; a commit of nothing is INVALID_TXN_STATE.
    assert_eq!(clients[co].end_txn_v2(id, (pid, e1 + 1), false).await.unwrap(), (0, pid, e1 + 2));
    assert_eq!(clients[co].end_txn_v2(id, (pid, e1 + 2), true).await.unwrap(), (48, -1, -1));
    // The old protocol's EndTxn (v3) of the current epoch is still answered: nothing to end.
    assert_eq!(clients[co].end_txn(id, (pid, e1 + 2), true).await.unwrap(), 48);

    // read_committed: transaction 1's records, not transaction 2's nor the fenced batch.
    let mut reader = KafkaClient::connect(&addrs[other]).await.unwrap().read_committed();
    let mut got = vec![];
    for partition in 0..2 {
        let f = reader.fetch(TOPIC_V2, partition, 0).await.unwrap();
        assert_eq!(f.error_code, 0);
        assert_eq!(f.last_stable_offset, f.high_watermark, "no transaction left open");
        let msgs = kafka_records::decode(f.records.clone()).unwrap();
        got.extend(committed_only(msgs, &f.aborted).into_iter().map(|(_, _, value)| value));
    }
    let mut want = values("one-p0");
    want.extend(values("one-p1"));
    assert_eq!(got, want);

    // The group's offset is transaction 1's, not the aborted 99.
    let fetch =
        OffsetFetchRequest::default().with_groups(vec![offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g-v2")))
            .with_topics(Some(vec![offset_fetch_request::OffsetFetchRequestTopics::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC_V2)))
                .with_partition_indexes(vec![0])]))]);
    let r: OffsetFetchResponse = kafka_call(&addrs[gc], ApiKey::OffsetFetch, 8, &fetch).await;
    assert_eq!(r.groups[0].topics[0].partitions[0].committed_offset, 3, "{r:?}");
}
