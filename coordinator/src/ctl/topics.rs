//! `coordctl topics list`, `topics describe T` and `files describe KEY...`: the catalog through
//! `ListTopics`, each partition's figures from the leader of its metadata partition through
//! `AdminService.DescribePartitions` (the one query that counts batches and stored bytes), and
//! files through `DescribeFiles`. Only gRPC calls and tables.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::{DescribePartitionsRequest, PartitionFigures, StatusRequest};
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::{describe_files_request, list_topics_response, DescribeFilesRequest, ListTopicsRequest};
use serde_json::json;

use super::{connect, Report};

const TIMEOUT_MS: i32 = 10_000;

async fn client(addr: &str) -> anyhow::Result<CoordinatorServiceClient<tonic::transport::Channel>> {
    Ok(CoordinatorServiceClient::new(connect(addr, Duration::from_secs(5)).await?).max_decoding_message_size(256 << 20))
}

async fn topics(addr: &str, names: Vec<String>) -> anyhow::Result<Vec<list_topics_response::Topic>> {
    let r = client(addr).await?.list_topics(ListTopicsRequest { names, timeout_ms: TIMEOUT_MS }).await?;
    let mut topics = r.into_inner().topics;
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(topics)
}

fn uuid_text(id: &[u8]) -> String {
    uuid::Uuid::from_slice(id).map_or_else(|_| format!("{id:02x?}"), |u| u.to_string())
}

fn topic_json(t: &list_topics_response::Topic) -> serde_json::Value {
    let c = t.configs.clone().unwrap_or_default();
    json!({
        "name": t.name,
        "topic_id": uuid_text(&t.topic_id),
        "partitions": t.num_partitions,
        "retention_ms": c.retention_ms,
        "retention_bytes": c.retention_bytes,
        "max_message_bytes": c.max_message_bytes,
        "message_timestamp_type": c.message_timestamp_type,
        "message_timestamp_before_max_ms": c.message_timestamp_before_max_ms,
        "message_timestamp_after_max_ms": c.message_timestamp_after_max_ms,
    })
}

fn setting(v: Option<i64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// `topics list`.
pub async fn list(addr: &str) -> anyhow::Result<Report> {
    let topics = topics(addr, vec![]).await?;
    let mut text =
        format!("{:<32} {:<36} {:>10} {:>14} {:>16}\n", "topic", "id", "partitions", "retention.ms", "retention.bytes");
    for t in &topics {
        let c = t.configs.clone().unwrap_or_default();
        let _ = writeln!(
            text,
            "{:<32} {:<36} {:>10} {:>14} {:>16}",
            t.name,
            uuid_text(&t.topic_id),
            t.num_partitions,
            setting(c.retention_ms),
            setting(c.retention_bytes)
        );
    }
    Ok(Report::ok(json!({ "topics": topics.iter().map(topic_json).collect::<Vec<_>>() }), text))
}

/// `topics describe NAME`.
pub async fn describe(addr: &str, name: &str) -> anyhow::Result<Report> {
    let found = topics(addr, vec![name.to_string()]).await?;
    let t = found.into_iter().find(|t| t.name == name).ok_or_else(|| anyhow::anyhow!("no topic named {name:?}"))?;
    let topic: [u8; 16] = t.topic_id.as_slice().try_into().map_err(|_| anyhow::anyhow!("a topic id is 16 bytes"))?;
    let mut admin = AdminServiceClient::new(connect(addr, Duration::from_secs(5)).await?);
    let status = admin.status(StatusRequest::default()).await?.into_inner();
    let n = status.num_metadata_partitions;
    let address: BTreeMap<u64, String> = status.nodes.iter().map(|x| (x.node_id, x.address.clone())).collect();
    // Each partition is asked of the leader of its metadata partition (the node at `addr` when
    // there is none known).
    let mut by_node: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for p in 0..t.num_partitions {
        let g = diskless_proto::metadata_partition_for(&topic, p, n);
        let leader = status.groups.get(g as usize).map_or(0, |x| x.leader);
        let at = address.get(&leader).cloned().unwrap_or_else(|| addr.to_string());
        by_node.entry(at).or_default().push(p);
    }
    let mut rows: Vec<PartitionFigures> = vec![];
    for (at, partitions) in by_node {
        let asked = async {
            let mut c = AdminServiceClient::new(connect(&at, Duration::from_secs(5)).await?);
            let req = DescribePartitionsRequest { topic_id: topic.to_vec(), partitions: partitions.clone() };
            anyhow::Ok(c.describe_partitions(req).await?.into_inner().partitions)
        };
        match asked.await {
            Ok(r) => rows.extend(r),
            Err(e) => rows.extend(partitions.iter().map(|&p| PartitionFigures {
                partition: p,
                metadata_partition: diskless_proto::metadata_partition_for(&topic, p, n),
                error_code: -1,
                error_message: format!("{at}: {e:#}"),
                ..Default::default()
            })),
        }
    }
    rows.sort_by_key(|r| r.partition);
    let ok = rows.iter().all(|r| r.error_code == 0);
    let c = t.configs.clone().unwrap_or_default();
    // The broker-enforced settings the topic has (the others are each broker's own).
    let own: Vec<String> = [
        c.max_message_bytes.map(|v| format!("max.message.bytes {v}")),
        c.message_timestamp_type.as_ref().map(|v| format!("message.timestamp.type {v}")),
        c.message_timestamp_before_max_ms.map(|v| format!("message.timestamp.before.max.ms {v}")),
        c.message_timestamp_after_max_ms.map(|v| format!("message.timestamp.after.max.ms {v}")),
    ]
    .into_iter()
    .flatten()
    .map(|s| format!(", {s}"))
    .collect();
    let mut text = format!(
        "topic {} ({}), {} partitions, retention.ms {}, retention.bytes {}{}\n\n{:>9} {:>8} {:>12} {:>14} {:>10} {:>14} {:>6}\n",
        t.name,
        uuid_text(&t.topic_id),
        t.num_partitions,
        setting(c.retention_ms),
        setting(c.retention_bytes),
        own.concat(),
        "partition",
        "metadata",
        "log start",
        "high watermark",
        "batches",
        "bytes",
        "node"
    );
    for r in &rows {
        if r.error_code != 0 {
            let _ = writeln!(
                text,
                "{:>9} {:>8}  error {}: {}",
                r.partition, r.metadata_partition, r.error_code, r.error_message
            );
        } else {
            let _ = writeln!(
                text,
                "{:>9} {:>8} {:>12} {:>14} {:>10} {:>14} {:>6}",
                r.partition, r.metadata_partition, r.log_start_offset, r.high_watermark, r.batches, r.bytes, r.node_id
            );
        }
    }
    let good = rows.iter().filter(|r| r.error_code == 0);
    let (batches, bytes) = good.fold((0u64, 0i64), |(a, b), r| (a + r.batches, b + r.bytes));
    let _ = writeln!(text, "{:>9} {:>8} {:>12} {:>14} {:>10} {:>14}", "total", "", "", "", batches, bytes);
    let mut doc = topic_json(&t);
    doc["partition_figures"] = serde_json::to_value(&rows)?;
    doc["batches"] = json!(batches);
    doc["bytes"] = json!(bytes);
    Ok(Report { json: doc, text, ok })
}

/// `files describe KEY...`.
pub async fn describe_files(addr: &str, keys: &[String]) -> anyhow::Result<Report> {
    let files =
        keys.iter().map(|k| describe_files_request::DescribeFileEntry { object_key: k.clone() }).collect::<Vec<_>>();
    let r = client(addr).await?.describe_files(DescribeFilesRequest { files, timeout_ms: TIMEOUT_MS }).await?;
    let files = r.into_inner().files;
    let ok = files.iter().all(|f| f.error_code == 0);
    let mut text = format!("{:<60} {:<6} {}\n", "object key", "known", "live batches");
    let mut out = vec![];
    for f in &files {
        let state = if f.error_code != 0 {
            format!("error {}: {}", f.error_code, f.error_message.clone().unwrap_or_default())
        } else if f.has_live_batches {
            "yes".into()
        } else {
            "no".into()
        };
        let _ = writeln!(text, "{:<60} {:<6} {state}", f.object_key, if f.known { "yes" } else { "no" });
        out.push(json!({
            "object_key": f.object_key,
            "known": f.known,
            "has_live_batches": f.has_live_batches,
            "error_code": f.error_code,
            "error_message": f.error_message,
        }));
    }
    Ok(Report { json: json!({ "files": out }), text, ok })
}
