//! ACL bindings in the cluster: created through a node that does not lead metadata partition 0
//! (forwarded to its leader), read alike through every node, kept when that leader dies, and
//! removed by filter with Kafka's answers (each filter reports what it matched).

use std::time::Duration;

use diskless_cluster_tests::*;
use diskless_proto::v1::{AclBinding, AclFilter, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};

fn binding(name: &str, pattern_type: i32, principal: &str) -> AclBinding {
    AclBinding {
        resource_type: 2, // TOPIC
        resource_name: name.into(),
        pattern_type,
        principal: principal.into(),
        host: "*".into(),
        operation: 3,  // READ
        permission: 3, // ALLOW
    }
}

fn any() -> AclFilter {
    AclFilter {
        resource_type: 1,
        resource_name: None,
        pattern_type: 1,
        principal: None,
        host: None,
        operation: 1,
        permission: 1,
    }
}

/// DescribeAcls through `via`, asked again (as a client does) while a new leader takes over.
async fn describe(c: &Cluster, via: u64, filter: AclFilter) -> Vec<AclBinding> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = c
            .client(via)
            .await
            .describe_acls(DescribeAclsRequest { filter: Some(filter.clone()), timeout_ms: 10_000 })
            .await
            .expect("describe acls")
            .into_inner();
        if r.error_code == 0 {
            return r.bindings;
        }
        assert!(r.error_code == 7 || r.error_code == 6, "{} {:?}", r.error_code, r.error_message);
        assert!(std::time::Instant::now() < deadline, "no answer in time: {:?}", r.error_message);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_are_replicated_read_alike_everywhere_and_deleted_by_filter() {
    let mut c = Cluster::start(3, Options::default()).await;
    let leader = c.leaders(1).await[0];
    let other = c.ids().into_iter().find(|&id| id != leader).unwrap();
    let wanted = vec![binding("orders", 3, "User:alice"), binding("ord", 4, "User:bob"), binding("", 3, "User:x")];
    let r = c
        .client(other)
        .await
        .create_acls(CreateAclsRequest { creations: wanted.clone(), timeout_ms: 10_000 })
        .await
        .expect("create acls")
        .into_inner();
    let codes: Vec<i32> = r.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![0, 0, 42], "the empty resource name is INVALID_REQUEST: {:?}", r.results);

    let mut stored = wanted[..2].to_vec();
    stored.sort_by_key(|a| (a.resource_name.clone(), a.pattern_type));
    for id in c.ids() {
        assert_eq!(describe(&c, id, any()).await, stored, "through node {id}");
    }
    // MATCH: the bindings that apply to topic "orders": the literal one and the prefix "ord".
    let matching = AclFilter { resource_name: Some("orders".into()), pattern_type: 2, ..any() };
    assert_eq!(describe(&c, other, matching).await.len(), 2);

    // Metadata partition 0's leader dies; the bindings are in the log of the others.
    c.kill(leader);
    c.wait_for_leaders(Duration::from_secs(30)).await;
    let alive = c.running()[0];
    assert_eq!(describe(&c, alive, any()).await, stored, "after the leader died");

    let by_alice = AclFilter { principal: Some("User:alice".into()), ..any() };
    let r = c
        .client(alive)
        .await
        .delete_acls(DeleteAclsRequest { filters: vec![by_alice, any()], timeout_ms: 10_000 })
        .await
        .expect("delete acls")
        .into_inner();
    let matched: Vec<usize> = r.results.iter().map(|f| f.matching.len()).collect();
    assert_eq!(matched, vec![1, 2], "every filter reports what it matched before the request: {:?}", r.results);
    assert!(describe(&c, alive, any()).await.is_empty());
}
