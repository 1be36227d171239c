//! This broker in the coordinator cluster's broker registry, and the live brokers it sees.
//!
//! Owns: registering (broker id, advertised Kafka address, rack, an incarnation drawn at process
//! start), keeping the lease alive with heartbeats, giving the id back at a clean shutdown, and a
//! cached list of the live brokers (`ListBrokers`, refreshed every `refresh_interval_ms`). From that
//! list it answers who owns what, the same on every broker that sees the same list: a
//! topic-partition's leader and a consumer group's coordinator are the live broker with the
//! highest rendezvous score for the key (`diskless_proto::rendezvous_score`), so when a broker
//! joins or goes, only the keys it gains or held move. This broker is always in its own list (it
//! serves while its registration is on its way). It must not decide anything about a group's
//! members (that is `groups`) or serve requests.
//!
//! A registration refused because another live broker holds the id is retried for one lease (the
//! holder may be a crashed process whose lease is running out); if it is still refused after
//! that, the holder is alive and [`Registry::run`] ends with the error, which stops the process.

use crate::incarnation::Incarnation;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_proto::v1 as coord;
use diskless_proto::{partition_key, rendezvous_score, ErrorCode};
use serde::{Deserialize, Serialize};

use crate::cluster::ClusterClient;

/// `[registry]`: this broker's rack and its lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// The rack (availability zone) this broker is in (Kafka's `broker.rack`): Fetch requests
    /// from a client in another rack are pointed at a live broker of the client's rack.
    pub rack: Option<String>,
    /// How long the registration lives without a heartbeat (Kafka's
    /// `broker.session.timeout.ms`).
    pub lease_ms: u64,
    /// How often the lease is renewed (Kafka's `broker.heartbeat.interval.ms`).
    pub heartbeat_interval_ms: u64,
    /// How often the list of live brokers is read again.
    pub refresh_interval_ms: u64,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig { rack: None, lease_ms: 9_000, heartbeat_interval_ms: 2_000, refresh_interval_ms: 1_000 }
    }
}

impl RegistryConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=300_000).contains(&self.lease_ms),
            "registry.lease_ms must be 1 to 300000, not {}",
            self.lease_ms
        );
        anyhow::ensure!(
            self.heartbeat_interval_ms > 0 && self.heartbeat_interval_ms < self.lease_ms,
            "registry.heartbeat_interval_ms ({}) must be above 0 and below registry.lease_ms ({})",
            self.heartbeat_interval_ms,
            self.lease_ms
        );
        anyhow::ensure!(self.refresh_interval_ms > 0, "registry.refresh_interval_ms must be above 0");
        Ok(())
    }
}

/// A live broker as clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveBroker {
    pub id: i32,
    /// Its first Kafka listener's advertised address.
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Every Kafka listener by name, as registered.
    pub listeners: Vec<coord::BrokerListener>,
}

impl LiveBroker {
    /// The address of its listener named `name`, else its first listener's.
    pub fn address_on(&self, name: &str) -> (String, i32) {
        match self.listeners.iter().find(|l| l.name == name) {
            Some(l) => (l.host.clone(), l.port),
            None => (self.host.clone(), self.port),
        }
    }
}

/// The broker with the highest rendezvous score for `key` (the first of equals by id).
pub fn owner<'a>(key: &[u8], brokers: &'a [LiveBroker]) -> Option<&'a LiveBroker> {
    brokers.iter().max_by(|a, b| rendezvous_score(key, a.id).cmp(&rendezvous_score(key, b.id)).then(b.id.cmp(&a.id)))
}

/// Where a client in `client_rack` should fetch partition (`topic_id`, `partition`) from, when not
/// from `me`: none when the client names no rack, `me` is in it, or no live broker is; else the
/// owner of the partition among the brokers of that rack.
pub fn preferred_replica(
    me: &LiveBroker,
    brokers: &[LiveBroker],
    client_rack: &str,
    topic_id: &[u8; 16],
    partition: i32,
) -> Option<i32> {
    if client_rack.is_empty() || me.rack.as_deref() == Some(client_rack) {
        return None;
    }
    let local: Vec<LiveBroker> = brokers.iter().filter(|b| b.rack.as_deref() == Some(client_rack)).cloned().collect();
    owner(&partition_key(topic_id, partition), &local).map(|b| b.id)
}

/// The registry as this broker uses it.
pub struct Registry {
    cluster: Arc<ClusterClient>,
    config: RegistryConfig,
    broker_id: i32,
    incarnation: u64,
    /// This broker (its advertised address once the Kafka listener is up).
    me: Mutex<LiveBroker>,
    /// The live brokers of the last ListBrokers, by id.
    live: Mutex<Vec<LiveBroker>>,
    /// The registry's generation that list was read at (it only grows; an older answer is not
    /// taken): every partition's leader epoch, as Metadata, ListOffsets, Fetch and
    /// OffsetForLeaderEpoch give it.
    generation: Mutex<u64>,
    /// When the registration was last granted or renewed (sent at), if ever.
    renewed: Mutex<Option<Instant>>,
}

const CALL_TIMEOUT_MS: i32 = 5_000;

impl Registry {
    pub fn new(cluster: Arc<ClusterClient>, config: RegistryConfig, incarnation: &Incarnation) -> Arc<Registry> {
        let broker_id = incarnation.broker_id();
        let me =
            LiveBroker { id: broker_id, host: String::new(), port: -1, rack: config.rack.clone(), listeners: vec![] };
        Arc::new(Registry {
            cluster,
            config,
            broker_id,
            incarnation: incarnation.number(),
            me: Mutex::new(me),
            live: Mutex::new(vec![]),
            generation: Mutex::new(0),
            renewed: Mutex::new(None),
        })
    }

    /// Adds a Kafka listener clients reach this broker through (its advertised address); the first
    /// one added is also the broker's address for clients of a listener other brokers lack.
    pub fn add_listener(&self, name: &str, host: &str, port: i32) {
        let mut me = self.me.lock().unwrap_or_else(|e| e.into_inner());
        if me.listeners.is_empty() {
            me.host = host.to_string();
            me.port = port;
        }
        me.listeners.push(coord::BrokerListener { name: name.to_string(), host: host.to_string(), port });
    }

    /// Whether this broker's registration holds: granted or renewed less than one lease ago, as
    /// this broker's clock measures from when it sent the request (so never later than the
    /// registry's own reckoning, which starts when the request applies). The broker's health.
    pub fn lease_held(&self) -> bool {
        let renewed = *self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        renewed.is_some_and(|t| t.elapsed() < Duration::from_millis(self.config.lease_ms))
    }

    fn renewed_at(&self, sent: Instant) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = Some(sent);
    }

    pub fn me(&self) -> LiveBroker {
        self.me.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The live brokers, this one included (with its own address), by id.
    pub fn brokers(&self) -> Vec<LiveBroker> {
        let me = self.me();
        let mut all: Vec<LiveBroker> =
            self.live.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|b| b.id != me.id).cloned().collect();
        all.push(me);
        all.sort_by_key(|b| b.id);
        all
    }

    /// Every partition's leader epoch (KIP-320): the registry's generation, which grows whenever
    /// the live brokers change, and so whenever a partition's rendezvous leader moves. The same on
    /// every broker that read the same registry.
    pub fn leader_epoch(&self) -> i32 {
        let g = *self.generation.lock().unwrap_or_else(|e| e.into_inner());
        i32::try_from(g).unwrap_or(i32::MAX)
    }

    /// The leader clients are told for a partition.
    pub fn partition_leader(&self, topic_id: &[u8; 16], partition: i32) -> LiveBroker {
        let all = self.brokers();
        owner(&partition_key(topic_id, partition), &all).cloned().unwrap_or_else(|| self.me())
    }

    /// The coordinator of consumer group `group_id`.
    pub fn group_coordinator(&self, group_id: &str) -> LiveBroker {
        let all = self.brokers();
        owner(group_id.as_bytes(), &all).cloned().unwrap_or_else(|| self.me())
    }

    /// Whether this broker coordinates `group_id`.
    pub fn owns_group(&self, group_id: &str) -> bool {
        self.group_coordinator(group_id).id == self.broker_id
    }

    /// Reads the live brokers again; false when the cluster did not answer (the old list stays).
    pub async fn refresh(&self) -> bool {
        let r = self
            .cluster
            .call(
                |mut c| async move { c.list_brokers(coord::ListBrokersRequest { timeout_ms: CALL_TIMEOUT_MS }).await },
            )
            .await;
        match r {
            Ok(resp) if resp.error_code == 0 => {
                let live = resp
                    .brokers
                    .into_iter()
                    .map(|b| LiveBroker {
                        id: b.broker_id,
                        host: b.host,
                        port: b.port,
                        rack: b.rack,
                        listeners: b.listeners,
                    })
                    .collect();
                let mut generation = self.generation.lock().unwrap_or_else(|e| e.into_inner());
                if resp.generation >= *generation {
                    *generation = resp.generation;
                    *self.live.lock().unwrap_or_else(|e| e.into_inner()) = live;
                }
                true
            }
            Ok(resp) => {
                tracing::debug!(code = resp.error_code, message = ?resp.error_message, "ListBrokers refused");
                false
            }
            Err(status) => {
                tracing::debug!(%status, "ListBrokers failed");
                false
            }
        }
    }

    async fn register(&self) -> Result<coord::RegisterBrokerResponse, tonic::Status> {
        let me = self.me();
        let request = coord::RegisterBrokerRequest {
            broker_id: self.broker_id,
            host: me.host,
            port: me.port,
            rack: me.rack,
            incarnation: self.incarnation,
            lease_ms: self.config.lease_ms as i64,
            timeout_ms: CALL_TIMEOUT_MS,
            listeners: me.listeners,
        };
        self.cluster
            .call(|mut c| {
                let request = request.clone();
                async move { c.register_broker(request).await }
            })
            .await
    }

    async fn heartbeat(&self) -> Result<coord::BrokerHeartbeatResponse, tonic::Status> {
        let request = coord::BrokerHeartbeatRequest {
            broker_id: self.broker_id,
            incarnation: self.incarnation,
            lease_ms: self.config.lease_ms as i64,
            timeout_ms: CALL_TIMEOUT_MS,
        };
        self.cluster.call(|mut c| async move { c.broker_heartbeat(request).await }).await
    }

    /// Gives the id back (a clean shutdown): other brokers take over its partitions and groups at
    /// their next refresh instead of after the lease.
    pub async fn unregister(&self) {
        let request = coord::UnregisterBrokerRequest {
            broker_id: self.broker_id,
            incarnation: self.incarnation,
            timeout_ms: CALL_TIMEOUT_MS,
        };
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            self.cluster.call(|mut c| async move { c.unregister_broker(request).await }),
        )
        .await;
        match r {
            Ok(Ok(resp)) if resp.error_code == 0 => tracing::info!(broker_id = self.broker_id, "unregistered"),
            other => tracing::warn!(broker_id = self.broker_id, answer = ?other, "unregistering failed"),
        }
    }

    /// Registers, keeps the lease alive and the live list fresh, until `stop`; calls `moved` after
    /// each refresh (so the caller can drop the groups it no longer coordinates). Ends with an
    /// error when another live broker holds this broker's id.
    pub async fn run(
        self: Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
        moved: impl Fn(&Registry) + Send + 'static,
    ) -> anyhow::Result<()> {
        let heartbeat_every = Duration::from_millis(self.config.heartbeat_interval_ms);
        let mut registered = false;
        // When a registration was first refused as a duplicate (since then, without success).
        let mut refused_since: Option<Instant> = None;
        let mut next_beat = Instant::now();
        let mut refresh = tokio::time::interval(Duration::from_millis(self.config.refresh_interval_ms));
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => return Ok(()),
                _ = tokio::time::sleep_until(next_beat.into()) => {
                    next_beat = Instant::now() + heartbeat_every;
                    let sent = Instant::now();
                    if registered {
                        match self.heartbeat().await {
                            Ok(r) if r.error_code == 0 => self.renewed_at(sent),
                            Ok(r) if r.error_code == ErrorCode::StaleBrokerEpoch.wire() => {
                                tracing::warn!(message = ?r.error_message, "broker lease lost: registering again");
                                registered = false;
                                next_beat = Instant::now();
                            }
                            Ok(r) => tracing::warn!(code = r.error_code, message = ?r.error_message, "broker heartbeat refused"),
                            Err(status) => tracing::warn!(%status, "broker heartbeat failed"),
                        }
                        continue;
                    }
                    match self.register().await {
                        Ok(r) if r.error_code == 0 => {
                            self.renewed_at(sent);
                            tracing::info!(broker_id = self.broker_id, incarnation = %format!("{:016x}", self.incarnation), "registered in the broker registry");
                            registered = true;
                            refused_since = None;
                            if self.refresh().await {
                                moved(&self);
                            }
                        }
                        Ok(r) if r.error_code == ErrorCode::DuplicateBrokerRegistration.wire() => {
                            let message = r.error_message.unwrap_or_default();
                            let since = *refused_since.get_or_insert_with(Instant::now);
                            // One lease and two heartbeats: a crashed holder's lease has lapsed by now.
                            let patience = Duration::from_millis(self.config.lease_ms) + 2 * heartbeat_every;
                            if since.elapsed() >= patience {
                                anyhow::bail!("broker id {} is taken: {message}", self.broker_id);
                            }
                            tracing::warn!(message, "broker id held by another broker; retrying until its lease would have lapsed");
                        }
                        Ok(r) => tracing::warn!(code = r.error_code, message = ?r.error_message, "broker registration refused"),
                        Err(status) => tracing::warn!(%status, "broker registration failed"),
                    }
                }
                _ = refresh.tick() => {
                    if self.refresh().await {
                        moved(&self);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: i32, rack: &str) -> LiveBroker {
        LiveBroker { id, host: "h".into(), port: 9092, rack: Some(rack.into()), listeners: vec![] }
    }

    #[test]
    fn a_client_in_another_rack_is_pointed_at_a_broker_of_its_rack() {
        let all = [b(1, "a"), b(2, "b"), b(3, "b")];
        let t = [5u8; 16];
        for p in 0..20 {
            let got = preferred_replica(&all[0], &all, "b", &t, p);
            assert!(matches!(got, Some(2 | 3)), "{got:?}");
            // Every broker of rack a points the same way.
            assert_eq!(got, preferred_replica(&b(9, "a"), &all, "b", &t, p));
        }
        // Both rack-b brokers get some partitions.
        let picks: std::collections::BTreeSet<_> =
            (0..40).filter_map(|p| preferred_replica(&all[0], &all, "b", &t, p)).collect();
        assert_eq!(picks.len(), 2);
        assert_eq!(preferred_replica(&all[1], &all, "b", &t, 0), None, "already in the client's rack");
        assert_eq!(preferred_replica(&all[0], &all, "", &t, 0), None, "no rack named");
        assert_eq!(preferred_replica(&all[0], &all, "c", &t, 0), None, "no broker in that rack");
    }

    #[test]
    fn every_broker_computes_the_same_owner_and_a_departure_moves_only_its_keys() {
        let three = [b(1, "a"), b(2, "a"), b(3, "a")];
        let two = [b(1, "a"), b(3, "a")];
        let mut owners = std::collections::BTreeSet::new();
        for g in 0..100 {
            let key = format!("group-{g}");
            let before = owner(key.as_bytes(), &three).unwrap().id;
            owners.insert(before);
            let after = owner(key.as_bytes(), &two).unwrap().id;
            if before != 2 {
                assert_eq!(before, after);
            }
        }
        assert_eq!(owners.len(), 3);
    }
}
