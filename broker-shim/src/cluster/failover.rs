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
    fn client(&self) -> (usize, Client) {
        let i = self.current.load(Ordering::Relaxed) % self.channels.len();
        (i, CoordinatorServiceClient::new(self.channels[i].1.clone()).max_decoding_message_size(256 << 20))
    }

    /// Sends a request that is safe to repeat, moving to the next node on transport failures.
    pub async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, tonic::Status>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = None;
        for _ in 0..self.channels.len() * 2 {
            let (i, c) = self.client();
            match f(c).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if retry_elsewhere(&s) => {
                    tracing::debug!(node = %self.channels[i].0, status = %s, "coordinator unreachable, trying the next");
                    let _ = self.current.compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed);
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
        let i = self.current.load(Ordering::Relaxed);
        let _ = self.current.compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed);
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
        let (i, c) = self.client();
        let r = f(c).await;
        if let Err(s) = &r {
            if retry_elsewhere(s) {
                let _ = self.current.compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed);
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
