//! The partition between nodes (the grudge: node → the peers it must not send to): picking a
//! random one and putting it in force through the nodes' transport hook. It must not decide when a
//! partition starts or ends (see `inject` and `heal`).

use std::collections::BTreeMap;

use diskless_proto::admin::FaultRequest;

use super::heal::Heal;
use super::Nemesis;

impl Nemesis {
    /// Nodes that are killed or paused now (a request to them would not be answered).
    fn unreachable_nodes(&self) -> Vec<u64> {
        self.active
            .iter()
            .filter_map(|a| match a.heal {
                Heal::RestartNode(n) | Heal::ResumeNode(n) | Heal::AfterFsyncError(n, _) => Some(n),
                _ => None,
            })
            .collect()
    }

    /// Tells node `n` which peers it must not send to now (an empty grudge heals it).
    pub(super) async fn apply_grudge_to(&self, n: u64) {
        let block_node_ids = self.grudge.get(&n).cloned().unwrap_or_default();
        if let Err(e) = self.system.inject(n, FaultRequest { block_node_ids, ..Default::default() }).await {
            self.history.note(format!("partition not applied to n{n}: {e}"));
        }
    }

    /// Puts the grudge in force on every reachable node (the others get it when they come back).
    pub(super) async fn apply_grudge(&self) {
        let down = self.unreachable_nodes();
        for n in self.system.node_ids() {
            if !down.contains(&n) {
                self.apply_grudge_to(n).await;
            }
        }
    }

    /// A random partition between nodes: `(variant, description, grudge)`.
    pub(super) fn pick_partition(&mut self) -> (&'static str, String, BTreeMap<u64, Vec<u64>>) {
        let mut nodes = self.system.node_ids();
        self.rng.shuffle(&mut nodes);
        let mut grudge: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let cut = |a: &[u64], b: &[u64], grudge: &mut BTreeMap<u64, Vec<u64>>| {
            for x in a {
                for y in b {
                    grudge.entry(*x).or_default().push(*y);
                    grudge.entry(*y).or_default().push(*x);
                }
            }
        };
        let names = |ns: &[u64]| ns.iter().map(|n| format!("n{n}")).collect::<Vec<_>>().join(",");
        match self.rng.below(4) {
            0 => {
                let (one, rest) = nodes.split_at(1);
                cut(one, rest, &mut grudge);
                ("isolate", format!("{} | {}", names(one), names(rest)), grudge)
            }
            1 => {
                let (minority, majority) = nodes.split_at(nodes.len() / 2);
                cut(minority, majority, &mut grudge);
                ("halves", format!("{} | {}", names(minority), names(majority)), grudge)
            }
            2 => {
                // One node's messages to some peers are lost; theirs to it get through.
                let from = nodes[0];
                let mut to: Vec<u64> = nodes[1..].iter().copied().filter(|_| self.rng.chance(0.6)).collect();
                if to.is_empty() {
                    to.push(nodes[1]);
                }
                grudge.insert(from, to.clone());
                ("one-way", format!("{} -/-> {}", names(&[from]), names(&to)), grudge)
            }
            _ => {
                // Two sides that cannot talk, and a bridge node that talks to both.
                let bridge = nodes[0];
                let rest = &nodes[1..];
                let (a, b) = rest.split_at(rest.len() / 2);
                cut(a, b, &mut grudge);
                ("bridge", format!("{} | {} | {} (bridge n{bridge})", names(a), names(&[bridge]), names(b)), grudge)
            }
        }
    }
}
