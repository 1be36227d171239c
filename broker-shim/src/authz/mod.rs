//! Authorization of Kafka requests, as Kafka's `StandardAuthorizer` (KIP-1163: diskless topics
//! authorize like classic ones), over ACL bindings the coordinator cluster keeps so that every
//! broker decides alike.
//!
//! - `config`: `[kafka.authorizer]` (`super.users`, `allow.everyone.if.no.acl.found`).
//! - `rules`: the decision, pure: bindings, a principal and host, an operation on a resource.
//! - `authorizer`: the settings and the bindings as last read from the cluster, kept current.
//! - `access`: one requester's rights under one set of bindings, which a handler asks.
//!
//! It must not know the Kafka APIs: which operation each request needs, and which error a refusal
//! is, are the handlers' (`crate::kafka`), as in Kafka's `KafkaApis`.

mod access;
mod authorizer;
pub mod config;
pub mod rules;

pub use access::Access;
pub use authorizer::{Authorizer, ACL_REFRESH};
pub use config::AuthorizerConfig;
pub use rules::{Operation, Requester, Resource, CLUSTER_NAME};
