//! Kafka records to and from record batches, with kafka-protocol's codec: what a client does. The
//! demo client and the end-to-end tests use it; the broker itself never re-encodes batches.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A record as a consumer sees it, with its batch's producer and flags (what a `read_committed`
/// consumer needs to drop aborted transactions and control records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub producer_id: i64,
    /// Its batch belongs to a transaction.
    pub transactional: bool,
    /// A control record (a transaction marker: its key is version and type, 0 ABORT, 1 COMMIT).
    pub control: bool,
}

impl Message {
    /// For a control record, whether it is an ABORT marker (its key's type 0).
    pub fn is_abort_marker(&self) -> bool {
        self.control && self.key.as_deref().and_then(|k| k.get(2..4)) == Some(&[0, 0][..])
    }
}

/// Idempotence fields of a batch: producer id, epoch, base sequence (-1s for none).
#[derive(Debug, Clone, Copy)]
pub struct Idempotence {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

pub const NOT_IDEMPOTENT: Idempotence = Idempotence { producer_id: -1, producer_epoch: -1, base_sequence: -1 };

/// Encodes `(key, value)` records as one v2 record batch.
pub fn encode(
    records: &[(Option<Bytes>, Option<Bytes>)],
    timestamp: i64,
    compression: Compression,
    idem: Idempotence,
) -> anyhow::Result<Bytes> {
    encode_batch(records, timestamp, compression, idem, false)
}

/// [`encode`] with the batch's transactional bit set, as a transactional producer sends it.
pub fn encode_transactional(
    records: &[(Option<Bytes>, Option<Bytes>)],
    timestamp: i64,
    idem: Idempotence,
) -> anyhow::Result<Bytes> {
    encode_batch(records, timestamp, Compression::None, idem, true)
}

fn encode_batch(
    records: &[(Option<Bytes>, Option<Bytes>)],
    timestamp: i64,
    compression: Compression,
    idem: Idempotence,
    transactional: bool,
) -> anyhow::Result<Bytes> {
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: idem.producer_id,
            producer_epoch: idem.producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // offset - sequence must be the same for every record of one batch.
            sequence: if idem.base_sequence < 0 { i as i32 - 1 } else { idem.base_sequence + i as i32 },
            timestamp: timestamp + i as i64,
            key: k.clone(),
            value: v.clone(),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &recs, &RecordEncodeOptions { version: 2, compression })?;
    Ok(buf.freeze())
}

/// Decodes every record of back-to-back record batches.
pub fn decode(mut bytes: Bytes) -> anyhow::Result<Vec<Message>> {
    let mut out = vec![];
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes)?;
        out.extend(set.records.into_iter().map(|r| Message {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            producer_id: r.producer_id,
            transactional: r.transactional,
            control: r.control,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record_batch;

    #[test]
    fn an_encoded_batch_is_one_valid_batch_that_decodes_back() {
        let recs: Vec<_> =
            (0..5).map(|i| (Some(Bytes::from(format!("k{i}"))), Some(Bytes::from(format!("v{i}"))))).collect();
        for c in [Compression::None, Compression::Gzip, Compression::Snappy] {
            let b = encode(&recs, 1000, c, NOT_IDEMPOTENT).unwrap();
            let h = record_batch::validate(&b).unwrap();
            assert_eq!(h.record_count, 5);
            let back = decode(b).unwrap();
            assert_eq!(back.len(), 5);
            assert_eq!(back[3].value.as_deref(), Some(&b"v3"[..]));
        }
        let idem = Idempotence { producer_id: 9, producer_epoch: 1, base_sequence: 40 };
        let h = record_batch::validate(&encode(&recs, 0, Compression::None, idem).unwrap()).unwrap();
        assert_eq!((h.producer_id, h.base_sequence, h.last_sequence()), (9, 40, 44));
    }
}
