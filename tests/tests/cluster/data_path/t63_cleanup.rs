//! Object cleanup: an orphan (uploaded, never committed — a broker crash between upload and commit)
//! is deleted after the grace period and committed objects never are; DeleteRecords and
//! DeleteTopics release objects, which the cleaner then deletes and confirms. On a local directory
//! and on S3.

use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::broker::{DeleteRecordsRequest, DeleteTopicRequest};

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what} did not happen within 30 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn run(c: &Cluster, storage: TestStorage, objects: diskless_broker_shim::storage::Storage) {
    let options = BrokerOptions {
        cleanup_interval_ms: 300,
        delete_grace_ms: 500,
        orphan_scan_interval_ms: 300,
        orphan_grace_ms: 3_000,
        ..BrokerOptions::default()
    };
    let broker = BrokerProc::start(c, "b1", &storage, &options).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "keep", 2).await;
    create_topic_via(&mut client, "drop", 2).await;
    for i in 0..4 {
        produce_retrying(&mut client, "keep", i % 2, batch_of(&[format!("k{i}")])).await;
        produce_retrying(&mut client, "drop", i % 2, batch_of(&[format!("d{i}")])).await;
    }
    // An orphan: a segment-looking object nobody committed.
    objects.put_new("wal/orphan-0001", bytes::Bytes::from_static(b"\0not committed")).await.unwrap();
    let count = |objects: &diskless_broker_shim::storage::Storage| {
        let objects = objects.clone();
        async move { objects.list("wal/").await.unwrap().into_iter().map(|o| o.key).collect::<Vec<_>>() }
    };
    let committed: Vec<String> = count(&objects).await.into_iter().filter(|k| !k.contains("orphan")).collect();
    assert!(!committed.is_empty());

    eventually("the orphan is deleted", async || !count(&objects).await.iter().any(|k| k.contains("orphan"))).await;
    let now = count(&objects).await;
    assert!(committed.iter().all(|k| now.contains(k)), "committed objects are never deleted as orphans");
    // Everything committed is still readable.
    assert_eq!(consume_all(&mut client, "keep", 0).await.unwrap().len(), 2);

    // Release everything: delete the "drop" topic and all records of "keep".
    let r = client.delete_topic(DeleteTopicRequest { name: "drop".into() }).await.unwrap().into_inner();
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    for p in 0..2 {
        let r = client
            .delete_records(DeleteRecordsRequest { topic: "keep".into(), partition: p, offset: -1 })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r.error_code, r.low_watermark), (0, 2), "{:?}", r.error_message);
    }
    eventually("every released object is deleted", async || count(&objects).await.is_empty()).await;
    // And the coordinator forgets them once the cleaner confirms (just after deleting).
    let coordinator = c.client(1).await;
    eventually("every deletion is confirmed", async || {
        let files = coordinator
            .clone()
            .list_files_to_delete(diskless_proto::v1::ListFilesToDeleteRequest { limit: 100, timeout_ms: 5000 })
            .await
            .unwrap()
            .into_inner()
            .files;
        files.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_and_released_objects_are_deleted_on_a_local_directory() {
    let c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::Local(c.path("objects"));
    run(&c, storage.clone(), storage.open()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_and_released_objects_are_deleted_on_s3() {
    let Some(s3) = S3Server::start("cleanup") else { return };
    let c = Cluster::start(3, Options::default()).await;
    let storage = TestStorage::S3 { endpoint: s3.endpoint.clone(), bucket: "cleanup".into() };
    run(&c, storage.clone(), storage.open()).await;
}
