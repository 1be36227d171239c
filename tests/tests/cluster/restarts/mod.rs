//! Cluster tests of restarts and snapshots.

mod t30_restart_catch_up;
mod t31_snapshot_install;
