//! Cluster tests of bootstrap, wiped nodes, topics, forwarding, ACLs, markers.

mod t10_bootstrap;
mod t11_wiped_node;
mod t12_topic_convergence;
mod t13_forwarding;
mod t14_acls;
mod t15_end_transaction;
mod t16_replace_batches;
