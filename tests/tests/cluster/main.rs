//! Every cluster test, in one binary (openraft's and TiKV's habit: one link of RocksDB and of the
//! harness instead of one per file). A module per area, named by number as before: `t1x` the
//! quorum (bootstrap, wiped nodes, topics, forwarding), `t2x` leaders and clocks, `t3x` restarts
//! and snapshots, `t4x` follower reads, `t5x` membership, `t6x` the broker's data path, `t7x` Kafka
//! clients, groups and the registry, `t8x` operations, security and hostile input, `t9x` the fault
//! suite and the brokers' background rewrites (consolidation). Each test starts real node and broker processes on loopback ports (`diskless_cluster_tests`).
//!
//! Run one area or one test: `cargo test -p diskless-cluster-tests --test cluster t20_` or
//! `tests/run.sh --test cluster t88_hostile_input::`.

mod consolidation;
mod data_path;
mod faults;
mod kafka;
mod leaders;
mod membership;
mod operations;
mod quorum;
mod reads;
mod restarts;
