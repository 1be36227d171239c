//! The key layout of one metadata partition's state, inside the shared `state` column family.
//!
//! Every key starts with the metadata partition id (4 bytes, big-endian), then a one-byte table
//! tag, then the table's fields, big-endian so byte order is numeric order. Offsets and partition
//! indexes stored in keys are never negative (checked before they reach here), so their
//! big-endian bytes sort correctly as they are.
//!
//! | tag | table | key after the tag | value |
//! | --- | --- | --- | --- |
//! | `T` | topics | topic id | `TopicRecord` |
//! | `N` | topic names | name bytes | topic id |
//! | `L` | topic settings the brokers enforce (absent: none set) | topic id | `TopicSettings` |
//! | `P` | partitions | topic id, partition | `PartitionRecord` |
//! | `B` | batches | topic id, partition, **last** offset | `BatchRecord` |
//! | `I` | timestamp index chunks | topic id, partition, level, last offset | `IndexChunk` |
//! | `S` | producer state | topic id, partition, producer id | `ProducerRecord` |
//! | `U` | open transactions by producer | topic id, partition, producer id | `OpenTxnRecord` |
//! | `V` | open transactions by first offset (the first is the last stable offset) | topic id, partition, first offset | producer id (`i64`) |
//! | `E` | aborted transactions (Kafka's transaction index) | topic id, partition, **marker** offset | `AbortedTxnRecord` |
//! | `C` | transaction markers (control batches without object bytes) | topic id, partition, offset | `MarkerRecord` |
//! | `F` | files | object key | `FileRecord` |
//! | `R` | a file's commit answers | object key | `CommitRecord` |
//! | `D` | files to delete | marked time (sign-flipped), object key | empty |
//! | `X` | fenced object keys (tombstones) | object key | `FencedRecord` |
//! | `Y` | tombstones by age | fenced time (sign-flipped), object key | empty |
//! | `Q` | purge queue | topic id, partition | empty |
//! | `G` | deleted topic ids (never reused) | topic id | deleted-at time |
//! | `K` | consumer groups (those this metadata partition holds) | group id bytes | `GroupRecord` |
//! | `O` | committed offsets | group id (u16 length, bytes), topic id, partition | `OffsetRecord` |
//! | `W` | committed offsets by topic | topic id, group id (u16 length, bytes) | empty |
//! | `J` | transactional ids (those this metadata partition holds) | transactional id bytes | `TxnRecord` |
//! | `s` | share groups' share-partition states | group id (u16 length, bytes), topic id, partition | `ShareStateRecord` |
//! | `H` | the broker registry (metadata partition 0 only) | broker id | `BrokerRecord` |
//! | `Z` | ACL bindings (metadata partition 0 only) | resource type, pattern type, then name, principal, host (each u16 length, bytes), operation, permission | `AclBinding` |
//! | `M` | metadata-partition values | name | per name |
//! | `A` | applied log id and membership (written by the Raft layer with each entry) | — | openraft's |
//!
//! The `P`, `S` and `M` tables are *hot*: applying a commit reads their keys almost every time, so
//! the applying side keeps their committed values in a [`HotKeys`](crate::storage::HotKeys)
//! cache ([`is_hot`]).
//!
//! Batches are keyed by their last offset so that "the first batch holding offset `o` or later"
//! is one seek to `o`: FindBatches costs O(batches returned) however deep the partition is.

use uuid::Uuid;

pub const TOPIC: u8 = b'T';
pub const TOPIC_NAME: u8 = b'N';
pub const TOPIC_SETTINGS: u8 = b'L';
pub const PARTITION: u8 = b'P';
pub const BATCH: u8 = b'B';
pub const INDEX: u8 = b'I';
pub const PRODUCER: u8 = b'S';
pub const OPEN_TXN: u8 = b'U';
pub const OPEN_TXN_BY_OFFSET: u8 = b'V';
pub const ABORTED_TXN: u8 = b'E';
pub const MARKER: u8 = b'C';
pub const FILE: u8 = b'F';
pub const TO_DELETE: u8 = b'D';
pub const COMMIT_RESULTS: u8 = b'R';
pub const FENCED: u8 = b'X';
pub const FENCED_BY_TIME: u8 = b'Y';
pub const PURGE: u8 = b'Q';
pub const DELETED_TOPIC: u8 = b'G';
pub const META: u8 = b'M';
pub const GROUP: u8 = b'K';
pub const OFFSET: u8 = b'O';
pub const OFFSET_BY_TOPIC: u8 = b'W';
pub const BROKER: u8 = b'H';
pub const ACL: u8 = b'Z';
pub const TXN: u8 = b'J';
pub const SHARE_STATE: u8 = b's';
pub const APPLIED: u8 = b'A';

/// Names under the `M` table.
pub const META_NEXT_BATCH_ID: &[u8] = b"next_batch_id";
pub const META_RETENTION_CURSOR: &[u8] = b"retention_cursor";
pub const META_PRODUCER_CURSOR: &[u8] = b"producer_cursor";
/// The next producer id to hand out (metadata partition 0 only).
pub const META_NEXT_PRODUCER_ID: &[u8] = b"next_producer_id";
/// Where the expiry of committed offsets resumes (an `O` key, or absent: from the start).
pub const META_OFFSETS_CURSOR: &[u8] = b"offsets_cursor";
/// The broker registry's generation: how many times its live set changed (metadata partition 0).
pub const META_REGISTRY_GENERATION: &[u8] = b"registry_generation";

/// The longest group id a key can hold (its length is stored in 16 bits).
pub const MAX_GROUP_ID_BYTES: usize = u16::MAX as usize;

/// Whether `key` is in a hot table (partitions, producer states, metadata-partition values).
pub fn is_hot(key: &[u8]) -> bool {
    matches!(key.get(4), Some(&(PARTITION | PRODUCER | META)))
}

/// A topic-partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct TopicPartition {
    pub topic_id: Uuid,
    pub partition: i32,
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic_id, self.partition)
    }
}

/// Builds the keys of one metadata partition.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    metadata_partition: u32,
}

impl Keys {
    pub fn new(metadata_partition: u32) -> Keys {
        Keys { metadata_partition }
    }

    fn start(&self, tag: u8, cap: usize) -> Vec<u8> {
        let mut k = Vec::with_capacity(5 + cap);
        k.extend_from_slice(&self.metadata_partition.to_be_bytes());
        k.push(tag);
        k
    }

    /// The first key of this metadata partition and the first key after it.
    pub fn metadata_partition_range(&self) -> (Vec<u8>, Vec<u8>) {
        let from = self.metadata_partition.to_be_bytes().to_vec();
        let to = match self.metadata_partition.checked_add(1) {
            Some(next) => next.to_be_bytes().to_vec(),
            None => vec![0xff; 5],
        };
        (from, to)
    }

    /// All keys of one table: `[from, to)`.
    pub fn table(&self, tag: u8) -> (Vec<u8>, Vec<u8>) {
        (self.start(tag, 0), self.start(tag + 1, 0))
    }

    pub fn topic(&self, topic_id: &Uuid) -> Vec<u8> {
        let mut k = self.start(TOPIC, 16);
        k.extend_from_slice(topic_id.as_bytes());
        k
    }

    pub fn topic_settings(&self, topic_id: &Uuid) -> Vec<u8> {
        let mut k = self.start(TOPIC_SETTINGS, 16);
        k.extend_from_slice(topic_id.as_bytes());
        k
    }

    /// An ACL binding: resource and pattern type, then resource name, principal and host, then
    /// operation and permission (the strings were checked to fit: `acls::MAX_ACL_FIELD`).
    pub fn acl(&self, types: [u8; 2], strings: [&str; 3], access: [u8; 2]) -> Vec<u8> {
        let mut k = self.start(ACL, 4 + strings.iter().map(|s| 2 + s.len()).sum::<usize>());
        k.extend_from_slice(&types);
        for s in strings {
            let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
            k.extend_from_slice(&len.to_be_bytes());
            k.extend_from_slice(&s.as_bytes()[..usize::from(len)]);
        }
        k.extend_from_slice(&access);
        k
    }

    /// The tombstone of a deleted topic id.
    pub fn deleted_topic(&self, topic_id: &Uuid) -> Vec<u8> {
        let mut k = self.start(DELETED_TOPIC, 16);
        k.extend_from_slice(topic_id.as_bytes());
        k
    }

    pub fn topic_name(&self, name: &str) -> Vec<u8> {
        let mut k = self.start(TOPIC_NAME, name.len());
        k.extend_from_slice(name.as_bytes());
        k
    }

    fn tp(&self, tag: u8, tp: &TopicPartition, cap: usize) -> Vec<u8> {
        let mut k = self.start(tag, 20 + cap);
        k.extend_from_slice(tp.topic_id.as_bytes());
        k.extend_from_slice(&tp.partition.to_be_bytes());
        k
    }

    pub fn partition(&self, tp: &TopicPartition) -> Vec<u8> {
        self.tp(PARTITION, tp, 0)
    }

    /// Decodes the topic-partition of a `P` or `Q` key.
    pub fn decode_tp(&self, key: &[u8]) -> Option<TopicPartition> {
        let rest = key.get(5..25)?;
        let topic_id = Uuid::from_slice(&rest[..16]).ok()?;
        let partition = i32::from_be_bytes(rest[16..20].try_into().ok()?);
        Some(TopicPartition { topic_id, partition })
    }

    /// The partitions of one topic: `[from, to)` in the `P` table (or another per-tp table).
    pub fn topic_span(&self, tag: u8, topic_id: &Uuid) -> (Vec<u8>, Vec<u8>) {
        let mut from = self.start(tag, 16);
        from.extend_from_slice(topic_id.as_bytes());
        let mut to = from.clone();
        to.extend_from_slice(&[0xff; 5]);
        (from, to)
    }

    pub fn batch(&self, tp: &TopicPartition, last_offset: i64) -> Vec<u8> {
        let mut k = self.tp(BATCH, tp, 8);
        k.extend_from_slice(&last_offset.to_be_bytes());
        k
    }

    /// Batches of a partition with `from_last <= last offset`: `[from, to)`.
    pub fn batches_from(&self, tp: &TopicPartition, from_last: i64) -> (Vec<u8>, Vec<u8>) {
        (self.batch(tp, from_last.max(0)), self.tp_end(BATCH, tp))
    }

    /// The first key after every key of `tp` in table `tag`.
    pub fn tp_end(&self, tag: u8, tp: &TopicPartition) -> Vec<u8> {
        let mut k = self.tp(tag, tp, 1);
        k.push(0xff);
        k
    }

    pub fn tp_start(&self, tag: u8, tp: &TopicPartition) -> Vec<u8> {
        self.tp(tag, tp, 0)
    }

    /// The offset suffix of a `B`, `I`, `V`, `E` or `C` key.
    pub fn decode_offset_suffix(key: &[u8]) -> Option<i64> {
        let tail = key.get(key.len().checked_sub(8)?..)?;
        Some(i64::from_be_bytes(tail.try_into().ok()?))
    }

    pub fn index_chunk(&self, tp: &TopicPartition, level: u8, last_offset: i64) -> Vec<u8> {
        let mut k = self.tp(INDEX, tp, 9);
        k.push(level);
        k.extend_from_slice(&last_offset.to_be_bytes());
        k
    }

    /// Index chunks of `level` ending at or after `from_last`: `[from, to)`.
    pub fn index_chunks_from(&self, tp: &TopicPartition, level: u8, from_last: i64) -> (Vec<u8>, Vec<u8>) {
        let mut to = self.tp(INDEX, tp, 1);
        to.push(level + 1);
        (self.index_chunk(tp, level, from_last.max(0)), to)
    }

    pub fn producer(&self, tp: &TopicPartition, producer_id: i64) -> Vec<u8> {
        let mut k = self.tp(PRODUCER, tp, 8);
        k.extend_from_slice(&producer_id.to_be_bytes());
        k
    }

    /// A producer's open transaction on `tp` (`U`).
    pub fn open_txn(&self, tp: &TopicPartition, producer_id: i64) -> Vec<u8> {
        let mut k = self.tp(OPEN_TXN, tp, 8);
        k.extend_from_slice(&producer_id.to_be_bytes());
        k
    }

    /// The open transaction of `tp` that starts at `first_offset` (`V`).
    pub fn open_txn_by_offset(&self, tp: &TopicPartition, first_offset: i64) -> Vec<u8> {
        let mut k = self.tp(OPEN_TXN_BY_OFFSET, tp, 8);
        k.extend_from_slice(&first_offset.to_be_bytes());
        k
    }

    /// An aborted transaction of `tp`, by the offset of its ABORT marker (`E`).
    pub fn aborted_txn(&self, tp: &TopicPartition, marker_offset: i64) -> Vec<u8> {
        let mut k = self.tp(ABORTED_TXN, tp, 8);
        k.extend_from_slice(&marker_offset.to_be_bytes());
        k
    }

    /// The transaction marker of `tp` at `offset` (`C`).
    pub fn marker(&self, tp: &TopicPartition, offset: i64) -> Vec<u8> {
        let mut k = self.tp(MARKER, tp, 8);
        k.extend_from_slice(&offset.to_be_bytes());
        k
    }

    pub fn file(&self, object_key: &str) -> Vec<u8> {
        let mut k = self.start(FILE, object_key.len());
        k.extend_from_slice(object_key.as_bytes());
        k
    }

    pub fn to_delete(&self, marked_at: i64, object_key: &str) -> Vec<u8> {
        let mut k = self.start(TO_DELETE, 8 + object_key.len());
        k.extend_from_slice(&sortable_i64(marked_at));
        k.extend_from_slice(object_key.as_bytes());
        k
    }

    /// The time and object key of a `D` or `Y` key (both are laid out the same way).
    pub fn decode_to_delete(key: &[u8]) -> Option<(i64, String)> {
        let at = unsortable_i64(key.get(5..13)?.try_into().ok()?);
        let object_key = String::from_utf8(key.get(13..)?.to_vec()).ok()?;
        Some((at, object_key))
    }

    pub fn commit_results(&self, object_key: &str) -> Vec<u8> {
        let mut k = self.start(COMMIT_RESULTS, object_key.len());
        k.extend_from_slice(object_key.as_bytes());
        k
    }

    pub fn fenced(&self, object_key: &str) -> Vec<u8> {
        let mut k = self.start(FENCED, object_key.len());
        k.extend_from_slice(object_key.as_bytes());
        k
    }

    /// A `Y` key: tombstones in the order they were made, so the oldest are found first.
    pub fn fenced_by_time(&self, fenced_at: i64, object_key: &str) -> Vec<u8> {
        let mut k = self.start(FENCED_BY_TIME, 8 + object_key.len());
        k.extend_from_slice(&sortable_i64(fenced_at));
        k.extend_from_slice(object_key.as_bytes());
        k
    }

    pub fn purge(&self, tp: &TopicPartition) -> Vec<u8> {
        self.tp(PURGE, tp, 0)
    }

    /// The Raft layer's record of the last applied log id (not part of the state's digest).
    pub fn applied(&self) -> Vec<u8> {
        self.start(APPLIED, 0)
    }

    pub fn group(&self, group_id: &str) -> Vec<u8> {
        let mut k = self.start(GROUP, group_id.len());
        k.extend_from_slice(group_id.as_bytes());
        k
    }

    /// A transactional id's state (`J`).
    pub fn txn(&self, transactional_id: &str) -> Vec<u8> {
        let mut k = self.start(TXN, transactional_id.len());
        k.extend_from_slice(transactional_id.as_bytes());
        k
    }

    /// The start of a share group's `s` rows (the caller checked the id fits).
    fn share_states_prefix(&self, group_id: &str, cap: usize) -> Vec<u8> {
        let mut k = self.start(SHARE_STATE, 2 + group_id.len() + cap);
        k.extend_from_slice(&(group_id.len() as u16).to_be_bytes());
        k.extend_from_slice(group_id.as_bytes());
        k
    }

    /// A share group's state of one partition (`s`).
    pub fn share_state(&self, group_id: &str, tp: &TopicPartition) -> Vec<u8> {
        let mut k = self.share_states_prefix(group_id, 20);
        k.extend_from_slice(tp.topic_id.as_bytes());
        k.extend_from_slice(&tp.partition.to_be_bytes());
        k
    }

    /// Every share-partition state of a group: `[from, to)`.
    pub fn share_states_of_group(&self, group_id: &str) -> (Vec<u8>, Vec<u8>) {
        let from = self.share_states_prefix(group_id, 0);
        let mut to = from.clone();
        to.extend_from_slice(&[0xff; 21]);
        (from, to)
    }

    /// The topic-partition of an `s` key.
    pub fn decode_share_state(key: &[u8]) -> Option<TopicPartition> {
        let len = usize::from(u16::from_be_bytes(key.get(5..7)?.try_into().ok()?));
        let rest = key.get(7 + len..)?;
        if rest.len() != 20 {
            return None;
        }
        let topic_id = Uuid::from_slice(&rest[..16]).ok()?;
        let partition = i32::from_be_bytes(rest[16..20].try_into().ok()?);
        Some(TopicPartition { topic_id, partition })
    }

    /// The transactional id of a `J` key.
    pub fn decode_txn(key: &[u8]) -> Option<String> {
        String::from_utf8(key.get(5..)?.to_vec()).ok()
    }

    /// The group id of a `K` key.
    pub fn decode_group(key: &[u8]) -> Option<String> {
        String::from_utf8(key.get(5..)?.to_vec()).ok()
    }

    /// The start of a group's `O` rows (the caller checked the id fits: [`MAX_GROUP_ID_BYTES`]).
    fn group_offsets(&self, group_id: &str, cap: usize) -> Vec<u8> {
        let mut k = self.start(OFFSET, 2 + group_id.len() + cap);
        k.extend_from_slice(&(group_id.len() as u16).to_be_bytes());
        k.extend_from_slice(group_id.as_bytes());
        k
    }

    pub fn offset(&self, group_id: &str, tp: &TopicPartition) -> Vec<u8> {
        let mut k = self.group_offsets(group_id, 20);
        k.extend_from_slice(tp.topic_id.as_bytes());
        k.extend_from_slice(&tp.partition.to_be_bytes());
        k
    }

    /// Every committed offset of a group: `[from, to)`.
    pub fn offsets_of_group(&self, group_id: &str) -> (Vec<u8>, Vec<u8>) {
        let from = self.group_offsets(group_id, 0);
        let mut to = from.clone();
        to.extend_from_slice(&[0xff; 21]);
        (from, to)
    }

    /// The committed offsets of a group in one topic: `[from, to)`.
    pub fn offsets_of_group_topic(&self, group_id: &str, topic_id: &uuid::Uuid) -> (Vec<u8>, Vec<u8>) {
        let mut from = self.group_offsets(group_id, 16);
        from.extend_from_slice(topic_id.as_bytes());
        let mut to = from.clone();
        to.extend_from_slice(&[0xff; 5]);
        (from, to)
    }

    /// The group id and topic-partition of an `O` key.
    pub fn decode_offset(key: &[u8]) -> Option<(String, TopicPartition)> {
        let len = usize::from(u16::from_be_bytes(key.get(5..7)?.try_into().ok()?));
        let group = String::from_utf8(key.get(7..7 + len)?.to_vec()).ok()?;
        let rest = key.get(7 + len..)?;
        if rest.len() != 20 {
            return None;
        }
        let topic_id = Uuid::from_slice(&rest[..16]).ok()?;
        let partition = i32::from_be_bytes(rest[16..20].try_into().ok()?);
        Some((group, TopicPartition { topic_id, partition }))
    }

    /// The `W` row saying `group_id` has committed offsets in topic `topic_id`.
    pub fn offset_by_topic(&self, topic_id: &Uuid, group_id: &str) -> Vec<u8> {
        let mut k = self.start(OFFSET_BY_TOPIC, 18 + group_id.len());
        k.extend_from_slice(topic_id.as_bytes());
        k.extend_from_slice(&(group_id.len() as u16).to_be_bytes());
        k.extend_from_slice(group_id.as_bytes());
        k
    }

    /// The group id of a `W` key.
    pub fn decode_offset_by_topic(key: &[u8]) -> Option<String> {
        String::from_utf8(key.get(23..)?.to_vec()).ok()
    }

    /// A registered broker (`H`); ids are never negative (checked before they reach here).
    pub fn broker(&self, broker_id: i32) -> Vec<u8> {
        let mut k = self.start(BROKER, 4);
        k.extend_from_slice(&broker_id.to_be_bytes());
        k
    }

    /// The broker id of an `H` key.
    pub fn decode_broker(key: &[u8]) -> Option<i32> {
        Some(i32::from_be_bytes(key.get(5..9)?.try_into().ok()?))
    }

    pub fn meta(&self, name: &[u8]) -> Vec<u8> {
        let mut k = self.start(META, name.len());
        k.extend_from_slice(name);
        k
    }
}

/// Big-endian bytes of `v` with the sign bit flipped, so negative values sort first.
fn sortable_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn unsortable_i64(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_keys_sort_by_offset_and_stay_inside_their_partition() {
        let k = Keys::new(3);
        let tp = TopicPartition { topic_id: Uuid::from_bytes([1; 16]), partition: 2 };
        let next = TopicPartition { topic_id: Uuid::from_bytes([1; 16]), partition: 3 };
        let (from, to) = k.batches_from(&tp, 0);
        let a = k.batch(&tp, 5);
        let b = k.batch(&tp, 256);
        let c = k.batch(&tp, i64::MAX);
        assert!(from <= a && a < b && b < c && c < to);
        assert!(to <= k.batch(&next, 0));
        assert_eq!(Keys::decode_offset_suffix(&b), Some(256));
    }

    #[test]
    fn metadata_partitions_do_not_overlap() {
        let (_, end0) = Keys::new(0).metadata_partition_range();
        let (start1, _) = Keys::new(1).metadata_partition_range();
        assert!(Keys::new(0).meta(b"zzz") < end0);
        assert_eq!(end0, start1);
    }

    #[test]
    fn offset_keys_of_one_group_never_mix_with_another_groups() {
        let k = Keys::new(2);
        let tp = TopicPartition { topic_id: Uuid::from_bytes([0xff; 16]), partition: i32::MAX };
        // "a" is a prefix of "ab": the length prefix keeps their rows apart.
        let (from, to) = k.offsets_of_group("a");
        let a = k.offset("a", &tp);
        assert!(from <= a && a < to);
        let ab = k.offset("ab", &TopicPartition { topic_id: Uuid::nil(), partition: 0 });
        assert!(!(from <= ab && ab < to));
        assert_eq!(Keys::decode_offset(&a), Some(("a".to_string(), tp)));
        let (tfrom, tto) = k.offsets_of_group_topic("a", &tp.topic_id);
        assert!(tfrom <= a && a < tto);
        assert_eq!(Keys::decode_offset_by_topic(&k.offset_by_topic(&tp.topic_id, "g-1")), Some("g-1".into()));
        assert_eq!(Keys::decode_group(&k.group("g-1")), Some("g-1".into()));
    }

    #[test]
    fn deletion_times_sort_numerically() {
        let k = Keys::new(0);
        let a = k.to_delete(-5, "x");
        let b = k.to_delete(3, "a");
        let c = k.to_delete(1 << 40, "a");
        assert!(a < b && b < c);
        assert_eq!(Keys::decode_to_delete(&b), Some((3, "a".to_string())));
    }

    #[test]
    fn index_levels_do_not_overlap() {
        let k = Keys::new(0);
        let tp = TopicPartition { topic_id: Uuid::from_bytes([9; 16]), partition: 0 };
        let (_, to1) = k.index_chunks_from(&tp, 1, 0);
        assert!(k.index_chunk(&tp, 1, i64::MAX) < to1);
        assert!(to1 <= k.index_chunk(&tp, 2, 0));
    }
}
