//! Damaged object bytes: the fetch of the affected partition reports CORRUPT_MESSAGE; the broker
//! stays up and serves everything else.

use diskless_cluster_tests::*;
use diskless_proto::broker::FetchRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_object_bytes_fail_the_partition_with_corrupt_message_and_nothing_else() {
    let c = Cluster::start(3, Options::default()).await;
    let dir = c.path("objects");
    // A long commit interval so both partitions' first batches share one segment... then a second
    // segment for partition 1 only.
    let broker = BrokerProc::start(&c, "b1", &TestStorage::Local(dir.clone()), &BrokerOptions::default()).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "t", 2).await;
    let a = produce_retrying(&mut client, "t", 0, batch_of(&["a1".into(), "a2".into()])).await;
    let b = produce_retrying(&mut client, "t", 1, batch_of(&["b1".into()])).await;
    assert_eq!((a.base_offset, b.base_offset), (0, 0));

    // Damage the object holding partition 0's batch: flip a byte inside its records.
    let objects: Vec<_> = std::fs::read_dir(dir.join("wal")).unwrap().map(|e| e.unwrap().path()).collect();
    let needle = b"a2";
    let victim = objects
        .iter()
        .find(|p| std::fs::read(p).unwrap().windows(2).any(|w| w == needle))
        .expect("the object holding a2");
    let mut bytes = std::fs::read(victim).unwrap();
    let at = bytes.windows(2).position(|w| w == needle).unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(victim, &bytes).unwrap();

    let r = client
        .fetch(FetchRequest { topic: "t".into(), partition: 0, offset: 0, max_bytes: 1 << 20 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error_code, 2, "CORRUPT_MESSAGE: {:?}", r.error_message);
    assert!(r.records.is_empty());

    // Partition 1 is fine (unless it shared the damaged object, in which case its own batch bytes
    // are intact anyway), producing goes on, and the broker is up.
    let msgs = consume_all(&mut client, "t", 1).await.unwrap();
    assert_eq!(msgs.len(), 1);
    let more = produce_retrying(&mut client, "t", 0, batch_of(&["a3".into()])).await;
    assert_eq!(more.base_offset, 2);
    let r = client
        .fetch(FetchRequest { topic: "t".into(), partition: 0, offset: 2, max_bytes: 1 << 20 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error_code, 0);
    assert_eq!(kafka_records::decode(bytes::Bytes::from(r.records)).unwrap()[0].offset, 2);
}
