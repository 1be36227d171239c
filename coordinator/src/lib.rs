//! The diskless coordinator: the metadata of Kafka diskless topics (KIP-1164), replicated.
//!
//! Data flows `server` → `node` → `raft` → `state_machine` → `storage`: the gRPC server routes a
//! request to its metadata partition's leader, the node proposes it to that partition's Raft group,
//! each replica's state machine applies it to RocksDB, and `storage` is the only module that touches
//! RocksDB. `metrics` (Prometheus instruments) is bumped by every layer; `server` serves them. See `ARCHITECTURE.md` at the repository root for the whole map.

pub mod backup;
pub mod cli;
pub mod ctl;
pub mod fuzz_targets;
pub mod metrics;
pub mod node;
pub mod raft;
pub mod server;
pub mod state_machine;
pub mod storage;

/// The memory allocator of every node process (each binary that runs a node declares it as its
/// `#[global_allocator]`): mimalloc instead of the system's, +6–7% commits/s under load with the
/// same code, measured back to back (bench/HISTORY.md).
pub use mimalloc::MiMalloc as NodeAllocator;
