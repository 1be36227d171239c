//! The broker side of diskless topics (KIP-1163).
//!
//! Data flows `wal` → `storage` → `produce` / `fetch` → `service`: record batches are validated
//! and laid out in WAL segments (`wal`), uploaded to object storage (`storage`), committed to the
//! coordinator cluster in order (`produce`, through `coordinator`), and read back by byte ranges
//! with offsets injected (`fetch`). `cleanup` deletes the objects the coordinator released and the
//! orphans it never knew. `groups` coordinates consumer groups (members in memory, generations and
//! committed offsets in the coordinator cluster). `service` is the broker's own gRPC API; `Shim` wires it all together.
//! `metrics` (Prometheus) is bumped along the way and served on `metrics_addr`.

pub mod cleanup;
pub mod cli;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod fetch;
pub mod fuzz_targets;
pub mod groups;
pub mod health;
pub mod kafka;
pub mod metrics;
pub mod produce;
pub mod producer_ids;
pub mod records;
pub mod registry;
pub mod service;
pub mod storage;
pub mod validate;
pub mod wal;

use std::sync::Arc;

pub use config::ShimConfig;
pub use error::KafkaError;

/// A running broker shim: produce pipeline, fetcher, cleaner.
pub struct Shim {
    pub config: ShimConfig,
    pub storage: storage::Storage,
    pub coordinators: Arc<coordinator::Coordinators>,
    pub producer: produce::Producer,
    pub fetcher: fetch::Fetcher,
    pub cleaner: Arc<cleanup::Cleaner>,
    /// Producer ids for InitProducerId, in blocks from the coordinators.
    pub producer_ids: producer_ids::ProducerIds,
    /// The object storage faults in force (only with `allow_fault_injection`).
    pub store_faults: Option<Arc<storage::faulty::StoreFaults>>,
    /// The consumer groups this broker coordinates.
    pub groups: Arc<groups::GroupCoordinator>,
    /// This broker in the broker registry; the live brokers.
    pub registry: Arc<registry::Registry>,
    tasks: std::sync::Mutex<Option<produce::ProducerTasks>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Shim {
    pub async fn start(config: ShimConfig) -> anyhow::Result<Arc<Shim>> {
        config.validate()?;
        let mut storage = storage::Storage::new(&config.storage)?;
        let mut store_faults = None;
        if config.allow_fault_injection {
            let (wrapped, faults) = storage.with_faults();
            storage = wrapped;
            store_faults = Some(faults);
        }
        // Outermost, so injected faults count as failed requests too.
        let storage = storage.metered();
        let address_map = config.coordinator_address_map.clone().into_iter().collect();
        let tls = match &config.coordinator_tls {
            Some(f) => Some(anyhow::Context::context(diskless_tls::ClientTls::new(f), "coordinator_tls")?),
            None => None,
        };
        let coordinators =
            Arc::new(coordinator::Coordinators::connect_with(&config.coordinators, address_map, tls).await?);
        let commit_deadline =
            produce::commit_deadline(std::time::Duration::from_millis(config.cleanup.orphan_grace_ms));
        let (producer, tasks) = produce::Producer::start(
            config.produce.clone(),
            config.broker_id,
            storage.clone(),
            coordinators.clone(),
            commit_deadline,
        );
        let fetcher = fetch::Fetcher::new(&config.fetch, storage.clone(), coordinators.clone());
        let cleaner = Arc::new(cleanup::Cleaner::new(
            config.cleanup.clone(),
            storage.clone(),
            coordinators.clone() as Arc<dyn cleanup::CleanupCoordinator>,
            config.produce.key_prefix.clone(),
        ));
        let producer_ids = producer_ids::ProducerIds::new(coordinators.clone(), config.broker_id);
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(cleaner.clone().run(stop_rx.clone()));
        let groups = groups::GroupCoordinator::new(coordinators.clone(), config.groups.clone(), config.broker_id);
        tokio::spawn(groups.clone().run(stop_rx));
        let registry = registry::Registry::new(coordinators.clone(), config.registry.clone(), config.broker_id);
        tracing::info!(storage = %storage.describe, coordinators = ?config.coordinators, "broker shim started");
        Ok(Arc::new(Shim {
            config,
            storage,
            coordinators,
            producer,
            fetcher,
            cleaner,
            producer_ids,
            store_faults,
            groups,
            registry,
            tasks: std::sync::Mutex::new(Some(tasks)),
            stop,
        }))
    }

    /// Starts the Kafka listeners if the configuration has them; returns the first one's address.
    pub async fn start_kafka(self: &Arc<Self>) -> anyhow::Result<Option<std::net::SocketAddr>> {
        Ok(self.start_kafka_listeners().await?.first().map(|(_, addr)| *addr))
    }

    /// Starts every Kafka listener (`[kafka]` `listen`, then `[[kafka.listeners]]`), each with
    /// its security protocol; returns their names and addresses.
    pub async fn start_kafka_listeners(self: &Arc<Self>) -> anyhow::Result<Vec<(String, std::net::SocketAddr)>> {
        let Some(k) = self.config.kafka.clone() else { return Ok(vec![]) };
        let shared = kafka::security::Shared::new(&k)?;
        let mut started = vec![];
        for l in k.all_listeners() {
            let listener = tokio::net::TcpListener::bind(&l.listen)
                .await
                .map_err(|e| anyhow::anyhow!("Kafka listener on {}: {e}", l.listen))?;
            let addr = listener.local_addr()?;
            let config = config::KafkaConfig {
                listen: l.listen.clone(),
                advertised_host: l.advertised_host.clone(),
                advertised_port: l.advertised_port,
                security_protocol: l.security_protocol,
                ..k.clone()
            };
            let name = l.name.clone().unwrap_or_else(|| l.security_protocol.name().to_string());
            let mut listener_state = kafka::Listener::new(self.clone(), name.clone(), config, addr);
            listener_state.security = shared.for_protocol(l.security_protocol);
            // Every listener is registered by name; the first is also the broker's address for
            // clients of a listener another broker lacks.
            self.registry.add_listener(&name, &listener_state.host, listener_state.port);
            tokio::spawn(Arc::new(listener_state).serve(listener, self.stop.subscribe()));
            tracing::info!(%addr, listener = %name, protocol = l.security_protocol.name(), "Kafka listener started");
            started.push((name, addr));
        }
        Ok(started)
    }

    /// Registers this broker (advertised at the Kafka listener's address) and keeps its lease alive
    /// until the shim stops; groups this broker no longer coordinates are dropped from memory as
    /// the live brokers change. The task ends with an error when another live broker holds this
    /// broker's id: the process should stop. Without a Kafka listener there is nothing to
    /// advertise, and the broker does not register.
    pub fn start_registry(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<anyhow::Result<()>>> {
        self.config.kafka.as_ref()?;
        let groups = self.groups.clone();
        let moved = move |r: &registry::Registry| {
            for id in groups.states().into_keys() {
                if !r.owns_group(&id) {
                    tracing::info!(
                        group = id,
                        coordinator = r.group_coordinator(&id).id,
                        "group moved to another broker"
                    );
                    groups.release(&id);
                }
            }
        };
        Some(tokio::spawn(self.registry.clone().run(self.stop.subscribe(), moved)))
    }

    /// Starts the Prometheus listener if the configuration has one; returns its address.
    pub async fn start_metrics(&self) -> anyhow::Result<Option<std::net::SocketAddr>> {
        let Some(addr) = &self.config.metrics_addr else { return Ok(None) };
        Ok(Some(metrics::http::serve(addr, self.stop.subscribe()).await?))
    }

    /// Stops accepting work, commits what was accepted, stops the cleaner.
    /// Becomes `true` when the broker starts shutting down.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub async fn shutdown(self: Arc<Self>) {
        let _ = self.stop.send(true);
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner()).take();
        // The pipeline ends when the last producer handle is gone: the service's and ours.
        drop(self);
        if let Some(t) = tasks {
            t.join().await;
        }
    }
}
