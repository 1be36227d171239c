//! Prometheus metrics: a 3-node cluster and a broker, each serving `/metrics`, scraped over HTTP
//! before and after traffic. The named metrics exist, the figures move with the traffic (commits,
//! applied indexes, fsyncs, gRPC requests, produced batches, uploads, snapshots), and the shipped
//! alert rules and Grafana dashboard use only metrics the processes export.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::admin::TriggerSnapshotRequest;

const NODE_METRICS: [&str; 29] = [
    "diskless_raft_has_leader",
    "diskless_raft_is_leader",
    "diskless_raft_replica_member",
    "diskless_raft_term",
    "diskless_raft_commit_index",
    "diskless_raft_applied_index",
    "diskless_raft_last_log_index",
    "diskless_raft_snapshot_index",
    "diskless_raft_leader_changes_total",
    "diskless_raft_proposals_committed_total",
    "diskless_raft_proposals_failed_total",
    "diskless_raft_proposals_pending",
    "diskless_raft_apply_duration_seconds",
    "diskless_raft_applied_entries_total",
    "diskless_wal_fsync_duration_seconds",
    "diskless_wal_appends_per_fsync",
    "diskless_snapshot_builds_total",
    "diskless_snapshot_build_bytes_total",
    "diskless_snapshot_build_duration_seconds",
    "diskless_snapshot_installs_total",
    "diskless_snapshot_install_bytes_total",
    "diskless_snapshot_install_duration_seconds",
    "diskless_grpc_requests_total",
    "diskless_grpc_request_duration_seconds",
    "diskless_forwarded_requests_total",
    "diskless_strict_read_duration_seconds",
    "diskless_rocksdb_size_bytes",
    "diskless_raft_log_size_bytes",
    "diskless_data_dir_size_bytes",
];

const BROKER_METRICS: [&str; 20] = [
    "diskless_broker_produce_duration_seconds",
    "diskless_broker_produce_batches_total",
    "diskless_broker_commit_duration_seconds",
    "diskless_broker_segment_bytes",
    "diskless_broker_segment_batches",
    "diskless_broker_segments_abandoned_total",
    "diskless_broker_uploads_in_flight",
    "diskless_broker_commit_backlog_segments",
    "diskless_broker_commit_backlog_oldest_age_seconds",
    "diskless_broker_fetch_cache_hits_total",
    "diskless_broker_fetch_cache_misses_total",
    "diskless_broker_object_store_requests_total",
    "diskless_broker_object_store_errors_total",
    "diskless_broker_object_store_request_duration_seconds",
    "diskless_broker_cleaner_last_success_timestamp_seconds",
    "diskless_broker_cleaner_failures_total",
    "diskless_broker_cleaner_files_deleted_total",
    "diskless_broker_cleaner_orphans_deleted_total",
    "diskless_broker_cleaner_backlog_files",
    "diskless_broker_offset_commit_duration_seconds",
];

/// The metric names a scrape declares (`# TYPE` lines), with a histogram's series names.
fn declared(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for l in text.lines() {
        let mut w = l.split(' ');
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) = (w.next(), w.next(), w.next(), w.next()) {
            names.insert(name.to_string());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    names
}

/// Every `diskless_*` identifier in a file.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("diskless_") {
        let tail = &rest[i..];
        let end =
            tail.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

async fn scrape_ok(addr: &str) -> String {
    let (content_type, body) = scrape(addr).await.unwrap_or_else(|e| panic!("scrape {addr}: {e}"));
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "Prometheus text format: {content_type}");
    body
}

/// Per node: the figures that must grow with traffic.
async fn node_figures(c: &Cluster) -> Vec<[f64; 4]> {
    let mut out = vec![];
    for id in c.ids() {
        let text = scrape_ok(c.metrics_addr(id).expect("metrics on")).await;
        out.push([
            metric_sum(&text, "diskless_raft_applied_index").unwrap_or(0.0),
            metric_sum(&text, "diskless_raft_commit_index").unwrap_or(0.0),
            metric_sum(&text, "diskless_wal_fsync_duration_seconds_count").unwrap_or(0.0),
            metric_sum(&text, "diskless_raft_proposals_committed_total").unwrap_or(0.0),
        ]);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_and_brokers_export_metrics_that_move_with_traffic() {
    let c = Cluster::start(3, Options { metrics: true, ..Options::default() }).await;
    let num_partitions = c.options.metadata_partitions;

    // Every node: the named metrics, and every metadata partition has a leader.
    let mut node_names = BTreeSet::new();
    for id in c.ids() {
        let text = scrape_ok(c.metrics_addr(id).unwrap()).await;
        let names = declared(&text);
        for m in NODE_METRICS {
            assert!(names.contains(m), "node {id} exports {m}:\n{text}");
        }
        for g in 0..num_partitions {
            let series = format!("diskless_raft_has_leader{{metadata_partition=\"{g}\"}}");
            assert_eq!(metric_value(&text, &series), Some(1.0), "node {id}: {series}");
        }
        let leaders = metric_sum(&text, "diskless_raft_leader_changes_total").unwrap_or(0.0);
        assert!(leaders >= f64::from(num_partitions), "node {id} saw a leader take over each partition: {leaders}");
        assert!(metric_sum(&text, "diskless_rocksdb_size_bytes").unwrap_or(0.0) > 0.0, "node {id}: RocksDB size");
        assert!(metric_sum(&text, "diskless_raft_log_size_bytes").unwrap_or(0.0) > 0.0, "node {id}: Raft log size");
        node_names.extend(names);
    }
    let before = node_figures(&c).await;

    // Traffic through a broker serving metrics too.
    let storage = TestStorage::Local(c.path("objects"));
    let broker_metrics = format!("127.0.0.1:{}", free_port());
    let options =
        BrokerOptions { extra_toml: format!("metrics_addr = \"{broker_metrics}\""), ..BrokerOptions::default() };
    let broker = BrokerProc::start(&c, "b1", &storage, &options).await;
    let mut client = broker.client().await;
    create_topic_via(&mut client, "metered", 4).await;
    const BATCHES: usize = 20;
    for i in 0..BATCHES {
        let values = vec![format!("v{i}")];
        produce_retrying(&mut client, "metered", (i % 4) as i32, batch_of(&values)).await;
    }
    for p in 0..4 {
        consume_all(&mut client, "metered", p).await.expect("consume");
    }
    c.admin(1).await.trigger_snapshot(TriggerSnapshotRequest {}).await.expect("snapshot");

    let after = node_figures(&c).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let id = c.ids()[i];
        assert!(a[0] > b[0], "node {id}: applied indexes grew ({} → {})", b[0], a[0]);
        assert!(a[1] > b[1], "node {id}: commit indexes grew ({} → {})", b[1], a[1]);
        assert!(a[2] > b[2], "node {id}: WAL fsyncs counted ({} → {})", b[2], a[2]);
    }
    let committed: f64 = after.iter().map(|f| f[3]).sum::<f64>() - before.iter().map(|f| f[3]).sum::<f64>();
    assert!(committed >= 1.0, "the leaders counted committed proposals: {committed}");

    let text = scrape_ok(c.metrics_addr(1).unwrap()).await;
    assert!(metric_sum(&text, "diskless_snapshot_builds_total").unwrap_or(0.0) >= 1.0, "node 1 built snapshots");
    assert!(metric_sum(&text, "diskless_raft_snapshot_index").unwrap_or(0.0) > 0.0, "node 1's snapshot indexes");
    let mut commit_files = 0.0;
    for id in c.ids() {
        let text = scrape_ok(c.metrics_addr(id).unwrap()).await;
        commit_files += text
            .lines()
            .filter(|l| l.starts_with("diskless_grpc_requests_total{") && l.contains("CoordinatorService/CommitFile"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    assert!(commit_files >= 1.0, "CommitFile requests counted by the gRPC layer: {commit_files}");

    // The broker.
    let text = scrape_ok(&broker_metrics).await;
    let broker_names = declared(&text);
    for m in BROKER_METRICS {
        assert!(broker_names.contains(m), "the broker exports {m}:\n{text}");
    }
    let ok = metric_value(&text, "diskless_broker_produce_batches_total{result=\"ok\"}").unwrap_or(0.0);
    assert!(ok >= BATCHES as f64, "produced batches counted: {ok}");
    assert!(metric_sum(&text, "diskless_broker_produce_duration_seconds_count").unwrap_or(0.0) >= BATCHES as f64);
    assert!(metric_sum(&text, "diskless_broker_segment_bytes_count").unwrap_or(0.0) >= 1.0, "segments sealed");
    assert!(metric_sum(&text, "diskless_broker_commit_duration_seconds_count").unwrap_or(0.0) >= 1.0, "commits timed");
    let puts = metric_value(&text, "diskless_broker_object_store_requests_total{operation=\"put\"}").unwrap_or(0.0);
    let gets = metric_value(&text, "diskless_broker_object_store_requests_total{operation=\"get\"}").unwrap_or(0.0);
    assert!(puts >= 1.0 && gets >= 1.0, "object storage requests by operation: {puts} puts, {gets} gets");
    assert_eq!(metric_sum(&text, "diskless_broker_commit_backlog_segments"), Some(0.0), "everything committed");
    // The cleaner runs every 500 ms here: it soon records a good pass.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = scrape_ok(&broker_metrics).await;
        if metric_sum(&text, "diskless_broker_cleaner_last_success_timestamp_seconds").unwrap_or(0.0) > 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no successful cleaner pass recorded:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The shipped alert rules and dashboard name only exported metrics; the rules are YAML.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exported: BTreeSet<String> = node_names.union(&broker_names).cloned().collect();
    for file in ["deploy/prometheus/alerts.yml", "deploy/grafana/diskless.json"] {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        for name in referenced(&text) {
            assert!(exported.contains(&name), "{file} uses {name}, which nothing exports");
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("deploy/grafana/diskless.json")).unwrap()).unwrap();
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() > 10), "dashboard panels");
    let check = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, yaml\n\
             d = yaml.safe_load(open(sys.argv[1]))\n\
             rules = [r for g in d['groups'] for r in g['rules']]\n\
             assert all(r['alert'] and r['expr'] and r['annotations']['summary'] for r in rules), rules\n\
             names = {r['alert'] for r in rules}\n\
             for want in ['DisklessMetadataPartitionNoLeader', 'DisklessLeaderFlapping', 'DisklessWalFsyncSlow', \
                          'DisklessBrokerCommitBacklogOld', 'DisklessBrokerCleanerStalled']:\n\
             \x20   assert want in names, want\n",
        )
        .arg(root.join("deploy/prometheus/alerts.yml"))
        .output()
        .expect("python3 (deploy/prereqs.sh --tests installs it)");
    assert!(check.status.success(), "alerts.yml: {}", String::from_utf8_lossy(&check.stderr));
}
