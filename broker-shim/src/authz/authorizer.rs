//! The broker's authorizer, Kafka's `StandardAuthorizer` over the bindings the coordinator cluster
//! keeps: it reads them whole (DescribeAcls, every binding) at start, every [`ACL_REFRESH`] after,
//! and at once after this broker changed them, so a change made through any broker is enforced by
//! every broker within about a second. When the cluster cannot be read it keeps the bindings it
//! has (as a Kafka broker keeps its last metadata). Before the first read a request waits for it
//! (at most [`READY_WAIT`]); if none comes, only super users are allowed (Kafka's
//! `AuthorizerNotReadyException`).
//!
//! Owns the settings and the current set of bindings; the decisions are `rules`'.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use diskless_proto::v1::AclBinding;
use tokio::sync::watch;

use super::access::Access;
use super::config::AuthorizerConfig;
use super::rules::Requester;
use crate::cluster::{match_any, ClusterClient};

/// How often the bindings are read again.
pub const ACL_REFRESH: Duration = Duration::from_secs(1);
/// How long a request waits for the first read of the bindings.
pub const READY_WAIT: Duration = Duration::from_secs(10);

/// A set of bindings and the number of the read that got it (reads may finish out of order).
type Snapshot = Option<(u64, Arc<Vec<AclBinding>>)>;

/// Settings and the bindings as last read.
pub struct Authorizer {
    super_users: HashSet<String>,
    allow_if_no_acl: bool,
    cluster: Arc<ClusterClient>,
    acls: watch::Sender<Snapshot>,
    reads: AtomicU64,
}

impl Authorizer {
    pub fn new(config: &AuthorizerConfig, cluster: Arc<ClusterClient>) -> Arc<Authorizer> {
        Arc::new(Authorizer {
            super_users: config.super_users.iter().cloned().collect(),
            allow_if_no_acl: config.allow_everyone_if_no_acl_found,
            cluster,
            acls: watch::channel(None).0,
            reads: AtomicU64::new(0),
        })
    }

    /// Reads every binding and makes them the current set (unless a later read already did).
    pub async fn reload(&self) -> Result<(), tonic::Status> {
        let n = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        let r = self.cluster.describe_acls(match_any()).await?;
        if r.error_code != 0 {
            return Err(tonic::Status::unavailable(format!(
                "DescribeAcls: error {}: {}",
                r.error_code,
                r.error_message.unwrap_or_default()
            )));
        }
        let acls = Arc::new(r.bindings);
        self.acls.send_if_modified(|cur| {
            let newer = cur.as_ref().is_none_or(|(m, _)| *m < n);
            if newer {
                *cur = Some((n, acls));
            }
            newer
        });
        Ok(())
    }

    /// Reads the bindings every [`ACL_REFRESH`] until `stop` fires.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut failing = false;
        loop {
            match self.reload().await {
                Ok(()) => failing = false,
                Err(s) if !failing => {
                    failing = true;
                    tracing::warn!(status = %s, "ACLs not read from the coordinator cluster; enforcing the last ones read");
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(ACL_REFRESH) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// What `who` may do, under the bindings as they are now.
    pub async fn access(&self, who: Requester) -> Access {
        if self.super_users.contains(&who.principal) {
            return Access::super_user(who);
        }
        let mut rx = self.acls.subscribe();
        let loaded = tokio::time::timeout(READY_WAIT, rx.wait_for(|s| s.is_some())).await;
        let acls = match loaded {
            Ok(Ok(s)) => s.as_ref().map(|(_, a)| a.clone()),
            _ => None,
        };
        match acls {
            Some(acls) => Access::under(acls, self.allow_if_no_acl, who),
            None => {
                tracing::warn!(principal = %who.principal, "ACLs not read yet: denying");
                Access::under(Arc::new(vec![]), false, who)
            }
        }
    }
}
