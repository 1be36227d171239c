//! The per-partition fan-out every CoordinatorService call shares: which metadata partition owns
//! an item, a request's items split by metadata partition (`diskless_proto::split_by_partition`),
//! each part run on its partition's leader through `node::route` at once, and the answers merged
//! back in request order (`diskless_proto::merge_part`); a part that could not be routed fails its
//! items as `convert::part_failure` says.
//!
//! Owns the split and the merge. It must not convert wire types (each call's file does) nor decide
//! where a part runs (that is `node::route`).

use std::time::Duration;

use diskless_proto::{merge_part, metadata_partition_for, split_by_partition, ErrorCode};
use futures_util::future::join_all;

use super::CoordinatorApi;
use crate::node::{Answer, Hop, Read, RouteError, Write};
use crate::server::convert::part_failure;
use crate::state_machine::{Failure, Op, Outcome, TopicPartition};

impl CoordinatorApi {
    pub(super) fn owner(&self, tp: &TopicPartition) -> u32 {
        if tp.partition < 0 {
            // Nobody owns it; metadata partition 0 answers UNKNOWN_TOPIC_OR_PARTITION like any other.
            return 0;
        }
        metadata_partition_for(tp.topic_id.as_bytes(), tp.partition, self.node.num_partitions())
    }

    /// Serves per-partition items: the valid ones split by the metadata partition owning them, each
    /// part run by `run` on its metadata partition at once, the answers put back in request order;
    /// an invalid item keeps its failure, a part that failed fails its items.
    pub(super) async fn per_partition<T, R, Fut>(
        &self,
        flat: &[Result<T, Failure>],
        tp: impl Fn(&T) -> &TopicPartition,
        run: impl Fn(u32, Vec<T>) -> Fut,
    ) -> Vec<Result<R, Failure>>
    where
        T: Clone,
        Fut: std::future::Future<Output = Result<Vec<Result<R, Failure>>, RouteError>>,
    {
        let mut results: Vec<Option<Result<R, Failure>>> =
            flat.iter().map(|r| r.as_ref().err().map(|f| Err(f.clone()))).collect();
        let parts = split_by_partition(flat, |r| r.as_ref().ok().map(|t| self.owner(tp(t))));
        let outs = join_all(
            parts.iter().map(|(&g, ks)| run(g, ks.iter().filter_map(|&k| flat[k].as_ref().ok().cloned()).collect())),
        )
        .await;
        for ((_, ks), out) in parts.iter().zip(outs) {
            merge_part(&mut results, ks, out, |f| Err(part_failure(f)));
        }
        results.into_iter().map(|r| r.unwrap_or_else(no_result)).collect()
    }

    /// Every metadata partition.
    pub(super) fn all_partitions(&self) -> Vec<u32> {
        (0..self.node.num_partitions()).collect()
    }

    /// Proposes `op` on `g`'s leader.
    pub(super) async fn write(
        &self,
        g: u32,
        op: Op,
        timeout: Duration,
        hop: Hop,
    ) -> Result<(Outcome, u64), RouteError> {
        self.node.on_leader(g, Write::Propose(op), timeout, hop).await
    }

    /// Serves `r` on `g`'s leader.
    pub(super) async fn read(&self, g: u32, r: Read, timeout: Duration, hop: Hop) -> Result<Answer, RouteError> {
        self.node.read_on_leader(g, r, timeout, hop).await
    }
}

/// The answer of an item that got none (a bug: every item is answered).
pub(super) fn no_result<T>() -> Result<T, Failure> {
    Err(Failure::new(ErrorCode::UnknownServerError, "no result"))
}
