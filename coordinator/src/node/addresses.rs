//! Where the other nodes are, beyond the metadata partitions' membership: which certificate
//! identities are members (for the peer listener's check), and the client address of each member
//! (membership holds peer addresses; with a separate peer listener, clients need the other one).
//!
//! Both are caches: member hosts are recomputed at most once a second (a removed node's
//! certificate stops working within that), client addresses are asked once per peer address with
//! `Identify` (a peer that does not answer is asked again after a few seconds, and meanwhile its
//! peer address is reported).
//!
//! Owns what the peer listener's check asks (`Node::is_peer`); it must not see requests (the
//! check's place in front of the services is `server::authz`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_tls::PeerIdentity;

use super::Node;

const HOSTS_FRESH_FOR: Duration = Duration::from_secs(1);
const RETRY_IDENTIFY_AFTER: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(super) struct Addresses {
    hosts: Mutex<Option<(Instant, Arc<HashSet<String>>)>>,
    /// Peer address → the client address its node answered, or when it last did not answer.
    clients: Mutex<HashMap<String, Result<String, Instant>>>,
}

impl Node {
    /// Whether a peer's certificate belongs to a member: it names the host of the address of a node
    /// in some metadata partition's membership or in `[[members]]`. A node that belongs to no
    /// cluster yet (waiting to be added) admits any peer its CA signed.
    pub fn is_peer(&self, identity: &PeerIdentity) -> bool {
        if self.identity.cluster_id().is_none() {
            return true;
        }
        names_a_host(identity, &self.member_hosts())
    }

    fn member_hosts(&self) -> Arc<HashSet<String>> {
        let mut cache = self.addresses.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, hosts)) = cache.as_ref() {
            if at.elapsed() < HOSTS_FRESH_FOR {
                return hosts.clone();
            }
        }
        let mut hosts: HashSet<String> = self.config.members.iter().map(|m| host_of(&m.addr).to_string()).collect();
        for g in 0..self.num_partitions() {
            if let Ok(m) = self.metrics(g) {
                hosts.extend(m.membership_config.membership().nodes().map(|(_, r)| host_of(&r.addr).to_string()));
            }
        }
        let hosts = Arc::new(hosts);
        *cache = Some((Instant::now(), hosts.clone()));
        hosts
    }

    /// The client address of each `(node id, peer address)`: the same address without a separate
    /// peer listener; else what the node answered to `Identify` (its peer address until it does).
    pub async fn client_addresses(&self, nodes: &[(u64, String)]) -> HashMap<u64, String> {
        if self.config.peer_listen.is_none() {
            return nodes.iter().cloned().collect();
        }
        let ask: Vec<&String> = {
            let cache = self.addresses.clients.lock().unwrap_or_else(|e| e.into_inner());
            nodes
                .iter()
                .filter(|(id, addr)| {
                    *id != self.id
                        && match cache.get(addr) {
                            None => true,
                            Some(Ok(_)) => false,
                            Some(Err(at)) => at.elapsed() > RETRY_IDENTIFY_AFTER,
                        }
                })
                .map(|(_, a)| a)
                .collect()
        };
        let answers = futures_util::future::join_all(ask.iter().map(|addr| async move {
            let r = tokio::time::timeout(Duration::from_secs(1), self.identify_peer(addr)).await;
            match r {
                Ok(Ok(reply)) if !reply.client_address.is_empty() => Ok(reply.client_address),
                // No answer, or none that names an address: asked again later.
                _ => Err(Instant::now()),
            }
        }))
        .await;
        let mut cache = self.addresses.clients.lock().unwrap_or_else(|e| e.into_inner());
        for (addr, a) in ask.into_iter().zip(answers) {
            cache.insert(addr.clone(), a);
        }
        nodes
            .iter()
            .map(|(id, addr)| {
                let client = if *id == self.id {
                    self.config.advertised().to_string()
                } else {
                    match cache.get(addr) {
                        Some(Ok(c)) => c.clone(),
                        _ => addr.clone(),
                    }
                };
                (*id, client)
            })
            .collect()
    }
}

/// Whether a certificate names one of `hosts`.
fn names_a_host(identity: &PeerIdentity, hosts: &HashSet<String>) -> bool {
    identity.names().any(|n| hosts.contains(n))
}

/// The host of `host:port` (brackets of an IPv6 address removed).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("127.0.0.1:7001"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7001"), "::1");
        assert_eq!(host_of("node-1.example:7001"), "node-1.example");
    }
}
