//! `coordctl`: every command's `--json` output is one JSON document; `status --cluster` and
//! `health --cluster` exit 0 on a healthy cluster and non-zero with a node down, naming it;
//! `topics list`, `topics describe` and `files describe` show what was committed.

use std::process::Output;

use diskless_cluster_tests::*;
use serde_json::Value;

/// Runs coordctl against node `via` of `c`; returns the exit status and the parsed document.
fn run_json(addr: &str, args: &[&str]) -> (bool, Value) {
    let out: Output = coordctl(addr).arg("--json").args(args).output().expect("run coordctl");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let doc: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("coordctl {args:?} --json printed no single JSON document ({e}):\n{stdout}"));
    (out.status.success(), doc)
}

#[tokio::test(flavor = "multi_thread")]
async fn json_output_parses_and_cluster_status_fails_with_a_node_down() {
    let mut c = Cluster::start(3, Options::default()).await;
    let addr = c.addr(1).to_string();

    let (ok, doc) = run_json(&addr, &["wait-ready", "--timeout-secs", "30"]);
    assert!(ok && doc["ready"] == true, "{doc}");

    let (ok, doc) = run_json(&addr, &["status"]);
    assert!(ok, "{doc}");
    assert_eq!(doc["node_id"], 1);
    assert_eq!(doc["groups"].as_array().map(Vec::len), Some(c.options.metadata_partitions as usize), "{doc}");

    let (ok, doc) = run_json(&addr, &["members", "list"]);
    assert!(ok, "{doc}");
    let members = doc["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{doc}");
    assert!(members.iter().all(|m| m["role"] == "voter" && m["address"].is_string()), "{doc}");

    let (ok, doc) = run_json(&addr, &["status", "--cluster"]);
    assert!(ok, "a healthy cluster: {doc}");
    assert_eq!(doc["healthy"], true);
    assert_eq!(doc["nodes"].as_array().map(Vec::len), Some(3));
    assert!(doc["nodes"].as_array().unwrap().iter().all(|n| n["reachable"] == true));

    // Health follows the metadata partitions within a moment of the election (re-evaluated every
    // 100 ms).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (ok, doc) = loop {
        let (ok, doc) = run_json(&addr, &["health", "--cluster"]);
        if ok || std::time::Instant::now() > deadline {
            break (ok, doc);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(ok, "{doc}");
    assert!(doc["nodes"].as_array().unwrap().iter().all(|n| n["status"] == "SERVING"), "{doc}");
    let (ok, doc) = run_json(&addr, &["health"]);
    assert!(ok && doc["healthy"] == true, "{doc}");

    let (ok, doc) = run_json(&addr, &["snapshot"]);
    assert!(ok, "{doc}");
    assert_eq!(doc["snapshot_index"].as_array().map(Vec::len), Some(c.options.metadata_partitions as usize), "{doc}");

    // The leader of metadata partition 0 hands it to another voter.
    let leader = c.leaders(1).await[0];
    let to = if leader == 1 { 2 } else { 1 };
    let (ok, doc) = run_json(c.addr(leader), &["transfer-leader", "--group", "0", "--to", &to.to_string()]);
    assert!(ok, "{doc}");
    assert_eq!(doc["leader"], to);

    // Every metadata partition's replicas compared: equal (nothing is written meanwhile).
    let mut client = c.client(1).await;
    create_topic(&mut client, &topic_id(1), "checked", 4).await;
    commit_all(&mut client, "obj-1", &topic_id(1), &[(0, 5), (1, 5), (2, 5), (3, 5)]).await;
    let (ok, doc) = run_json(&addr, &["check"]);
    assert!(ok, "{doc}");
    assert_eq!(doc["consistent"], true);
    let partitions = doc["groups"].as_array().expect("groups");
    assert_eq!(partitions.len(), c.options.metadata_partitions as usize, "{doc}");
    assert!(
        partitions.iter().all(|g| g["verdict"] == "equal" && g["replicas"].as_object().unwrap().len() == 3),
        "{doc}"
    );

    // The catalog and one topic's partitions, each from its metadata partition's leader.
    let (ok, doc) = run_json(&addr, &["topics", "list"]);
    assert!(ok, "{doc}");
    let topics = doc["topics"].as_array().expect("topics");
    assert!(topics.iter().any(|t| t["name"] == "checked" && t["partitions"] == 4), "{doc}");
    let (ok, doc) = run_json(&addr, &["topics", "describe", "checked"]);
    assert!(ok, "{doc}");
    let rows = doc["partition_figures"].as_array().expect("partition figures");
    assert_eq!(rows.len(), 4, "{doc}");
    let topic: [u8; 16] = topic_id(1).try_into().unwrap();
    for (p, r) in rows.iter().enumerate() {
        let g = diskless_proto::metadata_partition_for(&topic, p as i32, c.options.metadata_partitions);
        assert_eq!(r["partition"], p, "{doc}");
        assert_eq!(r["metadata_partition"], g, "{doc}");
        assert_eq!(r["error_code"], 0, "{doc}");
        assert_eq!((r["log_start_offset"].as_i64(), r["high_watermark"].as_i64()), (Some(0), Some(5)), "{doc}");
        assert_eq!((r["batches"].as_u64(), r["bytes"].as_i64()), (Some(1), Some(100)), "{doc}");
    }
    assert_eq!((doc["batches"].as_u64(), doc["bytes"].as_i64()), (Some(4), Some(400)), "{doc}");
    let (ok, doc) = run_json(&addr, &["topics", "describe", "no-such-topic"]);
    assert!(!ok && doc["error"].as_str().is_some_and(|e| e.contains("no topic named")), "{doc}");
    let (ok, doc) = run_json(&addr, &["files", "describe", "obj-1#1", "never-committed"]);
    assert!(ok, "{doc}");
    let files = doc["files"].as_array().expect("files");
    assert_eq!((files[0]["known"].as_bool(), files[0]["has_live_batches"].as_bool()), (Some(true), Some(true)));
    assert_eq!((files[1]["known"].as_bool(), files[1]["has_live_batches"].as_bool()), (Some(false), Some(false)));
    let text = coordctl(&addr).args(["topics", "describe", "checked"]).output().expect("run coordctl");
    assert!(text.status.success() && String::from_utf8_lossy(&text.stdout).contains("high watermark"));

    // A node down: both cluster-wide commands fail, and say which node.
    c.kill(3);
    let (ok, doc) = run_json(&addr, &["status", "--cluster"]);
    assert!(!ok, "status --cluster must exit non-zero with node 3 down: {doc}");
    assert_eq!(doc["healthy"], false);
    let node3 = doc["nodes"].as_array().unwrap().iter().find(|n| n["node_id"] == 3).expect("node 3 listed").clone();
    assert_eq!(node3["reachable"], false, "{doc}");
    assert!(doc["problems"].as_array().unwrap().iter().any(|p| p.as_str().is_some_and(|p| p.contains("node 3"))));
    let (ok, doc) = run_json(&addr, &["health", "--cluster"]);
    assert!(!ok, "{doc}");
    let text = coordctl(&addr).args(["status", "--cluster"]).output().expect("run coordctl");
    assert!(!text.status.success(), "the table form exits non-zero too");
    assert!(String::from_utf8_lossy(&text.stdout).contains("UNREACHABLE"));

    // An error is a JSON document too.
    let (ok, doc) = run_json("127.0.0.1:1", &["status"]);
    assert!(!ok && doc["error"].is_string(), "{doc}");
}
