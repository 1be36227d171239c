//! Damaged object bytes: the fetch of the affected partition reports CORRUPT_MESSAGE; the broker
//! stays up and serves everything else.

use diskless_broker_shim::storage::Storage;
use diskless_cluster_tests::*;
use diskless_proto::broker::FetchRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_object_bytes_fail_the_partition_with_corrupt_message_on_a_local_directory() {
    let c = Cluster::start(3, Options::default()).await;
    let dir = c.path("objects");
    let storage = TestStorage::Local(dir);
    run(&c, storage.clone(), storage.open()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_object_bytes_fail_the_partition_with_corrupt_message_on_s3() {
    let Some(s3) = S3Server::start("corrupt") else { return };
    let c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::S3 { endpoint: s3.endpoint.clone(), bucket: "corrupt".into() };
    run(&c, storage.clone(), storage.open()).await;
}

async fn run(c: &Cluster, storage: TestStorage, objects: Storage) {
    let broker = BrokerProc::start(c, "b1", &storage, &BrokerOptions::default()).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "t", 2).await;
    let a = produce_retrying(&mut client, "t", 0, batch_of(&["a1".into(), "a2".into()])).await;
    let b = produce_retrying(&mut client, "t", 1, batch_of(&["b1".into()])).await;
    assert_eq!((a.base_offset, b.base_offset), (0, 0));

    // Damage the object holding partition 0's batch: flip a byte inside its records.
    let needle = b"a2";
    let mut damaged = false;
    for o in objects.list("wal/").await.unwrap() {
        let mut bytes = objects.get(&o.key).await.unwrap().to_vec();
        if let Some(at) = bytes.windows(2).position(|w| w == needle) {
            bytes[at] ^= 0x20;
            objects.overwrite(&o.key, bytes::Bytes::from(bytes)).await.unwrap();
            damaged = true;
        }
    }
    assert!(damaged, "found the object holding a2");

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
