//! One authenticated connection as its handlers see it: the listener it came through and who is
//! on the other end — the principal (Kafka's `KafkaPrincipal`: `User:<SASL user>`, else
//! `User:CN=<certificate's common name>` for a client certificate, as Kafka's default
//! `ssl.principal.mapping.rules` names a certificate whose subject is its common name, else
//! `User:ANONYMOUS`) and the client's address. Handlers ask it what the client may do
//! ([`Session::access`]) and look topics up through it, authorized first ([`Session::topic`]), so
//! that a refused client learns nothing of a topic, as Kafka's `KafkaApis` checks before it looks.
//!
//! It dereferences to the [`Listener`]; it must not decide which operation an API needs (the
//! handlers do).

use std::ops::Deref;
use std::sync::Arc;

use diskless_proto::ErrorCode;

use super::listener::Listener;
use super::security::Principal;
use crate::authz::{Access, Operation, Requester, Resource};
use crate::cluster::TopicMeta;
use crate::error::KafkaError;

/// A connection's listener and requester.
pub struct Session {
    listener: Arc<Listener>,
    who: Requester,
    /// The share sessions (group, member) this connection opened: closed when it closes, their
    /// records given back, as Kafka's `ShareSessionCache` does on a disconnect.
    share_sessions: std::sync::Mutex<std::collections::BTreeSet<(String, String)>>,
    /// This connection's number (share sessions name the connection that opened them).
    pub conn: u64,
}

static CONNECTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Kafka's principal for what a connection authenticated as.
pub fn principal_of(p: &Principal) -> String {
    match (&p.user, &p.certificate) {
        (Some(user), _) => format!("User:{user}"),
        (None, Some(cn)) => format!("User:CN={cn}"),
        (None, None) => "User:ANONYMOUS".to_string(),
    }
}

impl Session {
    pub fn new(listener: Arc<Listener>, principal: &Principal, peer: std::net::IpAddr) -> Session {
        Session {
            listener,
            who: Requester { principal: principal_of(principal), host: peer.to_string() },
            share_sessions: Default::default(),
            conn: CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Notes that this connection opened the share session of `member` in `group_id`.
    pub fn opened_share_session(&self, group_id: &str, member: &str) {
        self.share_sessions.lock().unwrap_or_else(|e| e.into_inner()).insert((group_id.into(), member.into()));
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let opened = std::mem::take(&mut *self.share_sessions.lock().unwrap_or_else(|e| e.into_inner()));
        if opened.is_empty() {
            return;
        }
        let shim = self.listener.shim.clone();
        let conn = self.conn;
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        rt.spawn(async move {
            for (group_id, member) in opened {
                let partitions = shim.share_sessions.close_opened_by(conn, &group_id, &member);
                shim.share_states.release_member(&group_id, &member, &partitions).await;
            }
        });
    }
}

impl Session {
    /// The client's address as Kafka's group APIs show it (`InetAddress.toString()`: "/1.2.3.4").
    pub fn client_host(&self) -> String {
        format!("/{}", self.who.host)
    }

    /// What this client may do, under the ACLs as they are now (everything without an authorizer).
    pub async fn access(&self) -> Access {
        match &self.listener.authorizer {
            None => Access::unrestricted(self.who.clone()),
            Some(a) => a.access(self.who.clone()).await,
        }
    }

    /// The topic named `name`, if `access` allows `op` on it: TOPIC_AUTHORIZATION_FAILED before
    /// anything is looked up, else the topic or UNKNOWN_TOPIC_OR_PARTITION.
    pub async fn topic(&self, access: &Access, op: Operation, name: &str) -> Result<TopicMeta, KafkaError> {
        if !access.allowed(op, Resource::Topic, name) {
            return Err(refused(Resource::Topic, op, name));
        }
        self.listener.find_topic(name).await
    }
}

/// The error of a refusal of `op` on resource `name` of type `r`, as Kafka names it.
pub fn refused(r: Resource, op: Operation, name: &str) -> KafkaError {
    let code = match r {
        Resource::Topic => ErrorCode::TopicAuthorizationFailed,
        Resource::Group => ErrorCode::GroupAuthorizationFailed,
        Resource::Cluster => ErrorCode::ClusterAuthorizationFailed,
        Resource::TransactionalId => ErrorCode::TransactionalIdAuthorizationFailed,
    };
    KafkaError::new(code, format!("not authorized to {op:?} {r:?} {name:?}"))
}

impl Deref for Session {
    type Target = Listener;
    fn deref(&self) -> &Listener {
        &self.listener
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_are_named_as_kafka_names_them() {
        let sasl = Principal { user: Some("alice".into()), certificate: Some("client".into()) };
        assert_eq!(principal_of(&sasl), "User:alice");
        let cert = Principal { user: None, certificate: Some("client".into()) };
        assert_eq!(principal_of(&cert), "User:CN=client");
        assert_eq!(principal_of(&Principal::default()), "User:ANONYMOUS");
    }
}
