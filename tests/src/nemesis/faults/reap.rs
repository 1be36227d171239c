//! Crashes: restarting the processes that exited by themselves (a panic, an abort), each reported
//! as a `process-crash` anomaly, and not the ones the nemesis stopped on purpose. It must not heal
//! faults (see `heal`).

use crate::nemesis::checker::Anomaly;

use super::heal::Heal;
use super::{Nemesis, Target};

impl Nemesis {
    /// Restarts processes that exited by themselves, reporting each as an anomaly.
    pub(super) async fn reap(&mut self) {
        let mut crashed = vec![];
        let mut expected: Vec<u64> = self
            .active
            .iter()
            .filter_map(|a| match a.heal {
                Heal::AfterFsyncError(n, _) => Some(n),
                _ => None,
            })
            .collect();
        // A node with an empty data directory may rightly refuse to run as a voter; membership
        // faults restart their node themselves.
        for l in &self.lifecycles {
            expected.extend(l.targets.iter().filter_map(|t| match t {
                Target::Node(n) => Some(*n),
                _ => None,
            }));
        }
        {
            let mut cluster = self.system.cluster.lock().await;
            for n in self.system.node_ids() {
                if expected.contains(&n) {
                    continue;
                }
                if let Some(status) = cluster.exited(n) {
                    crashed.push(format!("node {n} exited by itself ({status})"));
                    cluster.spawn(n);
                }
            }
        }
        for b in &self.system.brokers {
            let mut p = b.process.lock().await;
            if let Some(status) = p.exited() {
                crashed.push(format!("broker {} exited by itself ({status})", b.number));
                p.spawn();
            }
        }
        for c in crashed {
            self.history.note(format!("process-crash: {c}; restarted"));
            self.anomalies.push(Anomaly::new("process-crash", c));
        }
    }
}
