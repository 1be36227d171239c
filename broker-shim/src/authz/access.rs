//! What one client may do: its principal and address against the ACL bindings as this broker last
//! read them, decided by `rules`. Made per request by the authorizer (a consistent set of
//! bindings for the whole request); with no authorizer, or for a super user, everything is
//! allowed. It must not read the bindings itself.

use std::sync::Arc;

use diskless_proto::v1::AclBinding;

use super::rules::{self, Operation, Requester, Resource, CLUSTER_NAME};

/// One requester's rights under one set of bindings.
#[derive(Debug, Clone)]
pub struct Access {
    /// The bindings and `allow.everyone.if.no.acl.found`; `None`: everything is allowed.
    rules: Option<(Arc<Vec<AclBinding>>, bool)>,
    who: Requester,
    /// Whether an authorizer is configured (a super user's access is unlimited but enabled).
    enabled: bool,
}

impl Access {
    /// Everything allowed: no authorizer.
    pub fn unrestricted(who: Requester) -> Access {
        Access { rules: None, who, enabled: false }
    }

    /// Everything allowed under an authorizer: a super user.
    pub fn super_user(who: Requester) -> Access {
        Access { rules: None, who, enabled: true }
    }

    /// `who` under `acls`.
    pub fn under(acls: Arc<Vec<AclBinding>>, allow_if_no_acl: bool, who: Requester) -> Access {
        Access { rules: Some((acls, allow_if_no_acl)), who, enabled: true }
    }

    /// Whether an authorizer is configured (Kafka answers the ACL APIs SECURITY_DISABLED without).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn who(&self) -> &Requester {
        &self.who
    }

    /// Whether the requester may do `op` to the resource `name` of type `r`.
    pub fn allowed(&self, op: Operation, r: Resource, name: &str) -> bool {
        match &self.rules {
            None => true,
            Some((acls, open)) => rules::allowed(acls, *open, &self.who, op, r, name),
        }
    }

    /// Whether the requester may do `op` to the cluster.
    pub fn on_cluster(&self, op: Operation) -> bool {
        self.allowed(op, Resource::Cluster, CLUSTER_NAME)
    }

    /// Whether the requester may do `op` to some resource of type `r`.
    pub fn allowed_somewhere(&self, op: Operation, r: Resource) -> bool {
        match &self.rules {
            None => true,
            Some((acls, open)) => rules::allowed_somewhere(acls, *open, &self.who, op, r),
        }
    }

    /// The KIP-430 authorized-operations bits of the resource `name` of type `r`.
    pub fn operations(&self, r: Resource, name: &str) -> i32 {
        match &self.rules {
            None => Operation::supported(r).iter().fold(0, |bits, op| bits | (1 << (*op as i32))),
            Some((acls, open)) => rules::authorized_operations(acls, *open, &self.who, r, name),
        }
    }
}
