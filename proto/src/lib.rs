//! The wire contract between brokers, operators and the coordinator cluster.
//!
//! Owns: the generated gRPC types (`v1`), Kafka's error codes as this project uses them
//! ([`ErrorCode`]), and the one function both sides must agree on: which metadata partition owns a
//! topic-partition ([`metadata_partition_for`]) and how a request is split by it and merged back
//! ([`split`]), and the encoded descriptors of the services
//! ([`FILE_DESCRIPTOR_SET`]). It must not hold behaviour beyond that: no I/O,
//! no state.

/// The protocol a stored consumer group is marked with when it is a KIP-848 group (classic groups
/// store their assignment protocol there, e.g. "range"): its commits are fenced by member epoch.
pub const CONSUMER_PROTOCOL_MARK: &str = "(consumer protocol)";

/// The protocol a stored group is marked with when it is a KIP-932 share group (its protocol type
/// "share"): offsets are never committed to it; its progress is its share-partition states.
pub const SHARE_PROTOCOL_MARK: &str = "(share protocol)";

pub mod error_code;
pub mod partitioning;
pub mod split;

pub use error_code::ErrorCode;
pub use partitioning::{metadata_partition_for, metadata_partition_for_group, partition_key, rendezvous_score};
pub use split::{merge_part, split_by_partition, PartFailure};

/// The encoded `FileDescriptorSet` of every service above (server reflection; method names).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/diskless_descriptor.bin"));

/// Version 1 of the coordinator API (`package diskless.coordinator.v1`).
pub mod v1 {
    tonic::include_proto!("diskless.coordinator.v1");
}

/// Operators' API (`package diskless.admin.v1`).
pub mod admin {
    tonic::include_proto!("diskless.admin.v1");
}

/// The broker shim's own API (`package diskless.broker.v1`).
pub mod broker {
    tonic::include_proto!("diskless.broker.v1");
}

/// Node-to-node traffic: Raft and forwarded proposals (`package diskless.internal.v1`).
pub mod internal {
    tonic::include_proto!("diskless.internal.v1");
}
