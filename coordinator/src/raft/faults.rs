//! Test-only fault state of one node, in the spirit of TiKV's transport filters and etcd's
//! failpoints (this machine's kernel has no netem): set through `AdminService.InjectFault`, which
//! refuses unless the node runs with `allow_fault_injection = true`. With nothing injected every
//! hook is a no-op: one lock-free read on the hot paths.
//!
//! - **Cut peers**: this node sends nothing to them, neither Raft messages (the network fails the
//!   call as unreachable) nor forwarded client requests. Cutting both directions of a pair takes
//!   both nodes; one side alone is a one-way partition (this node's requests are lost, the peer's
//!   requests and their answers still get through).
//! - **fsync stall / failure** at the log group commit: each fsync first waits out a stall; an
//!   injected failure is reported as the fsync's error, and a node whose fsync fails stops (see
//!   `log_sync`).
//! - **Clock offset**: added where the node stamps "now" into the commands it proposes.
//! - **Topic changes cut short**: the topic creations and deletions this node runs reach only the
//!   metadata partitions named, as a timeout or a crash part way would leave them (the
//!   reconciler's tests).
//!
//! It must not decide anything else: the hooks only delay, fail or shift.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use super::NodeId;

#[derive(Debug, Default)]
pub struct Faults {
    blocked: RwLock<HashSet<NodeId>>,
    /// Set when anything is injected, so the hot paths skip the locks otherwise.
    any_blocked: AtomicBool,
    fsync_stall_until: Mutex<Option<Instant>>,
    fsync_fail: AtomicBool,
    clock_offset_ms: AtomicI64,
    topic_changes_only: RwLock<Option<Vec<u32>>>,
}

impl Faults {
    /// Cuts this node off from `peers` (replacing the previous set; empty heals every cut).
    pub fn set_blocked(&self, peers: impl IntoIterator<Item = NodeId>) {
        let mut b = self.blocked.write().unwrap_or_else(|e| e.into_inner());
        b.clear();
        b.extend(peers);
        self.any_blocked.store(!b.is_empty(), Ordering::Release);
    }

    pub fn block(&self, peer: NodeId) {
        self.blocked.write().unwrap_or_else(|e| e.into_inner()).insert(peer);
        self.any_blocked.store(true, Ordering::Release);
    }

    pub fn unblock_all(&self) {
        self.set_blocked([]);
    }

    /// Whether this node must not send to `peer`.
    pub fn is_blocked(&self, peer: NodeId) -> bool {
        self.any_blocked.load(Ordering::Acquire)
            && self.blocked.read().unwrap_or_else(|e| e.into_inner()).contains(&peer)
    }

    /// Every log fsync waits until `for_` from now has passed (zero ends a stall).
    pub fn stall_fsyncs(&self, for_: Duration) {
        let until = (!for_.is_zero()).then(|| Instant::now() + for_);
        *self.fsync_stall_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }

    /// The next log fsync fails (`false` takes a pending failure back).
    pub fn fail_next_fsync(&self, fail: bool) {
        self.fsync_fail.store(fail, Ordering::Release);
    }

    /// Called by the log fsync thread before each fsync: waits out a stall (a heal ends it early),
    /// then reports an injected failure as the fsync's error.
    pub fn before_fsync(&self) -> std::io::Result<()> {
        loop {
            let until = *self.fsync_stall_until.lock().unwrap_or_else(|e| e.into_inner());
            match until {
                Some(u) if Instant::now() < u => {
                    std::thread::sleep(u.saturating_duration_since(Instant::now()).min(Duration::from_millis(20)))
                }
                _ => break,
            }
        }
        if self.fsync_fail.swap(false, Ordering::AcqRel) {
            return Err(std::io::Error::other("fault injection: fsync failed"));
        }
        Ok(())
    }

    /// Shifts this node's clock (as it stamps commands) by `ms` (0 undoes it).
    pub fn set_clock_offset_ms(&self, ms: i64) {
        self.clock_offset_ms.store(ms, Ordering::Release);
    }

    pub fn clock_offset_ms(&self) -> i64 {
        self.clock_offset_ms.load(Ordering::Acquire)
    }

    /// Topic changes run here reach only `partitions` (`None` restores the normal path).
    pub fn set_topic_changes_only(&self, partitions: Option<Vec<u32>>) {
        *self.topic_changes_only.write().unwrap_or_else(|e| e.into_inner()) = partitions;
    }

    /// The only metadata partitions a topic change run here reaches, when cut short.
    pub fn topic_changes_only(&self) -> Option<Vec<u32>> {
        self.topic_changes_only.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_stalls_failures_and_clock_shifts_are_set_and_healed() {
        let f = Faults::default();
        assert!(!f.is_blocked(2));
        f.set_blocked([2, 3]);
        assert!(f.is_blocked(2) && f.is_blocked(3) && !f.is_blocked(1));
        f.unblock_all();
        assert!(!f.is_blocked(2));

        f.stall_fsyncs(Duration::from_millis(60));
        let t = Instant::now();
        f.before_fsync().unwrap();
        assert!(t.elapsed() >= Duration::from_millis(50));
        f.stall_fsyncs(Duration::ZERO);
        f.fail_next_fsync(true);
        assert!(f.before_fsync().is_err());
        assert!(f.before_fsync().is_ok(), "one injected failure fails one fsync");

        f.set_clock_offset_ms(-5_000);
        assert_eq!(f.clock_offset_ms(), -5_000);

        assert_eq!(f.topic_changes_only(), None);
        f.set_topic_changes_only(Some(vec![2]));
        assert_eq!(f.topic_changes_only(), Some(vec![2]));
        f.set_topic_changes_only(None);
        assert_eq!(f.topic_changes_only(), None);
    }
}
