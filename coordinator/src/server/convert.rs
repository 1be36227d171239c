//! Between the wire (`diskless_proto::v1`) and the state machine's types: field checks that the
//! protobuf types cannot express (16-byte UUIDs, `int8`/`int16` ranges) happen here, so bad input
//! becomes a per-item `INVALID_REQUEST` before anything is proposed. Also the one table of what
//! a routing problem ([`RouteError`]) becomes: a Kafka error code for the items it affects, or a
//! gRPC status where a whole call fails. Every service answers a `RouteError` through this table
//! (CoordinatorService, AdminService, RaftService); it must not be rebuilt elsewhere.

use diskless_proto::v1::commit_file_request::CommitBatch as WireBatch;
use diskless_proto::PartFailure;
use tonic::Code;
use uuid::Uuid;

use crate::node::RouteError;
use crate::state_machine::{CommitBatch, ErrorCode, Failure, TopicPartition};

pub fn ok_fields() -> (i32, Option<String>) {
    (ErrorCode::None.wire(), None)
}

pub fn failure_fields(f: &Failure) -> (i32, Option<String>) {
    (f.code.wire(), Some(f.message.clone()))
}

/// The error code and message of a per-item result.
pub fn result_fields<T>(r: &Result<T, Failure>) -> (i32, Option<String>) {
    r.as_ref().map_or_else(failure_fields, |_| ok_fields())
}

/// The table: per kind of routing problem, the Kafka error of the items it affects and the gRPC
/// status code of a call it fails as a whole. Not applied (NotLeader) and retriable elsewhere are
/// UNAVAILABLE, so clients try again or another node; an unknown outcome is REQUEST_TIMED_OUT. A
/// metadata partition that does not exist is NOT_FOUND: the caller named it (AdminService's and
/// RaftService's requests carry a partition id), and asking again will not make it exist;
/// INTERNAL would say this node broke. Kafka has no code for it, so its items are
/// UNKNOWN_SERVER_ERROR (the CoordinatorService computes its partitions itself: no client meets
/// it there).
fn route_codes(e: &RouteError) -> (ErrorCode, Code) {
    match e {
        RouteError::NotLeader { .. } => (ErrorCode::NotLeaderOrFollower, Code::Unavailable),
        RouteError::Timeout { .. } | RouteError::NoQuorum { .. } => (ErrorCode::RequestTimedOut, Code::Unavailable),
        RouteError::ReplicaUnavailable { .. } => (ErrorCode::ReplicaNotAvailable, Code::Unavailable),
        RouteError::Failed { .. } => (ErrorCode::UnknownServerError, Code::Unavailable),
        RouteError::UnknownPartition(_) => (ErrorCode::UnknownServerError, Code::NotFound),
    }
}

/// The Kafka error a routing problem becomes for the items it affects.
pub fn route_failure(e: &RouteError) -> Failure {
    Failure::new(route_codes(e).0, e.to_string())
}

/// The gRPC status of a call a routing problem fails as a whole.
pub fn route_status(e: &RouteError) -> tonic::Status {
    tonic::Status::new(route_codes(e).1, e.to_string())
}

/// The error of the items of a request part that got no answer of their own.
pub fn part_failure(f: &PartFailure<RouteError>) -> Failure {
    match f {
        PartFailure::Failed(e) => route_failure(e),
        PartFailure::Miscounted { answered, sent } => {
            Failure::new(ErrorCode::UnknownServerError, format!("{answered} answers for {sent} items"))
        }
    }
}

pub fn topic_id(bytes: &[u8]) -> Result<Uuid, Failure> {
    Uuid::from_slice(bytes)
        .map_err(|_| Failure::new(ErrorCode::InvalidRequest, format!("a topic id is 16 bytes, not {}", bytes.len())))
}

pub fn tp(topic: &[u8], partition: i32) -> Result<TopicPartition, Failure> {
    Ok(TopicPartition { topic_id: topic_id(topic)?, partition })
}

pub fn narrow<T: TryFrom<i32>>(v: i32, what: &str) -> Result<T, Failure> {
    T::try_from(v).map_err(|_| Failure::new(ErrorCode::InvalidRequest, format!("{what} {v} is out of range")))
}

pub fn int8(v: i32, what: &str) -> Result<i8, Failure> {
    narrow(v, what)
}

/// The most batches one CommitFile may name (a 1 GiB segment of the smallest batches a broker
/// accepts has fewer), and the largest file (a broker's `produce.buffer_max_bytes` at most).
pub const MAX_COMMIT_BATCHES: usize = 1 << 24;
pub const MAX_FILE_BYTES: i64 = 1 << 30;

/// A CommitFile's counts and sizes within bounds, before anything of it is looked at further.
pub fn commit_size(batches: usize, file_size: i64) -> Result<(), Failure> {
    if batches > MAX_COMMIT_BATCHES {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("{batches} batches in one file: at most {MAX_COMMIT_BATCHES}"),
        ));
    }
    if file_size > MAX_FILE_BYTES {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("a file of {file_size} bytes: at most {MAX_FILE_BYTES}"),
        ));
    }
    Ok(())
}

pub fn commit_batch(b: &WireBatch) -> Result<CommitBatch, Failure> {
    Ok(CommitBatch {
        magic: int8(b.magic, "magic")?,
        request_id: b.request_id,
        tp: tp(&b.topic_id, b.partition_index)?,
        byte_offset: b.byte_offset,
        size: b.size,
        base_offset: b.base_offset,
        last_offset: b.last_offset,
        batch_max_timestamp: b.batch_max_timestamp,
        timestamp_type: int8(b.timestamp_type, "timestamp type")?,
        producer_id: b.producer_id,
        producer_epoch: narrow(b.producer_epoch, "producer epoch")?,
        base_sequence: b.base_sequence,
        last_sequence: b.last_sequence,
    })
}
