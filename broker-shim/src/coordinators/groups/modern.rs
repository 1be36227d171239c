//! What KIP-848 consumer groups and KIP-932 share groups have in common (Kafka's
//! `modern/ModernGroup`): a [`ModernGroup`] is an epoch and members, kept in the coordinator
//! cluster as a `ConsumerGroup` record (its protocol marked with the kind, each member as JSON in
//! its `subscription`: [`encode`], [`decode`]) and held on the coordinator
//! [`runtime`](crate::coordinators::runtime), whose store for such a kind is [`Records`]: it maps
//! the cluster's answers onto [`runtime::StoreError`] (ILLEGAL_GENERATION: another broker stored
//! since this one read, so the runtime reloads).
//!
//! It must not know what a kind's members mean (`consumer::group`, `share::group` do).

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::v1::{consumer_group, ConsumerGroup};
use diskless_proto::ErrorCode;
use futures_util::future::BoxFuture;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::kinds::{self, GroupKind};
use super::store::GroupStore;
use crate::coordinators::runtime::{self, Runtime, Settings};
use crate::error::KafkaError;
use crate::incarnation::Incarnation;

/// A member of a modern group as its kind's record keeps it: some fields in the record's own, the
/// whole member as JSON in its `subscription`.
pub trait KeptMember: Serialize + DeserializeOwned {
    fn member_id(&self) -> &str;
    /// Its epoch (the cluster fences its offset commits by it).
    fn epoch(&self) -> i32;
    fn client(&self) -> (&str, &str);
    fn instance_id(&self) -> Option<&str> {
        None
    }
    fn rebalance_timeout_ms(&self) -> i32 {
        0
    }
}

/// The record of a group of `kind` at `epoch` with `members`, stored by `identity`.
pub fn encode<'a, M: KeptMember + 'a>(
    kind: GroupKind,
    epoch: i32,
    members: impl Iterator<Item = &'a M>,
    identity: &str,
    session_ms: u64,
) -> ConsumerGroup {
    ConsumerGroup {
        generation_id: epoch,
        protocol_type: kind.protocol_type().to_string(),
        protocol: kind.mark().map(str::to_string),
        leader: None,
        members: members
            .map(|m| {
                let (client_id, client_host) = m.client();
                consumer_group::Member {
                    member_id: m.member_id().to_string(),
                    group_instance_id: m.instance_id().map(str::to_string),
                    client_id: client_id.to_string(),
                    client_host: client_host.to_string(),
                    session_timeout_ms: i32::try_from(session_ms).unwrap_or(i32::MAX),
                    rebalance_timeout_ms: m.rebalance_timeout_ms(),
                    subscription: serde_json::to_vec(m).unwrap_or_else(|e| {
                        // Cannot happen for these types; were it to, the member would be dropped
                        // at load.
                        tracing::error!(member = m.member_id(), error = %e, "a group member does not encode");
                        vec![]
                    }),
                    assignment: vec![],
                    member_epoch: m.epoch(),
                }
            })
            .collect(),
        updated_ms: 0,
        coordinator: identity.to_string(),
        version: 0,
    }
}

/// The epoch and members a stored record holds for a group of `kind`: `Err` (Kafka's code) when it
/// is another kind of group that does not give way ([`kinds::admit`]); an empty one of another
/// kind gives way, its epoch continued. A stored member that does not decode is dropped (its
/// partitions are assigned again).
pub fn decode<M: KeptMember>(
    group_id: &str,
    record: &ConsumerGroup,
    kind: GroupKind,
) -> Result<(i32, BTreeMap<String, M>), KafkaError> {
    kinds::admit_stored(group_id, Some(record), kind)?;
    if kinds::kind_of(record) != kind {
        return Ok((record.generation_id.max(0), BTreeMap::new()));
    }
    let mut members = BTreeMap::new();
    for m in &record.members {
        match serde_json::from_slice::<M>(&m.subscription) {
            Ok(member) if member.member_id() == m.member_id => {
                members.insert(m.member_id.clone(), member);
            }
            _ => tracing::warn!(group = group_id, member = m.member_id, "a stored member does not decode; dropped"),
        }
    }
    Ok((record.generation_id, members))
}

/// A modern group: what its kind's record keeps of it.
pub trait ModernGroup: Default + Clone + PartialEq + Send + Sync + 'static {
    type Member: KeptMember;
    const KIND: GroupKind;
    fn epoch(&self) -> i32;
    fn members(&self) -> &BTreeMap<String, Self::Member>;
    /// The group as loaded: what is not stored (targets) is computed later.
    fn loaded(epoch: i32, members: BTreeMap<String, Self::Member>) -> Self;
}

/// The group of kind `G` a stored record holds ([`decode`]).
pub fn decode_group<G: ModernGroup>(group_id: &str, record: &ConsumerGroup) -> Result<G, KafkaError> {
    let (epoch, members) = decode(group_id, record, G::KIND)?;
    Ok(G::loaded(epoch, members))
}

/// The runtime's store of groups of one kind, by group id.
pub struct Records<G> {
    store: Arc<dyn GroupStore>,
    identity: String,
    session_ms: u64,
    kind: PhantomData<fn() -> G>,
}

/// The runtime holding groups of kind `G` while this broker (`me`) coordinates them: kept in
/// `store`, every stored member's session (`session_ms`) started afresh when a group is loaded,
/// the in-memory part made by `timers` from those sessions.
pub fn runtime<G: ModernGroup, V: Clone + Send + 'static>(
    store: Arc<dyn GroupStore>,
    me: &Incarnation,
    session_ms: u64,
    timers: fn(HashMap<String, Instant>) -> V,
) -> Runtime<String, G, V> {
    let records = Arc::new(Records::<G> { store, identity: me.tag(), session_ms, kind: PhantomData });
    let settings =
        Settings { fresh_for: None, load_failed: ErrorCode::CoordinatorLoadInProgress, ..Settings::default() };
    let on_load = Box::new(move |_: &String, g: Option<&G>| {
        let until = Instant::now() + Duration::from_millis(session_ms);
        timers(g.map(|g| g.members().keys().map(|m| (m.clone(), until)).collect()).unwrap_or_default())
    });
    Runtime::new(records, settings, on_load)
}

impl<G: ModernGroup> runtime::Store<String, G> for Records<G> {
    fn load<'a>(&'a self, group_id: &'a String) -> BoxFuture<'a, Result<Option<(G, u64)>, runtime::StoreError>> {
        Box::pin(async move {
            let Some(record) =
                self.store.load(group_id).await.map_err(|e| e.for_runtime(ErrorCode::IllegalGeneration))?
            else {
                return Ok(None);
            };
            let group = decode_group::<G>(group_id, &record)
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
            let record = encode(G::KIND, group.epoch(), group.members().values(), &self.identity, self.session_ms);
            self.store.store(group_id, record, expected).await.map_err(|e| e.for_runtime(ErrorCode::IllegalGeneration))
        })
    }
}
