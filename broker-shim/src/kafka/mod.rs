//! The Kafka protocol listener (KIP-1163: diskless topics look like classic ones to clients).
//!
//! In data-flow order:
//! - `connection`: the accept loop; per connection, TLS and SASL first (`security`), then frames
//!   read in order (`frame`: sizes checked before allocating, headers decoded without trusting
//!   them), requests started in order, answers written in order (`response`: encoding).
//! - `dispatch`: the one table of APIs (versions and handler; ApiVersions answers from it).
//! - one file per API family, each over the shim's producer, fetcher and coordinator cluster
//!   client: `produce`, `fetch`, `metadata`, `offsets` (ListOffsets, DeleteRecords), `epochs` (OffsetForLeaderEpoch), `topics`
//!   (CreateTopics, CreatePartitions, DeleteTopics), `configs` (DescribeConfigs,
//!   IncrementalAlterConfigs, AlterConfigs), `producer_ids` (InitProducerId), `producers` (DescribeProducers), `transactions`
//!   (the transaction APIs), `groups`
//!   (FindCoordinator, the classic group protocol, the group admin APIs), `group_offsets`
//!   (OffsetCommit, OffsetFetch).
//! - `listener`: what the handlers share (the shim, the listener's settings and address, topic
//!   lookups, the authorizer); `session`: one connection's listener and principal, which handlers
//!   ask what the client may do (`crate::authz`) before they act; `acls` (CreateAcls,
//!   DescribeAcls, DeleteAcls); `config`: `[kafka]`.
//!
//! Metadata lists the live brokers of the registry (`crate::registry`) and names each partition's
//! rendezvous owner among them its leader, at the registry's generation as leader epoch; any broker can serve any partition (the coordinator
//! cluster orders everything), so this only spreads clients over the brokers. This module must not
//! keep state of its own beyond a connection's requests in flight.

mod acls;
pub mod config;
mod configs;
mod connection;
mod consumer_groups;
mod dispatch;
mod epochs;
mod fetch;
pub mod frame;
mod group_access;
mod group_offsets;
mod groups;
mod listener;
mod metadata;
mod offsets;
mod produce;
mod producer_ids;
mod producers;
pub mod response;
pub mod security;
mod session;
mod share_fetch;
mod share_groups;
mod topics;
mod transactions;

pub use config::KafkaConfig;
pub use dispatch::decode_request;
pub use listener::Listener;

use std::sync::Arc;

use crate::shim::Shim;

/// Starts every Kafka listener of `[kafka]` over `shim` (`listen`, then `[[kafka.listeners]]`),
/// each with its security protocol, and registers each by name in the broker registry; returns
/// their names and addresses.
pub async fn start_listeners(shim: &Arc<Shim>, k: &KafkaConfig) -> anyhow::Result<Vec<(String, std::net::SocketAddr)>> {
    k.validate()?;
    let protocols: Vec<_> = k.all_listeners().iter().map(|l| l.security_protocol).collect();
    let shared = security::Shared::new(&protocols, k.tls.as_ref(), k.sasl.as_ref())?;
    let authorizer = k.authorizer.as_ref().map(|a| {
        let authorizer = crate::authz::Authorizer::new(a, shim.cluster.clone());
        tokio::spawn(authorizer.clone().run(shim.stopping()));
        authorizer
    });
    let mut started = vec![];
    for l in k.all_listeners() {
        let listener = tokio::net::TcpListener::bind(&l.listen)
            .await
            .map_err(|e| anyhow::anyhow!("Kafka listener on {}: {e}", l.listen))?;
        let addr = listener.local_addr()?;
        let config = KafkaConfig {
            listen: l.listen.clone(),
            advertised_host: l.advertised_host.clone(),
            advertised_port: l.advertised_port,
            security_protocol: l.security_protocol,
            ..k.clone()
        };
        let name = l.name.clone().unwrap_or_else(|| l.security_protocol.name().to_string());
        let mut listener_state = Listener::new(shim.clone(), name.clone(), config, addr);
        listener_state.security = shared.for_protocol(l.security_protocol);
        listener_state.authorizer = authorizer.clone();
        // Every listener is registered by name; the first is also the broker's address for
        // clients of a listener another broker lacks.
        shim.registry.add_listener(&name, &listener_state.host, listener_state.port);
        tokio::spawn(Arc::new(listener_state).serve(listener, shim.stopping()));
        tracing::info!(%addr, listener = %name, protocol = l.security_protocol.name(), "Kafka listener started");
        started.push((name, addr));
    }
    Ok(started)
}
