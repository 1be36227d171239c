//! ReplaceBatches (object consolidation's atomic replace) through the coordinator's API: the
//! batches of one partition, copied into a new object, move there in one log entry, sent to any
//! node; every replica then answers FindBatches with the new coordinates and the same offsets; a
//! batch deleted meanwhile (DeleteRecords) is not moved; a resend is answered the same; the WAL
//! objects whose batches all moved or went lose their live bytes; the leader's kill changes none
//! of it, and the replicas' digests agree.

use std::time::Duration;

use diskless_cluster_tests::*;
use diskless_proto::v1::*;

/// A replace of `batches` (as FindBatches answered them) into `key`, laid out back to back.
fn replace_request(
    key: &str,
    topic: &[u8],
    partition: i32,
    batches: &[find_batches_response::BatchInfo],
) -> ReplaceBatchesRequest {
    let mut at = 0;
    let mut sources: Vec<String> = vec![];
    let batches: Vec<_> = batches
        .iter()
        .map(|b| {
            let source = match sources.iter().position(|s| *s == b.object_key) {
                Some(i) => i,
                None => {
                    sources.push(b.object_key.clone());
                    sources.len() - 1
                }
            } as u32;
            let r = replace_batches_request::Batch {
                last_offset: b.last_offset,
                batch_id: b.batch_id,
                byte_offset: at,
                byte_size: b.byte_size as i32,
                source,
            };
            at += b.byte_size as i32;
            r
        })
        .collect();
    ReplaceBatchesRequest {
        object_key: key.into(),
        object_format: 1,
        file_size: i64::from(at),
        uploader_broker_id: 1,
        topic_id: topic.to_vec(),
        partition_index: partition,
        batches,
        timeout_ms: 10_000,
        sources,
    }
}

async fn live(client: &mut Client, key: &str) -> (bool, bool) {
    let r = client
        .describe_files(DescribeFilesRequest {
            files: vec![describe_files_request::DescribeFileEntry { object_key: key.into() }],
            timeout_ms: 10_000,
        })
        .await
        .expect("describe files")
        .into_inner();
    (r.files[0].known, r.files[0].has_live_batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_batches_keep_their_offsets_on_every_replica_and_release_their_old_objects() {
    let mut c = Cluster::start(3, Options::default()).await;
    let topic = topic_id(16);
    create_topic(&mut c.client(1).await, &topic, "consolidated", 2).await;
    // Three WAL objects, each with a batch of partition 0 (2 records) and one of partition 1.
    let wal: Vec<String> = (0..3).map(|i| format!("wal/mixed-{i}")).collect();
    for key in &wal {
        let r = c.client(1).await.commit_file(commit_request(key, &topic, &[(0, 2), (1, 3)])).await.unwrap();
        assert!(r.get_ref().batches.iter().all(|b| b.error_code == 0), "{r:?}");
    }
    let before = all_batches(&mut c.client(1).await, &topic, 0, vec![]).await.unwrap();
    assert_eq!(before.iter().map(|b| b.base_offset).collect::<Vec<_>>(), [0, 2, 4]);

    // DeleteRecords takes the first batch away before the replace applies.
    let r = c
        .client(2)
        .await
        .delete_records(DeleteRecordsRequest {
            topics: vec![delete_records_request::DeleteRecordsTopic {
                topic_id: topic.clone(),
                partitions: vec![delete_records_request::DeleteRecordsPartition { partition_index: 0, offset: 2 }],
            }],
            timeout_ms: 10_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{r:?}");

    let request = replace_request("merged/p0", &topic, 0, &before);
    let r = c.client(3).await.replace_batches(request.clone()).await.unwrap().into_inner();
    assert_eq!((r.error_code, r.replaced.clone()), (0, vec![false, true, true]), "{r:?}");
    let applied = vec![r.applied.expect("the applied index")];

    // Every replica answers the new coordinates, offsets and times unchanged.
    for node in c.ids() {
        let after = batches_from(&mut c.client(node).await, &topic, 0, 2, applied.clone()).await.unwrap();
        assert_eq!(after.len(), 2, "node {node}: {after:?}");
        for (a, b) in after.iter().zip(&before[1..]) {
            assert_eq!(
                (a.object_key.as_str(), a.base_offset, a.last_offset),
                ("merged/p0", b.base_offset, b.last_offset)
            );
            assert_eq!(
                (a.batch_id, a.byte_size, a.batch_max_timestamp),
                (b.batch_id, b.byte_size, b.batch_max_timestamp)
            );
        }
        assert_eq!(after.iter().map(|b| b.byte_offset).collect::<Vec<_>>(), [100, 200], "node {node}");
    }

    // Partition 1 moves too: the WAL objects have nothing left and are released; the merged
    // objects hold the bytes.
    let p1 = all_batches(&mut c.client(1).await, &topic, 1, vec![]).await.unwrap();
    let r = c.client(1).await.replace_batches(replace_request("merged/p1", &topic, 1, &p1)).await.unwrap().into_inner();
    assert_eq!((r.error_code, r.replaced), (0, vec![true; 3]));
    for key in &wal {
        assert_eq!(live(&mut c.client(1).await, key).await, (true, false), "{key} released");
    }
    assert_eq!(live(&mut c.client(2).await, "merged/p0").await, (true, true));

    // The leader of partition 0's metadata partition is killed; the resend of the first replace
    // (its answer lost, say) is answered the same and moves nothing again.
    let g = applied[0].metadata_partition as usize;
    let leader = c.leaders(1).await[g];
    c.kill(leader);
    c.wait_for_leaders(Duration::from_secs(60)).await;
    let alive = c.running()[0];
    // Sent again while the election settles, as a broker's client does on a retriable answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let r = loop {
        match c.client(alive).await.replace_batches(request.clone()).await {
            Ok(r) if r.get_ref().error_code == 0 || std::time::Instant::now() > deadline => break r.into_inner(),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    assert_eq!((r.error_code, r.replaced), (0, vec![false, true, true]));
    let after = batches_from(&mut c.client(alive).await, &topic, 0, 2, vec![]).await.unwrap();
    assert!(after.iter().all(|b| b.object_key == "merged/p0"), "{after:?}");
    for per_node in c.converged_digests(Duration::from_secs(30)).await {
        let distinct: std::collections::BTreeSet<_> = per_node.values().collect();
        assert_eq!(distinct.len(), 1, "replicas' digests differ: {per_node:?}");
    }
}
