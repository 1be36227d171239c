//! Who may do what, decided from a set of ACL bindings exactly as Kafka's `StandardAuthorizer`
//! decides it (`StandardAuthorizerData.findAclRule` and `findResult`, and the `Authorizer`
//! interface's default `authorizeByResourceType`):
//!
//! - a binding applies to a resource when its pattern is LITERAL and names it (or is `*`), or is
//!   PREFIXED and the name starts with it; to a principal when it names it or `User:*`; to a host
//!   when it names the client's address or `*`;
//! - a DENY that applies to the operation (or is for ALL) wins over any ALLOW; an ALLOW applies to
//!   its operation, ALL to every one, and READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS
//!   implies DESCRIBE_CONFIGS (for ALLOW only: a DENY of READ does not deny DESCRIBE);
//! - a resource no binding applies to at all (whoever the binding is for) is allowed to everyone
//!   when `allow.everyone.if.no.acl.found`, else denied; a resource some binding applies to is
//!   denied unless an ALLOW grants it.
//!
//! Super users are the caller's business (`Authorizer`). Pure: no I/O, no clock; it must not know
//! where the bindings come from.

use diskless_proto::v1::AclBinding;

/// Kafka's `ResourceType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum Resource {
    Topic = 2,
    Group = 3,
    Cluster = 4,
    TransactionalId = 5,
}

/// The one cluster resource's name (Kafka's `CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// Kafka's `AclOperation` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum Operation {
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
}

impl Operation {
    /// The operations a resource type has (Kafka's `AclEntry.supportedOperations`): the bits of
    /// the KIP-430 authorized-operations fields.
    pub fn supported(r: Resource) -> &'static [Operation] {
        use Operation::*;
        match r {
            Resource::Topic => &[Read, Write, Create, Describe, Delete, Alter, DescribeConfigs, AlterConfigs],
            Resource::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            Resource::Cluster => {
                &[Create, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, Alter, Describe]
            }
            Resource::TransactionalId => &[Describe, Write],
        }
    }
}

const LITERAL: i32 = 3;
const PREFIXED: i32 = 4;
const DENY: i32 = 2;
const ALLOW: i32 = 3;
const WILDCARD: &str = "*";
const WILDCARD_PRINCIPAL: &str = "User:*";

/// Who asks: the principal (`User:alice`) and the client's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub principal: String,
    pub host: String,
}

impl Requester {
    fn matches(&self, b: &AclBinding) -> bool {
        (b.principal == self.principal || b.principal == WILDCARD_PRINCIPAL)
            && (b.host == WILDCARD || b.host == self.host)
    }
}

/// Whether a binding's pattern covers the resource `name` of type `r`.
fn covers(b: &AclBinding, r: Resource, name: &str) -> bool {
    b.resource_type == r as i32
        && match b.pattern_type {
            LITERAL => b.resource_name == name || b.resource_name == WILDCARD,
            PREFIXED => name.starts_with(b.resource_name.as_str()),
            _ => false,
        }
}

/// What a binding that applies to the requester and the resource says of `op`: `Some(true)`
/// allows, `Some(false)` denies, `None` says nothing.
fn verdict(b: &AclBinding, op: Operation) -> Option<bool> {
    let granted = b.operation;
    if granted != Operation::All as i32 {
        let applies = if b.permission == ALLOW {
            match op {
                Operation::Describe => {
                    [Operation::Describe, Operation::Read, Operation::Write, Operation::Delete, Operation::Alter]
                        .iter()
                        .any(|o| *o as i32 == granted)
                }
                Operation::DescribeConfigs => {
                    granted == Operation::DescribeConfigs as i32 || granted == Operation::AlterConfigs as i32
                }
                _ => granted == op as i32,
            }
        } else {
            granted == op as i32
        };
        if !applies {
            return None;
        }
    }
    match b.permission {
        ALLOW => Some(true),
        DENY => Some(false),
        _ => None,
    }
}

/// Whether `who` may do `op` to the resource `name` of type `r` under `acls`.
pub fn allowed(
    acls: &[AclBinding],
    allow_if_no_acl: bool,
    who: &Requester,
    op: Operation,
    r: Resource,
    name: &str,
) -> bool {
    let mut any_binding = false;
    let mut allow = false;
    for b in acls.iter().filter(|b| covers(b, r, name)) {
        any_binding = true;
        if !who.matches(b) {
            continue;
        }
        match verdict(b, op) {
            Some(false) => return false,
            Some(true) => allow = true,
            None => {}
        }
    }
    allow || (!any_binding && allow_if_no_acl)
}

/// Whether `who` may do `op` to *some* resource of type `r` (Kafka's `authorizeByResourceType`,
/// which an idempotent producer's InitProducerId asks of topics): allowed on a resource no binding
/// names, or by an ALLOW for `op` (or ALL) that no DENY dominates — a literal DENY of the same
/// name, a prefixed DENY of a prefix of it, or a DENY of every name.
pub fn allowed_somewhere(
    acls: &[AclBinding],
    allow_if_no_acl: bool,
    who: &Requester,
    op: Operation,
    r: Resource,
) -> bool {
    // A name no binding can name (Kafka asks for "hardcode"): a grant to everything, or no
    // binding of the type at all.
    if allowed(acls, allow_if_no_acl, who, op, r, "hardcode") {
        return true;
    }
    let mine: Vec<&AclBinding> = acls
        .iter()
        .filter(|b| b.resource_type == r as i32 && who.matches(b))
        .filter(|b| b.operation == op as i32 || b.operation == Operation::All as i32)
        .collect();
    let denied = |pattern: i32, name: &str| {
        mine.iter().any(|b| b.permission == DENY && b.pattern_type == pattern && b.resource_name == name)
    };
    if denied(LITERAL, WILDCARD) {
        return false;
    }
    if mine.iter().any(|b| b.permission == ALLOW && b.pattern_type == LITERAL && b.resource_name == WILDCARD) {
        return true;
    }
    mine.iter().filter(|b| b.permission == ALLOW && (b.pattern_type == LITERAL || b.pattern_type == PREFIXED)).any(
        |b| {
            let name = b.resource_name.as_str();
            let literal_denied = b.pattern_type == LITERAL && denied(LITERAL, name);
            let prefix_denied =
                name.char_indices().map(|(i, c)| &name[..i + c.len_utf8()]).any(|p| denied(PREFIXED, p));
            !literal_denied && !prefix_denied
        },
    )
}

/// The KIP-430 bit field of the operations `who` may do to `name`: bit `code` set for each
/// allowed operation of the type's [`Operation::supported`].
pub fn authorized_operations(
    acls: &[AclBinding],
    allow_if_no_acl: bool,
    who: &Requester,
    r: Resource,
    name: &str,
) -> i32 {
    Operation::supported(r)
        .iter()
        .filter(|op| allowed(acls, allow_if_no_acl, who, **op, r, name))
        .fold(0, |bits, op| bits | (1 << (*op as i32)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(r: Resource, name: &str, pattern: i32, principal: &str, op: Operation, permission: i32) -> AclBinding {
        AclBinding {
            resource_type: r as i32,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op as i32,
            permission,
        }
    }

    fn alice() -> Requester {
        Requester { principal: "User:alice".into(), host: "10.0.0.1".into() }
    }

    #[test]
    fn no_binding_on_a_resource_falls_to_the_default_rule() {
        let acls = vec![acl(Resource::Topic, "other", LITERAL, "User:bob", Operation::Read, ALLOW)];
        assert!(!allowed(&acls, false, &alice(), Operation::Read, Resource::Topic, "orders"));
        assert!(allowed(&acls, true, &alice(), Operation::Read, Resource::Topic, "orders"));
        // A binding for someone else still makes the resource guarded.
        assert!(!allowed(&acls, true, &alice(), Operation::Read, Resource::Topic, "other"));
    }

    #[test]
    fn literal_prefixed_and_wildcard_patterns_cover_what_kafka_covers() {
        let acls = vec![
            acl(Resource::Topic, "orders", LITERAL, "User:alice", Operation::Read, ALLOW),
            acl(Resource::Topic, "pay", PREFIXED, "User:alice", Operation::Write, ALLOW),
            acl(Resource::Group, "*", LITERAL, "User:*", Operation::Read, ALLOW),
        ];
        let a = alice();
        assert!(allowed(&acls, false, &a, Operation::Read, Resource::Topic, "orders"));
        assert!(!allowed(&acls, false, &a, Operation::Read, Resource::Topic, "orders2"), "a literal is exact");
        assert!(allowed(&acls, false, &a, Operation::Write, Resource::Topic, "payments"));
        assert!(!allowed(&acls, false, &a, Operation::Write, Resource::Topic, "pa"));
        assert!(allowed(&acls, false, &a, Operation::Read, Resource::Group, "any-group"), "`*` and User:*");
        assert!(!allowed(&acls, false, &a, Operation::Read, Resource::Cluster, CLUSTER_NAME));
    }

    #[test]
    fn deny_wins_and_implied_describe_is_for_allow_only() {
        let acls = vec![
            acl(Resource::Topic, "*", LITERAL, "User:*", Operation::All, ALLOW),
            acl(Resource::Topic, "secret", PREFIXED, "User:alice", Operation::Read, DENY),
        ];
        let a = alice();
        assert!(!allowed(&acls, false, &a, Operation::Read, Resource::Topic, "secret-1"));
        assert!(
            allowed(&acls, false, &a, Operation::Describe, Resource::Topic, "secret-1"),
            "a DENY of READ is not of DESCRIBE"
        );
        assert!(allowed(&acls, false, &a, Operation::Write, Resource::Topic, "secret-1"));

        let acls = vec![
            acl(Resource::Topic, "t", LITERAL, "User:alice", Operation::Write, ALLOW),
            acl(Resource::Topic, "t", LITERAL, "User:alice", Operation::AlterConfigs, ALLOW),
        ];
        assert!(allowed(&acls, false, &a, Operation::Describe, Resource::Topic, "t"), "WRITE implies DESCRIBE");
        assert!(allowed(&acls, false, &a, Operation::DescribeConfigs, Resource::Topic, "t"));
        assert!(!allowed(&acls, false, &a, Operation::Read, Resource::Topic, "t"));
    }

    #[test]
    fn a_binding_for_another_host_does_not_apply() {
        let mut b = acl(Resource::Topic, "t", LITERAL, "User:alice", Operation::Read, ALLOW);
        b.host = "10.0.0.2".into();
        assert!(!allowed(&[b.clone()], false, &alice(), Operation::Read, Resource::Topic, "t"));
        b.host = "10.0.0.1".into();
        assert!(allowed(&[b], false, &alice(), Operation::Read, Resource::Topic, "t"));
    }

    #[test]
    fn allowed_somewhere_follows_kafkas_dominance_rules() {
        let a = alice();
        let some = |acls: &[AclBinding]| allowed_somewhere(acls, false, &a, Operation::Write, Resource::Topic);
        assert!(!some(&[]));
        assert!(allowed_somewhere(&[], true, &a, Operation::Write, Resource::Topic));
        let grant = acl(Resource::Topic, "payments", LITERAL, "User:alice", Operation::Write, ALLOW);
        assert!(some(std::slice::from_ref(&grant)));
        assert!(!some(&[grant.clone(), acl(Resource::Topic, "pay", PREFIXED, "User:alice", Operation::Write, DENY)]));
        assert!(!some(&[grant.clone(), acl(Resource::Topic, "payments", LITERAL, "User:*", Operation::Write, DENY)]));
        assert!(!some(&[grant.clone(), acl(Resource::Topic, "*", LITERAL, "User:alice", Operation::All, DENY)]));
        assert!(some(&[grant, acl(Resource::Topic, "other", LITERAL, "User:alice", Operation::Write, DENY)]));
    }

    #[test]
    fn authorized_operations_set_the_bit_of_each_allowed_operation() {
        let acls = vec![acl(Resource::Topic, "t", LITERAL, "User:alice", Operation::Read, ALLOW)];
        let bits = authorized_operations(&acls, false, &alice(), Resource::Topic, "t");
        assert_eq!(bits, (1 << 3) | (1 << 8), "READ and the DESCRIBE it implies");
        let all = authorized_operations(&[], true, &alice(), Resource::Group, "g");
        assert_eq!(all, (1 << 3) | (1 << 8) | (1 << 6) | (1 << 10) | (1 << 11));
    }
}
