//! Who may call what: a tower layer in front of each listener's services.
//!
//! On the client listener, with `roles` configured, every call needs a certificate identity (its
//! common name or one of its alternative names) holding the method's role: `reader` (status,
//! topic and file descriptions, health), `broker` (the coordinator API; includes reader), `admin`
//! (membership, leadership, snapshots and backups, digests, fault injection; includes everything).
//! A refused call gets PERMISSION_DENIED naming the identity and the role it needs, and reaches no
//! service. Health and reflection need only an admitted connection. On the peer listener with TLS,
//! the client certificate must name the host of a member's address (`Node::is_peer`); members may
//! call everything there. Owns the decision only: the TLS handshake (`diskless_tls`) established
//! the identity, and handlers never see a refused call (except `Status` with digests, which asks
//! [`Caller::require`] itself). The roles' configuration (who holds which role) is
//! `node::roles`; which hosts are members is `node::addresses`.

use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use diskless_tls::{ConnInfo, PeerIdentity};
use futures_util::future::Either;

pub use crate::node::roles::{Role, Roles};
use crate::node::Node;

/// The role a method needs; `None`: any admitted connection (health, reflection).
pub fn required_role(path: &str) -> Option<Role> {
    const COORDINATOR: &str = "/diskless.coordinator.v1.CoordinatorService/";
    const ADMIN: &str = "/diskless.admin.v1.AdminService/";
    if path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.") {
        return None;
    }
    Some(if let Some(m) = path.strip_prefix(COORDINATOR) {
        match m {
            "ListTopics" | "DescribeFiles" | "DescribeAcls" => Role::Reader,
            _ => Role::Broker,
        }
    } else if let Some(m) = path.strip_prefix(ADMIN) {
        match m {
            // Status with digests needs admin: checked by the handler (Caller::require).
            "Status" | "DescribePartitions" => Role::Reader,
            _ => Role::Admin,
        }
    } else {
        Role::Admin
    })
}

/// The caller of a request, as authorized (a request extension).
#[derive(Debug, Clone)]
pub struct Caller {
    identity: Option<Arc<PeerIdentity>>,
    /// `None`: unrestricted (no roles configured, or a member on the peer listener).
    role: Option<Option<Role>>,
}

impl Caller {
    /// Refuses unless the caller holds `role`.
    pub fn require(&self, role: Role) -> Result<(), tonic::Status> {
        match self.role {
            None => Ok(()),
            Some(held) if held >= Some(role) => Ok(()),
            Some(_) => Err(denied(self.identity.as_deref(), role)),
        }
    }
}

/// Refuses a call of `identity` (none: no client certificate) that needs `role`, if the request
/// carries a [`Caller`] that does not hold it.
pub fn require<T>(request: &tonic::Request<T>, role: Role) -> Result<(), tonic::Status> {
    request.extensions().get::<Caller>().map_or(Ok(()), |c| c.require(role))
}

fn denied(identity: Option<&PeerIdentity>, role: Role) -> tonic::Status {
    let who = identity
        .map_or_else(|| "a client without a certificate".to_string(), |i| format!("identity {:?}", i.display()));
    tonic::Status::permission_denied(format!("{who} does not hold the role {} this call needs", role.name()))
}

/// Which listener a layer guards.
#[derive(Clone)]
pub enum Gate {
    /// The client listener: `roles` (none: everything allowed); `raft_here`: no separate peer
    /// listener, so Raft traffic arrives here too.
    Client { roles: Option<Arc<Roles>>, raft_here: bool },
    /// The peer listener: with `tls`, only members' certificates.
    Peer { node: Weak<Node>, tls: bool },
}

impl Gate {
    /// The caller of a request, or the refusal.
    fn admit(&self, path: &str, conn: Option<&ConnInfo>) -> Result<Caller, tonic::Status> {
        let identity = conn.and_then(|c| c.identity.clone());
        match self {
            Gate::Client { roles, raft_here } => {
                if !raft_here && path.starts_with("/diskless.internal.v1.RaftService/") {
                    return Err(tonic::Status::permission_denied(
                        "Raft traffic is served on the peer listener, not the client listener",
                    ));
                }
                let Some(roles) = roles else { return Ok(Caller { identity, role: None }) };
                let held = identity.as_deref().and_then(|i| roles.role_of(i));
                let caller = Caller { identity, role: Some(held) };
                if let Some(needed) = required_role(path) {
                    caller.require(needed)?;
                }
                Ok(caller)
            }
            Gate::Peer { node, tls } => {
                if *tls {
                    let Some(id) = identity.as_deref() else {
                        return Err(tonic::Status::permission_denied("the peer listener needs a client certificate"));
                    };
                    let node = node.upgrade().ok_or_else(|| tonic::Status::unavailable("the node is shutting down"))?;
                    if !node.is_peer(id) {
                        return Err(tonic::Status::permission_denied(format!(
                            "identity {:?} names no member of this cluster: peers' certificates must name the host of \
                             their member address",
                            id.display()
                        )));
                    }
                }
                Ok(Caller { identity, role: None })
            }
        }
    }
}

/// The layer: `Server::builder().layer(AuthzLayer(gate))`.
#[derive(Clone)]
pub struct AuthzLayer(pub Gate);

impl<S> tower_layer::Layer<S> for AuthzLayer {
    type Service = Authz<S>;

    fn layer(&self, inner: S) -> Authz<S> {
        Authz { inner, gate: self.0.clone() }
    }
}

#[derive(Clone)]
pub struct Authz<S> {
    inner: S,
    gate: Gate,
}

impl<S, B> tower_service::Service<http::Request<B>> for Authz<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<std::future::Ready<Result<S::Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        match self.gate.admit(req.uri().path(), req.extensions().get::<ConnInfo>()) {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                Either::Right(self.inner.call(req))
            }
            Err(status) => {
                tracing::info!(path = req.uri().path(), "refused: {}", status.message());
                Either::Left(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(cn: &str) -> PeerIdentity {
        PeerIdentity { common_name: Some(cn.into()), alt_names: vec![format!("{cn}.example")] }
    }

    #[test]
    fn methods_need_their_roles() {
        let roles = Roles { admin: vec!["op".into()], broker: vec!["b1.example".into()], reader: vec!["mon".into()] };
        assert_eq!(required_role("/diskless.admin.v1.AdminService/RemoveNode"), Some(Role::Admin));
        assert_eq!(required_role("/diskless.admin.v1.AdminService/Status"), Some(Role::Reader));
        assert_eq!(required_role("/diskless.coordinator.v1.CoordinatorService/CommitFile"), Some(Role::Broker));
        assert_eq!(required_role("/grpc.health.v1.Health/Check"), None);
        assert_eq!(required_role("/diskless.internal.v1.RaftService/Vote"), Some(Role::Admin));
        let gate = Gate::Client { roles: Some(Arc::new(roles)), raft_here: false };
        let conn = |i: PeerIdentity| ConnInfo { remote: None, tls: true, identity: Some(Arc::new(i)) };
        let e = gate.admit("/diskless.admin.v1.AdminService/RemoveNode", Some(&conn(id("b1")))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("\"b1\"") && e.message().contains("admin"), "{}", e.message());
        gate.admit("/diskless.admin.v1.AdminService/RemoveNode", Some(&conn(id("op")))).unwrap();
        let c = gate.admit("/diskless.admin.v1.AdminService/Status", Some(&conn(id("mon")))).unwrap();
        assert!(c.require(Role::Admin).is_err());
        assert!(gate.admit("/diskless.internal.v1.RaftService/Vote", Some(&conn(id("op")))).is_err());
        // Forwarded commands are a peer method like the Raft messages: not served here.
        assert!(gate.admit("/diskless.internal.v1.RaftService/Execute", Some(&conn(id("op")))).is_err());
        assert_eq!(required_role("/diskless.internal.v1.RaftService/Execute"), Some(Role::Admin));
        assert!(gate.admit("/diskless.admin.v1.AdminService/Status", None).is_err());
    }
}
