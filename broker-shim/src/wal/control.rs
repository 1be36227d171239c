//! Transaction markers as Kafka record batches: the COMMIT or ABORT control batch a consumer
//! reads where the coordinator cluster recorded a marker (markers hold no object bytes; see
//! `state_machine::partition_txns` in the coordinator). The layout is Kafka's
//! `MemoryRecords.withEndTransactionMarker`: one control record whose key is
//! `ControlRecordType` (version 0, type) and whose value is `EndTransactionMarker` (version 0,
//! coordinator epoch), in a batch with the transactional and control bits set, the producer's id
//! and epoch, no sequence, and the marker's time as both timestamps (CreateTime).

use super::record_batch::{CRC_START, HEADER_LEN, MAGIC_V2};

const TRANSACTIONAL_AND_CONTROL: i16 = (1 << 4) | (1 << 5);
/// `ControlRecordType`: ABORT 0, COMMIT 1.
const ABORT: i16 = 0;
const COMMIT: i16 = 1;

/// A transaction marker, as the coordinator describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// The control batch of `marker` at `offset`, written at `timestamp`.
pub fn batch(offset: i64, timestamp: i64, marker: &Marker) -> Vec<u8> {
    // The record: length, attributes, timestamp and offset deltas, key, value, no headers.
    let key: Vec<u8> = [0i16.to_be_bytes(), if marker.commit { COMMIT } else { ABORT }.to_be_bytes()].concat();
    let value: Vec<u8> = [&0i16.to_be_bytes()[..], &marker.coordinator_epoch.to_be_bytes()[..]].concat();
    let mut body = vec![0u8]; // attributes
    put_varint(&mut body, 0); // timestamp delta
    put_varint(&mut body, 0); // offset delta
    put_varint(&mut body, key.len() as i64);
    body.extend_from_slice(&key);
    put_varint(&mut body, value.len() as i64);
    body.extend_from_slice(&value);
    put_varint(&mut body, 0); // headers
    let mut b = vec![0u8; HEADER_LEN];
    b[0..8].copy_from_slice(&offset.to_be_bytes());
    b[12..16].copy_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch: none
    b[16] = MAGIC_V2 as u8;
    b[21..23].copy_from_slice(&TRANSACTIONAL_AND_CONTROL.to_be_bytes());
    b[23..27].copy_from_slice(&0i32.to_be_bytes());
    b[27..35].copy_from_slice(&timestamp.to_be_bytes());
    b[35..43].copy_from_slice(&timestamp.to_be_bytes());
    b[43..51].copy_from_slice(&marker.producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&marker.producer_epoch.to_be_bytes());
    b[53..57].copy_from_slice(&(-1i32).to_be_bytes());
    b[57..61].copy_from_slice(&1i32.to_be_bytes());
    put_varint(&mut b, body.len() as i64);
    b.extend_from_slice(&body);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A zigzag varint, as Kafka's records encode their lengths.
fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record_batch;

    #[test]
    fn a_marker_is_a_control_batch_kafkas_decoder_reads_as_one_commit_or_abort_record() {
        for commit in [true, false] {
            let m = Marker { producer_id: 4_000, producer_epoch: 7, commit, coordinator_epoch: 3 };
            let bytes = batch(42, 1_700_000_000_000, &m);
            let h = record_batch::parse(&bytes).expect("framing and CRC");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.base_offset, h.last_offset_delta, h.record_count), (42, 0, 1));
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (4_000, 7, -1));
            let mut buf = bytes::Bytes::from(bytes);
            let decoded =
                kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).expect("kafka-protocol decodes it");
            assert_eq!(decoded.records.len(), 1);
            let r = &decoded.records[0];
            assert!(r.control && r.transactional);
            assert_eq!((r.offset, r.timestamp, r.producer_id, r.producer_epoch), (42, 1_700_000_000_000, 4_000, 7));
            let key = r.key.as_ref().expect("a control key");
            assert_eq!(&key[..], &[0, 0, 0, u8::from(commit)]);
            assert_eq!(&r.value.as_ref().expect("a marker value")[..], &[0, 0, 0, 0, 0, 3]);
        }
    }
}
