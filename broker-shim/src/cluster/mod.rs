//! The broker's client of the coordinator cluster ([`ClusterClient`]): every call the broker makes
//! to the coordinator nodes goes through it.
//!
//! - `failover`: any node serves any request, so a request goes to one node and moves to the next
//!   when that one cannot be reached (only requests safe to repeat are repeated).
//! - `leaders`: each metadata partition's leader as last learned, for the calls sent straight to
//!   it (no forwarding hop).
//! - `commit`: a file's commit split per metadata partition and sent to the leaders, the answers
//!   merged back in request order (`diskless_proto::split_by_partition`, `merge_part`).
//! - `catalog`: the topic catalog cache (names to ids, read again on a miss).
//! - `applied`: the Raft indexes this broker's own commits were applied at, which its FindBatches
//!   pass on so the broker reads its own writes from any replica.
//! - `group_offsets`: a group's committed offsets written (OffsetCommit, a transaction's end).
//! - `offsets`: a partition's ListOffsets (a strict read of its leader) and DeleteRecords.
//! - `fencing`: FenceObjects, what the cluster knows of an object before it is deleted.
//! - `acls`: the ACL bindings the cluster keeps (create, describe, delete).
//! - `marks`: each partition's high watermark and log start as this broker learns them (its own
//!   commits, the watches), and the waits of parked fetches on them.
//! - `watch`: one WatchPartitions stream per metadata partition, resumed across nodes, feeding
//!   `marks` and `coordinates`.
//! - `coordinates`: the batch-coordinate cache (own commits, the watches' announcements, FindBatches
//!   answers), so fetches of recent data need no FindBatches.
//!
//! It decides nothing about Kafka semantics (the callers turn answers into Kafka errors) and keeps
//! no state that must survive the broker.

mod acls;
mod applied;
mod catalog;
mod commit;
pub mod coordinates;
mod failover;
mod fencing;
pub mod group_offsets;
mod leaders;
pub mod marks;
mod offsets;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::StatusRequest;
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use tonic::transport::Channel;

pub use acls::match_any;
pub use catalog::{TopicMeta, CATALOG_MAX_AGE, DEFAULT_RETENTION_BYTES, DEFAULT_RETENTION_MS};
pub use commit::MIN_COMMIT_WINDOW;
pub use fencing::Fence;
pub use offsets::OffsetAsk;

/// A client of one coordinator node.
pub type Client = CoordinatorServiceClient<Channel>;

/// The coordinator cluster as this broker sees it.
pub struct ClusterClient {
    /// Every node this broker was given, with its channel (`failover`).
    channels: Vec<(String, Channel)>,
    /// The node requests to "any node" go to (`failover`).
    current: AtomicUsize,
    /// The topic catalog cache (`catalog`).
    topics: Mutex<catalog::Catalog>,
    /// Per metadata partition, the highest index this broker's commits were applied at (`applied`).
    applied: Mutex<HashMap<u32, u64>>,
    num_metadata_partitions: u32,
    /// Each metadata partition's leader as last learned (AdminService.Status), for sending each
    /// part of a commit, and strict reads, straight to its leader (`leaders`).
    leaders: Mutex<Vec<Option<String>>>,
    /// Channels by node address, made on first use (`failover`).
    by_addr: Mutex<HashMap<String, Channel>>,
    /// Addresses to reach nodes through instead of those they advertise (see
    /// `ShimConfig::coordinator_address_map`).
    address_map: HashMap<String, String>,
    /// TLS to the nodes (`ShimConfig::coordinator_tls`).
    tls: Option<Arc<diskless_tls::ClientTls>>,
    /// Partitions' high watermarks as learned (`marks`, fed by commits and `watch`).
    marks: Arc<marks::Marks>,
    /// Recent batches' coordinates (`coordinates`, fed by commits, `watch` and reads).
    coordinates: Arc<coordinates::Coordinates>,
}

impl ClusterClient {
    /// Connects (lazily) to the nodes and learns the number of metadata partitions.
    pub async fn connect(addrs: &[String]) -> anyhow::Result<ClusterClient> {
        Self::connect_via(addrs, HashMap::new()).await
    }

    /// Like [`ClusterClient::connect`], reaching a node advertised at a key of `address_map`
    /// through that key's value.
    pub async fn connect_via(addrs: &[String], address_map: HashMap<String, String>) -> anyhow::Result<ClusterClient> {
        Self::connect_with(addrs, address_map, None).await
    }

    /// Like [`ClusterClient::connect_via`], over TLS with `tls`.
    pub async fn connect_with(
        addrs: &[String],
        address_map: HashMap<String, String>,
        tls: Option<Arc<diskless_tls::ClientTls>>,
    ) -> anyhow::Result<ClusterClient> {
        let mut channels = vec![];
        for a in addrs {
            channels.push((a.clone(), failover::channel(a, tls.clone())?));
        }
        let mut num_metadata_partitions = 0;
        let mut last_err = None;
        for _ in 0..60 {
            for (a, ch) in &channels {
                match AdminServiceClient::new(ch.clone())
                    .status(StatusRequest { with_digest: false, ..Default::default() })
                    .await
                {
                    Ok(s) => {
                        num_metadata_partitions = s.into_inner().num_metadata_partitions;
                        break;
                    }
                    Err(e) => last_err = Some(format!("{a}: {e}")),
                }
            }
            if num_metadata_partitions > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::ensure!(num_metadata_partitions > 0, "no coordinator answered: {last_err:?}");
        let by_addr = channels.iter().cloned().collect();
        let c = ClusterClient {
            channels,
            current: AtomicUsize::new(0),
            topics: Mutex::new(catalog::Catalog::default()),
            applied: Mutex::new(HashMap::new()),
            num_metadata_partitions,
            leaders: Mutex::new(vec![None; num_metadata_partitions as usize]),
            by_addr: Mutex::new(by_addr),
            address_map,
            tls,
            marks: Arc::new(marks::Marks::new(num_metadata_partitions)),
            coordinates: Arc::new(coordinates::Coordinates::new(coordinates::DEFAULT_MAX_ENTRIES)),
        };
        c.refresh_leaders().await;
        Ok(c)
    }

    /// The batch-coordinate cache keeps at most `entries` (0: none, and the watches do not ask for
    /// batches).
    pub fn with_coordinate_cache(mut self, entries: usize) -> ClusterClient {
        self.coordinates = Arc::new(coordinates::Coordinates::new(entries));
        self
    }

    /// The batch-coordinate cache.
    pub fn coordinates(&self) -> &Arc<coordinates::Coordinates> {
        &self.coordinates
    }

    /// How many metadata partitions the cluster has (fixed when it was created).
    pub fn num_metadata_partitions(&self) -> u32 {
        self.num_metadata_partitions
    }
}
