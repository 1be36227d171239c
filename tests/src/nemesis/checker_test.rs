//! The checker finds each anomaly it claims to, in small hand-made histories, and stays quiet on
//! a consistent one (unknown outcomes present or absent included).

use super::checker::check;
use super::history::{History, Op, Outcome, ProducerSeq, Res, Via, FINAL};

/// Lets the clock move, so consecutive operations are ordered in real time.
fn tick() {
    std::thread::sleep(std::time::Duration::from_micros(50));
}

fn produce(h: &History, p: u32, tp: (&str, i32), values: &[&str], producer: Option<ProducerSeq>, out: Outcome) {
    let op = Op::Produce {
        via: Via::Grpc,
        target: 0,
        topic: tp.0.into(),
        partition: tp.1,
        values: values.iter().map(|v| v.to_string()).collect(),
        producer,
        txn: None,
    };
    tick();
    let id = h.invoke(p, op);
    tick();
    h.complete(p, id, out);
}

fn read(h: &History, p: u32, tp: (&str, i32), from: i64, records: &[(i64, &str)], hw: i64) {
    read_waiting(h, p, tp, from, records, hw, 0);
}

fn read_waiting(h: &History, p: u32, tp: (&str, i32), from: i64, records: &[(i64, &str)], hw: i64, wait_ms: i32) {
    let op = Op::Read {
        via: Via::Kafka,
        target: 1,
        topic: tp.0.into(),
        partition: tp.1,
        offset: from,
        wait_ms,
        isolation: 0,
    };
    tick();
    let id = h.invoke(p, op);
    tick();
    let records = records.iter().map(|(o, v)| (*o, format!("k{v}"), v.to_string())).collect();
    h.complete(
        p,
        id,
        Outcome::Ok(Res::Records { records, high_watermark: hw, log_start: 0, last_stable_offset: None }),
    );
}

fn list(h: &History, p: u32, tp: (&str, i32), timestamp: i64, offset: i64) {
    let op = Op::ListOffsets { via: Via::Coordinator, target: 1, topic: tp.0.into(), partition: tp.1, timestamp };
    tick();
    let id = h.invoke(p, op);
    tick();
    h.complete(p, id, Outcome::Ok(Res::Offset { offset }));
}

/// The final phase: strict bounds, then the records.
fn final_state(h: &History, tp: (&str, i32), start: i64, records: &[(i64, &str)], hw: i64) {
    list(h, FINAL, tp, -2, start);
    list(h, FINAL, tp, -1, hw);
    read(h, FINAL, tp, start, records, hw);
}

fn kinds(h: &History) -> Vec<String> {
    check(&h.events()).into_iter().map(|a| a.kind).collect()
}

const T: (&str, i32) = ("t", 0);

#[test]
fn a_consistent_history_has_no_anomaly_and_unknown_writes_may_be_absent() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a", "b"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    produce(&h, 1, T, &["c"], None, Outcome::Unknown("timeout".into()));
    produce(&h, 1, T, &["d"], None, Outcome::Unknown("timeout".into()));
    produce(&h, 2, T, &["e"], None, Outcome::Fail("6 not leader".into()));
    list(&h, 3, T, -1, 3);
    final_state(&h, T, 0, &[(0, "a"), (1, "b"), (2, "c")], 3);
    assert_eq!(kinds(&h), Vec::<String>::new());
}

#[test]
fn an_acknowledged_record_missing_or_elsewhere_is_lost() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    produce(&h, 1, T, &["b"], None, Outcome::Ok(Res::Offset { offset: 1 }));
    final_state(&h, T, 0, &[(0, "a")], 1);
    // The final strict read missed the acknowledged offset 1 too.
    assert_eq!(kinds(&h), vec!["lost", "stale-read"]);

    let h = History::in_memory();
    produce(&h, 1, T, &["a"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    produce(&h, 1, T, &["b"], None, Outcome::Ok(Res::Offset { offset: 1 }));
    final_state(&h, T, 0, &[(0, "b"), (1, "a")], 2);
    assert_eq!(kinds(&h), vec!["lost", "lost"]);
}

#[test]
fn records_below_the_final_log_start_are_not_required() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    produce(&h, 1, T, &["b"], None, Outcome::Ok(Res::Offset { offset: 1 }));
    final_state(&h, T, 1, &[(1, "b")], 2);
    assert_eq!(kinds(&h), Vec::<String>::new());
}

#[test]
fn a_record_twice_or_an_idempotent_batch_acknowledged_twice_is_a_duplicate() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a"], None, Outcome::Unknown("timeout".into()));
    final_state(&h, T, 0, &[(0, "a"), (1, "a")], 2);
    assert_eq!(kinds(&h), vec!["duplicate"]);

    let h = History::in_memory();
    let p = Some(ProducerSeq { id: 9, epoch: 0, seq: 0 });
    produce(&h, 1, T, &["a"], p, Outcome::Ok(Res::Offset { offset: 0 }));
    produce(&h, 1, T, &["a"], p, Outcome::Ok(Res::Offset { offset: 1 }));
    final_state(&h, T, 0, &[(0, "a"), (1, "a")], 2);
    assert!(kinds(&h).iter().all(|k| k == "duplicate") && kinds(&h).len() == 2, "{:?}", kinds(&h));
}

#[test]
fn gaps_phantoms_refused_writes_and_disagreeing_reads_are_found() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    produce(&h, 1, T, &["x"], None, Outcome::Fail("6 not leader".into()));
    read(&h, 2, T, 0, &[(0, "a"), (1, "zz")], 2);
    read(&h, 2, T, 0, &[(0, "a"), (1, "x")], 2);
    final_state(&h, T, 0, &[(0, "a"), (1, "x")], 3);
    let mut k = kinds(&h);
    k.dedup();
    assert_eq!(k, vec!["failed-write-present", "gap", "inconsistent-read", "phantom"]);
}

#[test]
fn a_strict_read_after_an_acknowledgement_must_see_it_and_never_go_back() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a", "b"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    list(&h, 2, T, -1, 2);
    list(&h, 2, T, -1, 1);
    final_state(&h, T, 0, &[(0, "a"), (1, "b")], 2);
    assert_eq!(kinds(&h), vec!["offset-regression", "stale-read"]);
}

#[test]
fn acknowledged_deletions_hold_and_failed_final_reads_are_reported() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a", "b"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    let id = h.invoke(1, Op::DeleteRecords { via: Via::Grpc, target: 0, topic: "t".into(), partition: 0, offset: 1 });
    h.complete(1, id, Outcome::Ok(Res::Offset { offset: 1 }));
    list(&h, 2, T, -2, 0);
    final_state(&h, T, 0, &[(0, "a"), (1, "b")], 2);
    let id = h.invoke(
        FINAL,
        Op::Read { via: Via::Grpc, target: 0, topic: "u".into(), partition: 0, offset: 0, wait_ms: 0, isolation: 0 },
    );
    h.complete(FINAL, id, Outcome::Fail("storage error".into()));
    // The reader, the final strict read and the final log start all missed the deletion.
    assert_eq!(kinds(&h), vec!["final-read-failed", "stale-log-start", "stale-log-start", "stale-log-start"]);
}

#[test]
fn a_tail_consumer_must_read_every_acknowledged_record_above_the_final_log_start() {
    const U: (&str, i32) = ("t", 1);
    let h = History::in_memory();
    produce(&h, 1, T, &["a", "b", "c"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    produce(&h, 1, U, &["d"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    // Process 7 follows both partitions but never reads offset 2 of T; process 8 reads all of T
    // and follows nothing else; plain reads do not count as a tail.
    read_waiting(&h, 7, T, 0, &[(0, "a"), (1, "b")], 3, 500);
    read_waiting(&h, 7, U, 0, &[(0, "d")], 1, 500);
    read_waiting(&h, 8, T, 0, &[(0, "a"), (1, "b"), (2, "c")], 3, 500);
    read(&h, 9, U, 0, &[], 1);
    final_state(&h, T, 0, &[(0, "a"), (1, "b"), (2, "c")], 3);
    final_state(&h, U, 0, &[(0, "d")], 1);
    assert_eq!(kinds(&h), vec!["tail-missed"]);

    // Offset 0, below the final log start, need not have been read.
    let h = History::in_memory();
    produce(&h, 1, T, &["a", "b"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    read_waiting(&h, 7, T, 1, &[(1, "b")], 2, 500);
    final_state(&h, T, 1, &[(1, "b")], 2);
    assert_eq!(kinds(&h), Vec::<String>::new());
}

#[test]
fn topic_creations_and_deletions_are_checked_against_the_final_list() {
    let h = History::in_memory();
    for (op, ok) in [
        (Op::CreateTopic { via: Via::Kafka, target: 0, topic: "kept".into(), partitions: 1 }, true),
        (Op::CreateTopic { via: Via::Kafka, target: 0, topic: "gone".into(), partitions: 1 }, true),
        (Op::DeleteTopic { via: Via::Kafka, target: 0, topic: "gone".into() }, true),
        (Op::CreateTopic { via: Via::Kafka, target: 0, topic: "back".into(), partitions: 1 }, true),
        (Op::DeleteTopic { via: Via::Kafka, target: 0, topic: "back".into() }, true),
    ] {
        let id = h.invoke(1, op);
        h.complete(1, id, if ok { Outcome::Ok(Res::Done) } else { Outcome::Fail("x".into()) });
    }
    let id = h.invoke(FINAL, Op::ListTopics { via: Via::Coordinator, target: 1 });
    h.complete(FINAL, id, Outcome::Ok(Res::Topics { names: vec!["back".into()], ids: vec![], partitions: vec![] }));
    assert_eq!(kinds(&h), vec!["created-topic-missing", "deleted-topic-present"]);
}

/// A transactional batch of `values` in transaction `txn`, acknowledged at `offset`.
fn txn_produce(h: &History, tp: (&str, i32), txn: &str, values: &[&str], offset: i64) {
    let op = Op::Produce {
        via: Via::Kafka,
        target: 0,
        topic: tp.0.into(),
        partition: tp.1,
        values: values.iter().map(|v| v.to_string()).collect(),
        producer: Some(ProducerSeq { id: 9, epoch: 0, seq: 0 }),
        txn: Some(txn.into()),
    };
    tick();
    let id = h.invoke(7, op);
    tick();
    h.complete(7, id, Outcome::Ok(Res::Offset { offset }));
}

fn end_txn(h: &History, txn: &str, commit: bool, out: Outcome) {
    tick();
    let id = h.invoke(7, Op::EndTxn { via: Via::Kafka, target: 0, txn: txn.into(), commit, v2: false });
    tick();
    h.complete(7, id, out);
}

/// A `read_committed` read from `from` delivering `records`, with its answer's bounds.
fn committed_read(h: &History, p: u32, tp: (&str, i32), from: i64, records: &[(i64, &str)], hw: i64, lso: i64) {
    let op = Op::Read {
        via: Via::Kafka,
        target: 0,
        topic: tp.0.into(),
        partition: tp.1,
        offset: from,
        wait_ms: 0,
        isolation: 1,
    };
    tick();
    let id = h.invoke(p, op);
    tick();
    let records = records.iter().map(|(o, v)| (*o, format!("k{v}"), v.to_string())).collect();
    let res = Res::Records { records, high_watermark: hw, log_start: 0, last_stable_offset: Some(lso) };
    h.complete(p, id, Outcome::Ok(res));
}

const X0: (&str, i32) = ("x", 0);
const X1: (&str, i32) = ("x", 1);

#[test]
fn committed_transactions_whole_aborted_ones_unseen_and_unknown_ones_all_or_nothing_pass() {
    let h = History::in_memory();
    // t#1 committed over both partitions, t#2 aborted, t#3 never asked to commit, t#4 unknown.
    txn_produce(&h, X0, "t#1", &["a0"], 0);
    txn_produce(&h, X1, "t#1", &["a1"], 0);
    end_txn(&h, "t#1", true, Outcome::Ok(Res::Done));
    txn_produce(&h, X0, "t#2", &["b0"], 2);
    end_txn(&h, "t#2", false, Outcome::Ok(Res::Done));
    txn_produce(&h, X1, "t#3", &["c1"], 2);
    txn_produce(&h, X0, "t#4", &["d0"], 4);
    txn_produce(&h, X1, "t#4", &["d1"], 4);
    end_txn(&h, "t#4", true, Outcome::Unknown("timeout".into()));
    committed_read(&h, 2, X0, 0, &[(0, "a0")], 3, 3);
    // Final reads: t#4 visible whole; the last read of each partition at its end.
    committed_read(&h, FINAL, X0, 0, &[(0, "a0"), (4, "d0")], 6, 6);
    committed_read(&h, FINAL, X0, 6, &[], 6, 6);
    committed_read(&h, FINAL, X1, 0, &[(0, "a1"), (4, "d1")], 6, 6);
    committed_read(&h, FINAL, X1, 6, &[], 6, 6);
    assert_eq!(kinds(&h), Vec::<String>::new());
}

#[test]
fn aborted_reads_reads_past_the_lso_torn_and_missing_transactions_are_found() {
    let h = History::in_memory();
    txn_produce(&h, X0, "t#1", &["a0"], 0);
    txn_produce(&h, X1, "t#1", &["a1"], 0);
    end_txn(&h, "t#1", true, Outcome::Ok(Res::Done));
    txn_produce(&h, X0, "t#2", &["b0"], 2);
    end_txn(&h, "t#2", false, Outcome::Ok(Res::Done));
    txn_produce(&h, X0, "t#3", &["c0"], 4);
    txn_produce(&h, X1, "t#3", &["c1"], 2);
    end_txn(&h, "t#3", true, Outcome::Unknown("timeout".into()));
    txn_produce(&h, X0, "t#4", &["d0"], 6);
    end_txn(&h, "t#4", true, Outcome::Ok(Res::Done));
    // A reader sees the aborted b0, and c0 past the last stable offset it was told.
    committed_read(&h, 2, X0, 0, &[(0, "a0"), (2, "b0"), (4, "c0")], 5, 3);
    // The final reads: t#1 torn (a1 missing), t#3 torn, t#4 missing entirely.
    committed_read(&h, FINAL, X0, 0, &[(0, "a0"), (4, "c0")], 8, 8);
    committed_read(&h, FINAL, X0, 8, &[], 8, 8);
    committed_read(&h, FINAL, X1, 0, &[], 4, 4);
    committed_read(&h, FINAL, X1, 4, &[], 4, 4);
    assert_eq!(
        kinds(&h),
        vec!["aborted-read", "committed-missing", "read-past-lso", "torn-transaction", "torn-transaction"]
    );
    // A partition whose final read never got past an open transaction is reported, and its
    // transactions are not judged.
    let h = History::in_memory();
    txn_produce(&h, X0, "t#1", &["a0"], 0);
    end_txn(&h, "t#1", true, Outcome::Ok(Res::Done));
    committed_read(&h, FINAL, X0, 0, &[], 2, 0);
    assert_eq!(kinds(&h), vec!["final-read-incomplete"]);
}

fn share_fetch(h: &History, p: u32, acks: Vec<(i32, i64, i64)>, acquired: &[(i32, i64, &str)], ack_code: i16) {
    let op = Op::ShareFetch { target: 0, group: "g".into(), topic: "t".into(), session_epoch: 1, acks: acks.clone() };
    let id = h.invoke(p, op);
    let acquired = acquired.iter().map(|(part, off, v)| (*part, *off, v.to_string(), 1)).collect();
    let ack_codes = acks.iter().map(|(part, _, _)| (*part, ack_code)).collect();
    h.complete(p, id, Outcome::Ok(Res::Shared { acquired, ack_codes }));
}

#[test]
fn a_share_group_never_delivers_an_accepted_record_again_and_delivers_every_record() {
    let h = History::in_memory();
    produce(&h, 1, T, &["a", "b", "c"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    share_fetch(&h, 7, vec![], &[(0, 0, "a"), (0, 1, "b")], 0);
    // Offset 0 accepted; offset 1's acceptance refused (its lock expired): it may come again.
    share_fetch(&h, 7, vec![(0, 0, 0)], &[], 0);
    share_fetch(&h, 8, vec![(0, 1, 1)], &[], 121);
    share_fetch(&h, 8, vec![], &[(0, 1, "b"), (0, 2, "c")], 0);
    final_state(&h, T, 0, &[(0, "a"), (1, "b"), (2, "c")], 3);
    assert!(kinds(&h).is_empty(), "{:?}", kinds(&h));

    // Offset 0 acquired again after its acceptance was answered; offset 2 never delivered.
    let h = History::in_memory();
    produce(&h, 1, T, &["a", "b", "c"], None, Outcome::Ok(Res::Offset { offset: 0 }));
    share_fetch(&h, 7, vec![], &[(0, 0, "a"), (0, 1, "b")], 0);
    share_fetch(&h, 7, vec![(0, 0, 1)], &[], 0);
    share_fetch(&h, 8, vec![], &[(0, 0, "a")], 0);
    final_state(&h, T, 0, &[(0, "a"), (1, "b"), (2, "c")], 3);
    assert_eq!(kinds(&h), vec!["share-missed", "share-redelivered"]);
}

#[test]
fn a_committed_offset_never_goes_back() {
    let commit = |h: &History, p: u32, offset: i64| {
        let op = Op::CommitOffset { group: "g".into(), topic: "t".into(), partition: 0, offset, epoch: 1 };
        let id = h.invoke(p, op);
        h.complete(p, id, Outcome::Ok(Res::Done));
    };
    let fetch = |h: &History, p: u32, offset: i64| {
        let id = h.invoke(p, Op::FetchCommitted { group: "g".into(), topic: "t".into(), partition: 0 });
        h.complete(p, id, Outcome::Ok(Res::Offset { offset }));
    };
    let h = History::in_memory();
    commit(&h, 1, 5);
    fetch(&h, 2, 5);
    commit(&h, 2, 9);
    fetch(&h, 1, 9);
    assert!(kinds(&h).is_empty());
    let h = History::in_memory();
    commit(&h, 1, 5);
    std::thread::sleep(std::time::Duration::from_millis(2));
    fetch(&h, 2, 3);
    assert_eq!(kinds(&h), vec!["commit-regression"]);
}
