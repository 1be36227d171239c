//! `CoordinatorService`'s broker-registry calls (RegisterBroker, BrokerHeartbeat,
//! UnregisterBroker, ListBrokers), served by metadata partition 0's leader
//! ([`REGISTRY_AUTHORITY`]; `node::route` forwards them once otherwise).
//!
//! Owns the wire conversions of these calls; the rules (who may hold an id, lease expiry by the
//! entry's time) are the state machine's (`state_machine::registry`). ListBrokers is a
//! linearizable read on that leader, which judges leases with its own clock — the clock that
//! stamped the leases' ends.

use std::time::Duration;

use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

use super::request::{hop_of, timeout_of};
use super::CoordinatorApi;
use crate::node::{Answer, Hop, Read, RouteError};
use crate::server::convert::{failure_fields, result_fields, route_failure};
use crate::state_machine::{Failure, NamedListener, Op, Outcome, RegisterBroker, REGISTRY_AUTHORITY};

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
    /// Proposes a registry operation on metadata partition 0's leader; routing problems become the
    /// operation's failure.
    async fn registry_op(&self, op: Op, timeout: Duration, hop: Hop) -> Result<i64, Failure> {
        match self.write(REGISTRY_AUTHORITY, op, timeout, hop).await {
            Ok((Outcome::Broker(r), _)) => r,
            Ok((other, _)) => Err(route_failure(&RouteError::unexpected(REGISTRY_AUTHORITY, &other))),
            Err(e) => Err(route_failure(&e)),
        }
    }

    pub(super) async fn serve_register_broker(
        &self,
        request: Request<RegisterBrokerRequest>,
    ) -> Result<Response<RegisterBrokerResponse>, Status> {
        let hop = hop_of(&request);
        let r = request.into_inner();
        let timeout = timeout_of(r.timeout_ms);
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
        let (error_code, error_message, lease_until_ms) = lease_fields(&self.registry_op(op, timeout, hop).await);
        Ok(Response::new(RegisterBrokerResponse { error_code, error_message, lease_until_ms }))
    }

    pub(super) async fn serve_broker_heartbeat(
        &self,
        request: Request<BrokerHeartbeatRequest>,
    ) -> Result<Response<BrokerHeartbeatResponse>, Status> {
        let hop = hop_of(&request);
        let r = request.into_inner();
        let timeout = timeout_of(r.timeout_ms);
        let op = Op::BrokerHeartbeat { broker_id: r.broker_id, incarnation: r.incarnation, lease_ms: r.lease_ms };
        let (error_code, error_message, lease_until_ms) = lease_fields(&self.registry_op(op, timeout, hop).await);
        Ok(Response::new(BrokerHeartbeatResponse { error_code, error_message, lease_until_ms }))
    }

    pub(super) async fn serve_unregister_broker(
        &self,
        request: Request<UnregisterBrokerRequest>,
    ) -> Result<Response<UnregisterBrokerResponse>, Status> {
        let hop = hop_of(&request);
        let r = request.into_inner();
        let timeout = timeout_of(r.timeout_ms);
        let op = Op::UnregisterBroker { broker_id: r.broker_id, incarnation: r.incarnation };
        let (error_code, error_message) = result_fields(&self.registry_op(op, timeout, hop).await.map(|_| ()));
        Ok(Response::new(UnregisterBrokerResponse { error_code, error_message }))
    }

    pub(super) async fn serve_list_brokers(
        &self,
        request: Request<ListBrokersRequest>,
    ) -> Result<Response<ListBrokersResponse>, Status> {
        let hop = hop_of(&request);
        let timeout = timeout_of(request.into_inner().timeout_ms);
        let g = REGISTRY_AUTHORITY;
        let refused = |f: Failure| {
            let (error_code, error_message) = failure_fields(&f);
            ListBrokersResponse { error_code, error_message, brokers: vec![], now_ms: 0, generation: 0 }
        };
        Ok(Response::new(match self.read(g, Read::LiveBrokers, timeout, hop).await {
            Ok(Answer::LiveBrokers { brokers, now_ms, generation }) => ListBrokersResponse {
                error_code: 0,
                error_message: None,
                brokers: brokers
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
                generation,
            },
            Ok(other) => refused(route_failure(&RouteError::unexpected(g, &other))),
            Err(e) => refused(route_failure(&e)),
        }))
    }
}
