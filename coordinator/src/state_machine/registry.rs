//! The broker registry: which brokers are alive, where clients reach them, in which rack.
//!
//! Owns the `H` table of metadata partition 0 ([`REGISTRY_AUTHORITY`], the catalog's authority;
//! other partitions refuse these operations). A broker registers with its id, advertised Kafka
//! address, rack and an *incarnation* drawn at process start, and keeps a lease alive with
//! heartbeats; a broker whose lease lapsed is gone. Expiry is judged only by the "now" carried in
//! the entry being applied (and, for reads, by the reader's clock passed in): this module never
//! reads a clock. Two live brokers never hold one id: a registration is refused while another
//! incarnation at another address holds the id with a running lease (the same address is a
//! restart of the same broker — two live processes cannot listen on one address — and takes the
//! id over at once). Lapsed records are swept by every registry operation, so the table holds
//! about the live brokers only.
//!
//! The registry's *generation* counts the changes of its live set: +1 for a registration that adds
//! a broker (no record, a lapsed one, or another incarnation), +1 for an unregistration, +1 for each
//! lapsed record swept. It only grows, and replicas that apply the same log agree on it; brokers
//! give it to clients as every partition's leader epoch (KIP-320), since partition leadership is a
//! function of the live set. A lease that lapsed shows in a reader's live set (judged by the
//! reader's clock) before the sweep that counts it, at the latest at the next heartbeat of any
//! broker.

use super::command::{ErrorCode, Failure, RegisterBroker};
use super::keys::{self, Keys};
use super::records::BrokerRecord;
use super::{tables, StateMachine};
use crate::storage::{KvRead, StorageError, Txn};

/// The metadata partition that holds the registry.
pub const REGISTRY_AUTHORITY: u32 = 0;
/// The longest lease a registration or heartbeat may ask for (5 minutes).
pub const MAX_BROKER_LEASE_MS: i64 = 300_000;
/// The most named Kafka listeners a broker registers.
pub const MAX_BROKER_LISTENERS: usize = 16;
/// The longest listener name and advertised host, in bytes.
pub const MAX_LISTENER_FIELD: usize = 255;

fn invalid<T>(m: String) -> Result<Result<T, Failure>, StorageError> {
    Ok(Err(Failure::new(ErrorCode::InvalidRequest, m)))
}

fn stale<T>(m: String) -> Result<Result<T, Failure>, StorageError> {
    Ok(Err(Failure::new(ErrorCode::StaleBrokerEpoch, m)))
}

/// The checks every registry operation shares: the right metadata partition, a valid id and lease.
fn check(sm: &StateMachine, broker_id: i32, lease_ms: Option<i64>) -> Result<(), Failure> {
    let bad = |m: String| Err(Failure::new(ErrorCode::InvalidRequest, m));
    if sm.metadata_partition != REGISTRY_AUTHORITY {
        return bad(format!(
            "the broker registry is in metadata partition {REGISTRY_AUTHORITY}, not {}",
            sm.metadata_partition
        ));
    }
    if broker_id < 0 {
        return bad(format!("broker id {broker_id} is negative"));
    }
    if let Some(l) = lease_ms {
        if !(1..=MAX_BROKER_LEASE_MS).contains(&l) {
            return bad(format!("a broker lease lasts 1 to {MAX_BROKER_LEASE_MS} ms, not {l}"));
        }
    }
    Ok(())
}

/// A registration's named listeners: at most [`MAX_BROKER_LISTENERS`], names distinct and not
/// empty, each with a host and a port.
fn check_listeners(r: &RegisterBroker) -> Result<(), String> {
    if r.listeners.len() > MAX_BROKER_LISTENERS {
        return Err(format!(
            "broker {} registers {} listeners, at most {MAX_BROKER_LISTENERS}",
            r.broker_id,
            r.listeners.len()
        ));
    }
    for (i, l) in r.listeners.iter().enumerate() {
        if l.name.is_empty() || l.name.len() > MAX_LISTENER_FIELD {
            return Err(format!("broker {} listener {i}: a name has 1 to {MAX_LISTENER_FIELD} bytes", r.broker_id));
        }
        if r.listeners[..i].iter().any(|o| o.name == l.name) {
            return Err(format!("broker {} names two listeners {:?}", r.broker_id, l.name));
        }
        if l.host.is_empty() || l.host.len() > MAX_LISTENER_FIELD || !(1..=65_535).contains(&l.port) {
            return Err(format!(
                "broker {} listener {:?} advertises {:?}:{}, not a host and port",
                r.broker_id, l.name, l.host, l.port
            ));
        }
    }
    Ok(())
}

/// Every record, by id.
pub fn all(view: &dyn KvRead, keys: &Keys) -> Result<Vec<(i32, BrokerRecord)>, StorageError> {
    let (from, to) = keys.table(keys::BROKER);
    let mut out = vec![];
    view.scan(&from, &to, &mut |k, v| {
        let id = Keys::decode_broker(k).ok_or_else(|| StorageError::Corrupt {
            key: crate::storage::display_key(k),
            reason: "not a broker key".into(),
        })?;
        out.push((id, crate::storage::codec::decode(k, v)?));
        Ok(true)
    })?;
    Ok(out)
}

/// The registry's generation (0 before any change).
pub fn generation(view: &dyn KvRead, keys: &Keys) -> Result<u64, StorageError> {
    Ok(tables::get(view, &keys.meta(keys::META_REGISTRY_GENERATION))?.unwrap_or(0))
}

/// Counts `changes` more changes of the live set.
fn bump(sm: &StateMachine, txn: &mut Txn<'_>, changes: u64) -> Result<(), StorageError> {
    if changes > 0 {
        let g = generation(txn, &sm.keys)?.saturating_add(changes);
        tables::put(txn, sm.keys.meta(keys::META_REGISTRY_GENERATION), &g)?;
    }
    Ok(())
}

/// Forgets every record whose lease lapsed at `now`, but `keep`'s; each is a change.
fn sweep(sm: &StateMachine, txn: &mut Txn<'_>, now: i64, keep: i32) -> Result<(), StorageError> {
    let mut swept = 0;
    for (id, b) in all(txn, &sm.keys)? {
        if id != keep && b.lease_until_ms <= now {
            txn.delete(sm.keys.broker(id));
            swept += 1;
        }
    }
    bump(sm, txn, swept)
}

pub fn register(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    r: &RegisterBroker,
) -> Result<Result<i64, Failure>, StorageError> {
    if let Err(f) = check(sm, r.broker_id, Some(r.lease_ms)) {
        return Ok(Err(f));
    }
    if r.host.is_empty() || r.host.len() > MAX_LISTENER_FIELD || !(1..=65_535).contains(&r.port) {
        return invalid(format!("broker {} advertises {:?}:{}, not a host and port", r.broker_id, r.host, r.port));
    }
    if let Err(m) = check_listeners(r) {
        return invalid(m);
    }
    let key = sm.keys.broker(r.broker_id);
    let old: Option<BrokerRecord> = tables::get(txn, &key)?;
    let mut registered_ms = now;
    // A broker joins (no record, a lapsed one, another incarnation): the live set changes.
    let joins = old.as_ref().is_none_or(|o| o.lease_until_ms <= now || o.incarnation != r.incarnation);
    if let Some(old) = &old {
        let live = old.lease_until_ms > now;
        let same_address = old.host == r.host && old.port == r.port;
        if live && old.incarnation != r.incarnation && !same_address {
            return Ok(Err(Failure::new(
                ErrorCode::DuplicateBrokerRegistration,
                format!(
                    "broker id {} is held by another broker (incarnation {:016x} at {}:{}, rack {:?}) whose lease \
                     runs {} ms more",
                    r.broker_id,
                    old.incarnation,
                    old.host,
                    old.port,
                    old.rack,
                    old.lease_until_ms - now
                ),
            )));
        }
        if live && old.incarnation == r.incarnation {
            registered_ms = old.registered_ms;
        }
    }
    let lease_until_ms = now.saturating_add(r.lease_ms);
    let record = BrokerRecord {
        host: r.host.clone(),
        port: r.port,
        rack: r.rack.clone(),
        incarnation: r.incarnation,
        registered_ms,
        lease_until_ms,
        listeners: r.listeners.clone(),
    };
    tables::put(txn, key, &record)?;
    bump(sm, txn, u64::from(joins))?;
    sweep(sm, txn, now, r.broker_id)?;
    Ok(Ok(lease_until_ms))
}

pub fn heartbeat(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    broker_id: i32,
    incarnation: u64,
    lease_ms: i64,
) -> Result<Result<i64, Failure>, StorageError> {
    if let Err(f) = check(sm, broker_id, Some(lease_ms)) {
        return Ok(Err(f));
    }
    let key = sm.keys.broker(broker_id);
    let out = match tables::get::<BrokerRecord>(txn, &key)? {
        Some(mut b) if b.incarnation == incarnation && b.lease_until_ms > now => {
            b.lease_until_ms = now.saturating_add(lease_ms);
            tables::put(txn, key, &b)?;
            Ok(b.lease_until_ms)
        }
        Some(b) if b.incarnation != incarnation => {
            return stale(format!(
                "broker id {broker_id} is held by incarnation {:016x} at {}:{}, not {incarnation:016x}",
                b.incarnation, b.host, b.port
            ))
        }
        Some(_) => return stale(format!("the lease of broker {broker_id} lapsed: register again")),
        None => return stale(format!("broker {broker_id} is not registered")),
    };
    sweep(sm, txn, now, broker_id)?;
    Ok(out)
}

pub fn unregister(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    now: i64,
    broker_id: i32,
    incarnation: u64,
) -> Result<Result<i64, Failure>, StorageError> {
    if let Err(f) = check(sm, broker_id, None) {
        return Ok(Err(f));
    }
    let key = sm.keys.broker(broker_id);
    if let Some(b) = tables::get::<BrokerRecord>(txn, &key)? {
        if b.incarnation != incarnation {
            return stale(format!(
                "broker id {broker_id} is held by incarnation {:016x}, not {incarnation:016x}",
                b.incarnation
            ));
        }
        txn.delete(key);
        bump(sm, txn, 1)?;
    }
    sweep(sm, txn, now, broker_id)?;
    Ok(Ok(0))
}
