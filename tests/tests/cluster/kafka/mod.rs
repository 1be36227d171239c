//! Cluster tests of Kafka clients, groups, transactions and the broker registry.

mod t70_kafka_clients;
mod t71_consumer_groups;
mod t72_producer_ids;
mod t73_broker_registry;
mod t74_kafka_semantics;
mod t75_conformance;
mod t76_consumer_protocol;
mod t77_share_groups;
