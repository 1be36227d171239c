//! A 3-node cluster bootstraps from configuration; commits and reads work through any node.

use std::time::Duration;

use diskless_cluster_tests::*;
use diskless_proto::v1::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_bootstrap_and_serve_commits_and_reads_through_any_node() {
    let c = Cluster::start(3, Options { metadata_partitions: 8, ..Options::default() }).await;
    let topic = topic_id(1);
    let mut n1 = c.client(1).await;
    create_topic(&mut n1, &topic, "orders", 16).await;

    // Leaders are spread: within a few balancing rounds no node leads more than 3 of 8 metadata
    // partitions.
    let mut spread = false;
    for _ in 0..60 {
        let leaders = c.leaders(1).await;
        let max = (1..=3).map(|id| leaders.iter().filter(|l| **l == id).count()).max().unwrap();
        if max <= 3 && !leaders.contains(&0) {
            spread = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(spread, "leaders not spread: {:?}", c.leaders(1).await);

    // Commit through every node; each commit touches all 16 partitions (so every metadata
    // partition).
    let mut expected_hwm = 0;
    for (i, via) in [1u64, 2, 3, 1, 2, 3].iter().enumerate() {
        let mut client = c.client(*via).await;
        let parts: Vec<(i32, i64)> = (0..16).map(|p| (p, 3)).collect();
        let r = client.commit_file(commit_request(&format!("wal/{i}"), &topic, &parts)).await.unwrap().into_inner();
        assert_eq!(r.batches.len(), 16);
        for b in &r.batches {
            assert_eq!(b.error_code, 0, "{:?}", b.error_message);
            assert_eq!(b.assigned_base_offset, expected_hwm);
        }
        expected_hwm += 3;
        let partitions: std::collections::BTreeSet<u32> = r.applied.iter().map(|g| g.metadata_partition).collect();
        let owners: std::collections::BTreeSet<u32> =
            (0..16).map(|p| diskless_proto::metadata_partition_for(&topic.clone().try_into().unwrap(), p, 8)).collect();
        assert_eq!(partitions, owners, "every metadata partition involved reports its applied index");
    }

    // Strict reads agree through every node.
    for via in 1..=3 {
        let mut client = c.client(via).await;
        for p in [0, 7, 15] {
            assert_eq!(high_watermark(&mut client, &topic, p).await.unwrap(), 18);
        }
        let batches = all_batches(&mut client, &topic, 5, vec![]).await.unwrap();
        let keys: Vec<&str> = batches.iter().map(|b| b.object_key.as_str()).collect();
        assert_eq!(keys, ["wal/0", "wal/1", "wal/2", "wal/3", "wal/4", "wal/5"]);
    }

    // Bad input gets a clear error and changes nothing.
    let mut bad = commit_request("wal/bad", &topic, &[(0, 1)]);
    bad.batches[0].topic_id = vec![1, 2, 3];
    let r = n1.commit_file(bad).await.unwrap().into_inner();
    assert_eq!(r.batches[0].error_code, 42);
    assert!(r.batches[0].error_message.as_deref().unwrap_or("").contains("16 bytes"));
    let r = n1.commit_file(commit_request("wal/x", &topic_id(9), &[(0, 1)])).await.unwrap().into_inner();
    assert_eq!(r.batches[0].error_code, 3, "unknown topic");
    let huge = commit_request("wal/huge", &topic, &vec![(0, 1); 200_000]);
    match n1.commit_file(huge).await {
        Err(err) => assert!(matches!(err.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted), "{err}"),
        Ok(r) => panic!("an oversized request was served ({} results)", r.into_inner().batches.len()),
    }
    assert_eq!(high_watermark(&mut n1, &topic, 0).await.unwrap(), 18);

    // Describe files: known and live; an unknown key is "false", not an error.
    let r = n1
        .describe_files(DescribeFilesRequest {
            files: ["wal/0", "nope"]
                .iter()
                .map(|k| describe_files_request::DescribeFileEntry { object_key: k.to_string() })
                .collect(),
            timeout_ms: 5_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.files[0].has_live_batches && r.files[0].known);
    assert!(!r.files[1].has_live_batches && !r.files[1].known && r.files[1].error_code == 0);
}
