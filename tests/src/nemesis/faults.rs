//! The nemesis: injects faults at random every 0.2–3 s (log-uniform), each healed after its own
//! random duration, and heals everything at the end. One seeded [`Rng`] makes every choice.
//!
//! Faults (`Kind`): kill -9 of a node, of the node leading the most metadata partitions, of a
//! broker (each restarted later); SIGSTOP/SIGCONT pauses of nodes and brokers; network
//! partitions between nodes (isolate one, majority/minority halves, one-way, bridge) through the
//! nodes' transport hook, re-applied to a node that restarts while it lasts; partitions between
//! brokers and nodes through the proxies (cut or blackhole one link, a broker from every node, a
//! node from every broker); WAL fsync stalls and failures (a failed fsync stops the node, which
//! is restarted); clock jumps on one node (minutes either way); object storage faults on a broker
//! (delay, fail, fail after doing, hang: puts, gets, deletes, lists); removing a node from every
//! group and adding it back, either as it is or with its data directory wiped (it rejoins as a
//! new node: learner, caught up, voter); the loss of a node's disk (its data directory wiped and
//! the node restarted with its unchanged configuration, as after a disk replacement; healed by
//! removing it, wiping it again and adding it back as a new node); leader transfers and
//! snapshots.
//!
//! Limits keep the run meaningful: at most `max_down` nodes are down (killed, paused, ...) at once
//! (a minority: 1 of 3, 2 of 5), and a broker has one fault at a time. A process that exits by
//! itself (a panic, an abort) is restarted and reported as a `process-crash` anomaly, unless the
//! nemesis caused the exit on purpose.
//!
//! It must not judge the system: the checker does, from the history this writes to.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::admin::{
    AddNodeRequest, FaultRequest, RemoveNodeRequest, TransferLeaderRequest, TriggerSnapshotRequest,
};
use diskless_proto::broker::{StorageFaultAction, StorageFaultRequest, StorageOperation};

use super::checker::Anomaly;
use super::history::History;
use super::proxy::Mode;
use super::rng::Rng;
use super::system::{signal, System};

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

/// A fault request that undoes every fault a node can hold.
fn heal_everything() -> FaultRequest {
    FaultRequest {
        block_node_ids: vec![],
        keep_blocks: false,
        fsync_stall_ms: Some(0),
        fsync_fail: Some(false),
        clock_offset_ms: Some(0),
        fail_dir: None,
    }
}

/// How an active fault is undone.
#[derive(Debug, Clone)]
enum Heal {
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
    fn targets(&self) -> Vec<Target> {
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
    /// A node is out of the groups (one membership change at a time).
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

    /// Collects the background faults that ended.
    async fn finish_lifecycles(&mut self) {
        let mut i = 0;
        while i < self.lifecycles.len() {
            if self.lifecycles[i].task.is_finished() {
                let l = self.lifecycles.remove(i);
                match l.task.await {
                    Ok(found) => self.anomalies.extend(found),
                    Err(e) => self.history.note(format!("a {} fault's task failed: {e}", l.kind.name())),
                }
            } else {
                i += 1;
            }
        }
    }

    fn background_env(&self) -> Background {
        Background { system: self.system.clone(), history: self.history.clone(), hurry: self.hurry.subscribe() }
    }

    /// Starts a background fault on `targets`.
    fn lifecycle(
        &mut self,
        kind: Kind,
        name: String,
        target: String,
        targets: Vec<Target>,
        run: impl FnOnce(u64) -> futures_util::future::BoxFuture<'static, Vec<Anomaly>>,
    ) {
        let id = self.history.fault_started(&name, &target);
        *self.counts.entry(name).or_default() += 1;
        let task = tokio::spawn(run(id));
        self.lifecycles.push(Lifecycle { kind, targets, task });
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
    async fn apply_grudge_to(&self, n: u64) {
        let block_node_ids = self.grudge.get(&n).cloned().unwrap_or_default();
        if let Err(e) = self.system.inject(n, FaultRequest { block_node_ids, ..Default::default() }).await {
            self.history.note(format!("partition not applied to n{n}: {e}"));
        }
    }

    /// Puts the grudge in force on every reachable node (the others get it when they come back).
    async fn apply_grudge(&self) {
        let down = self.unreachable_nodes();
        for n in self.system.node_ids() {
            if !down.contains(&n) {
                self.apply_grudge_to(n).await;
            }
        }
    }

    /// A random partition between nodes: `(variant, description, grudge)`.
    fn pick_partition(&mut self) -> (&'static str, String, BTreeMap<u64, Vec<u64>>) {
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

    /// An instantaneous fault, or one that runs in the background until it is done.
    fn once(&mut self, kind: Kind, target: String, work: impl std::future::Future<Output = String> + Send + 'static) {
        let id = self.history.fault_started(kind.name(), &target);
        *self.counts.entry(kind.name().to_string()).or_default() += 1;
        let history = self.history.clone();
        self.background.spawn(async move {
            let result = work.await;
            history.fault_healed(id, kind.name(), &format!("{target}: {result}"));
        });
    }

    async fn inject_one(&mut self) {
        let candidates: Vec<Kind> = self.kinds.iter().copied().filter(|k| self.applicable(*k)).collect();
        if candidates.is_empty() {
            return;
        }
        let kind = *self.rng.pick(&candidates);
        match kind {
            Kind::KillNode | Kind::KillLeader => {
                let free = self.free_nodes();
                let mut node = *self.rng.pick(&free);
                if kind == Kind::KillLeader {
                    match self.system.busiest_leader(&free).await {
                        Some(n) => node = n,
                        None => return,
                    }
                }
                self.system.cluster.lock().await.kill(node);
                let lasts = self.rng.duration(Duration::from_millis(500), Duration::from_secs(5));
                self.start(kind, format!("n{node}"), lasts, Heal::RestartNode(node));
            }
            Kind::PauseNode => {
                let node = *self.rng.pick(&self.free_nodes());
                let Some(pid) = self.system.cluster.lock().await.pid(node) else { return };
                signal(pid, libc::SIGSTOP);
                let lasts = self.rng.duration(Duration::from_millis(200), Duration::from_secs(10));
                self.start(kind, format!("n{node}"), lasts, Heal::ResumeNode(node));
            }
            Kind::KillBroker => {
                let b = *self.rng.pick(&self.free_brokers());
                self.system.brokers[b].process.lock().await.kill();
                let lasts = self.rng.duration(Duration::from_millis(500), Duration::from_secs(5));
                self.start(kind, format!("b{b}"), lasts, Heal::RestartBroker(b));
            }
            Kind::PauseBroker => {
                let b = *self.rng.pick(&self.free_brokers());
                let Some(pid) = self.system.brokers[b].process.lock().await.pid() else { return };
                signal(pid, libc::SIGSTOP);
                let lasts = self.rng.duration(Duration::from_millis(200), Duration::from_secs(10));
                self.start(kind, format!("b{b}"), lasts, Heal::ResumeBroker(b));
            }
            Kind::PartitionNodes => {
                let (variant, description, grudge) = self.pick_partition();
                self.grudge = grudge;
                self.apply_grudge().await;
                let lasts = self.rng.duration(Duration::from_secs(1), Duration::from_secs(10));
                self.start_named(kind, format!("{}/{variant}", kind.name()), description, lasts, Heal::Reconnect);
            }
            Kind::PartitionClients => {
                let free = self.free_brokers();
                let mode = if self.rng.chance(0.5) { Mode::Cut } else { Mode::Blackhole };
                let nodes = self.system.node_ids();
                let (variant, links): (&str, Vec<(usize, u64)>) = match self.rng.below(3) {
                    0 => ("link", vec![(*self.rng.pick(&free), *self.rng.pick(&nodes))]),
                    1 => {
                        let b = *self.rng.pick(&free);
                        ("broker", nodes.iter().map(|n| (b, *n)).collect())
                    }
                    _ => {
                        let n = *self.rng.pick(&nodes);
                        ("node", free.iter().map(|b| (*b, n)).collect())
                    }
                };
                for (b, n) in &links {
                    self.system.brokers[*b].proxies[n].set(mode);
                }
                let brokers: std::collections::BTreeSet<usize> = links.iter().map(|(b, _)| *b).collect();
                let description = links.iter().map(|(b, n)| format!("b{b}-n{n}")).collect::<Vec<_>>().join(",")
                    + &format!(" {mode:?}");
                let lasts = self.rng.duration(Duration::from_secs(1), Duration::from_secs(10));
                let mode_name = if mode == Mode::Cut { "cut" } else { "blackhole" };
                self.start_named(
                    kind,
                    format!("{}/{variant}-{mode_name}", kind.name()),
                    description,
                    lasts,
                    Heal::PassProxies(brokers.into_iter().collect()),
                );
            }
            Kind::FsyncStall => {
                let node = *self.rng.pick(&self.free_nodes());
                let lasts = self.rng.duration(Duration::from_millis(300), Duration::from_secs(8));
                let req = FaultRequest {
                    keep_blocks: true,
                    fsync_stall_ms: Some(lasts.as_millis() as u64),
                    ..Default::default()
                };
                if let Err(e) = self.system.inject(node, req).await {
                    self.history.note(format!("fsync stall not injected on n{node}: {e}"));
                    return;
                }
                self.start(kind, format!("n{node} for {lasts:?}"), lasts, Heal::EndFsyncStall(node));
            }
            Kind::FsyncError => {
                let node = *self.rng.pick(&self.free_nodes());
                let req = FaultRequest { keep_blocks: true, fsync_fail: Some(true), ..Default::default() };
                if let Err(e) = self.system.inject(node, req).await {
                    self.history.note(format!("fsync failure not injected on n{node}: {e}"));
                    return;
                }
                let syncs = self.system.status(node, false, Duration::from_millis(500)).await.map(|s| s.wal_syncs);
                let lasts = self.rng.duration(Duration::from_millis(500), Duration::from_secs(3));
                self.start(kind, format!("n{node}"), lasts, Heal::AfterFsyncError(node, syncs));
            }
            Kind::ClockJump => {
                let node = *self.rng.pick(&self.system.node_ids());
                let by = self.rng.duration(Duration::from_secs(1), Duration::from_secs(600)).as_millis() as i64;
                let by = if self.rng.chance(0.5) { by } else { -by };
                let req = FaultRequest { keep_blocks: true, clock_offset_ms: Some(by), ..Default::default() };
                if let Err(e) = self.system.inject(node, req).await {
                    self.history.note(format!("clock jump not injected on n{node}: {e}"));
                    return;
                }
                let lasts = self.rng.duration(Duration::from_secs(1), Duration::from_secs(20));
                self.start(kind, format!("n{node} by {by} ms"), lasts, Heal::ResetClock(node));
            }
            Kind::StoreFault => {
                let b = *self.rng.pick(&self.free_brokers());
                let all =
                    [StorageOperation::Put, StorageOperation::Get, StorageOperation::Delete, StorageOperation::List];
                let mut ops: Vec<StorageOperation> = all.iter().copied().filter(|_| self.rng.chance(0.4)).collect();
                if ops.is_empty() {
                    ops.push(*self.rng.pick(&all));
                }
                let (action, action_name) = match self.rng.below(4) {
                    0 => (StorageFaultAction::Delay, "delay"),
                    1 => (StorageFaultAction::Fail, "fail"),
                    2 => (StorageFaultAction::FailAfter, "fail-after"),
                    _ => (StorageFaultAction::Hang, "hang"),
                };
                let delay_ms = self.rng.duration(Duration::from_millis(50), Duration::from_secs(5)).as_millis() as u64;
                let percent = *self.rng.pick(&[25u32, 50, 100]);
                let mut req = StorageFaultRequest { operations: vec![], action: action as i32, delay_ms, percent };
                for op in &ops {
                    req.operations.push(*op as i32);
                }
                if let Err(e) = self.system.inject_storage(b, req).await {
                    self.history.note(format!("storage fault not injected on b{b}: {e}"));
                    return;
                }
                let names: Vec<&str> =
                    ops.iter().map(|o| o.as_str_name().trim_start_matches("STORAGE_OPERATION_")).collect();
                let lasts = self.rng.duration(Duration::from_secs(1), Duration::from_secs(10));
                self.start_named(
                    kind,
                    format!("{}/{action_name}", kind.name()),
                    format!("b{b} {} {percent}% (delay {delay_ms} ms)", names.join("+")),
                    lasts,
                    Heal::RepairStore(b),
                );
            }
            Kind::RemoveNode => {
                let nodes = self.system.node_ids();
                let node = *self.rng.pick(&nodes);
                let others: Vec<u64> = nodes.iter().copied().filter(|n| *n != node).collect();
                let via = *self.rng.pick(&others);
                let wipe = self.rng.chance(0.5);
                let lasts = self.rng.duration(Duration::from_secs(2), Duration::from_secs(15));
                let name = format!("{}/{}", kind.name(), if wipe { "wipe" } else { "keep" });
                let bg = self.background_env();
                let target = format!("n{node} via n{via}");
                let targets = vec![Target::Node(node), Target::Membership];
                self.lifecycle(kind, name.clone(), target.clone(), targets, move |id| {
                    Box::pin(remove_and_add_back(bg, id, name, target, node, via, wipe, lasts))
                });
            }
            Kind::DiskLoss => {
                let node = *self.rng.pick(&self.free_nodes());
                let others: Vec<u64> = self.system.node_ids().into_iter().filter(|n| *n != node).collect();
                let via = *self.rng.pick(&others);
                let lasts = self.rng.duration(Duration::from_secs(2), Duration::from_secs(10));
                let bg = self.background_env();
                let target = format!("n{node}");
                let targets = vec![Target::Node(node), Target::Membership];
                self.lifecycle(kind, kind.name().to_string(), target.clone(), targets, move |id| {
                    Box::pin(lose_disk(bg, id, target, node, via, lasts))
                });
            }
            Kind::TransferLeader => {
                let nodes = self.system.node_ids();
                let via = *self.rng.pick(&nodes);
                let to = *self.rng.pick(&nodes);
                let group = self.rng.below(self.system.shape.metadata_partitions as usize) as u32;
                let mut admin = self.system.admin(via);
                let req = TransferLeaderRequest { metadata_partition: group, to_node_id: to };
                self.once(kind, format!("group {group} to n{to} via n{via}"), async move {
                    match tokio::time::timeout(Duration::from_secs(15), admin.transfer_leader(req)).await {
                        Ok(Ok(_)) => "done".into(),
                        Ok(Err(s)) => format!("refused: {}", s.message()),
                        Err(_) => "no answer".into(),
                    }
                });
            }
            Kind::Snapshot => {
                let nodes = self.system.node_ids();
                let node = *self.rng.pick(&nodes);
                let mut admin = self.system.admin(node);
                self.once(kind, format!("n{node}"), async move {
                    match tokio::time::timeout(
                        Duration::from_secs(40),
                        admin.trigger_snapshot(TriggerSnapshotRequest {}),
                    )
                    .await
                    {
                        Ok(Ok(r)) => format!("at {:?}", r.into_inner().snapshot_index),
                        Ok(Err(s)) => format!("refused: {}", s.message()),
                        Err(_) => "no answer".into(),
                    }
                });
            }
        }
    }

    async fn heal_due(&mut self) {
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

    /// Restarts processes that exited by themselves, reporting each as an anomaly.
    async fn reap(&mut self) {
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

    /// Heals every fault and makes sure every process runs and none is stopped.
    pub async fn heal_all(&mut self) {
        // Membership faults end on their own (each step bounded), without waiting out their time.
        self.hurry.send_replace(true);
        // The other faults first (processes first of all, so the nodes answer the fault requests
        // that follow): a node being added back must be able to reach its groups' leaders, as an
        // operator adds a node once the network works. Healing membership under a partition that
        // cuts the new learner off from a leader fails, rightly, with a retriable error.
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

/// What a background fault works with.
struct Background {
    system: Arc<System>,
    history: Arc<History>,
    /// Turns true when everything is to be healed now.
    hurry: tokio::sync::watch::Receiver<bool>,
}

/// How long adding a node back may take (learner caught up, then voter, in every group).
const ADD_BACK_BOUND: Duration = Duration::from_secs(60);

/// Adds node `n` back to every group (learner, caught up, voter), through the other nodes in turn,
/// within [`ADD_BACK_BOUND`].
async fn add_back(system: &System, n: u64) -> Result<(), String> {
    let others: Vec<u64> = system.node_ids().into_iter().filter(|m| *m != n).collect();
    let deadline = Instant::now() + ADD_BACK_BOUND;
    let mut last = String::new();
    for attempt in 0.. {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let via = others[attempt % others.len()];
        let req = AddNodeRequest { node_id: n, address: system.nodes[&n].clone(), metadata_partition: None };
        match tokio::time::timeout(left, system.admin(via).add_node(req)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(s)) => last = format!("via n{via}: {}", s.message()),
            Err(_) => last = format!("via n{via}: no answer within {ADD_BACK_BOUND:?}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(last)
}

/// Sleeps `d`, or less if everything is to be healed now.
async fn wait_or_hurry(d: Duration, mut hurry: tokio::sync::watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = hurry.wait_for(|h| *h) => {}
    }
}

/// Removes `node` from every group (through `via`), wipes its data directory if asked and the
/// removal succeeded everywhere (a voter must never lose its log), waits, and adds it back.
#[allow(clippy::too_many_arguments)]
async fn remove_and_add_back(
    bg: Background,
    id: u64,
    name: String,
    target: String,
    node: u64,
    via: u64,
    wipe: bool,
    lasts: Duration,
) -> Vec<Anomaly> {
    let Background { system, history, hurry } = bg;
    let req = RemoveNodeRequest { node_id: node, metadata_partition: None };
    let (removed, result) =
        match tokio::time::timeout(Duration::from_secs(30), system.admin(via).remove_node(req)).await {
            Ok(Ok(r)) => (true, r.into_inner().progress.join("; ")),
            Ok(Err(s)) => (false, format!("refused: {}", s.message())),
            Err(_) => (false, "no answer within 30 s".into()),
        };
    let wiped = wipe && removed;
    if wiped {
        let mut cluster = system.cluster.lock().await;
        cluster.kill(node);
        let _ = std::fs::remove_dir_all(cluster.data_dir(node));
        // It rejoins as a new node: no bootstrap.
        cluster.set_bootstrap(node, false);
        cluster.spawn(node);
    }
    history.note(format!("{target}: removal: {result}; wiped: {wiped}"));
    wait_or_hurry(lasts, hurry).await;
    let mut found = vec![];
    if let Err(e) = add_back(&system, node).await {
        found.push(Anomaly::new("membership-not-restored", format!("n{node} could not be added back: {e}")));
    }
    history.fault_healed(id, &name, &target);
    found
}

/// The loss of `node`'s disk: killed, its data directory wiped, restarted with its unchanged
/// configuration (as after a disk replacement); after `lasts`, healed the way an operator would:
/// removed from every group, wiped again, added back as a new node.
async fn lose_disk(bg: Background, id: u64, target: String, node: u64, via: u64, lasts: Duration) -> Vec<Anomaly> {
    let Background { system, history, hurry } = bg;
    {
        let mut cluster = system.cluster.lock().await;
        cluster.kill(node);
        let _ = std::fs::remove_dir_all(cluster.data_dir(node));
        cluster.spawn(node);
    }
    wait_or_hurry(lasts, hurry).await;
    if let Some(status) = system.cluster.lock().await.exited(node) {
        history.note(format!("n{node}, restarted with an empty data directory, exited ({status})"));
    }
    let req = RemoveNodeRequest { node_id: node, metadata_partition: None };
    let r = tokio::time::timeout(Duration::from_secs(30), system.admin(via).remove_node(req)).await;
    history.note(format!("n{node} removed after its disk loss: {r:?}"));
    {
        let mut cluster = system.cluster.lock().await;
        cluster.kill(node);
        let _ = std::fs::remove_dir_all(cluster.data_dir(node));
        cluster.set_bootstrap(node, false);
        cluster.spawn(node);
    }
    let mut found = vec![];
    if let Err(e) = add_back(&system, node).await {
        found.push(Anomaly::new(
            "membership-not-restored",
            format!("n{node} could not be added back after its disk loss: {e}"),
        ));
    }
    history.fault_healed(id, Kind::DiskLoss.name(), &target);
    found
}
