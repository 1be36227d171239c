//! `CoordinatorService`'s ACL calls (CreateAcls, DescribeAcls, DeleteAcls), served by metadata
//! partition 0's leader ([`ACL_AUTHORITY`]; `node::route` forwards them once otherwise).
//!
//! Owns the wire conversions of these calls; the rules (what a binding may be, what a filter
//! matches) are the state machine's (`state_machine::acls`). A code that does not fit Kafka's
//! 8-bit codes becomes UNKNOWN (0), which the rules refuse.

use diskless_proto::v1 as wire;
use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Read, RouteError};
use crate::server::convert::{failure_fields, result_fields, route_failure};
use crate::state_machine::{AclBinding, AclFilter, Failure, Op, Outcome, ACL_AUTHORITY};

fn code(v: i32) -> i8 {
    i8::try_from(v).unwrap_or(0)
}

fn binding_of(b: wire::AclBinding) -> AclBinding {
    AclBinding {
        resource_type: code(b.resource_type),
        resource_name: b.resource_name,
        pattern_type: code(b.pattern_type),
        principal: b.principal,
        host: b.host,
        operation: code(b.operation),
        permission: code(b.permission),
    }
}

fn wire_binding(b: AclBinding) -> wire::AclBinding {
    wire::AclBinding {
        resource_type: b.resource_type.into(),
        resource_name: b.resource_name,
        pattern_type: b.pattern_type.into(),
        principal: b.principal,
        host: b.host,
        operation: b.operation.into(),
        permission: b.permission.into(),
    }
}

fn filter_of(f: wire::AclFilter) -> AclFilter {
    AclFilter {
        resource_type: code(f.resource_type),
        resource_name: f.resource_name,
        pattern_type: code(f.pattern_type),
        principal: f.principal,
        host: f.host,
        operation: code(f.operation),
        permission: code(f.permission),
    }
}

impl CoordinatorApi {
    pub(super) async fn serve_create_acls(
        &self,
        request: Request<CreateAclsRequest>,
    ) -> Result<Response<CreateAclsResponse>, Status> {
        let hop = hop_of(&request);
        let r = request.into_inner();
        let timeout = timeout_of(r.timeout_ms);
        let n = r.creations.len();
        let op = Op::CreateAcls(r.creations.into_iter().map(binding_of).collect());
        let results: Vec<Result<(), Failure>> = match self.write(ACL_AUTHORITY, op, timeout, hop).await {
            Ok((Outcome::AclsCreated(v), _)) => v,
            Ok((other, _)) => vec![Err(route_failure(&RouteError::unexpected(ACL_AUTHORITY, &other))); n],
            Err(e) => vec![Err(route_failure(&e)); n],
        };
        let results = results
            .iter()
            .map(|r| {
                let (error_code, error_message) = result_fields(r);
                create_acls_response::CreationResult { error_code, error_message }
            })
            .collect();
        Ok(Response::new(CreateAclsResponse { results }))
    }

    pub(super) async fn serve_describe_acls(
        &self,
        request: Request<DescribeAclsRequest>,
    ) -> Result<Response<DescribeAclsResponse>, Status> {
        let hop = hop_of(&request);
        let r = request.into_inner();
        let timeout = timeout_of(r.timeout_ms);
        let filter = r.filter.map_or_else(AclFilter::any, filter_of);
        let answer = match self.read(ACL_AUTHORITY, Read::Acls(filter), timeout, hop).await {
            Ok(Answer::Acls(r)) => r,
            Ok(other) => Err(route_failure(&RouteError::unexpected(ACL_AUTHORITY, &other))),
            Err(e) => Err(route_failure(&e)),
        };
        Ok(Response::new(match answer {
            Ok(bindings) => DescribeAclsResponse {
                error_code: 0,
                error_message: None,
                bindings: bindings.into_iter().map(wire_binding).collect(),
            },
            Err(f) => {
                let (error_code, error_message) = failure_fields(&f);
                DescribeAclsResponse { error_code, error_message, bindings: vec![] }
            }
        }))
    }

    pub(super) async fn serve_delete_acls(
        &self,
        request: Request<DeleteAclsRequest>,
    ) -> Result<Response<DeleteAclsResponse>, Status> {
        let hop = hop_of(&request);
        let r = request.into_inner();
        let timeout = timeout_of(r.timeout_ms);
        let n = r.filters.len();
        let op = Op::DeleteAcls(r.filters.into_iter().map(filter_of).collect());
        let results = match self.write(ACL_AUTHORITY, op, timeout, hop).await {
            Ok((Outcome::AclsDeleted(v), _)) => v,
            Ok((other, _)) => vec![Err(route_failure(&RouteError::unexpected(ACL_AUTHORITY, &other))); n],
            Err(e) => vec![Err(route_failure(&e)); n],
        };
        let results = results
            .into_iter()
            .map(|r| match r {
                Ok(matched) => delete_acls_response::FilterResult {
                    error_code: 0,
                    error_message: None,
                    matching: matched.into_iter().map(wire_binding).collect(),
                },
                Err(f) => {
                    let (error_code, error_message) = failure_fields(&f);
                    delete_acls_response::FilterResult { error_code, error_message, matching: vec![] }
                }
            })
            .collect();
        Ok(Response::new(DeleteAclsResponse { results }))
    }
}
