//! What KIP-848 consumer groups and KIP-932 share groups have in common as state this broker
//! coordinates on the [`runtime`](crate::runtime): each kind is kept in the coordinator cluster as
//! a `ConsumerGroup` record (its protocol marked with the kind, each member as JSON in its
//! `subscription`), and [`Records`] is the runtime's store for such a kind — it encodes and decodes
//! through the kind's [`Kept`] and maps the cluster's answers onto [`runtime::StoreError`]
//! (ILLEGAL_GENERATION: another broker stored since this one read, so the runtime reloads).
//!
//! It must not know what a kind's members mean (`consumer::group`, `share::group` do).

use std::marker::PhantomData;
use std::sync::Arc;

use diskless_proto::v1::ConsumerGroup;
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use super::store::{GroupStore, StoreError};
use crate::error::KafkaError;
use crate::runtime;

/// A kind of group as its record keeps it.
pub trait Kept: Clone + PartialEq + Send + Sync + Sized + 'static {
    /// The group `record` holds; `Err` with Kafka's code when it is another kind of group this
    /// kind may not take over (one with members).
    fn decode(group_id: &str, record: &ConsumerGroup) -> Result<Self, KafkaError>;
    /// The record of this group, stored by `identity` (the broker's incarnation), its members'
    /// session timeout `session_ms`.
    fn encode(&self, identity: &str, session_ms: u64) -> ConsumerGroup;
}

/// The runtime's store of groups of kind `G`, by group id.
pub struct Records<G> {
    store: Arc<dyn GroupStore>,
    identity: String,
    session_ms: u64,
    kind: PhantomData<fn() -> G>,
}

impl<G> Records<G> {
    pub fn new(store: Arc<dyn GroupStore>, identity: String, session_ms: u64) -> Records<G> {
        Records { store, identity, session_ms, kind: PhantomData }
    }
}

fn store_error(e: StoreError) -> runtime::StoreError {
    match e {
        StoreError::Refused { code: ErrorCode::IllegalGeneration, message } => runtime::StoreError::Fenced(message),
        StoreError::Refused { code, message } => runtime::StoreError::Refused { code, message },
        StoreError::Unavailable(m) => runtime::StoreError::Unknown(m),
    }
}

impl<G: Kept> runtime::Store<String, G> for Records<G> {
    fn load<'a>(&'a self, group_id: &'a String) -> BoxFuture<'a, Result<Option<(G, u64)>, runtime::StoreError>> {
        Box::pin(async move {
            let Some(record) = self.store.load(group_id).await.map_err(store_error)? else { return Ok(None) };
            let group = G::decode(group_id, &record)
                .map_err(|e| runtime::StoreError::Refused { code: e.code, message: e.message })?;
            Ok(Some((group, record.version)))
        })
    }

    fn store<'a>(
        &'a self,
        group_id: &'a String,
        group: &'a G,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64, runtime::StoreError>> {
        Box::pin(async move {
            let record = group.encode(&self.identity, self.session_ms);
            self.store.store(group_id, record, expected).await.map_err(store_error)
        })
    }
}
