//! The model of the broker registry: a map of broker records, restating `state_machine::registry`
//! (metadata partition 0 only; a live holder at another address and with another incarnation
//! refuses a registration; heartbeats only from the live holder; every operation sweeps lapsed
//! records but the one it is about), and its generation (+1 per broker that joins, unregisters or
//! is swept).

use std::collections::BTreeMap;

use diskless_coordinator::state_machine::*;

use super::fail;

#[derive(Debug, Clone, Default)]
pub struct Registry {
    pub brokers: BTreeMap<i32, BrokerRecord>,
    pub generation: u64,
}

fn check(authority: bool, id: i32, lease_ms: Option<i64>) -> Result<(), Failure> {
    if !authority || id < 0 || lease_ms.is_some_and(|l| !(1..=MAX_BROKER_LEASE_MS).contains(&l)) {
        return fail(ErrorCode::InvalidRequest);
    }
    Ok(())
}

impl Registry {
    fn sweep(&mut self, now: i64, keep: i32) {
        let before = self.brokers.len();
        self.brokers.retain(|id, b| *id == keep || b.lease_until_ms > now);
        self.generation += (before - self.brokers.len()) as u64;
    }

    pub fn register(&mut self, authority: bool, now: i64, r: &RegisterBroker) -> Result<i64, Failure> {
        check(authority, r.broker_id, Some(r.lease_ms))?;
        if r.host.is_empty() || !(1..=65_535).contains(&r.port) {
            return fail(ErrorCode::InvalidRequest);
        }
        let names: std::collections::BTreeSet<&str> = r.listeners.iter().map(|l| l.name.as_str()).collect();
        if names.len() != r.listeners.len()
            || r.listeners.len() > 16
            || r.listeners.iter().any(|l| l.name.is_empty() || l.host.is_empty() || !(1..=65_535).contains(&l.port))
        {
            return fail(ErrorCode::InvalidRequest);
        }
        let mut registered_ms = now;
        let live = self.brokers.get(&r.broker_id).filter(|b| b.lease_until_ms > now);
        let joins = live.is_none_or(|b| b.incarnation != r.incarnation);
        if let Some(old) = live {
            if old.incarnation != r.incarnation && (old.host != r.host || old.port != r.port) {
                return fail(ErrorCode::DuplicateBrokerRegistration);
            }
            if old.incarnation == r.incarnation {
                registered_ms = old.registered_ms;
            }
        }
        let lease_until_ms = now.saturating_add(r.lease_ms);
        self.brokers.insert(
            r.broker_id,
            BrokerRecord {
                host: r.host.clone(),
                port: r.port,
                rack: r.rack.clone(),
                incarnation: r.incarnation,
                registered_ms,
                lease_until_ms,
                listeners: r.listeners.clone(),
            },
        );
        self.generation += u64::from(joins);
        self.sweep(now, r.broker_id);
        Ok(lease_until_ms)
    }

    pub fn heartbeat(
        &mut self,
        authority: bool,
        now: i64,
        id: i32,
        incarnation: u64,
        lease_ms: i64,
    ) -> Result<i64, Failure> {
        check(authority, id, Some(lease_ms))?;
        match self.brokers.get_mut(&id) {
            Some(b) if b.incarnation == incarnation && b.lease_until_ms > now => {
                b.lease_until_ms = now.saturating_add(lease_ms);
                let until = b.lease_until_ms;
                self.sweep(now, id);
                Ok(until)
            }
            _ => fail(ErrorCode::StaleBrokerEpoch),
        }
    }

    pub fn unregister(&mut self, authority: bool, now: i64, id: i32, incarnation: u64) -> Result<i64, Failure> {
        check(authority, id, None)?;
        if let Some(b) = self.brokers.get(&id) {
            if b.incarnation != incarnation {
                return fail(ErrorCode::StaleBrokerEpoch);
            }
            self.brokers.remove(&id);
            self.generation += 1;
        }
        self.sweep(now, id);
        Ok(0)
    }

    pub fn live(&self, now: i64) -> Vec<(i32, BrokerRecord)> {
        self.brokers.iter().filter(|(_, b)| b.lease_until_ms > now).map(|(id, b)| (*id, b.clone())).collect()
    }
}
