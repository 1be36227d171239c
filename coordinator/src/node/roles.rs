//! The client listener's roles, as the configuration names them (`[roles]`): which certificate
//! identities hold `reader`, `broker` or `admin`, and the highest role an identity holds.
//!
//! Owns the configuration's types and the one rule of holding a role (a role includes the ones
//! below it). It must not decide what a role may call, nor see a request: that is
//! `server::authz`, which sits above and imports these.

use diskless_tls::PeerIdentity;
use serde::{Deserialize, Serialize};

/// The roles, each a list of identities.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Roles {
    pub admin: Vec<String>,
    pub broker: Vec<String>,
    pub reader: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Reader,
    Broker,
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Broker => "broker",
            Role::Admin => "admin",
        }
    }
}

impl Roles {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.admin.is_empty() {
            tracing::warn!("roles names no admin identity: membership changes, snapshots and backups are refused");
        }
        Ok(())
    }

    /// The highest role `identity` holds (roles include the ones below them).
    pub fn role_of(&self, identity: &PeerIdentity) -> Option<Role> {
        let holds = |list: &Vec<String>| list.iter().any(|n| identity.has(n));
        if holds(&self.admin) {
            Some(Role::Admin)
        } else if holds(&self.broker) {
            Some(Role::Broker)
        } else if holds(&self.reader) {
            Some(Role::Reader)
        } else {
            None
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
    fn roles_include_the_ones_below() {
        let roles = Roles { admin: vec!["op".into()], broker: vec!["b1.example".into()], reader: vec!["mon".into()] };
        assert_eq!(roles.role_of(&id("op")), Some(Role::Admin));
        assert_eq!(roles.role_of(&id("b1")), Some(Role::Broker));
        assert_eq!(roles.role_of(&id("mon")), Some(Role::Reader));
        assert_eq!(roles.role_of(&id("x")), None);
        assert!(Role::Admin > Role::Broker && Role::Broker > Role::Reader);
    }
}
