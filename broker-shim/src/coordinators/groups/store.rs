//! Where a broker's groups are kept when it is gone: the coordinator cluster (StoreGroup and
//! FetchOffsets of the metadata partition the group id maps to, ListGroups over all of them),
//! behind a trait so the protocol's tests run without a cluster.

use diskless_proto::v1::{ConsumerGroup, FetchOffsetsRequest, ListGroupsRequest, StoreGroupRequest};
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use crate::cluster::ClusterClient;
pub use crate::coordinators::cluster_error::StoreError;

pub trait GroupStore: Send + Sync + 'static {
    /// Stores `group` by compare-and-set: only if the stored group is at `expected_version` (0:
    /// none), else ILLEGAL_GENERATION. Returns the version it was stored at.
    fn store<'a>(
        &'a self,
        group_id: &'a str,
        group: ConsumerGroup,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
    /// The stored group (with its version), if any.
    fn load<'a>(&'a self, group_id: &'a str) -> BoxFuture<'a, Result<Option<ConsumerGroup>, StoreError>>;
    /// Every stored group with members, by id. The groups of a metadata partition that did not
    /// answer are missing (the error only when none answered).
    fn list_with_members(&self) -> BoxFuture<'_, Result<Vec<(String, ConsumerGroup)>, StoreError>>;
}

const TIMEOUT_MS: i32 = 10_000;

impl GroupStore for ClusterClient {
    fn store<'a>(
        &'a self,
        group_id: &'a str,
        group: ConsumerGroup,
        expected_version: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let req = StoreGroupRequest {
                group_id: group_id.to_string(),
                group: Some(group),
                timeout_ms: TIMEOUT_MS,
                expected_version,
            };
            let r = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.store_group(req).await }
                })
                .await
                .map_err(|s| StoreError::unavailable(&s))?;
            match r.error_code {
                0 => r.group.map(|g| g.version).ok_or_else(|| {
                    StoreError::Unavailable("the cluster's answer to StoreGroup names no stored group".into())
                }),
                code => Err(StoreError::Refused {
                    code: ErrorCode::from_wire(code),
                    message: r.error_message.unwrap_or_default(),
                }),
            }
        })
    }

    fn load<'a>(&'a self, group_id: &'a str) -> BoxFuture<'a, Result<Option<ConsumerGroup>, StoreError>> {
        Box::pin(async move {
            // Asking for one partition that cannot exist reads the group without its offsets.
            let none = diskless_proto::v1::GroupOffset { topic_id: vec![0; 16], partition: -1, ..Default::default() };
            let req =
                FetchOffsetsRequest { group_id: group_id.to_string(), partitions: vec![none], timeout_ms: TIMEOUT_MS };
            let r = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.fetch_offsets(req).await }
                })
                .await
                .map_err(|s| StoreError::unavailable(&s))?;
            match r.error_code {
                0 => Ok(r.group),
                code => Err(StoreError::Refused {
                    code: ErrorCode::from_wire(code),
                    message: r.error_message.unwrap_or_default(),
                }),
            }
        })
    }

    fn list_with_members(&self) -> BoxFuture<'_, Result<Vec<(String, ConsumerGroup)>, StoreError>> {
        Box::pin(async move {
            let r = self
                .call(|mut c| async move { c.list_groups(ListGroupsRequest { timeout_ms: TIMEOUT_MS }).await })
                .await
                .map_err(|s| StoreError::unavailable(&s))?;
            let groups: Vec<(String, ConsumerGroup)> = r
                .groups
                .into_iter()
                .filter_map(|e| Some((e.group_id, e.group.filter(|g| !g.members.is_empty())?)))
                .collect();
            if r.error_code != 0 && groups.is_empty() {
                return Err(StoreError::Unavailable(r.error_message.unwrap_or_else(|| "no group listed".into())));
            }
            Ok(groups)
        })
    }
}
