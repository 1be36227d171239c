//! `coordctl inspect DATA_DIR`: a stopped node's data directory as JSON lines — its identity,
//! per metadata partition the Raft bookkeeping and a summary of the state (keys and bytes per
//! table, digest), and with `keys` every state key, decoded where it is a topic, partition,
//! batch, file, producer state or tombstone. Read only (RocksDB refuses to open a directory a
//! running node holds); it must not repair or change anything.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde_json::json;

use crate::state_machine::keys::{self as sk, Keys};
use crate::state_machine::records::{
    BatchRecord, FencedRecord, FileRecord, PartitionRecord, ProducerRecord, TopicRecord,
};
use crate::state_machine::StateMachine;
use crate::storage::{codec, display_key, Db, KvRead};

/// Writes the lines to `out`.
pub fn inspect(data_dir: &Path, keys: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let rocksdb = data_dir.join("rocksdb");
    anyhow::ensure!(
        rocksdb.join("CURRENT").exists(),
        "{} is not a node's data directory (no rocksdb/CURRENT)",
        data_dir.display()
    );
    let db = Db::open(&rocksdb)
        .with_context(|| format!("open {} (is the node still running? stop it first)", rocksdb.display()))?;
    let id = crate::raft::placement::read_identity(&db)?.context("the data directory has no identity record")?;
    let n = id.num_metadata_partitions;
    let log_dir = crate::raft::home::DataDir::log_path(data_dir);
    let log = crate::raft::seglog::SegLog::open_read_only(&log_dir)
        .with_context(|| format!("read the Raft log in {}", log_dir.display()))?;
    writeln!(out, "{}", json!({ "kind": "identity", "data_dir": data_dir, "identity": id }))?;
    for g in 0..n {
        let mut line = crate::raft::inspect::partition(&db, &log, data_dir, g)?;
        let (from, to) = Keys::new(g).metadata_partition_range();
        let applied = Keys::new(g).applied();
        let mut tables: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        db.read().scan(&from, &to, &mut |k, v| {
            if k != applied.as_slice() {
                let e = tables.entry(table_name(k)).or_default();
                e.0 += 1;
                e.1 += (k.len() + v.len()) as u64;
            }
            Ok(true)
        })?;
        let digest = StateMachine::new(g, n).digest(&db.read())?;
        line["kind"] = json!("metadata_partition");
        line["metadata_partition"] = json!(g);
        line["state"] = json!({
            "tables": tables.iter().map(|(t, (k, b))| (t.clone(), json!({ "keys": k, "bytes": b }))).collect::<serde_json::Map<_, _>>(),
            "digest": digest.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        });
        writeln!(out, "{line}")?;
    }
    if keys {
        for g in 0..n {
            let (from, to) = Keys::new(g).metadata_partition_range();
            let mut err = None;
            db.read().scan(&from, &to, &mut |k, v| {
                if let Err(e) = writeln!(out, "{}", key_line(g, k, v)) {
                    err = Some(e);
                    return Ok(false);
                }
                Ok(true)
            })?;
            if let Some(e) = err {
                return Err(e.into());
            }
        }
    }
    Ok(())
}

fn table_name(k: &[u8]) -> String {
    let name = match k.get(4).copied() {
        Some(sk::TOPIC) => "topics",
        Some(sk::TOPIC_NAME) => "topic_names",
        Some(sk::TOPIC_SETTINGS) => "topic_settings",
        Some(sk::ACL) => "acls",
        Some(sk::PARTITION) => "partitions",
        Some(sk::BATCH) => "batches",
        Some(sk::INDEX) => "time_index",
        Some(sk::PRODUCER) => "producer_states",
        Some(sk::FILE) => "files",
        Some(sk::COMMIT_RESULTS) => "commit_results",
        Some(sk::TO_DELETE) => "files_to_delete",
        Some(sk::FENCED) => "fenced_keys",
        Some(sk::FENCED_BY_TIME) => "fenced_by_time",
        Some(sk::PURGE) => "purge_queue",
        Some(sk::DELETED_TOPIC) => "deleted_topics",
        Some(sk::GROUP) => "consumer_groups",
        Some(sk::OFFSET) => "committed_offsets",
        Some(sk::OFFSET_BY_TOPIC) => "committed_offsets_by_topic",
        Some(sk::BROKER) => "brokers",
        Some(sk::META) => "meta",
        Some(sk::APPLIED) => "applied",
        _ => return format!("unknown:{}", display_key(k.get(4..5).unwrap_or_default())),
    };
    name.to_string()
}

fn uuid_at(k: &[u8], at: usize) -> Option<uuid::Uuid> {
    Some(uuid::Uuid::from_bytes(k.get(at..at + 16)?.try_into().ok()?))
}

fn i32_at(k: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(k.get(at..at + 4)?.try_into().ok()?))
}

fn i64_at(k: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(k.get(at..at + 8)?.try_into().ok()?))
}

fn decoded<T: serde::de::DeserializeOwned + serde::Serialize>(k: &[u8], v: &[u8]) -> serde_json::Value {
    match codec::decode::<T>(k, v) {
        Ok(r) => serde_json::to_value(r).unwrap_or_default(),
        Err(e) => json!({ "undecodable": e.to_string() }),
    }
}

/// One state key as a JSON object: table, the key's fields, the value (decoded for the main
/// tables).
fn key_line(g: u32, k: &[u8], v: &[u8]) -> serde_json::Value {
    let text = |at: usize| String::from_utf8_lossy(k.get(at..).unwrap_or_default()).into_owned();
    let mut line = json!({ "kind": "key", "metadata_partition": g, "table": table_name(k) });
    let (key, value) = match k.get(4).copied() {
        Some(sk::TOPIC) => (json!({ "topic_id": uuid_at(k, 5) }), decoded::<TopicRecord>(k, v)),
        Some(sk::PARTITION) => {
            (json!({ "topic_id": uuid_at(k, 5), "partition": i32_at(k, 21) }), decoded::<PartitionRecord>(k, v))
        }
        Some(sk::BATCH) => (
            json!({ "topic_id": uuid_at(k, 5), "partition": i32_at(k, 21), "last_offset": i64_at(k, 25) }),
            decoded::<BatchRecord>(k, v),
        ),
        Some(sk::PRODUCER) => (
            json!({ "topic_id": uuid_at(k, 5), "partition": i32_at(k, 21), "producer_id": i64_at(k, 25) }),
            decoded::<ProducerRecord>(k, v),
        ),
        Some(sk::FILE) => (json!({ "object_key": text(5) }), decoded::<FileRecord>(k, v)),
        Some(sk::FENCED) => (json!({ "object_key": text(5) }), decoded::<FencedRecord>(k, v)),
        Some(sk::TOPIC_NAME) => (json!({ "name": text(5) }), decoded::<uuid::Uuid>(k, v)),
        Some(sk::TOPIC_SETTINGS) => {
            (json!({ "topic_id": uuid_at(k, 5) }), decoded::<crate::state_machine::TopicSettings>(k, v))
        }
        // The binding is the value whole; the key is its fields, packed.
        Some(sk::ACL) => (json!(display_key(k)), decoded::<crate::state_machine::AclBinding>(k, v)),
        Some(sk::GROUP) => (json!({ "group_id": text(5) }), decoded::<crate::state_machine::GroupRecord>(k, v)),
        Some(sk::BROKER) => {
            (json!({ "broker_id": Keys::decode_broker(k) }), decoded::<crate::state_machine::BrokerRecord>(k, v))
        }
        Some(sk::OFFSET) => match Keys::decode_offset(k) {
            Some((group_id, tp)) => (
                json!({ "group_id": group_id, "topic_id": tp.topic_id, "partition": tp.partition }),
                decoded::<crate::state_machine::OffsetRecord>(k, v),
            ),
            None => (json!(display_key(k)), json!({ "undecodable": "not an offset key" })),
        },
        _ => (json!(display_key(k)), json!({ "bytes": v.len() })),
    };
    line["key"] = key;
    line["value"] = value;
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_machine::{GroupRecord, OffsetRecord, TopicPartition};

    #[test]
    fn group_and_offset_keys_are_decoded() {
        let keys = Keys::new(3);
        let g = GroupRecord {
            generation: 4,
            protocol_type: "consumer".into(),
            protocol: None,
            leader: None,
            members: vec![],
            updated_ms: 9,
            coordinator: "b".into(),
            version: 3,
        };
        let line = key_line(3, &keys.group("grp"), &codec::encode(&g).unwrap());
        assert_eq!(line["table"], "consumer_groups");
        assert_eq!(line["key"]["group_id"], "grp");
        assert_eq!(line["value"]["generation"], 4);
        let tp = TopicPartition { topic_id: uuid::Uuid::from_bytes([1; 16]), partition: 2 };
        let o = OffsetRecord { offset: 17, leader_epoch: -1, metadata: None, commit_ms: 5 };
        let line = key_line(3, &keys.offset("grp", &tp), &codec::encode(&o).unwrap());
        assert_eq!(line["table"], "committed_offsets");
        assert_eq!(line["key"]["partition"], 2);
        assert_eq!(line["value"]["offset"], 17);
    }

    #[test]
    fn topic_settings_and_acl_keys_are_decoded() {
        let keys = Keys::new(0);
        let id = uuid::Uuid::from_bytes([2; 16]);
        let s = crate::state_machine::TopicSettings { max_message_bytes: Some(2000), ..Default::default() };
        let line = key_line(0, &keys.topic_settings(&id), &codec::encode(&s).unwrap());
        assert_eq!(line["table"], "topic_settings");
        assert_eq!(line["key"]["topic_id"], id.to_string());
        assert_eq!(line["value"]["max_message_bytes"], 2000);
        let b = crate::state_machine::AclBinding {
            resource_type: 2,
            resource_name: "orders".into(),
            pattern_type: 3,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission: 3,
        };
        let line = key_line(0, &crate::state_machine::acls::acl_key(&keys, &b), &codec::encode(&b).unwrap());
        assert_eq!(line["table"], "acls");
        assert_eq!(line["value"]["principal"], "User:alice");
    }
}
