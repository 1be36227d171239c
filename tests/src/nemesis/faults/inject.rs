//! Starting each kind of fault: picks the kind among those applicable now, its target and how
//! long it lasts, does it, and records it as active (with how to heal it) or hands it to a
//! background task. It must not heal faults (see `heal`) nor judge the system.

use std::time::Duration;

use diskless_proto::admin::{FaultRequest, TransferLeaderRequest, TriggerSnapshotRequest};
use diskless_proto::broker::{StorageFaultAction, StorageFaultRequest, StorageOperation};

use super::background::{lose_disk, remove_and_add_back};
use super::heal::Heal;
use super::{Kind, Nemesis, Target};
use crate::nemesis::proxy::Mode;
use crate::nemesis::system::signal;

impl Nemesis {
    pub(super) async fn inject_one(&mut self) {
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
                let lasts = self.rng.duration(Duration::from_millis(500), Duration::from_secs(3));
                if let Err(e) = self.system.inject(node, req).await {
                    // The node may have taken the fault and stopped at its next fsync before its
                    // answer left: the heal tells (an exit is this fault's, not a crash; without
                    // one the failure is disarmed).
                    self.history.note(format!("fsync failure on n{node}: no answer ({e}); treated as injected"));
                    self.start(kind, format!("n{node}"), lasts, Heal::AfterFsyncError(node, None));
                    return;
                }
                let syncs = self.system.status(node, false, Duration::from_millis(500)).await.map(|s| s.wal_syncs);
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
                let partition = self.rng.below(self.system.shape.metadata_partitions as usize) as u32;
                let mut admin = self.system.admin(via);
                let req = TransferLeaderRequest { metadata_partition: partition, to_node_id: to };
                self.once(kind, format!("metadata partition {partition} to n{to} via n{via}"), async move {
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
}
