//! `CoordinatorService`'s broker-registry calls (RegisterBroker, BrokerHeartbeat,
//! UnregisterBroker, ListBrokers), served by metadata partition 0's leader
//! ([`REGISTRY_AUTHORITY`]; forwarded once otherwise).
//!
//! Owns the wire conversions and routing of these calls; the rules (who may hold an id, lease
//! expiry by the entry's time) are the state machine's (`state_machine::registry`). ListBrokers is
//! a linearizable read on that leader, which judges leases with its own clock — the clock that
//! stamped the leases' ends.

use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::convert::{failure_fields, result_fields, route_failure};
use super::coordinator_service::{forwarded_group, timeout_of, CoordinatorApi};
use crate::node::RouteError;
use crate::state_machine::{Failure, NamedListener, Op, Outcome, RegisterBroker, REGISTRY_AUTHORITY};

fn unexpected(o: &Outcome) -> RouteError {
    RouteError::Failed { group: REGISTRY_AUTHORITY, message: format!("unexpected outcome {o:?}") }
}

/// (error code, message, lease end) of a registry outcome.
fn lease_fields(r: &Result<i64, Failure>) -> (i32, Option<String>, i64) {
    match r {
        Ok(until) => (0, None, *until),
        Err(f) => {
            let (c, m) = failure_fields(f);
            (c, m, -1)
        }
    }
}

impl CoordinatorApi {
    /// Proposes a registry operation on metadata partition 0.
    async fn registry_op(&self, op: Op, timeout: std::time::Duration) -> Result<Result<i64, Failure>, RouteError> {
        match self.propose(REGISTRY_AUTHORITY, op, timeout).await? {
            (Outcome::Broker(r), _) => Ok(r),
            (other, _) => Err(unexpected(&other)),
        }
    }

    pub(super) async fn serve_register_broker(
        &self,
        request: Request<RegisterBrokerRequest>,
    ) -> Result<Response<RegisterBrokerResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let local = |r: RegisterBrokerRequest| async move {
            let op = Op::RegisterBroker(RegisterBroker {
                broker_id: r.broker_id,
                host: r.host,
                port: r.port,
                rack: r.rack,
                incarnation: r.incarnation,
                lease_ms: r.lease_ms,
                listeners: r
                    .listeners
                    .into_iter()
                    .map(|l| NamedListener { name: l.name, host: l.host, port: l.port })
                    .collect(),
            });
            let (error_code, error_message, lease_until_ms) = lease_fields(&self.registry_op(op, timeout).await?);
            Ok(RegisterBrokerResponse { error_code, error_message, lease_until_ms })
        };
        let out =
            self.on_group(REGISTRY_AUTHORITY, fwd.is_some(), req, local, |mut c, r| async move {
                c.register_broker(r).await
            })
            .await;
        Ok(Response::new(out.unwrap_or_else(|e| {
            let (error_code, error_message) = failure_fields(&route_failure(&e));
            RegisterBrokerResponse { error_code, error_message, lease_until_ms: -1 }
        })))
    }

    pub(super) async fn serve_broker_heartbeat(
        &self,
        request: Request<BrokerHeartbeatRequest>,
    ) -> Result<Response<BrokerHeartbeatResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let local = |r: BrokerHeartbeatRequest| async move {
            let op = Op::BrokerHeartbeat { broker_id: r.broker_id, incarnation: r.incarnation, lease_ms: r.lease_ms };
            let (error_code, error_message, lease_until_ms) = lease_fields(&self.registry_op(op, timeout).await?);
            Ok(BrokerHeartbeatResponse { error_code, error_message, lease_until_ms })
        };
        let out =
            self.on_group(REGISTRY_AUTHORITY, fwd.is_some(), req, local, |mut c, r| async move {
                c.broker_heartbeat(r).await
            })
            .await;
        Ok(Response::new(out.unwrap_or_else(|e| {
            let (error_code, error_message) = failure_fields(&route_failure(&e));
            BrokerHeartbeatResponse { error_code, error_message, lease_until_ms: -1 }
        })))
    }

    pub(super) async fn serve_unregister_broker(
        &self,
        request: Request<UnregisterBrokerRequest>,
    ) -> Result<Response<UnregisterBrokerResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let local = |r: UnregisterBrokerRequest| async move {
            let op = Op::UnregisterBroker { broker_id: r.broker_id, incarnation: r.incarnation };
            let r = self.registry_op(op, timeout).await?.map(|_| ());
            let (error_code, error_message) = result_fields(&r);
            Ok(UnregisterBrokerResponse { error_code, error_message })
        };
        let out =
            self.on_group(REGISTRY_AUTHORITY, fwd.is_some(), req, local, |mut c, r| async move {
                c.unregister_broker(r).await
            })
            .await;
        Ok(Response::new(out.unwrap_or_else(|e| {
            let (error_code, error_message) = failure_fields(&route_failure(&e));
            UnregisterBrokerResponse { error_code, error_message }
        })))
    }

    pub(super) async fn serve_list_brokers(
        &self,
        request: Request<ListBrokersRequest>,
    ) -> Result<Response<ListBrokersResponse>, Status> {
        let fwd = forwarded_group(&request);
        let req = request.into_inner();
        let timeout = timeout_of(req.timeout_ms);
        let g = REGISTRY_AUTHORITY;
        let local = |_r: ListBrokersRequest| async move {
            self.node().linearizable(g, timeout).await?;
            let sm = self.node().state_machine(g)?;
            let placed = self.node().placed(g)?;
            let view = placed.db.read();
            let now_ms = self.node().now_ms();
            let live =
                sm.live_brokers(&view, now_ms).map_err(|e| RouteError::Failed { group: g, message: e.to_string() })?;
            Ok(ListBrokersResponse {
                error_code: 0,
                error_message: None,
                brokers: live
                    .into_iter()
                    .map(|(broker_id, b)| RegisteredBroker {
                        broker_id,
                        host: b.host,
                        port: b.port,
                        rack: b.rack,
                        incarnation: b.incarnation,
                        registered_ms: b.registered_ms,
                        lease_until_ms: b.lease_until_ms,
                        listeners: b
                            .listeners
                            .into_iter()
                            .map(|l| BrokerListener { name: l.name, host: l.host, port: l.port })
                            .collect(),
                    })
                    .collect(),
                now_ms,
            })
        };
        let out = self.on_group(g, fwd.is_some(), req, local, |mut c, r| async move { c.list_brokers(r).await }).await;
        Ok(Response::new(out.unwrap_or_else(|e| {
            let (error_code, error_message) = failure_fields(&route_failure(&e));
            ListBrokersResponse { error_code, error_message, brokers: vec![], now_ms: 0 }
        })))
    }
}
