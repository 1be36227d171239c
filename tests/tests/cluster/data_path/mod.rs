//! Cluster tests of the broker's data path: produce, fetch, cleanup, fencing, transactions' partition side.

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
