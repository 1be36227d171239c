//! Keys of the Raft bookkeeping of one metadata partition (its log entries are in the segmented
//! log): in the `raft` column family, prefixed by the metadata partition id (4 bytes, big-endian)
//! and a one-byte tag. The applied state lives in the `state` family, next to the data it
//! describes, so both change in one write.

/// Log entries, as earlier versions kept them (tag, then the index: 8 bytes, big-endian); moved to
/// the segmented log at start (`log_store::move_log_out_of_rocksdb`).
const LOG: u8 = b'L';
/// The vote.
const VOTE: u8 = b'V';
/// The last committed log id.
const COMMITTED: u8 = b'C';
/// The last purged log id.
const PURGED: u8 = b'P';
/// A snapshot install in progress: the path of the snapshot file being installed.
const INSTALLING: u8 = b'I';

fn key(partition: u32, tag: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(13);
    k.extend_from_slice(&partition.to_be_bytes());
    k.push(tag);
    k
}

/// All log keys of the metadata partition as earlier versions wrote them: `[from, to)`.
pub fn log_range(partition: u32) -> (Vec<u8>, Vec<u8>) {
    (key(partition, LOG), key(partition, LOG + 1))
}

pub fn vote(partition: u32) -> Vec<u8> {
    key(partition, VOTE)
}

pub fn committed(partition: u32) -> Vec<u8> {
    key(partition, COMMITTED)
}

pub fn purged(partition: u32) -> Vec<u8> {
    key(partition, PURGED)
}

pub fn installing(partition: u32) -> Vec<u8> {
    key(partition, INSTALLING)
}
