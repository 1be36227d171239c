//! Transactions end to end (issue 27) with real clients through two brokers: confluent-kafka
//! (librdkafka), aiokafka and kafka-python transactional producers commit and abort, a second producer of one
//! transactional id fences the first, and `read_committed` consumers see exactly the committed
//! records, and a consume-transform-produce loop with `send_offsets_to_transaction` writes every
//! input record exactly once and commits the group's offsets with its transactions
//! (`tests/python/transactions.py`). Then the transactional id's state as the coordinator
//! cluster keeps it: Complete states, one producer id per transactional id, numbered transactions.

use diskless_cluster_tests::*;
use diskless_proto::v1::*;

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
    for t in [TOPIC, "txn-in", "txn-out"] {
        create_topic_via(&mut a.client().await, t, 2).await;
    }
    let brokers = format!("{},{}", a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    let args = vec![brokers, TOPIC.into(), "txn-in".into(), "txn-out".into()];
    let out = run_python_checks("transactions.py", args, "all transaction checks passed").await;
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
}
