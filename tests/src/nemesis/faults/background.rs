//! The faults that run as tasks: instantaneous ones (leader transfers, snapshots) and membership
//! faults that take seconds to minutes (`remove_and_add_back`, `lose_disk`), while other faults
//! must still heal on time. A membership fault's task records its own heal. It must not choose
//! faults or their targets (see `inject`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_proto::admin::{AddNodeRequest, MembershipResponse, RemoveNodeRequest};

use super::{Kind, Lifecycle, Nemesis, Target};
use crate::nemesis::checker::Anomaly;
use crate::nemesis::history::History;
use crate::nemesis::system::{AdminClient, System};

impl Nemesis {
    /// Collects the background faults that ended.
    pub(super) async fn finish_lifecycles(&mut self) {
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

    pub(super) fn background_env(&self) -> Background {
        Background { system: self.system.clone(), history: self.history.clone(), hurry: self.hurry.subscribe() }
    }

    /// Starts a background fault on `targets`.
    pub(super) fn lifecycle(
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

    /// An instantaneous fault, or one that runs in the background until it is done.
    pub(super) fn once(
        &mut self,
        kind: Kind,
        target: String,
        work: impl std::future::Future<Output = String> + Send + 'static,
    ) {
        let id = self.history.fault_started(kind.name(), &target);
        *self.counts.entry(kind.name().to_string()).or_default() += 1;
        let history = self.history.clone();
        self.background.spawn(async move {
            let result = work.await;
            history.fault_healed(id, kind.name(), &format!("{target}: {result}"));
        });
    }
}

/// What a background fault works with.
pub(super) struct Background {
    system: Arc<System>,
    history: Arc<History>,
    /// Turns true when everything is to be healed now.
    hurry: tokio::sync::watch::Receiver<bool>,
}

/// How long a membership change a heal makes (adding a node back: learner caught up, then voter,
/// in every metadata partition; removing one) may take, asked again through the nodes in turn.
const MEMBERSHIP_BOUND: Duration = Duration::from_secs(60);

/// Makes a membership change through `nodes` in turn (a second after each refusal) within
/// [`MEMBERSHIP_BOUND`]: the lines of progress, or the last refusal.
async fn change_through<F, Fut>(system: &System, nodes: &[u64], change: F) -> Result<String, String>
where
    F: Fn(AdminClient) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<MembershipResponse>, tonic::Status>>,
{
    let deadline = Instant::now() + MEMBERSHIP_BOUND;
    let mut last = String::new();
    for attempt in 0.. {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || nodes.is_empty() {
            break;
        }
        let via = nodes[attempt % nodes.len()];
        match tokio::time::timeout(left, change(system.admin(via))).await {
            Ok(Ok(r)) => return Ok(r.into_inner().progress.join("; ")),
            Ok(Err(s)) => last = format!("via n{via}: {}", s.message()),
            Err(_) => last = format!("via n{via}: no answer within {MEMBERSHIP_BOUND:?}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(last)
}

/// Adds node `n` back to every metadata partition (learner, caught up, voter), through the other
/// nodes in turn.
async fn add_back(system: &System, n: u64) -> Result<(), String> {
    let others: Vec<u64> = system.node_ids().into_iter().filter(|m| *m != n).collect();
    let addr = system.nodes[&n].clone();
    change_through(system, &others, |mut admin| {
        let req = AddNodeRequest { node_id: n, address: addr.clone(), metadata_partition: None };
        async move { admin.add_node(req).await }
    })
    .await
    .map(|_| ())
}

/// Removes node `n` from every metadata partition, first through `via`, then through the other
/// nodes in turn.
async fn remove(system: &System, n: u64, via: u64) -> Result<String, String> {
    let mut nodes: Vec<u64> = system.node_ids().into_iter().filter(|m| *m != n && *m != via).collect();
    nodes.insert(0, via);
    change_through(system, &nodes, |mut admin| async move {
        admin.remove_node(RemoveNodeRequest { node_id: n, metadata_partition: None }).await
    })
    .await
}

/// Sleeps `d`, or less if everything is to be healed now.
async fn wait_or_hurry(d: Duration, mut hurry: tokio::sync::watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = hurry.wait_for(|h| *h) => {}
    }
}

/// Removes `node` from every metadata partition (through `via`), wipes its data directory if asked
/// and the removal succeeded everywhere (a voter must never lose its log), waits, and adds it back.
#[allow(clippy::too_many_arguments)]
pub(super) async fn remove_and_add_back(
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
/// removed from every metadata partition, wiped again, added back as a new node.
pub(super) async fn lose_disk(
    bg: Background,
    id: u64,
    target: String,
    node: u64,
    via: u64,
    lasts: Duration,
) -> Vec<Anomaly> {
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
    let mut found = vec![];
    match remove(&system, node, via).await {
        Ok(progress) => history.note(format!("n{node} removed after its disk loss: {progress}")),
        // An operator's removal must go through while a majority is up (it was once refused for
        // minutes while a partition's leader kept handing leadership to the wiped node).
        Err(e) => found.push(Anomaly::new(
            "heal-refused",
            format!("n{node} could not be removed after its disk loss within {MEMBERSHIP_BOUND:?}: {e}"),
        )),
    }
    {
        let mut cluster = system.cluster.lock().await;
        cluster.kill(node);
        let _ = std::fs::remove_dir_all(cluster.data_dir(node));
        cluster.set_bootstrap(node, false);
        cluster.spawn(node);
    }
    if let Err(e) = add_back(&system, node).await {
        found.push(Anomaly::new(
            "membership-not-restored",
            format!("n{node} could not be added back after its disk loss: {e}"),
        ));
    }
    history.fault_healed(id, Kind::DiskLoss.name(), &target);
    found
}
