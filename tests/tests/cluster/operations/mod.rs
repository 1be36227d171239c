//! Cluster tests of operations, security and hostile input.

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
