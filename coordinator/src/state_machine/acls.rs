//! Access-control bindings: the ACLs of Kafka's `StandardAuthorizer`, kept by the cluster so that
//! every broker authorizes alike (an addition to KIP-1164, which has none). They live in metadata
//! partition 0 ([`ACL_AUTHORITY`], the catalog's authority; other partitions refuse these
//! operations), replicated, in snapshots and in backups like every table.
//!
//! CreateAcls adds bindings (one already stored is a successful no-op); DeleteAcls removes those
//! matching each filter, every filter matched against the bindings as they were before the command
//! (a binding two filters match is reported by both), as Kafka's `AclControlManager`; DescribeAcls
//! reads those matching a filter. The rules are Kafka's: `AclControlManager.validateNewAcl` and
//! `validateFilter`, `ResourcePatternFilter.matches`, `AccessControlEntryFilter.matches`.
//!
//! Owns the `Z` table and those rules; it must not decide who may do what (the brokers'
//! authorizer does, from the bindings it reads here).

use serde::{Deserialize, Serialize};

use super::failure::{ErrorCode, Failure};
use super::keys::{self, Keys};
use super::{tables, StateMachine};
use crate::storage::{KvRead, StorageError, Txn};

/// The metadata partition that holds the bindings.
pub const ACL_AUTHORITY: u32 = 0;
/// The most bindings one command creates, and the most it deletes (Kafka's
/// `MAX_RECORDS_PER_USER_OP`).
pub const MAX_ACLS_PER_OP: usize = 10_000;
/// The longest resource name, principal or host, in bytes (each is stored with a 16-bit length).
pub const MAX_ACL_FIELD: usize = 4096;

/// Kafka's `ResourceType` codes.
pub mod resource {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's `PatternType` codes.
pub mod pattern {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// Kafka's `AclOperation` codes (`ANY` only in filters; `ALL` grants every operation).
pub mod operation {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
    /// The highest code Kafka defines.
    pub const MAX: i8 = DESCRIBE_TOKENS;
}

/// Kafka's `AclPermissionType` codes.
pub mod permission {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// The `*` resource name or host: every one.
pub const WILDCARD: &str = "*";

/// One ACL: who (`principal`, e.g. `User:alice`, from `host` or `*`) may or may not (`permission`)
/// do what (`operation`) to which resources (`resource_type`, `resource_name`, as a literal name or
/// a prefix: `pattern_type`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

/// Which bindings a DescribeAcls or DeleteAcls means: `ANY` codes and `None` strings match every
/// value; pattern type `MATCH` matches the bindings that apply to the named resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    /// The filter every binding matches.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: resource::ANY,
            resource_name: None,
            pattern_type: pattern::ANY,
            principal: None,
            host: None,
            operation: operation::ANY,
            permission: permission::ANY,
        }
    }

    /// `ResourcePatternFilter.matches` and `AccessControlEntryFilter.matches`.
    pub fn matches(&self, b: &AclBinding) -> bool {
        if self.resource_type != resource::ANY && self.resource_type != b.resource_type {
            return false;
        }
        if ![pattern::ANY, pattern::MATCH, b.pattern_type].contains(&self.pattern_type) {
            return false;
        }
        let name_ok = match &self.resource_name {
            None => true,
            Some(n) if self.pattern_type == pattern::ANY || self.pattern_type == b.pattern_type => {
                *n == b.resource_name
            }
            // MATCH: the bindings that apply to the resource named.
            Some(n) => match b.pattern_type {
                pattern::LITERAL => *n == b.resource_name || b.resource_name == WILDCARD,
                pattern::PREFIXED => n.starts_with(&b.resource_name),
                _ => false,
            },
        };
        name_ok
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == operation::ANY || self.operation == b.operation)
            && (self.permission == permission::ANY || self.permission == b.permission)
    }

    /// `validateFilter`: no UNKNOWN (or undefined) code.
    pub fn validate(&self) -> Result<(), Failure> {
        let known = (resource::ANY..=resource::USER).contains(&self.resource_type)
            && (pattern::ANY..=pattern::PREFIXED).contains(&self.pattern_type)
            && (operation::ANY..=operation::MAX).contains(&self.operation)
            && (permission::ANY..=permission::ALLOW).contains(&self.permission);
        if !known {
            return Err(invalid(format!("Unknown patternFilter or entryFilter in {self:?}")));
        }
        Ok(())
    }
}

fn invalid(m: String) -> Failure {
    Failure::new(ErrorCode::InvalidRequest, m)
}

/// `validateNewAcl`, and the sizes a key can hold.
pub fn validate_binding(b: &AclBinding) -> Result<(), Failure> {
    if !(resource::TOPIC..=resource::USER).contains(&b.resource_type) {
        return Err(invalid(format!("Invalid resourceType {}", b.resource_type)));
    }
    if b.pattern_type != pattern::LITERAL && b.pattern_type != pattern::PREFIXED {
        return Err(invalid(format!("Invalid patternType {}", b.pattern_type)));
    }
    if !(operation::ALL..=operation::MAX).contains(&b.operation) {
        return Err(invalid(format!("Invalid operation {}", b.operation)));
    }
    if b.permission != permission::DENY && b.permission != permission::ALLOW {
        return Err(invalid(format!("Invalid permissionType {}", b.permission)));
    }
    if b.resource_name.is_empty() {
        return Err(invalid("Resource name should not be empty".into()));
    }
    // Kafka's `SecurityUtils.parseKafkaPrincipal`: "type:name".
    if !b.principal.split_once(':').is_some_and(|(t, n)| !t.is_empty() && !n.is_empty()) {
        return Err(invalid(format!(
            "Could not parse principal from `{}` (no colon is present separating the principal type from name)",
            b.principal
        )));
    }
    if b.host.is_empty() {
        return Err(invalid("Host should not be empty (use * for every host)".into()));
    }
    for (what, v) in [("resource name", &b.resource_name), ("principal", &b.principal), ("host", &b.host)] {
        if v.len() > MAX_ACL_FIELD {
            return Err(invalid(format!("an ACL's {what} is at most {MAX_ACL_FIELD} bytes, not {}", v.len())));
        }
    }
    Ok(())
}

fn check_authority(sm: &StateMachine) -> Result<(), Failure> {
    if sm.metadata_partition != ACL_AUTHORITY {
        return Err(invalid(format!("ACLs are in metadata partition {ACL_AUTHORITY}, not {}", sm.metadata_partition)));
    }
    Ok(())
}

/// CreateAcls: per binding, in request order.
pub fn create(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    bindings: &[AclBinding],
) -> Result<Vec<Result<(), Failure>>, StorageError> {
    let whole = check_authority(sm).and_then(|()| {
        if bindings.len() > MAX_ACLS_PER_OP {
            return Err(invalid(format!("Cannot create more than {MAX_ACLS_PER_OP} acls in a single operation")));
        }
        Ok(())
    });
    if let Err(f) = whole {
        return Ok(vec![Err(f); bindings.len()]);
    }
    let mut out = Vec::with_capacity(bindings.len());
    for b in bindings {
        let r = validate_binding(b);
        if r.is_ok() {
            tables::put(txn, acl_key(&sm.keys, b), b)?;
        }
        out.push(r);
    }
    Ok(out)
}

/// DeleteAcls: per filter, in request order, the bindings it matched (all removed).
pub fn delete(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    filters: &[AclFilter],
) -> Result<Vec<Result<Vec<AclBinding>, Failure>>, StorageError> {
    if let Err(f) = check_authority(sm) {
        return Ok(vec![Err(f); filters.len()]);
    }
    let stored = list(txn, &sm.keys)?;
    let mut out = Vec::with_capacity(filters.len());
    let mut removed = std::collections::BTreeSet::new();
    for f in filters {
        let r = f.validate().map(|()| stored.iter().filter(|b| f.matches(b)).cloned().collect::<Vec<_>>());
        if let Ok(matched) = &r {
            removed.extend(matched.iter().cloned());
        }
        out.push(r);
    }
    if removed.len() > MAX_ACLS_PER_OP {
        let f = invalid(format!("Cannot remove more than {MAX_ACLS_PER_OP} acls in a single delete operation."));
        return Ok(vec![Err(f); filters.len()]);
    }
    for b in &removed {
        txn.delete(acl_key(&sm.keys, b));
    }
    Ok(out)
}

/// DescribeAcls: the bindings matching `filter`, in `AclBinding` order.
pub fn describe(
    sm: &StateMachine,
    view: &dyn KvRead,
    filter: &AclFilter,
) -> Result<Result<Vec<AclBinding>, Failure>, StorageError> {
    if let Err(f) = check_authority(sm).and_then(|()| filter.validate()) {
        return Ok(Err(f));
    }
    Ok(Ok(list(view, &sm.keys)?.into_iter().filter(|b| filter.matches(b)).collect()))
}

/// Every stored binding, in `AclBinding` order (resource type, name, pattern type, ...).
fn list(view: &dyn KvRead, keys: &Keys) -> Result<Vec<AclBinding>, StorageError> {
    let (from, to) = keys.table(keys::ACL);
    let mut out: Vec<AclBinding> = vec![];
    view.scan(&from, &to, &mut |k, v| {
        out.push(crate::storage::codec::decode(k, v)?);
        Ok(true)
    })?;
    out.sort_unstable();
    Ok(out)
}

/// Where binding `b` is kept.
pub fn acl_key(keys: &Keys, b: &AclBinding) -> Vec<u8> {
    keys.acl(
        [b.resource_type as u8, b.pattern_type as u8],
        [&b.resource_name, &b.principal, &b.host],
        [b.operation as u8, b.permission as u8],
    )
}
