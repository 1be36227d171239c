//! The broker side of diskless topics (KIP-1163).
//!
//! Data flows `kafka` → `validate` → `produce` → `wal` / `storage` → `cluster`, and back through
//! `fetch`: a Kafka client's record batches are validated (`validate`), laid out in WAL segments
//! (`wal`), uploaded to object storage (`storage`), committed to the coordinator cluster in order
//! (`produce`, through `cluster`, the broker's client of the coordinator cluster), and read back by
//! byte ranges with offsets injected (`fetch`). `consolidate` rewrites old batches out of the mixed
//! WAL objects into one object per partition (KIP-1165); `cleanup` deletes the objects the cluster
//! released and the orphans it never knew.
//!
//! Beside the data path, `coordinators` holds what the broker coordinates: groups (classic,
//! KIP-848, share) and transactional ids, on one coordinator runtime's rule (state held per key,
//! stored by compare-and-set before an answer). `registry` is this broker in the cluster's broker
//! registry (who coordinates and leads what); `producer_ids` hands out idempotent producers' ids;
//! `incarnation` is this process's one identity. `kafka` is the Kafka protocol listener (`authz`
//! decides which of its requests a principal may make, from the ACLs the cluster keeps), `service`
//! the broker's own gRPC API; `shim` wires the parts below the listeners together (the listeners
//! start over it), `config` composes the modules' settings. `metrics` (Prometheus) is bumped along
//! the way and served on `metrics_addr`.
//!
//! Three things are "coordinators" in Kafka's words; here each has its own name: the coordinator
//! cluster (`cluster::ClusterClient`), a group's coordinator (`coordinators::groups`), and the
//! transaction coordinator (`coordinators::transactions`).

pub mod authz;
pub mod cleanup;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod consolidate;
pub mod coordinators;
pub mod error;
pub mod fetch;
pub mod fuzz_targets;
pub mod health;
pub mod incarnation;
pub mod kafka;
pub mod metrics;
pub mod produce;
pub mod producer_ids;
pub mod records;
pub mod registry;
pub mod service;
pub mod shim;
pub mod storage;
pub mod validate;
pub mod wal;

pub use config::ShimConfig;
pub use error::KafkaError;
pub use incarnation::Incarnation;
pub use shim::Shim;
