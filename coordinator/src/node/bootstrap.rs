//! Bootstrapping a new cluster, and `Identify` (who a node is), which bootstrapping asks every
//! member.
//!
//! Owns the rule of when this node may initialize a metadata partition's Raft group (only when
//! every listed member answered and none has it: a wiped node never re-bootstraps) and the
//! membership and cluster id it starts with. It must not add or remove members of a running
//! cluster (that is `membership`, on an operator's request).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diskless_proto::internal::{IdentifyReply, IdentifyRequest};

use super::Node;
use crate::raft::identity;
use crate::raft::{NodeId, Replica};

impl Node {
    /// Bootstraps the metadata partitions of a new cluster, safely.
    ///
    /// A listed member initializes a metadata partition only when **every** other listed member has
    /// answered `Identify` and none has that metadata partition initialized: then the cluster is
    /// new, and each member's replica enters the membership under the incarnation it reported (all
    /// members that initialize compute the same membership and the same cluster id). As soon as any
    /// member reports the metadata partition initialized, this node initializes nothing: its
    /// replica joins through replication if the metadata partition knows its incarnation, and is
    /// refused (see `raft::identity`) until an operator adds it again if it does not — the case of
    /// a wiped or replaced data directory, which must never vote with the log it lost. Members that
    /// do not answer are waited for.
    pub(super) async fn bootstrap(me: std::sync::Weak<Node>) {
        let mut last_note: Option<Instant> = None;
        loop {
            let Some(node) = me.upgrade() else { return };
            if *node.stop.borrow() {
                return;
            }
            match node.try_bootstrap().await {
                Ok(None) => return,
                Ok(Some(missing)) => {
                    if last_note.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        last_note = Some(Instant::now());
                        tracing::info!(
                            ?missing,
                            "waiting for every member to answer before bootstrapping a new cluster"
                        );
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "bootstrap stopped");
                    return;
                }
            }
            drop(node);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// One bootstrap attempt: `Ok(None)` when there is nothing left to do, else the members that
    /// did not answer.
    async fn try_bootstrap(&self) -> anyhow::Result<Option<Vec<NodeId>>> {
        let mut todo = vec![];
        for (g, mp) in self.partitions.iter().enumerate() {
            if !mp.raft.is_initialized().await? {
                todo.push(g as u32);
            }
        }
        if todo.is_empty() {
            return Ok(None);
        }
        let mut replies: BTreeMap<NodeId, IdentifyReply> = BTreeMap::new();
        let mut missing = vec![];
        for m in self.config.members.iter().filter(|m| m.id != self.id) {
            match self.identify_peer(&m.addr).await {
                Ok(r) if r.node_id != m.id || r.num_metadata_partitions != self.num_partitions() => {
                    tracing::error!(
                        addr = %m.addr,
                        "member {} at {} answers as node {} with {} metadata partitions; fix the members list",
                        m.id,
                        m.addr,
                        r.node_id,
                        r.num_metadata_partitions
                    );
                    missing.push(m.id);
                }
                Ok(r) => {
                    replies.insert(m.id, r);
                }
                Err(e) => {
                    tracing::debug!(member = m.id, error = %e, "member did not answer");
                    missing.push(m.id);
                }
            }
        }
        let exists = |g: u32| replies.values().any(|r| r.initialized.get(g as usize) == Some(&true));
        if todo.iter().any(|&g| exists(g)) {
            tracing::info!(
                "the cluster exists: this node's replicas take part once their metadata partitions know them (a node whose data                  directory is new is added with `coordctl add-node`)"
            );
            return Ok(None);
        }
        if !missing.is_empty() {
            return Ok(Some(missing));
        }
        let membership = |g: u32| -> BTreeMap<NodeId, Replica> {
            self.config
                .members
                .iter()
                .map(|m| {
                    let incarnation = if m.id == self.id {
                        self.identity.incarnation(g).unwrap_or_default()
                    } else {
                        replies.get(&m.id).and_then(|r| r.incarnations.get(g as usize).copied()).unwrap_or_default()
                    };
                    (m.id, Replica::new(&m.addr, incarnation))
                })
                .collect()
        };
        self.identity.join_cluster(identity::derive_cluster_id(&membership(0))?)?;
        for g in todo {
            let members = membership(g);
            match self.partitions[g as usize].raft.initialize(members.clone()).await {
                Ok(()) => tracing::info!(metadata_partition = g, ?members, "bootstrapped metadata partition"),
                // Another member's replication got here first: fine.
                Err(e) => tracing::debug!(metadata_partition = g, error = %e, "initialize skipped"),
            }
        }
        Ok(None)
    }

    /// Asks the node at `addr` who it is.
    pub async fn identify_peer(&self, addr: &str) -> anyhow::Result<IdentifyReply> {
        let mut client = self.peers.client(addr).map_err(anyhow::Error::msg)?;
        let r = tokio::time::timeout(Duration::from_secs(2), client.identify(IdentifyRequest {}))
            .await
            .map_err(|_| anyhow::anyhow!("no answer from {addr}"))??;
        Ok(r.into_inner())
    }

    /// Who this node is (the answer to `Identify`).
    pub fn identify(&self) -> IdentifyReply {
        IdentifyReply {
            node_id: self.id,
            incarnations: self.identity.incarnations().to_vec(),
            initialized: (0..self.num_partitions())
                .map(|g| self.metrics(g).is_ok_and(|m| m.membership_config.membership().nodes().next().is_some()))
                .collect(),
            cluster_id: self.identity.cluster_id().map(|c| c.to_vec()).unwrap_or_default(),
            num_metadata_partitions: self.num_partitions(),
            now_ms: self.now_ms(),
            client_address: self.config.advertised().to_string(),
        }
    }
}
