use super::command::*;
use super::fixture::*;
use super::records::BrokerRecord;
use super::MAX_BROKER_LEASE_MS;

fn reg(broker_id: i32, port: i32, incarnation: u64, lease_ms: i64) -> Op {
    Op::RegisterBroker(RegisterBroker {
        broker_id,
        host: "127.0.0.1".into(),
        port,
        rack: Some("az1".into()),
        incarnation,
        lease_ms,
        listeners: vec![],
    })
}

fn listener(name: &str, port: i32) -> NamedListener {
    NamedListener { name: name.into(), host: "127.0.0.1".into(), port }
}

fn reg_with(broker_id: i32, listeners: Vec<NamedListener>) -> Op {
    let Op::RegisterBroker(mut r) = reg(broker_id, 9092, 7, 5_000) else { unreachable!() };
    r.listeners = listeners;
    Op::RegisterBroker(r)
}

#[test]
fn named_listeners_are_kept_and_bad_ones_refused_whole() {
    let mut f = Fixture::new();
    let two = vec![listener("PLAINTEXT", 9092), listener("EXTERNAL", 19092)];
    lease(f.apply(reg_with(1, two.clone()))).unwrap();
    let view = f.db.read();
    let brokers = f.sm.live_brokers(&view, f.now).unwrap();
    assert_eq!(brokers[0].1.listeners, two);
    drop(view);

    let too_many = (0..17).map(|i| listener(&format!("L{i}"), 9000 + i)).collect();
    for (bad, why) in [
        (vec![listener("A", 1), listener("A", 2)], "names two listeners"),
        (vec![listener("", 1)], "a name has"),
        (vec![listener("A", 0)], "not a host and port"),
        (vec![NamedListener { name: "A".into(), host: String::new(), port: 1 }], "not a host and port"),
        (too_many, "at most 16"),
    ] {
        let Outcome::Broker(Err(f)) = f.apply(reg_with(2, bad)) else { panic!("accepted: {why}") };
        assert_eq!(f.code, ErrorCode::InvalidRequest);
        assert!(f.message.contains(why), "{why}: {}", f.message);
    }
    assert_eq!(live(&f), vec![(1, 7)], "nothing of a refused registration was recorded");
}

fn lease(o: Outcome) -> Result<i64, ErrorCode> {
    let Outcome::Broker(r) = o else { panic!("outcome {o:?}") };
    r.map_err(|f| f.code)
}

fn live(f: &Fixture) -> Vec<(i32, u64)> {
    let view = f.db.read();
    f.sm.live_brokers(&view, f.now).unwrap().into_iter().map(|(id, b)| (id, b.incarnation)).collect()
}

#[test]
fn a_second_live_broker_with_the_same_id_is_refused_naming_the_holder() {
    let mut f = Fixture::new();
    assert_eq!(lease(f.apply(reg(1, 9092, 7, 5_000))), Ok(f.now + 5_000));
    let Outcome::Broker(Err(refused)) = f.apply(reg(1, 9093, 8, 5_000)) else { panic!("accepted") };
    assert_eq!(refused.code, ErrorCode::DuplicateBrokerRegistration);
    assert!(refused.message.contains("127.0.0.1:9092"), "{}", refused.message);
    assert!(refused.message.contains("0000000000000007"), "{}", refused.message);
    // Another id is fine; the holder keeps its id.
    assert_eq!(lease(f.apply(reg(2, 9093, 8, 5_000))), Ok(f.now + 5_000));
    assert_eq!(live(&f), vec![(1, 7), (2, 8)]);
}

#[test]
fn a_restart_at_the_same_address_takes_the_id_over_at_once() {
    let mut f = Fixture::new();
    lease(f.apply(reg(1, 9092, 7, 5_000))).unwrap();
    f.now += 100;
    assert_eq!(lease(f.apply(reg(1, 9092, 9, 5_000))), Ok(f.now + 5_000));
    assert_eq!(live(&f), vec![(1, 9)]);
    // The old incarnation's heartbeats are refused from now on.
    assert_eq!(
        lease(f.apply(Op::BrokerHeartbeat { broker_id: 1, incarnation: 7, lease_ms: 5_000 })),
        Err(ErrorCode::StaleBrokerEpoch)
    );
}

#[test]
fn heartbeats_extend_the_lease_and_a_lapsed_broker_is_gone() {
    let mut f = Fixture::new();
    lease(f.apply(reg(1, 9092, 7, 1_000))).unwrap();
    lease(f.apply(reg(2, 9093, 8, 1_000))).unwrap();
    f.now += 900;
    assert_eq!(
        lease(f.apply(Op::BrokerHeartbeat { broker_id: 1, incarnation: 7, lease_ms: 1_000 })),
        Ok(f.now + 1_000)
    );
    f.now += 200;
    // Broker 2's lease lapsed at the entry's time: it is not live, its heartbeat is refused.
    assert_eq!(live(&f), vec![(1, 7)]);
    assert_eq!(
        lease(f.apply(Op::BrokerHeartbeat { broker_id: 2, incarnation: 8, lease_ms: 1_000 })),
        Err(ErrorCode::StaleBrokerEpoch)
    );
    // A lapsed id may be taken by anyone; the record of the lapsed one was swept.
    assert_eq!(lease(f.apply(reg(2, 9999, 10, 1_000))), Ok(f.now + 1_000));
    let view = f.db.read();
    let all: Vec<(i32, BrokerRecord)> = f.sm.brokers(&view).unwrap();
    assert_eq!(all.iter().map(|(id, b)| (*id, b.port)).collect::<Vec<_>>(), vec![(1, 9092), (2, 9999)]);
}

#[test]
fn unregister_gives_the_id_back_but_only_for_its_own_incarnation() {
    let mut f = Fixture::new();
    lease(f.apply(reg(1, 9092, 7, 5_000))).unwrap();
    assert_eq!(lease(f.apply(Op::UnregisterBroker { broker_id: 1, incarnation: 8 })), Err(ErrorCode::StaleBrokerEpoch));
    assert_eq!(lease(f.apply(Op::UnregisterBroker { broker_id: 1, incarnation: 7 })), Ok(0));
    assert_eq!(live(&f), vec![]);
    assert_eq!(lease(f.apply(reg(1, 9093, 8, 5_000))), Ok(f.now + 5_000));
}

#[test]
fn only_metadata_partition_0_holds_the_registry_and_bad_requests_are_refused() {
    let mut f = Fixture::metadata_partition(1, 4);
    assert_eq!(lease(f.apply(reg(1, 9092, 7, 5_000))), Err(ErrorCode::InvalidRequest));
    let mut f = Fixture::new();
    assert_eq!(lease(f.apply(reg(-1, 9092, 7, 5_000))), Err(ErrorCode::InvalidRequest));
    assert_eq!(lease(f.apply(reg(1, 0, 7, 5_000))), Err(ErrorCode::InvalidRequest));
    assert_eq!(lease(f.apply(reg(1, 9092, 7, 0))), Err(ErrorCode::InvalidRequest));
    assert_eq!(lease(f.apply(reg(1, 9092, 7, MAX_BROKER_LEASE_MS + 1))), Err(ErrorCode::InvalidRequest));
}

#[test]
fn the_registry_travels_in_snapshots() {
    use crate::raft::snapshot;
    let mut f = Fixture::new();
    lease(f.apply(reg(1, 9092, 7, 5_000))).unwrap();
    lease(f.apply(reg(3, 9093, 8, 5_000))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = super::keys::Keys::new(0).metadata_partition_range();
    let file =
        snapshot::write(&f.db.read(), &from, &to, &|_| false, &Default::default(), &dir.path().join("s")).unwrap();
    let g = Fixture::new();
    let mut t = crate::storage::Txn::new(&g.db);
    snapshot::for_each_pair(&file.path, &mut |k, v| {
        t.put(k.to_vec(), v.to_vec());
        Ok(())
    })
    .unwrap();
    t.commit(false).unwrap();
    assert_eq!(g.sm.digest(&g.db.read()).unwrap(), f.sm.digest(&f.db.read()).unwrap());
    assert_eq!(g.sm.brokers(&g.db.read()).unwrap(), f.sm.brokers(&f.db.read()).unwrap());
    assert_eq!(live(&g), vec![(1, 7), (3, 8)]);
}

fn generation(f: &Fixture) -> u64 {
    let view = f.db.read();
    f.sm.registry_generation(&view).unwrap()
}

#[test]
fn the_generation_counts_every_change_of_the_live_set_and_nothing_else() {
    let mut f = Fixture::new();
    assert_eq!(generation(&f), 0);
    lease(f.apply(reg(1, 9092, 7, 5_000))).unwrap();
    lease(f.apply(reg(2, 9093, 8, 1_000))).unwrap();
    assert_eq!(generation(&f), 2, "two brokers joined");
    // The same incarnation again, and heartbeats: the live set is the same.
    lease(f.apply(reg(1, 9092, 7, 5_000))).unwrap();
    lease(f.apply(Op::BrokerHeartbeat { broker_id: 1, incarnation: 7, lease_ms: 5_000 })).unwrap();
    assert_eq!(generation(&f), 2);
    // A refused registration changes nothing.
    assert_eq!(lease(f.apply(reg(1, 9999, 9, 5_000))), Err(ErrorCode::DuplicateBrokerRegistration));
    assert_eq!(generation(&f), 2);
    // Broker 2's lease lapses; the next operation sweeps it.
    f.now += 2_000;
    lease(f.apply(Op::BrokerHeartbeat { broker_id: 1, incarnation: 7, lease_ms: 5_000 })).unwrap();
    assert_eq!(live(&f), vec![(1, 7)]);
    assert_eq!(generation(&f), 3, "a swept broker is a change");
    // A restart at the same address (another incarnation) and an unregistration.
    lease(f.apply(reg(1, 9092, 10, 5_000))).unwrap();
    assert_eq!(generation(&f), 4);
    lease(f.apply(Op::UnregisterBroker { broker_id: 1, incarnation: 10 })).unwrap();
    assert_eq!(generation(&f), 5);
    lease(f.apply(Op::UnregisterBroker { broker_id: 1, incarnation: 10 })).unwrap();
    assert_eq!(generation(&f), 5, "unregistering what is gone changes nothing");
}
