//! KIP-932 share groups: queue-like consumption, several consumers sharing one partition's
//! records, each record acquired by one consumer at a time and acknowledged one by one.
//!
//! - `group`: one share group's members, epochs and assignment (after Kafka's `SimpleAssignor`),
//!   pure.
//! - `coordinator`: [`ShareGroups`], the share groups this broker coordinates, loaded from and
//!   stored in the coordinator cluster, and their session timers.
//! - `partition`: one share partition's records in flight (Kafka's `SharePartition`), pure.
//! - `states`: [`ShareStates`], share-partition states cached here and stored in the cluster by
//!   compare-and-set before they are acted on (what Kafka keeps in `__share_group_state`).
//! - `sessions`: [`ShareSessions`], the share sessions of ShareFetch and ShareAcknowledge.
//!
//! Follows Kafka 4.1 (see docs/research/kip-932-kafka-rules.md and kip-932-librdkafka.md). This
//! module must not speak the Kafka protocol (`kafka::share_groups` and `kafka::share_fetch` do)
//! nor read the log.

pub mod coordinator;
pub mod group;
pub mod partition;
pub mod sessions;
pub mod states;

pub use coordinator::ShareGroups;
pub use sessions::ShareSessions;
pub use states::ShareStates;
