//! Producer ids are unique across brokers: two brokers (the registry refuses two live brokers with
//! one id; producer ids never depended on broker ids), asked
//! for producer ids at the same time through the Kafka protocol, never hand out one id twice — a
//! second producer with the same id would have its first batches taken for duplicates and
//! acknowledged without being stored.

use std::collections::BTreeSet;

use diskless_cluster_tests::*;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};
use tokio::net::TcpStream;

const VERSION: i16 = 4;

/// One InitProducerId over an open Kafka connection: the producer id (or the error code).
async fn init_producer_id(stream: &mut TcpStream, correlation_id: i32) -> Result<i64, i16> {
    let req = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000);
    let r: InitProducerIdResponse = kafka_request(stream, ApiKey::InitProducerId, VERSION, correlation_id, &req).await;
    if r.error_code != 0 {
        return Err(r.error_code);
    }
    Ok(r.producer_id.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_never_hand_out_the_same_producer_id() {
    let c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::Local(c.path("objects"));
    let options = BrokerOptions { kafka: true, ..BrokerOptions::default() };
    let a = BrokerProc::start(&c, "a", &storage, &options).await;
    let b = BrokerProc::start(&c, "b", &storage, &options).await;

    let mut tasks = vec![];
    for broker in [&a, &b] {
        for _ in 0..3 {
            let addr = broker.kafka_addr.clone().expect("kafka listener");
            tasks.push(tokio::spawn(async move {
                let mut stream = TcpStream::connect(&addr).await.expect("connect");
                let mut ids = vec![];
                for i in 0..150 {
                    ids.push(init_producer_id(&mut stream, i).await.expect("a producer id"));
                }
                ids
            }));
        }
    }
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "{} producer ids handed out twice", all.len() - distinct.len());
    assert!(all.iter().all(|id| *id >= 0));
}
