//! Cluster tests of leader crashes, degraded answers, clocks, wiped voters.

mod t20_leader_crash;
mod t21_degraded_error_codes;
mod t22_retention_clock;
mod t23_wiped_voter_liveness;
