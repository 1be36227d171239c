//! While metadata partitions have no quorum, every answer is a retriable Kafka error with a
//! message — NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT or REPLICA_NOT_AVAILABLE — never
//! UNKNOWN_SERVER_ERROR, which Kafka clients do not retry.

use std::time::Duration;

use diskless_cluster_tests::*;
use diskless_proto::v1::{describe_files_request, list_offsets_request, DescribeFilesRequest, ListOffsetsRequest};

const PARTITIONS: i32 = 8;

fn retriable_with_message(code: i32, message: &Option<String>) -> bool {
    matches!(code, 6 | 7 | 9) && message.as_ref().is_some_and(|m| !m.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_quorum_every_answer_is_retriable() {
    // Leaders spread over the nodes, so node 1 leads some metadata partitions and follows in
    // others.
    let mut c = Cluster::start(3, Options { leader_balance_ms: 500, ..Options::default() }).await;
    let topic = topic_id(1);
    create_topic(&mut c.client(1).await, &topic, "t", PARTITIONS).await;
    let parts: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, 1)).collect();
    commit_all(&mut c.client(1).await, "a", &topic, &parts).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let leaders = c.leaders(1).await;
    assert!(leaders.contains(&1) && leaders.iter().any(|l| *l != 1), "leaders spread: {leaders:?}");

    c.kill(2);
    c.kill(3);
    // Within its lease (one maximum election timeout after the last quorum acknowledgement) a
    // leader still serves strict reads on its own, correctly: no other leader can exist yet.
    tokio::time::sleep(Duration::from_millis(2 * 1_600)).await;
    let mut client = c.client(1).await;
    for round in 0..3 {
        let r = client
            .list_offsets(ListOffsetsRequest {
                topics: vec![list_offsets_request::ListOffsetsTopic {
                    topic_id: topic.clone(),
                    partitions: (0..PARTITIONS)
                        .map(|p| list_offsets_request::ListOffsetsPartition { partition_index: p, timestamp: -1 })
                        .collect(),
                }],
                timeout_ms: 10_000,
                isolation_level: 0,
            })
            .await
            .expect("list offsets")
            .into_inner();
        for p in &r.topics[0].partitions {
            assert!(
                retriable_with_message(p.error_code, &p.error_message),
                "round {round}, ListOffsets of partition {}: {} {:?}",
                p.partition_index,
                p.error_code,
                p.error_message
            );
        }

        let mut req = commit_request(&format!("b{round}"), &topic, &parts);
        req.timeout_ms = 1_500;
        let r = client.commit_file(req).await.expect("commit file").into_inner();
        for b in &r.batches {
            assert!(
                matches!(b.error_code, 6 | 7) && b.error_message.is_some(),
                "round {round}, CommitFile: {} {:?}",
                b.error_code,
                b.error_message
            );
        }

        let r = client
            .describe_files(DescribeFilesRequest {
                files: vec![describe_files_request::DescribeFileEntry { object_key: "a#1".into() }],
                timeout_ms: 10_000,
            })
            .await
            .expect("describe files")
            .into_inner();
        let f = &r.files[0];
        assert!(
            retriable_with_message(f.error_code, &f.error_message),
            "round {round}, DescribeFiles: {} {:?}",
            f.error_code,
            f.error_message
        );
    }
}
