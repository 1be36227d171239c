//! Undoing faults: how each active fault is healed (`Heal`), healing the faults whose time is up,
//! and healing everything at the end of a run. It must not start faults (see `inject`).

use std::time::{Duration, Instant};

use diskless_proto::admin::FaultRequest;
use diskless_proto::broker::{StorageFaultAction, StorageFaultRequest};

use super::{Active, Nemesis, Target};
use crate::nemesis::checker::Anomaly;
use crate::nemesis::proxy::Mode;
use crate::nemesis::system::signal;

/// A fault request that undoes every fault a node can hold.
fn heal_everything() -> FaultRequest {
    FaultRequest {
        block_node_ids: vec![],
        keep_blocks: false,
        fsync_stall_ms: Some(0),
        fsync_fail: Some(false),
        clock_offset_ms: Some(0),
        fail_dir: None,
        topic_changes_only: vec![],
        set_topic_changes_only: true,
    }
}

/// How an active fault is undone.
#[derive(Debug, Clone)]
pub(super) enum Heal {
    RestartNode(u64),
    ResumeNode(u64),
    RestartBroker(usize),
    ResumeBroker(usize),
    /// Every node talks to every other again.
    Reconnect,
    /// These brokers' proxies pass again.
    PassProxies(Vec<usize>),
    EndFsyncStall(u64),
    /// The node should stop at its next fsync: restart it. With the node's fsync count just
    /// after the failure was armed, when it answered.
    AfterFsyncError(u64, Option<u64>),
    ResetClock(u64),
    RepairStore(usize),
}

impl Heal {
    /// What the fault occupies while it lasts (one fault per node, broker, network at a time).
    pub(super) fn targets(&self) -> Vec<Target> {
        match self {
            Heal::RestartNode(n) | Heal::ResumeNode(n) | Heal::EndFsyncStall(n) | Heal::AfterFsyncError(n, _) => {
                vec![Target::Node(*n)]
            }
            Heal::ResetClock(_) => vec![Target::Clock],
            Heal::RestartBroker(b) | Heal::ResumeBroker(b) | Heal::RepairStore(b) => vec![Target::Broker(*b)],
            Heal::Reconnect => vec![Target::Network],
            Heal::PassProxies(bs) => bs.iter().map(|b| Target::Broker(*b)).collect(),
        }
    }
}

impl Nemesis {
    pub(super) async fn heal_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = (0..self.active.len()).filter(|i| self.active[*i].heal_at <= now).collect();
        for i in due.into_iter().rev() {
            let a = self.active.remove(i);
            self.heal(a).await;
        }
    }

    async fn heal(&mut self, a: Active) {
        match &a.heal {
            Heal::RestartNode(n) => {
                let n = *n;
                self.system.cluster.lock().await.spawn(n);
                // A restarted node comes back without its fault state: a partition still in force
                // is applied again once it answers.
                if self.grudge.contains_key(&n) {
                    for _ in 0..20 {
                        if self.system.status(n, false, Duration::from_millis(500)).await.is_some() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    self.apply_grudge_to(n).await;
                }
            }
            Heal::ResumeNode(n) => {
                if let Some(pid) = self.system.cluster.lock().await.pid(*n) {
                    signal(pid, libc::SIGCONT);
                }
                if self.grudge.contains_key(n) {
                    self.apply_grudge_to(*n).await;
                }
            }
            Heal::RestartBroker(b) => self.system.brokers[*b].process.lock().await.spawn(),
            Heal::ResumeBroker(b) => {
                if let Some(pid) = self.system.brokers[*b].process.lock().await.pid() {
                    signal(pid, libc::SIGCONT);
                }
            }
            Heal::Reconnect => {
                self.grudge.clear();
                self.apply_grudge().await;
            }
            Heal::PassProxies(brokers) => {
                for b in brokers {
                    for p in self.system.brokers[*b].proxies.values() {
                        p.set(Mode::Pass);
                    }
                }
            }
            Heal::EndFsyncStall(n) => {
                let req = FaultRequest { keep_blocks: true, fsync_stall_ms: Some(0), ..Default::default() };
                let _ = self.system.inject(*n, req).await;
            }
            Heal::AfterFsyncError(n, armed_at) => {
                let n = *n;
                // The node stops at its next WAL fsync, soon if it takes appends (a node cut off
                // by a partition may take none).
                let mut exited = None;
                for _ in 0..30 {
                    exited = self.system.cluster.lock().await.exited(n);
                    if exited.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                match exited {
                    Some(status) => {
                        self.history.note(format!("n{n} stopped after its failed fsync ({status}); restarting it"));
                        self.system.cluster.lock().await.spawn(n);
                        if self.grudge.contains_key(&n) {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            self.apply_grudge_to(n).await;
                        }
                    }
                    None => {
                        let now = self.system.status(n, false, Duration::from_secs(1)).await.map(|s| s.wal_syncs);
                        let req = FaultRequest { keep_blocks: true, fsync_fail: Some(false), ..Default::default() };
                        let _ = self.system.inject(n, req).await;
                        // One fsync may have been past the failpoint when it was armed; a second
                        // one went through it.
                        match (armed_at, now) {
                            (Some(a), Some(b)) if b >= a + 2 => self.anomalies.push(Anomaly::new(
                                "fsync-error-ignored",
                                format!("n{n} still runs after {} WAL fsyncs since one was made to fail", b - a),
                            )),
                            _ => self.history.note(format!("n{n} did no WAL fsync while armed to fail; disarmed")),
                        }
                    }
                }
            }
            Heal::ResetClock(n) => {
                let req = FaultRequest { keep_blocks: true, clock_offset_ms: Some(0), ..Default::default() };
                let _ = self.system.inject(*n, req).await;
            }
            Heal::RepairStore(b) => {
                let req = StorageFaultRequest { action: StorageFaultAction::Heal as i32, ..Default::default() };
                if let Err(e) = self.system.inject_storage(*b, req).await {
                    // A restarted broker has no faults; a paused one is healed at the end.
                    self.history.note(format!("storage fault not healed on b{b}: {e}"));
                }
            }
        }
        self.history.fault_healed(a.id, &a.name, &a.target);
    }
    /// Heals every fault and makes sure every process runs and none is stopped.
    pub async fn heal_all(&mut self) {
        // Membership faults end on their own (each step bounded), without waiting out their time.
        self.hurry.send_replace(true);
        // The other faults first (processes first of all, so the nodes answer the fault requests
        // that follow): a node being added back must be able to reach its metadata partitions'
        // leaders, as an operator adds a node once the network works. Healing membership under a
        // partition that cuts the new learner off from a leader fails, rightly, with a retriable
        // error.
        self.active.sort_by_key(|a| !matches!(a.heal, Heal::RestartNode(_) | Heal::ResumeNode(_)));
        while !self.active.is_empty() {
            let a = self.active.remove(0);
            self.heal(a).await;
        }
        self.reap().await;
        self.grudge.clear();
        for n in self.system.node_ids() {
            // Wait for the node to answer: every fault it holds must be cleared.
            for _ in 0..100 {
                if self.system.inject(n, heal_everything()).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        for b in &self.system.brokers {
            for p in b.proxies.values() {
                p.set(Mode::Pass);
            }
            let req = StorageFaultRequest { action: StorageFaultAction::Heal as i32, ..Default::default() };
            for _ in 0..100 {
                if self.system.inject_storage(b.number, req.clone()).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        for l in std::mem::take(&mut self.lifecycles) {
            match l.task.await {
                Ok(found) => self.anomalies.extend(found),
                Err(e) => self.history.note(format!("a {} fault's task failed: {e}", l.kind.name())),
            }
        }
        // Again, now that no membership fault holds a node: one that exited meanwhile crashed.
        self.reap().await;
        let mut cluster = self.system.cluster.lock().await;
        for n in self.system.node_ids() {
            match cluster.pid(n) {
                Some(pid) => signal(pid, libc::SIGCONT),
                None => cluster.spawn(n),
            }
        }
        drop(cluster);
        for b in &self.system.brokers {
            let mut p = b.process.lock().await;
            match p.pid() {
                Some(pid) => signal(pid, libc::SIGCONT),
                None => p.spawn(),
            }
        }
        // Background faults (transfers, snapshots) end within their own deadlines.
        while self.background.join_next().await.is_some() {}
        self.history.note("every fault healed");
    }
}
