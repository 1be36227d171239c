//! Each metadata partition's leader as last learned, from every node's AdminService.Status at
//! once (per metadata partition the leader of the highest term wins: a node may know none, being
//! cut off, just restarted, or not a member), translated through the address map. Also points the
//! requests to "any node" at one that knows every leader. A stale entry is harmless: a leader that
//! moved answers "not the leader" and the caller learns again.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::StatusRequest;

use super::ClusterClient;

impl ClusterClient {
    /// Learns every metadata partition's leader from the nodes.
    pub async fn refresh_leaders(&self) {
        // Every node's view at once: a node may know no leader (cut off, just restarted, or its
        // replicas not members), so per metadata partition the leader of the highest term wins.
        let views = futures_util::future::join_all(self.channels.iter().map(|(_, ch)| async move {
            let r = AdminServiceClient::new(ch.clone())
                .status(StatusRequest { with_digest: false, ..Default::default() })
                .await;
            r.ok().map(|s| s.into_inner())
        }))
        .await;
        let mut best: Vec<Option<(u64, String)>> = vec![None; self.num_metadata_partitions as usize];
        let mut knowing: Option<usize> = None;
        for (i, s) in views.iter().enumerate() {
            let Some(s) = s else { continue };
            let addr: HashMap<u64, &String> = s.nodes.iter().map(|n| (n.node_id, &n.address)).collect();
            // `groups`: the node's metadata partitions, as the admin API names them.
            for mp in &s.groups {
                let (Some(slot), Some(a)) = (best.get_mut(mp.metadata_partition as usize), addr.get(&mp.leader)) else {
                    continue;
                };
                if slot.as_ref().is_none_or(|(term, _)| mp.term > *term) {
                    *slot = Some((mp.term, self.address_map.get(*a).unwrap_or(a).clone()));
                }
            }
            if s.groups.iter().all(|mp| mp.leader != 0) && knowing.is_none() {
                knowing = Some(i);
            }
        }
        {
            let mut leaders = self.leaders.lock().unwrap_or_else(|e| e.into_inner());
            for (slot, b) in leaders.iter_mut().zip(best) {
                if let Some((_, addr)) = b {
                    *slot = Some(addr);
                }
            }
        }
        // Requests to "any node" go to one that knows every leader, if the current one does not.
        let cur = self.current.load(Ordering::Relaxed) % self.channels.len();
        let current_knows = views[cur].as_ref().is_some_and(|s| s.groups.iter().all(|mp| mp.leader != 0));
        if let (false, Some(k)) = (current_knows, knowing) {
            self.current.store(k, Ordering::Relaxed);
        }
    }

    /// The address of metadata partition `mp`'s leader, if one is known.
    pub(super) fn leader_of(&self, mp: u32) -> Option<String> {
        self.leaders.lock().unwrap_or_else(|e| e.into_inner()).get(mp as usize).cloned().flatten()
    }
}
