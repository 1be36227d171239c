//! Cluster tests of follower reads and stale replicas.

mod t40_follower_reads;
mod t41_stale_replicas;
