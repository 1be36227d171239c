//! The model of the ACL bindings: a plain set, restating `state_machine::acls` from Kafka's rules
//! (metadata partition 0 only; `validateNewAcl`; a filter without UNKNOWN codes; DeleteAcls
//! matches every filter against the set as it was, then removes the union).

use std::collections::BTreeSet;

use diskless_coordinator::state_machine::*;

use super::fail;

#[derive(Debug, Clone, Default)]
pub struct Acls {
    pub bindings: BTreeSet<AclBinding>,
}

fn valid(b: &AclBinding) -> bool {
    (2..=7).contains(&b.resource_type)
        && (b.pattern_type == 3 || b.pattern_type == 4)
        && (2..=14).contains(&b.operation)
        && (b.permission == 2 || b.permission == 3)
        && !b.resource_name.is_empty()
        && b.principal.split_once(':').is_some_and(|(t, n)| !t.is_empty() && !n.is_empty())
        && !b.host.is_empty()
}

fn filter_valid(f: &AclFilter) -> bool {
    (1..=7).contains(&f.resource_type)
        && (1..=4).contains(&f.pattern_type)
        && (1..=14).contains(&f.operation)
        && (1..=3).contains(&f.permission)
}

/// Kafka's `AclBindingFilter.matches`, case by case.
fn matches(f: &AclFilter, b: &AclBinding) -> bool {
    let any = |code: i8, v: i8| code == 1 || code == v;
    let opt = |want: &Option<String>, v: &String| want.as_ref().is_none_or(|w| w == v);
    let name = match (&f.resource_name, f.pattern_type) {
        (None, _) => true,
        (Some(n), 1) => *n == b.resource_name,
        (Some(n), 2) => match b.pattern_type {
            3 => *n == b.resource_name || b.resource_name == "*",
            4 => n.starts_with(b.resource_name.as_str()),
            _ => false,
        },
        (Some(n), p) => p == b.pattern_type && *n == b.resource_name,
    };
    any(f.resource_type, b.resource_type)
        && (f.pattern_type == 1 || f.pattern_type == 2 || f.pattern_type == b.pattern_type)
        && name
        && opt(&f.principal, &b.principal)
        && opt(&f.host, &b.host)
        && any(f.operation, b.operation)
        && any(f.permission, b.permission)
}

impl Acls {
    pub fn create(&mut self, authority: bool, bindings: &[AclBinding]) -> Vec<Result<(), Failure>> {
        if !authority || bindings.len() > MAX_ACLS_PER_OP {
            return bindings.iter().map(|_| fail(ErrorCode::InvalidRequest)).collect();
        }
        bindings
            .iter()
            .map(|b| {
                if !valid(b) {
                    return fail(ErrorCode::InvalidRequest);
                }
                self.bindings.insert(b.clone());
                Ok(())
            })
            .collect()
    }

    pub fn delete(&mut self, authority: bool, filters: &[AclFilter]) -> Vec<Result<Vec<AclBinding>, Failure>> {
        if !authority {
            return filters.iter().map(|_| fail(ErrorCode::InvalidRequest)).collect();
        }
        let out: Vec<Result<Vec<AclBinding>, Failure>> = filters
            .iter()
            .map(|f| {
                if !filter_valid(f) {
                    return fail(ErrorCode::InvalidRequest);
                }
                Ok(self.bindings.iter().filter(|b| matches(f, b)).cloned().collect())
            })
            .collect();
        let gone: BTreeSet<AclBinding> = out.iter().flatten().flatten().cloned().collect();
        if gone.len() > MAX_ACLS_PER_OP {
            return filters.iter().map(|_| fail(ErrorCode::InvalidRequest)).collect();
        }
        self.bindings.retain(|b| !gone.contains(b));
        out
    }

    pub fn describe(&self, authority: bool, f: &AclFilter) -> Result<Vec<AclBinding>, Failure> {
        if !authority || !filter_valid(f) {
            return fail(ErrorCode::InvalidRequest);
        }
        Ok(self.bindings.iter().filter(|b| matches(f, b)).cloned().collect())
    }
}
