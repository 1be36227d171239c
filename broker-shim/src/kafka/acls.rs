//! CreateAcls, DescribeAcls and DeleteAcls, as Kafka's `AclApis`: without an authorizer each is
//! answered SECURITY_DISABLED; with one, CreateAcls and DeleteAcls need ALTER on the cluster and
//! DescribeAcls DESCRIBE (else CLUSTER_AUTHORIZATION_FAILED). The bindings are the coordinator
//! cluster's (its CreateAcls, DescribeAcls, DeleteAcls, which check them as Kafka's
//! `AclControlManager` does); after a change this broker reads them again at once, the others
//! within `authz::ACL_REFRESH`.
//!
//! Owns the conversions between Kafka's ACL messages and the cluster's; it must not keep bindings.

use std::collections::BTreeMap;

use diskless_proto::v1 as coord;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::response::{encode, message, text, Reply};
use super::session::Session;
use crate::authz::{Operation, Resource, CLUSTER_NAME};
use crate::error::KafkaError;

/// Why the request is refused as a whole, if it is: no authorizer, or not allowed `op` on the
/// cluster.
async fn refusal(l: &Session, op: Operation) -> Option<KafkaError> {
    let access = l.access().await;
    if !access.enabled() {
        return Some(KafkaError::new(ErrorCode::SecurityDisabled, "No Authorizer is configured on the broker"));
    }
    if !access.on_cluster(op) {
        return Some(super::session::refused(Resource::Cluster, op, CLUSTER_NAME));
    }
    None
}

fn opt(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.as_str().to_string())
}

pub(super) async fn create_acls(l: &Session, header: &RequestHeader, req: CreateAclsRequest) -> Reply {
    let v = header.request_api_version;
    let n = req.creations.len();
    let results: Vec<Result<(), KafkaError>> = match refusal(l, Operation::Alter).await {
        Some(e) => vec![Err(e); n],
        None => {
            // Kafka's own checks before the authorizer's: the cluster has one name.
            let mut results: Vec<Option<Result<(), KafkaError>>> = vec![None; n];
            let mut valid = vec![];
            for (i, c) in req.creations.iter().enumerate() {
                if c.resource_type == Resource::Cluster as i8 && c.resource_name.as_str() != CLUSTER_NAME {
                    results[i] = Some(Err(KafkaError::new(
                        ErrorCode::InvalidRequest,
                        format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"),
                    )));
                    continue;
                }
                valid.push((
                    i,
                    coord::AclBinding {
                        resource_type: c.resource_type.into(),
                        resource_name: c.resource_name.to_string(),
                        pattern_type: c.resource_pattern_type.into(),
                        principal: c.principal.to_string(),
                        host: c.host.to_string(),
                        operation: c.operation.into(),
                        permission: c.permission_type.into(),
                    },
                ));
            }
            if !valid.is_empty() {
                let (at, bindings): (Vec<usize>, Vec<_>) = valid.into_iter().unzip();
                let answers = l.shim.cluster.create_acls(bindings).await;
                for (k, i) in at.iter().enumerate() {
                    results[*i] = Some(match &answers {
                        Ok(a) => match a.get(k) {
                            Some(r) => KafkaError::from_wire(r.error_code, r.error_message.clone()).map_or(Ok(()), Err),
                            None => Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")),
                        },
                        Err(s) => Err(KafkaError::unavailable("create ACLs", s)),
                    });
                }
                reload(l).await;
            }
            results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
        }
    };
    let results = results
        .into_iter()
        .map(|r| match r {
            Ok(()) => create_acls_response::AclCreationResult::default(),
            Err(e) => create_acls_response::AclCreationResult::default()
                .with_error_code(e.code.code())
                .with_error_message(message(e.message)),
        })
        .collect();
    encode(ApiKey::CreateAcls, header, v, &CreateAclsResponse::default().with_results(results))
}

/// How often a read of the bindings after a change made here is tried before the periodic
/// refresh is left to catch up.
const RELOAD_ATTEMPTS: usize = 3;

/// Reads the bindings again after a change made here, so this broker enforces it at once (a read
/// that fails is tried again: a client that changed an ACL expects this broker to apply it).
async fn reload(l: &Session) {
    let Some(a) = &l.authorizer else { return };
    for attempt in 1..=RELOAD_ATTEMPTS {
        match a.reload().await {
            Ok(()) => return,
            Err(s) if attempt == RELOAD_ATTEMPTS => {
                tracing::info!(status = %s, "ACLs not read again after a change; the next refresh will")
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
}

/// Kafka's filter as the cluster's.
fn filter_of(
    resource_type: i8,
    name: &Option<StrBytes>,
    pattern: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    operation: i8,
    permission: i8,
) -> coord::AclFilter {
    coord::AclFilter {
        resource_type: resource_type.into(),
        resource_name: opt(name),
        pattern_type: pattern.into(),
        principal: opt(principal),
        host: opt(host),
        operation: operation.into(),
        permission: permission.into(),
    }
}

pub(super) async fn describe_acls(l: &Session, header: &RequestHeader, req: DescribeAclsRequest) -> Reply {
    let v = header.request_api_version;
    let answer: Result<Vec<coord::AclBinding>, KafkaError> = match refusal(l, Operation::Describe).await {
        Some(e) => Err(e),
        None => {
            let f = filter_of(
                req.resource_type_filter,
                &req.resource_name_filter,
                req.pattern_type_filter,
                &req.principal_filter,
                &req.host_filter,
                req.operation,
                req.permission_type,
            );
            match l.shim.cluster.describe_acls(f).await {
                Ok(r) => KafkaError::from_wire(r.error_code, r.error_message).map_or(Ok(r.bindings), Err),
                Err(s) => Err(KafkaError::unavailable("describe ACLs", &s)),
            }
        }
    };
    let body = match answer {
        Err(e) => DescribeAclsResponse::default().with_error_code(e.code.code()).with_error_message(message(e.message)),
        Ok(bindings) => {
            // Grouped by resource pattern, as Kafka's `DescribeAclsResponse.aclsResources`.
            let mut by_resource: BTreeMap<(i32, String, i32), Vec<describe_acls_response::AclDescription>> =
                BTreeMap::new();
            for b in bindings {
                by_resource.entry((b.resource_type, b.resource_name.clone(), b.pattern_type)).or_default().push(
                    describe_acls_response::AclDescription::default()
                        .with_principal(text(&b.principal))
                        .with_host(text(&b.host))
                        .with_operation(code(b.operation))
                        .with_permission_type(code(b.permission)),
                );
            }
            let resources = by_resource
                .into_iter()
                .map(|((t, name, pattern), acls)| {
                    describe_acls_response::DescribeAclsResource::default()
                        .with_resource_type(code(t))
                        .with_resource_name(text(&name))
                        .with_pattern_type(code(pattern))
                        .with_acls(acls)
                })
                .collect();
            DescribeAclsResponse::default().with_resources(resources)
        }
    };
    encode(ApiKey::DescribeAcls, header, v, &body)
}

/// A cluster code (stored from Kafka's 8-bit ones) back as Kafka's.
fn code(v: i32) -> i8 {
    i8::try_from(v).unwrap_or(0)
}

pub(super) async fn delete_acls(l: &Session, header: &RequestHeader, req: DeleteAclsRequest) -> Reply {
    let v = header.request_api_version;
    let n = req.filters.len();
    let answers: Vec<Result<Vec<coord::AclBinding>, KafkaError>> = match refusal(l, Operation::Alter).await {
        Some(e) => vec![Err(e); n],
        None => {
            let filters = req
                .filters
                .iter()
                .map(|f| {
                    filter_of(
                        f.resource_type_filter,
                        &f.resource_name_filter,
                        f.pattern_type_filter,
                        &f.principal_filter,
                        &f.host_filter,
                        f.operation,
                        f.permission_type,
                    )
                })
                .collect();
            let r = l.shim.cluster.delete_acls(filters).await;
            reload(l).await;
            match r {
                Ok(results) => (0..n)
                    .map(|i| match results.get(i) {
                        Some(r) => KafkaError::from_wire(r.error_code, r.error_message.clone())
                            .map_or(Ok(r.matching.clone()), Err),
                        None => Err(KafkaError::new(ErrorCode::UnknownServerError, "no answer")),
                    })
                    .collect(),
                Err(s) => vec![Err(KafkaError::unavailable("delete ACLs", &s)); n],
            }
        }
    };
    let results = answers
        .into_iter()
        .map(|a| match a {
            Err(e) => delete_acls_response::DeleteAclsFilterResult::default()
                .with_error_code(e.code.code())
                .with_error_message(message(e.message)),
            Ok(matching) => delete_acls_response::DeleteAclsFilterResult::default().with_matching_acls(
                matching
                    .into_iter()
                    .map(|b| {
                        delete_acls_response::DeleteAclsMatchingAcl::default()
                            .with_resource_type(code(b.resource_type))
                            .with_resource_name(text(&b.resource_name))
                            .with_pattern_type(code(b.pattern_type))
                            .with_principal(text(&b.principal))
                            .with_host(text(&b.host))
                            .with_operation(code(b.operation))
                            .with_permission_type(code(b.permission))
                    })
                    .collect(),
            ),
        })
        .collect();
    encode(ApiKey::DeleteAcls, header, v, &DeleteAclsResponse::default().with_filter_results(results))
}
