//! Kafka's answers where a diskless broker could approximate them, through three client
//! implementations (confluent-kafka, kafka-python, aiokafka): ListOffsets by timestamp to the
//! record inside a batch, MAX_TIMESTAMP, lookups after DeleteRecords cut a batch; CreatePartitions
//! through one broker seen by the other at once; and transactional producers and KIP-848 consumers
//! starting at once. See
//! `tests/python/kafka_semantics.py` for the checks.

use diskless_cluster_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_names_records_create_partitions_grows_topics_and_new_protocols_start_at_once() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 50, ..BrokerOptions::default() };
    let a = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let b = BrokerProc::start(&c, "b", &TestStorage::Local(c.path("objects")), &options).await;
    let addrs = vec![a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap()];
    run_python_checks("kafka_semantics.py", addrs, "ALL SEMANTICS CHECKS PASSED").await;
}
