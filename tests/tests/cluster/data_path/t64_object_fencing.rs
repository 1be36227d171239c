//! No object is deleted while a commit of it can still apply (a commit racing the fencing and deletion of its object).
//!
//! A commit part that is held back — queued on a slow broker, in flight to a slow leader, appended
//! by a leader that lost its quorum — reaches the log after the cleaner decided to delete the
//! object. The cleaner fences the key through every relevant metadata partition's log before
//! deleting, so the late part is refused instead of acknowledging batches in a deleted object.
//! Here the held-back parts are sent by the test itself, after the cleaner fenced and deleted:
//! - an orphan (uploaded, its commit not yet applied anywhere), deleted by the orphan scan;
//! - a segment split over two metadata partitions, one part committed and then released (its
//!   records deleted), the other part still on its way when the released file is deleted.
//!
//! At the end, every batch any partition holds points into an object that exists.

use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::broker::DeleteRecordsRequest;
use diskless_proto::v1::{CommitFileRequest, ListTopicsRequest};
use diskless_proto::{metadata_partition_for, ErrorCode};

const PARTITIONS: i32 = 8;

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "{what} did not happen within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A WAL segment (format version 0) holding `values` as one record batch per entry, and each
/// batch's (byte offset, size).
fn segment(values: &[&str]) -> (Vec<u8>, Vec<(i32, i32)>) {
    let mut bytes = vec![0u8];
    let mut placed = vec![];
    for v in values {
        let b = batch_of(&[v.to_string()]);
        placed.push((bytes.len() as i32, b.len() as i32));
        bytes.extend_from_slice(&b);
    }
    (bytes, placed)
}

fn commit_of(
    key: &str,
    topic: &[u8],
    file_size: usize,
    owners: Vec<i32>,
    parts: &[(i32, (i32, i32))],
) -> CommitFileRequest {
    CommitFileRequest {
        object_key: key.into(),
        object_format: 1,
        file_size: file_size as i64,
        owner_ids: owners,
        batches: parts.iter().map(|&(p, (at, size))| batch(topic, p, 1, at, size)).collect(),
        timeout_ms: 10_000,
        uploader_broker_id: 7,
    }
}

/// Commits until the outcome is known (a leader being elected is retried).
async fn commit_settled(client: &mut Client, req: CommitFileRequest) -> Vec<(i32, Option<String>, i64)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = client.commit_file(req.clone()).await.expect("commit rpc").into_inner();
        let out: Vec<_> =
            r.batches.into_iter().map(|b| (b.error_code, b.error_message, b.assigned_base_offset)).collect();
        if out.iter().all(|(code, _, _)| *code != ErrorCode::NotLeaderOrFollower.wire()) {
            return out;
        }
        assert!(Instant::now() < deadline, "commit still not routed after a minute: {out:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn exists(objects: &diskless_broker_shim::storage::Storage, key: &str) -> bool {
    objects.list("wal/").await.unwrap().iter().any(|o| o.key == key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_arrives_after_its_object_was_fenced_and_deleted_is_refused() {
    let c = Cluster::start(3, Options::default()).await;
    let num_partitions = c.options.metadata_partitions;
    let storage = TestStorage::Local(c.path("objects"));
    let objects = storage.open();
    let options = BrokerOptions {
        cleanup_interval_ms: 300,
        delete_grace_ms: 500,
        orphan_scan_interval_ms: 300,
        orphan_grace_ms: 3_000,
        ..BrokerOptions::default()
    };
    let broker = BrokerProc::start(&c, "b1", &storage, &options).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "fenced", PARTITIONS).await;
    let mut coordinator = c.client(1).await;
    let listed = coordinator
        .list_topics(ListTopicsRequest { names: vec!["fenced".into()], timeout_ms: 10_000 })
        .await
        .unwrap()
        .into_inner();
    let topic = listed.topics[0].topic_id.clone();
    let owner = |p: i32| metadata_partition_for(topic.as_slice().try_into().unwrap(), p, num_partitions);
    // Ordinary traffic, which must survive the cleaner.
    for p in 0..PARTITIONS {
        produce_retrying(&mut client, "fenced", p, batch_of(&[format!("kept-{p}")])).await;
    }

    // 1. An orphan whose commit is still on its way: the orphan scan fences it everywhere and
    //    deletes it; the commit then arrives.
    let (bytes, placed) = segment(&["late"]);
    objects.put_new("wal/late-orphan", bytes::Bytes::from(bytes.clone())).await.unwrap();
    eventually("the orphan is deleted", async || !exists(&objects, "wal/late-orphan").await).await;
    let late =
        commit_settled(&mut coordinator, commit_of("wal/late-orphan", &topic, bytes.len(), vec![], &[(0, placed[0])]))
            .await;
    assert_eq!(late[0].0, ErrorCode::KafkaStorageError.wire(), "late commit of a deleted orphan: {late:?}");
    assert!(late[0].1.as_deref().unwrap_or_default().contains("produce again"), "{late:?}");
    assert!(ErrorCode::KafkaStorageError.retriable());

    // 2. A segment split over two metadata partitions: one part commits, its records are deleted
    //    (the file is released there), the other part is still on its way.
    let (pa, pb) = (0..PARTITIONS)
        .flat_map(|a| (0..PARTITIONS).map(move |b| (a, b)))
        .find(|&(a, b)| owner(a) != owner(b))
        .expect("two partitions in different metadata partitions");
    let owners = vec![owner(pa) as i32, owner(pb) as i32];
    let (bytes, placed) = segment(&["split-a", "split-b"]);
    objects.put_new("wal/split", bytes::Bytes::from(bytes.clone())).await.unwrap();
    let first = commit_of("wal/split", &topic, bytes.len(), owners.clone(), &[(pa, placed[0])]);
    let r = commit_settled(&mut coordinator, first.clone()).await;
    assert_eq!(r[0].0, 0, "{r:?}");
    // Its reply was lost? A repeat gets the same answer.
    let again = commit_settled(&mut coordinator, first.clone()).await;
    assert_eq!((again[0].0, again[0].2), (0, r[0].2), "a repeat is answered with the original result");
    let d = client
        .delete_records(DeleteRecordsRequest { topic: "fenced".into(), partition: pa, offset: -1 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.error_code, 0, "{:?}", d.error_message);
    eventually("the released split segment is deleted", async || !exists(&objects, "wal/split").await).await;
    let held_back = commit_of("wal/split", &topic, bytes.len(), owners.clone(), &[(pb, placed[1])]);
    let r = commit_settled(&mut coordinator, held_back).await;
    assert_eq!(r[0].0, ErrorCode::KafkaStorageError.wire(), "the held-back part of a deleted segment: {r:?}");
    let r = commit_settled(&mut coordinator, first).await;
    assert_eq!(r[0].0, ErrorCode::KafkaStorageError.wire(), "a repeat after the deletion: {r:?}");

    // Nothing acknowledged points into a deleted object; the ordinary data is all there.
    for p in (0..PARTITIONS).filter(|&p| p != pa) {
        for b in all_batches(&mut coordinator, &topic, p, vec![]).await.unwrap() {
            assert!(
                exists(&objects, &b.object_key).await,
                "partition {p}: batch at {} in deleted {}",
                b.base_offset,
                b.object_key
            );
        }
        let got = consume_all(&mut client, "fenced", p).await.unwrap();
        assert_eq!(got.len(), 1, "partition {p}: {got:?}");
    }
    assert_eq!(high_watermark(&mut coordinator, &topic, pa).await.unwrap(), 2, "kept-{pa} and split-a, deleted");
    assert_eq!(high_watermark(&mut coordinator, &topic, pb).await.unwrap(), 1, "only the produced record");
}
