//! Real Kafka clients nobody on this team wrote (kcat, kafka-python, confluent-kafka) against two
//! diskless brokers on one coordinator quorum; see `tests/python/kafka_clients.py` for the checks.
//! Also: bad input on the Kafka port closes that connection and the broker stays up.

use std::io::{Read, Write};
use std::time::Duration;

use diskless_cluster_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_kafka_python_and_confluent_kafka_produce_and_consume_through_two_brokers() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 50, ..BrokerOptions::default() };
    let a = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let b = BrokerProc::start(&c, "b", &TestStorage::Local(c.path("objects")), &options).await;
    let (ka, kb) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    run_python_checks("kafka_clients.py", vec![ka, kb], "ALL CLIENT CHECKS PASSED").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_the_connection_and_the_broker_stays_up() {
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, ..BrokerOptions::default() };
    let broker = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let addr = broker.kafka_addr.clone().unwrap();
    let send = |bytes: Vec<u8>| {
        let addr = addr.clone();
        move || {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(&bytes).unwrap();
            let mut buf = [0u8; 64];
            // The broker closes the connection: read returns 0 (or a reset).
            matches!(s.read(&mut buf), Ok(0) | Err(_))
        }
    };
    let garbage = vec![0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4];
    let unknown_api = vec![0, 0, 0, 10, 0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    let oversized = vec![0x7f, 0xff, 0xff, 0xff, 0, 0];
    let bad_version = vec![0, 0, 0, 10, 0, 0, 0x00, 0x63, 0, 0, 0, 1, 0xff, 0xff]; // Produce v99
    for (what, bytes) in
        [("garbage", garbage), ("unknown API", unknown_api), ("oversized", oversized), ("bad version", bad_version)]
    {
        let closed = tokio::task::spawn_blocking(send(bytes)).await.unwrap();
        assert!(closed, "{what}: the broker closes the connection");
    }
    // Still up and serving: a produce through the broker's API works.
    let mut client = broker.client().await;
    create_topic_via(&mut client, "after", 1).await;
    let r = produce_retrying(&mut client, "after", 0, batch_of(&["fine".into()])).await;
    assert_eq!(r.base_offset, 0);
}
