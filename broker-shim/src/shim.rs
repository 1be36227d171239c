//! The running broker's parts, wired together: storage, the coordinator cluster's client, the
//! produce pipeline, the fetcher, the cleaner, producer ids, consumer groups and the registry
//! entry; how they start and stop. The listeners (`kafka`, `service`, `health`) sit above it and
//! are started over it (`kafka::start_listeners`); it must not import them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cleanup::CleanupConfig;
use crate::coordinators::groups::GroupConfig;
use crate::coordinators::transactions::TxnConfig;
use crate::coordinators::{groups, transactions};
use crate::fetch::FetchConfig;
use crate::produce::ProduceConfig;
use crate::registry::RegistryConfig;
use crate::storage::StorageConfig;
use crate::{cleanup, cluster, fetch, metrics, produce, producer_ids, registry, storage};

/// What the broker's parts start from: the sections of the modules below the listeners and the
/// broker's own keys (`ShimConfig::settings` takes them out of the configuration, checked).
pub struct ShimSettings {
    pub broker_id: i32,
    pub coordinators: Vec<String>,
    pub coordinator_address_map: BTreeMap<String, String>,
    pub coordinator_tls: Option<diskless_tls::TlsFiles>,
    pub storage: StorageConfig,
    pub produce: ProduceConfig,
    pub fetch: FetchConfig,
    pub cleanup: CleanupConfig,
    pub consolidation: crate::consolidate::ConsolidationConfig,
    pub groups: GroupConfig,
    pub registry: RegistryConfig,
    pub transactions: TxnConfig,
    pub allow_fault_injection: bool,
    /// Whether the broker has Kafka listeners, and so an address to advertise in the registry.
    pub advertised: bool,
}

/// A running broker shim: produce pipeline, fetcher, cleaner.
pub struct Shim {
    pub broker_id: i32,
    /// Whether the broker has Kafka listeners (it registers only then).
    pub advertised: bool,
    pub storage: storage::Storage,
    /// The broker's client of the coordinator cluster.
    pub cluster: Arc<cluster::ClusterClient>,
    pub producer: produce::Producer,
    pub fetcher: fetch::Fetcher,
    pub cleaner: Arc<cleanup::Cleaner>,
    /// Producer ids for InitProducerId, in blocks from the coordinator cluster.
    pub producer_ids: Arc<producer_ids::ProducerIds>,
    /// The object storage faults in force (only with `allow_fault_injection`).
    pub store_faults: Option<Arc<storage::faulty::StoreFaults>>,
    /// The consumer groups this broker coordinates.
    pub groups: Arc<groups::GroupCoordinator>,
    /// KIP-848 consumer groups.
    pub consumer_groups: Arc<groups::consumer::ConsumerGroups>,
    /// KIP-932 share groups: the groups this broker coordinates, the share-partition states it
    /// serves, its share sessions.
    pub share_groups: Arc<groups::share::ShareGroups>,
    /// The three kinds' coordinators together: which kind a group id is held as.
    pub held: groups::HeldGroups,
    pub share_states: Arc<groups::share::ShareStates>,
    pub share_sessions: groups::share::ShareSessions,
    /// `[groups]`, as configured.
    pub groups_config: groups::GroupConfig,
    /// The transactional ids this broker coordinates.
    pub transactions: Arc<transactions::TransactionCoordinator>,
    /// This broker in the broker registry; the live brokers.
    pub registry: Arc<registry::Registry>,
    tasks: std::sync::Mutex<Option<produce::ProducerTasks>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Shim {
    pub async fn start(config: ShimSettings) -> anyhow::Result<Arc<Shim>> {
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
        let cluster = Arc::new(
            cluster::ClusterClient::connect_with(&config.coordinators, address_map, tls)
                .await?
                .with_coordinate_cache(config.fetch.coordinate_cache_entries),
        );
        let commit_deadline =
            produce::commit_deadline(std::time::Duration::from_millis(config.cleanup.orphan_grace_ms));
        let (producer, tasks) = produce::Producer::start(
            config.produce.clone(),
            config.broker_id,
            storage.clone(),
            cluster.clone(),
            commit_deadline,
        );
        let fetcher = fetch::Fetcher::new(&config.fetch, storage.clone(), cluster.clone());
        let cleaner = Arc::new(cleanup::Cleaner::new(
            config.cleanup.clone(),
            storage.clone(),
            cluster.clone() as Arc<dyn cleanup::CleanupClient>,
            config.produce.key_prefix.clone(),
        ));
        let producer_ids = Arc::new(producer_ids::ProducerIds::new(cluster.clone(), config.broker_id));
        let txn_store = transactions::ClusterTxnStore { cluster: cluster.clone(), producer_ids: producer_ids.clone() };
        // One incarnation for the process: every coordinator below stores under it, and the
        // registry registers it.
        let me = crate::Incarnation::new(config.broker_id);
        let transactions =
            transactions::TransactionCoordinator::new(Arc::new(txn_store), config.transactions.clone(), &me);
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(cleaner.clone().run(stop_rx.clone()));
        // Parked fetches wake on other brokers' commits through these.
        cluster.start_watches(stop_rx.clone());
        let groups = groups::GroupCoordinator::new(cluster.clone(), config.groups.clone(), &me);
        tokio::spawn(groups.clone().run(stop_rx.clone()));
        let consumer_groups = groups::consumer::ConsumerGroups::new(cluster.clone(), config.groups.clone(), &me);
        tokio::spawn(consumer_group_timers(consumer_groups.clone(), cluster.clone(), stop_rx.clone()));
        let share_groups = groups::share::ShareGroups::new(cluster.clone(), config.groups.clone(), &me);
        let share_states = groups::share::ShareStates::new(cluster.clone(), &me);
        let share_sessions = groups::share::ShareSessions::new(
            config.groups.share_max_sessions,
            std::time::Duration::from_millis(config.groups.share_session_timeout_ms),
        );
        tokio::spawn(share_group_timers(share_groups.clone(), share_states.clone(), cluster.clone(), stop_rx.clone()));
        let registry = registry::Registry::new(cluster.clone(), config.registry.clone(), &me);
        // Object consolidation of the partitions this broker owns among the live ones (it takes
        // part only when it registers, i.e. has a Kafka listener).
        if config.advertised && config.consolidation.enabled {
            let consolidator = Arc::new(crate::consolidate::Consolidator::new(
                config.consolidation.clone(),
                storage.clone(),
                cluster.clone(),
                config.produce.key_prefix.clone(),
                config.broker_id,
            ));
            tokio::spawn(consolidator.run(registry.clone(), stop_rx.clone()));
        }
        // Expired transactions and ends left prepared, of the ids this broker coordinates.
        if config.advertised {
            let r = registry.clone();
            tokio::spawn(transactions.clone().run(Arc::new(move |id: &str| r.owns_group(id)), stop_rx));
        }
        tracing::info!(storage = %storage.describe, coordinators = ?config.coordinators, "broker shim started");
        let held = groups::HeldGroups {
            classic: groups.clone(),
            consumer: consumer_groups.clone(),
            share: share_groups.clone(),
        };
        Ok(Arc::new(Shim {
            broker_id: config.broker_id,
            advertised: config.advertised,
            storage,
            cluster,
            producer,
            fetcher,
            cleaner,
            producer_ids,
            store_faults,
            groups,
            consumer_groups,
            held,
            share_groups,
            share_states,
            share_sessions,
            groups_config: config.groups.clone(),
            transactions,
            registry,
            tasks: std::sync::Mutex::new(Some(tasks)),
            stop,
        }))
    }

    /// Registers this broker (advertised at the Kafka listener's address) and keeps its lease alive
    /// until the shim stops; as the live brokers change, groups this broker no longer coordinates
    /// are dropped from memory and those it coordinates now are loaded (`HeldGroups::take_over`). The task ends with an error when another live broker holds this
    /// broker's id: the process should stop. Without a Kafka listener there is nothing to
    /// advertise, and the broker does not register.
    pub fn start_registry(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<anyhow::Result<()>>> {
        if !self.advertised {
            return None;
        }
        let groups = self.groups.clone();
        let consumer_groups = self.consumer_groups.clone();
        let share_groups = self.share_groups.clone();
        let (held, cluster, registry) = (self.held.clone(), self.cluster.clone(), self.registry.clone());
        // One takeover at a time, once per change of the live brokers (the registry's generation;
        // `moved` runs at every refresh): each lists the groups again.
        let taking_over: Arc<tokio::sync::Mutex<Option<i32>>> = Arc::default();
        let moved = move |r: &registry::Registry| {
            for id in share_groups.held() {
                if !r.owns_group(&id) {
                    share_groups.release(&id);
                }
            }
            for id in consumer_groups.held() {
                if !r.owns_group(&id) {
                    consumer_groups.release(&id);
                }
            }
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
            let (held, cluster, registry, taking_over) =
                (held.clone(), cluster.clone(), registry.clone(), taking_over.clone());
            tokio::spawn(async move {
                let mut done_at = taking_over.lock().await;
                let generation = registry.leader_epoch();
                if *done_at == Some(generation) {
                    return;
                }
                let owns = |id: &str| registry.owns_group(id);
                match held.take_over(cluster.as_ref(), &owns).await {
                    Ok(n) => {
                        *done_at = Some(generation);
                        tracing::debug!(groups = n, generation, "groups this broker coordinates are loaded");
                    }
                    Err(e) => {
                        tracing::info!(error = %e, "listing groups to take over failed; each loads at its next use")
                    }
                }
            });
        };
        Some(tokio::spawn(self.registry.clone().run(self.stop.subscribe(), moved)))
    }

    /// Starts the Prometheus listener on `addr` until the shim stops; returns its address.
    pub async fn start_metrics(&self, addr: &str) -> anyhow::Result<std::net::SocketAddr> {
        metrics::http::serve(addr, self.stop.subscribe()).await
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

/// The session timers of the share groups this broker coordinates, every 250 ms until `stop`; a
/// removed member's records are given back.
async fn share_group_timers(
    groups: Arc<groups::share::ShareGroups>,
    states: Arc<groups::share::ShareStates>,
    cluster: Arc<cluster::ClusterClient>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(std::time::Duration::from_millis(250));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                if groups.held().is_empty() {
                    continue;
                }
                match cluster.all_topics().await {
                    Ok(topics) => {
                        states.prune();
                        let catalog: Arc<groups::consumer::group::Catalog> =
                            Arc::new(topics.iter().map(|t| (t.name.clone(), (t.id, t.partitions))).collect());
                        for (group_id, members) in groups.tick(catalog.clone()).await {
                            // What a removed member holds in the topics it subscribed to is given
                            // back, in a task of its own (the timers go on meanwhile).
                            let states = states.clone();
                            let catalog = catalog.clone();
                            tokio::spawn(async move {
                                for m in members {
                                    let partitions: Vec<([u8; 16], i32)> = m
                                        .subscribed_names
                                        .iter()
                                        .filter_map(|n| catalog.get(n))
                                        .flat_map(|&(id, n)| (0..n).map(move |p| (id, p)))
                                        .collect();
                                    states.release_member(&group_id, &m.member_id, &partitions).await;
                                }
                            });
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "share group timers: no catalog"),
                }
            }
            _ = stop.changed() => return,
        }
    }
}

/// The timers of the KIP-848 groups this broker coordinates, every 250 ms until `stop`, against
/// the topic catalog as it is then (a removed member's partitions are assigned again).
async fn consumer_group_timers(
    groups: Arc<groups::consumer::ConsumerGroups>,
    cluster: Arc<cluster::ClusterClient>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(std::time::Duration::from_millis(250));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                if groups.held().is_empty() {
                    continue;
                }
                match cluster.all_topics().await {
                    Ok(topics) => {
                        let catalog = topics.into_iter().map(|t| (t.name, (t.id, t.partitions))).collect();
                        groups.tick(Arc::new(catalog)).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "consumer group timers: no catalog"),
                }
            }
            _ = stop.changed() => return,
        }
    }
}
