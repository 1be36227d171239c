//! The ACL bindings the coordinator cluster keeps (CreateAcls, DescribeAcls, DeleteAcls of its
//! own API, served by metadata partition 0's leader): each call safe to repeat on another node —
//! a binding created twice is stored once, and a filter repeated after its deletion matches
//! nothing more. It must not decide who may do what: the broker's authorizer (`crate::authz`)
//! does, from the bindings read here.

use diskless_proto::v1::*;

use super::ClusterClient;

/// The filter every binding matches (Kafka's `AclBindingFilter.ANY`).
pub fn match_any() -> AclFilter {
    AclFilter {
        resource_type: 1,
        resource_name: None,
        pattern_type: 1,
        principal: None,
        host: None,
        operation: 1,
        permission: 1,
    }
}

impl ClusterClient {
    /// Stores bindings; per binding, in order, its error code and message (0: stored, or already).
    pub async fn create_acls(
        &self,
        creations: Vec<AclBinding>,
    ) -> Result<Vec<create_acls_response::CreationResult>, tonic::Status> {
        let req = CreateAclsRequest { creations, timeout_ms: 10_000 };
        let r = self.call(|mut c| {
            let req = req.clone();
            async move { c.create_acls(req).await }
        });
        Ok(r.await?.results)
    }

    /// The bindings `filter` matches (linearizable: read by the leader).
    pub async fn describe_acls(&self, filter: AclFilter) -> Result<DescribeAclsResponse, tonic::Status> {
        let req = DescribeAclsRequest { filter: Some(filter), timeout_ms: 10_000 };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.describe_acls(req).await }
        })
        .await
    }

    /// Deletes the bindings each filter matches; per filter, in order, what it removed.
    pub async fn delete_acls(
        &self,
        filters: Vec<AclFilter>,
    ) -> Result<Vec<delete_acls_response::FilterResult>, tonic::Status> {
        let req = DeleteAclsRequest { filters, timeout_ms: 10_000 };
        let r = self.call(|mut c| {
            let req = req.clone();
            async move { c.delete_acls(req).await }
        });
        Ok(r.await?.results)
    }
}
