//! Failover between the coordinator nodes: a request that is safe to repeat goes to the current
//! node and moves on to the next when the transport fails (`call`); one that is not is sent once
//! (`call_once`), and its outcome is unknown if the transport fails. Also the channels: to the
//! configured nodes, and to a leader's address learned later (`channel_to`, made on first use).
//! It must not retry on an answer (a node that answered, even with an error, was reached).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use tonic::transport::{Channel, Endpoint};

use super::{Client, ClusterClient};

/// Transport-level failures worth trying on another node.
fn retry_elsewhere(s: &tonic::Status) -> bool {
    matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
}

/// A lazily connected channel to a configured node.
pub(super) fn channel(addr: &str, tls: Option<Arc<diskless_tls::ClientTls>>) -> anyhow::Result<Channel> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10));
    Ok(diskless_tls::client::channel(endpoint, tls))
}

impl ClusterClient {
    /// The current node's client, with the counter it was chosen by (`current` only grows; the
    /// node is the counter modulo the node count) and that node's index.
    fn client(&self) -> (usize, usize, Client) {
        let turn = self.current.load(Ordering::Relaxed);
        let i = turn % self.channels.len();
        (turn, i, CoordinatorServiceClient::new(self.channels[i].1.clone()).max_decoding_message_size(256 << 20))
    }

    /// Moves on from the node chosen at `turn`, unless another caller already did (comparing the
    /// counter itself, not the node index: once it has wrapped the index never equals it).
    fn next_after(&self, turn: usize) {
        let _ = self.current.compare_exchange(turn, turn.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Sends a request that is safe to repeat, moving to the next node on transport failures.
    pub async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, tonic::Status>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = None;
        for _ in 0..self.channels.len() * 2 {
            let (turn, i, c) = self.client();
            match f(c).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if retry_elsewhere(&s) => {
                    tracing::debug!(node = %self.channels[i].0, status = %s, "coordinator unreachable, trying the next");
                    self.next_after(turn);
                    last = Some(s);
                }
                Err(s) => return Err(s),
            }
        }
        Err(last.unwrap_or_else(|| tonic::Status::unavailable("no coordinator")))
    }

    /// Moves the requests that go to "any node" on to the next node (the current one answered that
    /// it cannot serve, e.g. its replica is stale). Returns how many nodes there are.
    pub fn move_on(&self) -> usize {
        self.next_after(self.current.load(Ordering::Relaxed));
        self.channels.len()
    }

    /// How many coordinator nodes this broker knows.
    pub fn nodes(&self) -> usize {
        self.channels.len()
    }

    /// Sends a request once (its outcome is unknown if the transport fails).
    pub async fn call_once<T, F, Fut>(&self, f: F) -> Result<T, tonic::Status>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let (turn, _, c) = self.client();
        let r = f(c).await;
        if let Err(s) = &r {
            if retry_elsewhere(s) {
                self.next_after(turn);
            }
        }
        r.map(|r| r.into_inner())
    }

    /// The channel to the node at `addr` (a leader's address), made on first use.
    pub(super) fn channel_to(&self, addr: &str) -> Option<Channel> {
        let mut map = self.by_addr.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(addr) {
            return Some(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .ok()?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(10));
        let ch = diskless_tls::client::channel(endpoint, self.tls.clone());
        map.insert(addr.to_string(), ch.clone());
        Some(ch)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use diskless_proto::v1::ListTopicsRequest;

    use super::super::{catalog, ClusterClient};

    /// A client of `n` nodes that refuse every connection (ports bound, then closed).
    fn unreachable(n: usize) -> ClusterClient {
        let channels: Vec<_> = (0..n)
            .map(|_| {
                let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
                let a = format!("127.0.0.1:{port}");
                let ch = super::channel(&a, None).unwrap();
                (a, ch)
            })
            .collect();
        ClusterClient {
            by_addr: Mutex::new(channels.iter().cloned().collect()),
            channels,
            current: AtomicUsize::new(0),
            topics: Mutex::new(catalog::Catalog::default()),
            applied: Mutex::new(HashMap::new()),
            num_metadata_partitions: 1,
            leaders: Mutex::new(vec![None]),
            address_map: HashMap::new(),
            tls: None,
            marks: std::sync::Arc::new(super::super::marks::Marks::new(1)),
            coordinates: std::sync::Arc::new(super::super::coordinates::Coordinates::new(0)),
        }
    }

    #[tokio::test]
    async fn failover_moves_on_after_the_counter_has_wrapped_past_the_node_count() {
        let c = unreachable(3);
        // Past one round (as after `move_on`s): the node is the counter modulo 3.
        c.current.store(4, Ordering::Relaxed);
        let r = c.call(|mut c| async move { c.list_topics(ListTopicsRequest::default()).await }).await;
        assert!(r.is_err());
        assert_eq!(c.current.load(Ordering::Relaxed), 4 + 6, "each of the 6 failed tries moved on to the next node");
    }
}
