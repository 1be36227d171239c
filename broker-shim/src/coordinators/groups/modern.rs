//! What KIP-848 consumer groups and KIP-932 share groups have in common as state this broker
//! coordinates on the [`runtime`](crate::coordinators::runtime): each kind is kept in the coordinator cluster as
//! a `ConsumerGroup` record (its protocol marked with the kind, each member as JSON in its
//! `subscription`), and [`Records`] is the runtime's store for such a kind — it encodes and decodes
//! through the kind's [`Kind`] and maps the cluster's answers onto [`runtime::StoreError`]
//! (ILLEGAL_GENERATION: another broker stored since this one read, so the runtime reloads).
//!
//! It must not know what a kind's members mean (`consumer::group`, `share::group` do).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::v1::ConsumerGroup;
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use super::store::{GroupStore, StoreError};
use crate::coordinators::runtime::{self, Runtime, Settings};
use crate::error::KafkaError;
use crate::incarnation::Incarnation;

/// A kind of group as its record keeps it.
pub struct Kind<G> {
    /// The record of a group, stored by `identity` (the broker's incarnation), its members'
    /// session timeout `session_ms`.
    pub encode: fn(&G, &str, u64) -> ConsumerGroup,
    /// The group a record holds; `Err` with Kafka's code when it is another kind of group this
    /// kind may not take over (one with members).
    pub decode: fn(&str, &ConsumerGroup) -> Result<G, KafkaError>,
    /// Its members' ids.
    pub members: fn(&G) -> Vec<String>,
}

/// The runtime's store of groups of one kind, by group id.
pub struct Records<G> {
    kind: Kind<G>,
    store: Arc<dyn GroupStore>,
    identity: String,
    session_ms: u64,
}

/// The runtime holding groups of `kind` while this broker (`me`) coordinates them: kept in
/// `store`, every stored member's session (`session_ms`) started afresh when a group is loaded,
/// the in-memory part made by `timers` from those sessions.
pub fn runtime<G: Clone + PartialEq + Send + Sync + 'static, V: Clone + Send + 'static>(
    kind: Kind<G>,
    store: Arc<dyn GroupStore>,
    me: &Incarnation,
    session_ms: u64,
    timers: fn(HashMap<String, Instant>) -> V,
) -> Runtime<String, G, V> {
    let members = kind.members;
    let records = Arc::new(Records { kind, store, identity: me.tag(), session_ms });
    let settings = Settings { fresh_for: None, load_failed: ErrorCode::CoordinatorLoadInProgress, tries: 3 };
    let on_load = Box::new(move |_: &String, g: Option<&G>| {
        let until = Instant::now() + Duration::from_millis(session_ms);
        timers(g.map(|g| members(g).into_iter().map(|m| (m, until)).collect()).unwrap_or_default())
    });
    Runtime::new(records, settings, on_load)
}

fn store_error(e: StoreError) -> runtime::StoreError {
    match e {
        StoreError::Refused { code: ErrorCode::IllegalGeneration, message } => runtime::StoreError::Fenced(message),
        StoreError::Refused { code, message } => runtime::StoreError::Refused { code, message },
        StoreError::Unavailable(m) => runtime::StoreError::Unknown(m),
    }
}

impl<G: Send + Sync + 'static> runtime::Store<String, G> for Records<G> {
    fn load<'a>(&'a self, group_id: &'a String) -> BoxFuture<'a, Result<Option<(G, u64)>, runtime::StoreError>> {
        Box::pin(async move {
            let Some(record) = self.store.load(group_id).await.map_err(store_error)? else { return Ok(None) };
            let group = (self.kind.decode)(group_id, &record)
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
            let record = (self.kind.encode)(group, &self.identity, self.session_ms);
            self.store.store(group_id, record, expected).await.map_err(store_error)
        })
    }
}
