//! The nemesis: injects faults at random every 0.2–3 s (log-uniform), each healed after its own
//! random duration, and heals everything at the end. One seeded [`Rng`] makes every choice.
//!
//! Faults (`Kind`): kill -9 of a node, of the node leading the most metadata partitions, of a
//! broker (each restarted later); SIGSTOP/SIGCONT pauses of nodes and brokers; network partitions
//! between nodes (isolate one, majority/minority halves, one-way, bridge) through the nodes'
//! transport hook, re-applied to a node that restarts while it lasts; partitions between brokers
//! and nodes through the proxies (cut or blackhole one link, a broker from every node, a node from
//! every broker); WAL fsync stalls and failures (a failed fsync stops the node, which is
//! restarted); clock jumps on one node (minutes either way); object storage faults on a broker
//! (delay, fail, fail after doing, hang: puts, gets, deletes, lists); removing a node from every
//! metadata partition and adding it back, either as it is or with its data directory wiped (it
//! rejoins as a new node: learner, caught up, voter); the loss of a node's disk (its data directory
//! wiped and the node restarted with its unchanged configuration, as after a disk replacement;
//! healed by removing it, wiping it again and adding it back as a new node); leader transfers and
//! snapshots.
//!
//! Limits keep the run meaningful: at most `max_down` nodes are down (killed, paused, ...) at once
//! (a minority: 1 of 3, 2 of 5), and a broker has one fault at a time. A process that exits by
//! itself (a panic, an abort) is restarted and reported as a `process-crash` anomaly, unless the
//! nemesis caused the exit on purpose.
//!
//! It must not judge the system: the checker does, from the history this writes to.
//!
//! The files: this one holds the fault kinds, the nemesis's state and its schedule (`run`);
//! `inject` starts each kind of fault, `heal` undoes them, `partition` keeps the partition
//! between nodes in force, `background` runs the faults that take their time as tasks, and
//! `reap` restarts processes that exited by themselves.

mod background;
mod heal;
mod inject;
mod partition;
mod reap;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::checker::Anomaly;
use super::history::History;
use super::rng::Rng;
use super::system::System;

use heal::Heal;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    KillNode,
    KillLeader,
    KillBroker,
    PauseNode,
    PauseBroker,
    PartitionNodes,
    PartitionClients,
    FsyncStall,
    FsyncError,
    ClockJump,
    StoreFault,
    RemoveNode,
    DiskLoss,
    TransferLeader,
    Snapshot,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::KillNode,
        Kind::KillLeader,
        Kind::KillBroker,
        Kind::PauseNode,
        Kind::PauseBroker,
        Kind::PartitionNodes,
        Kind::PartitionClients,
        Kind::FsyncStall,
        Kind::FsyncError,
        Kind::ClockJump,
        Kind::StoreFault,
        Kind::RemoveNode,
        Kind::DiskLoss,
        Kind::TransferLeader,
        Kind::Snapshot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::KillNode => "kill-node",
            Kind::KillLeader => "kill-leader",
            Kind::KillBroker => "kill-broker",
            Kind::PauseNode => "pause-node",
            Kind::PauseBroker => "pause-broker",
            Kind::PartitionNodes => "partition-nodes",
            Kind::PartitionClients => "partition-clients",
            Kind::FsyncStall => "fsync-stall",
            Kind::FsyncError => "fsync-error",
            Kind::ClockJump => "clock-jump",
            Kind::StoreFault => "store-fault",
            Kind::RemoveNode => "remove-node",
            Kind::DiskLoss => "disk-loss",
            Kind::TransferLeader => "transfer-leader",
            Kind::Snapshot => "snapshot",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the fault takes its node out (counts against `max_down`).
    fn downs_a_node(self) -> bool {
        matches!(
            self,
            Kind::KillNode
                | Kind::KillLeader
                | Kind::PauseNode
                | Kind::FsyncStall
                | Kind::FsyncError
                | Kind::RemoveNode
                | Kind::DiskLoss
        )
    }
}

struct Active {
    id: u64,
    kind: Kind,
    /// The kind's name, with the variant when it has some (`partition-nodes/halves`).
    name: String,
    target: String,
    heal_at: Instant,
    heal: Heal,
}

/// What a fault occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Node(u64),
    Broker(usize),
    /// The network between nodes.
    Network,
    /// One node's clock is off (one at a time).
    Clock,
    /// A node is out of the metadata partitions (one membership change at a time).
    Membership,
}

pub struct Nemesis {
    system: Arc<System>,
    history: Arc<History>,
    rng: Rng,
    kinds: Vec<Kind>,
    active: Vec<Active>,
    /// Faults injected, by kind name.
    pub counts: BTreeMap<String, usize>,
    /// Processes that exited by themselves.
    pub anomalies: Vec<Anomaly>,
    max_down: usize,
    background: tokio::task::JoinSet<()>,
    /// The partition between nodes in force: node → the peers it must not send to.
    grudge: BTreeMap<u64, Vec<u64>>,
    /// Faults that run their course in the background (membership changes take seconds to
    /// minutes, and other faults must still heal on time meanwhile).
    lifecycles: Vec<Lifecycle>,
    /// Set when everything is to be healed: background faults skip what is left of their time.
    hurry: tokio::sync::watch::Sender<bool>,
}

/// A background fault: its targets stay busy until its task ends; the task records its own heal
/// and returns the anomalies it saw.
struct Lifecycle {
    kind: Kind,
    targets: Vec<Target>,
    task: tokio::task::JoinHandle<Vec<Anomaly>>,
}

impl Nemesis {
    pub fn new(system: Arc<System>, history: Arc<History>, rng: Rng, kinds: Vec<Kind>) -> Nemesis {
        let max_down = (system.shape.nodes as usize - 1) / 2;
        Nemesis {
            system,
            history,
            rng,
            kinds,
            active: vec![],
            counts: BTreeMap::new(),
            anomalies: vec![],
            max_down,
            background: tokio::task::JoinSet::new(),
            grudge: BTreeMap::new(),
            lifecycles: vec![],
            hurry: tokio::sync::watch::channel(false).0,
        }
    }

    /// Faults injected so far.
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// Injects faults until `until` and at least `min_faults` were injected (but never past
    /// `cap`), then heals everything.
    pub async fn run(&mut self, until: Instant, min_faults: usize, cap: Instant) {
        let mut next = Instant::now() + self.gap();
        loop {
            self.reap().await;
            self.heal_due().await;
            self.finish_lifecycles().await;
            while self.background.try_join_next().is_some() {}
            let now = Instant::now();
            if (now >= until && self.total() >= min_faults) || now >= cap {
                break;
            }
            if now >= next {
                self.inject_one().await;
                next = Instant::now() + self.gap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.heal_all().await;
    }

    fn gap(&mut self) -> Duration {
        self.rng.duration(Duration::from_millis(200), Duration::from_secs(3))
    }

    fn busy(&self, t: Target) -> bool {
        self.active.iter().any(|a| a.heal.targets().contains(&t))
            || self.lifecycles.iter().any(|l| l.targets.contains(&t))
    }

    fn down(&self) -> usize {
        self.active.iter().filter(|a| a.kind.downs_a_node()).count()
            + self.lifecycles.iter().filter(|l| l.kind.downs_a_node()).count()
    }

    fn free_nodes(&self) -> Vec<u64> {
        self.system.node_ids().into_iter().filter(|n| !self.busy(Target::Node(*n))).collect()
    }

    fn free_brokers(&self) -> Vec<usize> {
        (0..self.system.brokers.len()).filter(|b| !self.busy(Target::Broker(*b))).collect()
    }

    fn applicable(&self, k: Kind) -> bool {
        if k == Kind::RemoveNode {
            return self.down() == 0
                && self.max_down > 0
                && !self.busy(Target::Network)
                && !self.busy(Target::Membership);
        }
        if k == Kind::DiskLoss && self.busy(Target::Membership) {
            return false;
        }
        if k.downs_a_node() {
            return self.down() < self.max_down && !self.free_nodes().is_empty();
        }
        match k {
            Kind::KillBroker | Kind::PauseBroker => !self.free_brokers().is_empty(),
            Kind::PartitionNodes => !self.busy(Target::Network),
            Kind::ClockJump => !self.busy(Target::Clock),
            Kind::StoreFault => !self.free_brokers().is_empty(),
            // A node cut from every broker takes them all.
            Kind::PartitionClients => !self.free_brokers().is_empty(),
            _ => true,
        }
    }

    fn start(&mut self, kind: Kind, target: String, lasts: Duration, heal: Heal) {
        self.start_named(kind, kind.name().to_string(), target, lasts, heal);
    }

    fn start_named(&mut self, kind: Kind, name: String, target: String, lasts: Duration, heal: Heal) {
        let id = self.history.fault_started(&name, &target);
        *self.counts.entry(name.clone()).or_default() += 1;
        self.active.push(Active { id, kind, name, target, heal_at: Instant::now() + lasts, heal });
    }
}
