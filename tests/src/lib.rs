//! Harness for the cluster tests (`tests/tests/cluster/`), split by role: `cluster` (coordinator
//! node processes), `broker` (broker processes), `s3` (a moto server), `clients` (real Kafka
//! clients), `requests` (coordinator request builders), `produce` (through a broker), `metrics`,
//! `kafka_wire` (raw Kafka requests) and the fault suite (`nemesis`). Everything is re-exported
//! here, so a test needs one `use diskless_cluster_tests::*;`.
//!
//! Each node's log goes to `<tmp>/node-<id>.log`; when a test fails, the tail of every log is
//! printed. Set `DISKLESS_KEEP_TEST_DIRS=1` to keep the folder, and `DISKLESS_NODE_LOG` to change the
//! nodes' `RUST_LOG` filter.

pub mod broker;
pub mod clients;
pub mod cluster;
pub mod kafka_wire;
pub mod metrics;
pub mod nemesis;
pub mod produce;
pub mod requests;
pub mod s3;

pub use broker::*;
pub use clients::*;
pub use cluster::*;
pub use diskless_broker_shim::records::{self as kafka_records, Idempotence, Message, NOT_IDEMPOTENT};
pub use kafka_protocol::records::Compression;
pub use kafka_wire::{exchange, kafka_any, kafka_call, kafka_request};
pub use metrics::*;
pub use produce::*;
pub use requests::*;
pub use s3::*;
