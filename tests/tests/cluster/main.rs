//! Every cluster test, in one binary (openraft's and TiKV's habit: one link of RocksDB and of the
//! harness instead of one per file). A module per area, named by number as before: `t1x` the
//! quorum (bootstrap, wiped nodes, topics, forwarding), `t2x` leaders and clocks, `t3x` restarts
//! and snapshots, `t4x` follower reads, `t5x` membership, `t6x` the broker's data path, `t7x` Kafka
//! clients, groups and the registry, `t8x` operations, security and hostile input, `t9x` the fault
//! suite. Each test starts real node and broker processes on loopback ports (`diskless_cluster_tests`).
//!
//! Run one area or one test: `cargo test -p diskless-cluster-tests --test cluster t20_` or
//! `tests/run.sh --test cluster t88_hostile_input::`.

mod t10_bootstrap;
mod t11_wiped_node;
mod t12_topic_convergence;
mod t13_forwarding;
mod t14_acls;
mod t15_end_transaction;
mod t20_leader_crash;
mod t21_degraded_error_codes;
mod t22_retention_clock;
mod t23_wiped_voter_liveness;
mod t30_restart_catch_up;
mod t31_snapshot_install;
mod t40_follower_reads;
mod t41_stale_replicas;
mod t50_membership;
mod t60_produce_fetch;
mod t61_broker_leader_crash;
mod t62_corruption;
mod t63_cleanup;
mod t64_object_fencing;
mod t65_parked_fetch;
mod t66_coordinate_cache;
mod t67_transaction_reads;
mod t68_transactions;
mod t69_exactly_once;
mod t70_kafka_clients;
mod t71_consumer_groups;
mod t72_producer_ids;
mod t73_broker_registry;
mod t74_kafka_semantics;
mod t75_conformance;
mod t76_consumer_protocol;
mod t77_share_groups;
mod t80_metrics;
mod t81_health;
mod t82_coordctl;
mod t83_backup_restore;
mod t84_deploy_files;
mod t85_security;
mod t86_data_dirs;
mod t87_kafka_security;
mod t88_hostile_input;
mod t89_kafka_authorization;
mod t90_nemesis;
