//! `[kafka.authorizer]`: turns authorization on, as Kafka's `authorizer.class.name =
//! org.apache.kafka.metadata.authorizer.StandardAuthorizer` does, with Kafka's two settings of it,
//! `super.users` and `allow.everyone.if.no.acl.found`. Parsing and validation only.

use serde::{Deserialize, Serialize};

/// The authorizer's settings; without the section every client may do everything.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizerConfig {
    /// Principals allowed everything whatever the ACLs say (`super.users`), e.g. `"User:admin"`.
    #[serde(default)]
    pub super_users: Vec<String>,
    /// Whether a resource that no ACL names is open to everyone (`allow.everyone.if.no.acl.found`,
    /// default false: it is closed to all but the super users).
    #[serde(default)]
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Each super user is a principal, `Type:name`.
    pub fn validate(&self) -> anyhow::Result<()> {
        for p in &self.super_users {
            let ok = p.split_once(':').is_some_and(|(kind, name)| !kind.is_empty() && !name.is_empty());
            anyhow::ensure!(ok, "[kafka.authorizer] super_users: {p:?} is not a principal such as \"User:admin\"");
        }
        Ok(())
    }
}
