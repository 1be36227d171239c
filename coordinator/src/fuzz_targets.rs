//! Entry points of the coverage-guided fuzz targets (`fuzz/`): each hands arbitrary bytes to one
//! decoder of the node's hostile input, as the node runs it (a peer's Raft messages and forwarded
//! requests, the wire form of CommitFile, the Raft log's records on disk), and checks what that
//! decoder promises besides not panicking. The node never calls these (a unit test runs every
//! seed through its target).

use prost::Message;

use crate::node::route::{Routed, Served};
use crate::node::RouteError;
use crate::raft::{SnapshotMeta, TypeConfig, Vote};
use crate::storage::codec;

/// A peer's message payload: the first byte picks what the receiving end decodes it as (every
/// `RaftService` payload, and both ends of `Execute`).
pub fn peer_message(data: &[u8]) {
    let Some((&kind, payload)) = data.split_first() else { return };
    let key = b"fuzz";
    match kind % 6 {
        0 => round_trip::<openraft::raft::AppendEntriesRequest<TypeConfig>>(key, payload),
        1 => round_trip::<openraft::raft::VoteRequest<TypeConfig>>(key, payload),
        2 => round_trip::<openraft::raft::TransferLeaderRequest<TypeConfig>>(key, payload),
        3 => round_trip::<(Vote, SnapshotMeta)>(key, payload),
        4 => round_trip::<Routed>(key, payload),
        _ => round_trip::<Result<Served, RouteError>>(key, payload),
    }
}

/// Decoding may fail; what decodes encodes, and that encoding decodes back to itself (a value
/// travels between nodes unchanged).
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(key: &[u8], payload: &[u8]) {
    if let Ok(v) = codec::decode::<T>(key, payload) {
        let bytes = codec::encode(&v).expect("a decoded value encodes");
        let back: T = codec::decode(key, &bytes).expect("an encoding decodes");
        assert_eq!(codec::encode(&back).expect("encodes"), bytes, "a value survives a round trip");
    }
}

/// A segment file's bytes after its header, read record by record as recovery scans them; each
/// record found must lie within the bytes and encode back to them, and an entry's payload goes
/// through the entry decoder (what reading the log back does).
pub fn seglog_records(data: &[u8]) {
    use crate::raft::seglog::record::{self, Kind, Next};
    let mut at = 0;
    while let Next::Record(r) = record::parse(&data[at..]) {
        assert!(r.len >= record::HEADER + record::FIXED && at + r.len <= data.len(), "a record within the bytes");
        let mut again = vec![];
        record::encode(&mut again, r.kind, r.partition, r.index, r.payload);
        assert_eq!(again, data[at..at + r.len], "a record reads back as written");
        if r.kind == Kind::Entry {
            round_trip::<crate::raft::Entry>(b"fuzz entry", r.payload);
        }
        at += r.len;
    }
}

/// A CommitFile as a broker sends it, through the service's wire checks.
pub fn commit_file(data: &[u8]) {
    let Ok(req) = diskless_proto::v1::CommitFileRequest::decode(data) else { return };
    if crate::server::convert::commit_size(req.batches.len(), req.file_size).is_err() {
        return;
    }
    for b in &req.batches {
        if let Ok(c) = crate::server::convert::commit_batch(b) {
            assert_eq!(c.tp.partition, b.partition_index);
        }
    }
}

/// Starting inputs for the targets above (`fuzz/run.sh --seeds` writes them under
/// `fuzz/seeds/`): well-formed messages of each kind, so the fuzzer starts from the real shapes.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use openraft::entry::RaftEntry;

    use crate::node::route::Read;
    use crate::raft::{Entry, LogId};
    use crate::state_machine::TopicPartition;

    let leader = openraft::vote::leader_id_adv::LeaderId { term: 3, node_id: 1 };
    let vote = Vote::new(3, 1);
    let log_id = |i| LogId::new(leader, i);
    let tp = TopicPartition { topic_id: uuid::Uuid::from_bytes([7; 16]), partition: 2 };
    let tagged = |kind: u8, bytes: Vec<u8>| [vec![kind], bytes].concat();
    let append = openraft::raft::AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: Some(log_id(4)),
        entries: vec![Entry::new_blank(log_id(5)), Entry::new_blank(log_id(6))],
        leader_commit: Some(log_id(4)),
    };
    let mut out = vec![
        ("peer_message", tagged(0, enc(&append))),
        ("peer_message", tagged(1, enc(&openraft::raft::VoteRequest::<TypeConfig>::new(vote, Some(log_id(9)))))),
        ("peer_message", tagged(4, enc(&Routed::Read(Read::ListOffsets(vec![(tp, -1), (tp, 1_700_000_000_000)]))))),
        (
            "peer_message",
            tagged(4, enc(&Routed::Read(Read::FetchOffsets { group_id: "g".into(), partitions: vec![tp] }))),
        ),
        ("peer_message", tagged(4, enc(&Routed::Read(Read::Topics)))),
        ("peer_message", tagged(4, enc(&Routed::Read(Read::DescribeFiles(vec!["wal/a".into(), "wal/b".into()]))))),
    ];
    let batch = |partition: i32, base: i64| diskless_proto::v1::commit_file_request::CommitBatch {
        magic: 2,
        topic_id: vec![7; 16],
        partition_index: partition,
        byte_offset: 1 + 100 * partition,
        size: 100,
        base_offset: base,
        last_offset: base + 9,
        batch_max_timestamp: 1_700_000_000_000,
        timestamp_type: 0,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
        ..Default::default()
    };
    let commit = diskless_proto::v1::CommitFileRequest {
        object_key: "wal/0f".into(),
        object_format: 1,
        uploader_broker_id: 1,
        file_size: 301,
        batches: vec![batch(0, 0), batch(1, 0), batch(2, 40)],
        ..Default::default()
    };
    out.push(("commit_file", commit.encode_to_vec()));
    let mut log = vec![];
    use crate::raft::seglog::record::{encode as put, Kind};
    put(&mut log, Kind::Entry, 0, 5, &enc(&Entry::new_blank(log_id(5))));
    put(&mut log, Kind::Entry, 1, 9, &enc(&Entry::new_blank(log_id(9))));
    put(&mut log, Kind::Truncate, 0, 5, &[]);
    put(&mut log, Kind::Drop, 2, 0, &[]);
    put(&mut log, Kind::Seal, 0, 0, &[]);
    out.push(("seglog_records", log));
    out
}

/// A seed's bincode bytes.
fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
    codec::encode(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_is_well_formed_input_for_its_target() {
        let seeds = seeds();
        for (target, bytes) in &seeds {
            match *target {
                "peer_message" => {
                    let (kind, payload) = bytes.split_first().unwrap();
                    let decoded = match kind {
                        0 => codec::decode::<openraft::raft::AppendEntriesRequest<TypeConfig>>(b"k", payload).is_ok(),
                        1 => codec::decode::<openraft::raft::VoteRequest<TypeConfig>>(b"k", payload).is_ok(),
                        _ => codec::decode::<Routed>(b"k", payload).is_ok(),
                    };
                    assert!(decoded, "seed of kind {kind}");
                    peer_message(bytes);
                }
                "commit_file" => {
                    let req = diskless_proto::v1::CommitFileRequest::decode(&bytes[..]).unwrap();
                    assert!(req.batches.iter().all(|b| crate::server::convert::commit_batch(b).is_ok()));
                    commit_file(bytes);
                }
                "seglog_records" => seglog_records(bytes),
                other => panic!("a seed for an unknown target {other}"),
            }
        }
        for t in ["peer_message", "commit_file", "seglog_records"] {
            assert!(seeds.iter().any(|(s, _)| *s == t), "no seed for {t}");
        }
    }
}
