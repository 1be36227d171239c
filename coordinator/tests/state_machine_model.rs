//! Model-based test of the metadata state machine: random sequences of every operation (idempotent
//! producers with retries, epoch bumps and gaps, malformed batches, deletions, retention with
//! small budgets, file confirmations, fencing object keys, commits that arrive after their key was
//! fenced or deleted, repeats of earlier commits, commit parts sent to a non-owner) are applied to
//! the RocksDB-backed state machine (one transaction per command, through the hot-key cache, as a
//! node does) and to the naive model in `model/`, transactional batches and their COMMIT and ABORT
//! markers among them, read both read_uncommitted and read_committed; every answer, and the final state, must agree.
//! Two more fresh state machines apply the same commands and must end with a byte-identical state
//! (same digest): one without the cache, one that applies runs of several commands in one
//! transaction (as a node applies the entries of one apply call), whose answers must agree too.
//!
//! `DISKLESS_MODEL_CASES` sets the number of random sequences (default 30, of 340–480 operations
//! each: over 10,000 operations per run).

mod model;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use diskless_coordinator::state_machine::*;
use diskless_coordinator::storage::{Db, HotKeys, Txn};
use model::Model;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use uuid::Uuid;

const TOPICS: u8 = 3;
const MAX_PARTITIONS_USED: i32 = 5;
/// Group ids the operations pick from: `GROUP_IDS[i]` ("" is invalid; "a" and "ab" share a prefix).
const GROUP_IDS: [&str; 4] = ["a", "ab", "b", ""];
const GROUPS: u8 = GROUP_IDS.len() as u8;

fn group_record(generation: i32, members: u8, coordinator: u8) -> GroupRecord {
    GroupRecord {
        generation,
        protocol_type: "consumer".into(),
        protocol: Some("range".into()),
        leader: None,
        members: (0..3)
            .filter(|i| members & (1 << i) != 0)
            .map(|i| MemberRecord {
                member_id: format!("m{i}"),
                group_instance_id: (i == 2).then(|| "static".to_string()),
                client_id: "c".into(),
                client_host: "h".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 30_000,
                subscription: vec![i],
                assignment: vec![],
                member_epoch: 0,
            })
            .collect(),
        updated_ms: 0,
        coordinator: format!("broker-{coordinator}"),
        version: 0,
    }
}

#[derive(Debug, Clone)]
enum SeqChoice {
    Next,
    Retry(u8),
    BumpEpoch,
    OldEpoch,
    Gap,
    /// A batch so long its last sequence lands just below i32::MAX, so the next one wraps.
    NearWrap,
}

#[derive(Debug, Clone)]
struct TBatch {
    topic: u8,
    partition: i32,
    records: i64,
    log_append_time: bool,
    ts_delta: i64,
    size: i32,
    producer: Option<(u8, SeqChoice)>,
    corrupt: Option<u8>,
    /// Transactional (a producer's batch mostly; sometimes one without a producer, refused).
    txn: bool,
}

#[derive(Debug, Clone)]
enum TOp {
    CreateAcls(Vec<AclBinding>),
    DeleteAcls(Vec<AclFilter>),
    Create {
        topic: u8,
        partitions: i32,
        name: u8,
        retention_ms: Option<i64>,
        retention_bytes: Option<i64>,
        /// Proposed as `CreatePartitions` with these settings; `None`: as the older
        /// `CreatePartitions`.
        settings: Option<TopicSettings>,
    },
    DeleteTopic {
        topic: u8,
        budget: u32,
    },
    Commit {
        batches: Vec<TBatch>,
        slack: i32,
        reuse: Option<u8>,
        owners: u8,
    },
    CommitMany(Vec<(Vec<TBatch>, i32, Option<u8>, u8)>),
    DeleteRecords {
        parts: Vec<(u8, i32, u8)>,
        budget: u32,
    },
    Alter {
        topic: u8,
        ms: Option<i64>,
        bytes: Option<i64>,
        /// Proposed as `AlterTopicConfigs` with these changes; `None`: as the older
        /// `AlterTopicConfigs`.
        changes: Option<Vec<SettingChange>>,
    },
    Retention {
        budget: u32,
        producer_expiration_ms: i64,
        fenced_object_retention_ms: i64,
    },
    Confirm {
        take: u8,
        live_too: bool,
    },
    Tick {
        ms: i64,
    },
    StoreGroup {
        group: u8,
        generation: i32,
        members: u8,
        coordinator: u8,
        /// 0: the stored version; 1: one past it; 2: "nothing stored".
        versioned: u8,
    },
    CommitOffsets {
        group: u8,
        /// Take the generation and a member of the stored group (when it has members).
        fit: bool,
        generation: i32,
        member: u8,
        offsets: Vec<(u8, i32, i64)>,
    },
    DeleteGroups {
        groups: Vec<u8>,
    },
    DeleteOffsets {
        group: u8,
        parts: Vec<(u8, i32)>,
    },
    ExpireOffsets {
        retention_ms: i64,
        budget: u32,
    },
    /// Fence object keys: known ones, fenced ones, fresh ones (which later commits may use).
    Fence {
        picks: Vec<u8>,
    },
    /// Send again one of the last commits, exactly (a broker whose reply was lost), or with its
    /// deadline moved.
    Repeat {
        pick: u8,
        new_deadline: bool,
    },
    AllocateProducerIds {
        count: u32,
    },
    /// Broker `broker - 1` (so -1 too) registers as incarnation `incarnation` at port 9000 + `port`
    /// (port 2: port 0, refused), with `listeners` 0: no named listeners, 1: two, 2: two with one
    /// name (refused).
    RegisterBroker {
        broker: u8,
        incarnation: u8,
        port: u8,
        lease_ms: i64,
        listeners: u8,
    },
    BrokerHeartbeat {
        broker: u8,
        incarnation: u8,
        lease_ms: i64,
    },
    UnregisterBroker {
        broker: u8,
        incarnation: u8,
    },
    /// Producer `1000 + producer` ends its transaction on every partition where it has one open
    /// (and on `extra`, where it may have none), with its epoch bumped (`epoch` % 8 > 1, as
    /// transactions v2 do), kept (0), or an older one (1, refused).
    EndTxn {
        producer: u8,
        commit: bool,
        epoch: u8,
        extra: Option<(u8, i32)>,
    },
    /// A broker stores transactional id `id`'s state at the version stored (`stale` 0), or at
    /// another (fenced).
    StoreTxn {
        id: u8,
        state: u8,
        number: u8,
        stale: u8,
    },
    /// A broker forgets transactional id `id` at the version stored (`stale` 0), or at another.
    ExpireTxn {
        id: u8,
        stale: u8,
    },
    /// Consolidation: the stored batches of a partition picked by `picks` (as the model holds
    /// them), copied into a new object; `twist` % 8: 0 a batch read with another id, 1 with
    /// another size, 2 the last replace sent again, 3 a fenced key, 4 out of order, else as read.
    Replace {
        topic: u8,
        partition: i32,
        picks: Vec<u8>,
        twist: u8,
    },
}

/// A broker lease: mostly valid, sometimes out of bounds.
fn broker_lease() -> impl Strategy<Value = i64> {
    prop_oneof![8 => 1i64..4_000, 1 => Just(0i64), 1 => Just(MAX_BROKER_LEASE_MS + 1)]
}

fn seq_choice() -> impl Strategy<Value = SeqChoice> {
    prop_oneof![
        12 => Just(SeqChoice::Next),
        6 => any::<u8>().prop_map(SeqChoice::Retry),
        1 => Just(SeqChoice::BumpEpoch),
        1 => Just(SeqChoice::OldEpoch),
        1 => Just(SeqChoice::Gap),
        1 => Just(SeqChoice::NearWrap),
    ]
}

fn tbatch() -> impl Strategy<Value = TBatch> {
    (
        (
            prop_oneof![6 => 1..=2u8, 1 => 0..=TOPICS],
            prop_oneof![6 => 0..3i32, 1 => 0..MAX_PARTITIONS_USED + 1],
            1i64..5,
            prop::bool::weighted(0.2),
            -5_000i64..5_000,
        ),
        (
            // Sizes on a grid of 50 bytes, so retention.bytes boundaries are hit exactly.
            prop_oneof![4 => (1i32..7).prop_map(|k| k * 50), 1 => 1i32..300],
            prop::option::weighted(0.6, (0u8..3, seq_choice())),
            prop::option::weighted(0.05, 0u8..7),
            prop::bool::weighted(0.3),
        ),
    )
        .prop_map(|((topic, partition, records, lat, ts_delta), (size, producer, corrupt, txn))| TBatch {
            topic,
            partition,
            records,
            log_append_time: lat,
            ts_delta,
            size,
            txn: txn && (producer.is_some() || ts_delta % 5 == 0),
            producer,
            corrupt,
        })
}

fn retention_value() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(-1)),
        2 => (0i64..20_000).prop_map(Some),
        2 => (0i64..40).prop_map(|k| Some(k * 50)),
        1 => Just(Some(-2)),
    ]
}

/// A setting's value: mostly valid, sometimes out of Kafka's range, sometimes reset.
fn setting_change() -> impl Strategy<Value = SettingChange> {
    let size = prop_oneof![1 => Just(None), 4 => (0i32..2_000_000).prop_map(Some), 1 => Just(Some(-1))];
    let kind = prop_oneof![1 => Just(None), 2 => (0i8..2).prop_map(Some), 1 => Just(Some(7))];
    let ms = || prop_oneof![1 => Just(None), 4 => (0i64..100_000).prop_map(Some), 1 => Just(Some(-5))];
    prop_oneof![
        size.prop_map(SettingChange::MaxMessageBytes),
        kind.prop_map(SettingChange::TimestampType),
        ms().prop_map(SettingChange::TimestampBeforeMaxMs),
        ms().prop_map(SettingChange::TimestampAfterMaxMs),
    ]
}

fn settings() -> impl Strategy<Value = Option<TopicSettings>> {
    prop::option::weighted(0.7, prop::collection::vec(setting_change(), 0..4))
        .prop_map(|c| c.map(|c| TopicSettings::default().with(&c)))
}

/// Resource names that match one another in every way a filter can: literally, by prefix, by `*`.
const ACL_NAMES: [&str; 5] = ["t1", "t", "*", "t1x", ""];
const ACL_PRINCIPALS: [&str; 5] = ["User:a", "User:b", "User:a", "nocolon", ""];
const ACL_HOSTS: [&str; 4] = ["*", "h1", "*", ""];

fn acl_binding() -> impl Strategy<Value = AclBinding> {
    (
        prop_oneof![12 => Just(2i8), 6 => 3i8..8, 1 => 0i8..2, 1 => Just(9i8)],
        0..ACL_NAMES.len(),
        prop_oneof![12 => 3i8..5, 1 => 0i8..3],
        0..ACL_PRINCIPALS.len(),
        0..ACL_HOSTS.len(),
        prop_oneof![8 => 2i8..15, 1 => 0i8..2, 1 => Just(15i8)],
        prop_oneof![6 => 2i8..4, 1 => 0i8..2],
    )
        .prop_map(|(resource_type, name, pattern_type, principal, host, operation, permission)| AclBinding {
            resource_type,
            resource_name: ACL_NAMES[name].into(),
            pattern_type,
            principal: ACL_PRINCIPALS[principal].into(),
            host: ACL_HOSTS[host].into(),
            operation,
            permission,
        })
}

fn acl_filter() -> impl Strategy<Value = AclFilter> {
    let name = prop::option::weighted(0.6, 0..ACL_NAMES.len()).prop_map(|n| n.map(|n| ACL_NAMES[n].to_string()));
    let principal =
        prop::option::weighted(0.4, 0..ACL_PRINCIPALS.len()).prop_map(|n| n.map(|n| ACL_PRINCIPALS[n].to_string()));
    let host = prop::option::weighted(0.3, 0..ACL_HOSTS.len()).prop_map(|n| n.map(|n| ACL_HOSTS[n].to_string()));
    (
        prop_oneof![6 => 1i8..8, 1 => Just(0i8)],
        name,
        prop_oneof![8 => 1i8..5, 1 => Just(0i8)],
        principal,
        host,
        prop_oneof![4 => Just(1i8), 4 => 2i8..15, 1 => Just(0i8)],
        prop_oneof![4 => Just(1i8), 4 => 2i8..4, 1 => Just(0i8)],
    )
        .prop_map(|(resource_type, resource_name, pattern_type, principal, host, operation, permission)| {
            AclFilter { resource_type, resource_name, pattern_type, principal, host, operation, permission }
        })
}

fn top() -> impl Strategy<Value = TOp> {
    prop_oneof![
        4 => prop::collection::vec(acl_binding(), 1..6).prop_map(TOp::CreateAcls),
        1 => prop::collection::vec(acl_filter(), 1..3).prop_map(TOp::DeleteAcls),
        3 => (0..=TOPICS, -1i32..MAX_PARTITIONS_USED + 1, 0u8..10, retention_value(), retention_value(), settings()).prop_map(
            |(topic, partitions, name, retention_ms, retention_bytes, settings)| TOp::Create { topic, partitions, name, retention_ms, retention_bytes, settings }
        ),
        1 => (1..=TOPICS, 0u32..12).prop_map(|(topic, budget)| TOp::DeleteTopic { topic, budget }),
        20 => (prop::collection::vec(tbatch(), 0..8), -20i32..20, prop::option::weighted(0.08, any::<u8>()), any::<u8>())
            .prop_map(|(batches, slack, reuse, owners)| TOp::Commit { batches, slack, reuse, owners }),
        4 => prop::collection::vec(
            (prop::collection::vec(tbatch(), 0..5), -20i32..20, prop::option::weighted(0.1, any::<u8>()), any::<u8>()),
            1..4
        )
        .prop_map(TOp::CommitMany),
        2 => prop::collection::vec(any::<u8>(), 1..4).prop_map(|picks| TOp::Fence { picks }),
        2 => (any::<u8>(), prop::bool::weighted(0.3)).prop_map(|(pick, new_deadline)| TOp::Repeat { pick, new_deadline }),
        3 => (prop::collection::vec((1..=TOPICS, -1i32..MAX_PARTITIONS_USED, any::<u8>()), 1..3), 0u32..12)
            .prop_map(|(parts, budget)| TOp::DeleteRecords { parts, budget }),
        2 => (0..=TOPICS, retention_value(), retention_value(), prop::option::weighted(0.7, prop::collection::vec(setting_change(), 0..4)))
            .prop_map(|(topic, ms, bytes, changes)| TOp::Alter { topic, ms, bytes, changes }),
        3 => (
            0u32..15,
            prop_oneof![2 => Just(-1i64), 1 => Just(0i64), 2 => 0i64..20_000],
            prop_oneof![1 => Just(-1i64), 1 => Just(0i64), 2 => 0i64..8_000],
        )
            .prop_map(|(budget, producer_expiration_ms, fenced_object_retention_ms)| TOp::Retention {
                budget,
                producer_expiration_ms,
                fenced_object_retention_ms
            }),
        2 => (0u8..4, prop::bool::weighted(0.2)).prop_map(|(take, live_too)| TOp::Confirm { take, live_too }),
        4 => (-200i64..3_000).prop_map(|ms| TOp::Tick { ms }),
        1 => prop_oneof![8 => 1u32..2_000, 1 => Just(0u32), 1 => Just(u32::MAX)]
            .prop_map(|count| TOp::AllocateProducerIds { count }),
        3 => (0u8..GROUPS, -1i32..4, 0u8..8, 0u8..2, prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)]).prop_map(|(group, generation, members, coordinator, versioned)| TOp::StoreGroup { group, generation, members, coordinator, versioned }),
        8 => (0u8..GROUPS, prop::bool::weighted(0.6), -1i32..4, 0u8..4, prop::collection::vec((prop_oneof![6 => 1..=2u8, 1 => 0..=TOPICS], prop_oneof![6 => 0..3i32, 1 => -1..MAX_PARTITIONS_USED], -1i64..1_000), 0..4))
            .prop_map(|(group, fit, generation, member, offsets)| TOp::CommitOffsets { group, fit, generation, member, offsets }),
        1 => prop::collection::vec(0u8..GROUPS, 1..3).prop_map(|groups| TOp::DeleteGroups { groups }),
        1 => (0u8..GROUPS, prop::collection::vec((0..=TOPICS, 0i32..MAX_PARTITIONS_USED), 1..3))
            .prop_map(|(group, parts)| TOp::DeleteOffsets { group, parts }),
        2 => (prop_oneof![1 => Just(-1i64), 1 => Just(0i64), 3 => 0i64..5_000], prop_oneof![3 => 1u32..4, 1 => Just(0u32), 1 => Just(100u32)])
            .prop_map(|(retention_ms, budget)| TOp::ExpireOffsets { retention_ms, budget }),
        5 => (0u8..5, 0u8..3, prop_oneof![4 => Just(0u8), 4 => Just(1u8), 1 => Just(2u8)], broker_lease(), prop_oneof![6 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8)])
            .prop_map(|(broker, incarnation, port, lease_ms, listeners)| TOp::RegisterBroker { broker, incarnation, port, lease_ms, listeners }),
        3 => (0u8..5, 0u8..3, broker_lease())
            .prop_map(|(broker, incarnation, lease_ms)| TOp::BrokerHeartbeat { broker, incarnation, lease_ms }),
        1 => (0u8..5, 0u8..3).prop_map(|(broker, incarnation)| TOp::UnregisterBroker { broker, incarnation }),
        5 => (0u8..3, prop::bool::weighted(0.6), any::<u8>(), prop::option::weighted(0.3, (0..=TOPICS, -1i32..MAX_PARTITIONS_USED)))
            .prop_map(|(producer, commit, epoch, extra)| TOp::EndTxn { producer, commit, epoch, extra }),
        3 => (0u8..3, 0u8..8, 0u8..4, prop_oneof![6 => Just(0u8), 1 => 1u8..3])
            .prop_map(|(id, state, number, stale)| TOp::StoreTxn { id, state, number, stale }),
        1 => (0u8..3, prop_oneof![4 => Just(0u8), 1 => 1u8..3]).prop_map(|(id, stale)| TOp::ExpireTxn { id, stale }),
        5 => (prop_oneof![6 => 1..=2u8, 1 => 0..=TOPICS], prop_oneof![6 => 0..3i32, 1 => -1..MAX_PARTITIONS_USED], prop::collection::vec(any::<u8>(), 1..6), any::<u8>())
            .prop_map(|(topic, partition, picks, twist)| TOp::Replace { topic, partition, picks, twist }),
    ]
}

fn topic_id(n: u8) -> Uuid {
    if n == 0 {
        Uuid::nil()
    } else {
        Uuid::from_bytes([n; 16])
    }
}

fn tp(topic: u8, partition: i32) -> TopicPartition {
    TopicPartition { topic_id: topic_id(topic), partition }
}

/// Turns generated operations into commands, the way a client would: producers continue from
/// what the coordinator (the model) last accepted.
struct Driver {
    now: i64,
    next_key: u32,
    epochs: [i16; 3],
    /// Per producer, the number of its current transaction (a transactional id's counter).
    numbers: [u64; 3],
    mp: u32,
    num_mps: u32,
    /// The last commits sent (with their transactional flags), for repeats.
    sent: Vec<FileToCommit>,
    /// The last replace sent, for its repeat.
    replaced: Option<ReplaceBatches>,
}

impl Driver {
    fn fresh_key(&mut self) -> String {
        self.next_key += 1;
        format!("wal/{:06}", self.next_key)
    }

    /// The owner ids a commit names: this metadata partition (alone or with another) mostly;
    /// sometimes not, or out of range, which the state machine refuses.
    fn owners(&self, pick: u8) -> Vec<i32> {
        let (g, n) = (self.mp as i32, self.num_mps as i32);
        match pick % 32 {
            0 => vec![],
            1 => vec![(g + 1) % n, n],
            2 if n > 1 => vec![(g + 1) % n],
            3 => vec![g, g],
            4..=11 => (0..n).rev().collect(),
            _ => vec![g],
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn commit_file(
        &mut self,
        now: i64,
        batches: &[TBatch],
        slack: &i32,
        reuse: &Option<u8>,
        owners: u8,
        model: &Model,
        pending: &mut BTreeMap<(TopicPartition, i64), (i16, i32)>,
    ) -> FileToCommit {
        // A reused key is a known file's (refused) or a fenced one's (a commit that arrives after
        // its key was fenced or its object deleted: refused while the tombstone lives).
        let reusable: Vec<String> = model.known_keys().into_iter().chain(model.fenced_keys()).collect();
        let object_key = match reuse {
            Some(i) if !reusable.is_empty() => reusable[usize::from(*i) % reusable.len()].clone(),
            Some(_) => String::new(),
            None => self.fresh_key(),
        };
        let mut at = 0i32;
        let mut out = Vec::with_capacity(batches.len());
        // Sequences a producer used earlier in this same request.
        for b in batches {
            let t = tp(b.topic, b.partition);
            let mut cb = CommitBatch {
                magic: 2,
                request_id: 0,
                tp: t,
                byte_offset: at,
                size: b.size,
                base_offset: 0,
                last_offset: b.records - 1,
                batch_max_timestamp: now + b.ts_delta,
                timestamp_type: i8::from(b.log_append_time),
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
                last_sequence: -1,
            };
            at += b.size;
            if let Some((p, choice)) = &b.producer {
                let pid = 1000 + i64::from(*p);
                let epoch_now = self.epochs[usize::from(*p)];
                let tail =
                    pending.get(&(t, pid)).copied().or_else(|| model.producer_tail(&t, pid).map(|(e, _, l)| (e, l)));
                let (epoch, last) = match tail {
                    Some((e, l)) if e == epoch_now => (e, Some(l)),
                    _ => (epoch_now, None),
                };
                let next = last.map_or(0, |l| if l == i32::MAX { 0 } else { l + 1 });
                let (epoch, base, records) = match choice {
                    SeqChoice::Next => (epoch, next, b.records),
                    SeqChoice::Gap => (epoch, next.wrapping_add(2) & i32::MAX, b.records),
                    SeqChoice::BumpEpoch => {
                        self.epochs[usize::from(*p)] += 1;
                        (epoch + 1, 0, b.records)
                    }
                    SeqChoice::OldEpoch => ((epoch - 1).max(0), next, b.records),
                    SeqChoice::NearWrap => (epoch, next, i64::from(i32::MAX - 1 - next).max(1)),
                    SeqChoice::Retry(i) => {
                        let h = model.producer_history(&t, pid);
                        if h.is_empty() {
                            (epoch, next, b.records)
                        } else {
                            let (e, bs, ls) = h[usize::from(*i) % h.len()];
                            (e, bs, (i64::from(ls) - i64::from(bs)).rem_euclid(1 << 31) + 1)
                        }
                    }
                };
                let last_seq = ((i64::from(base) + records - 1) % (1 << 31)) as i32;
                cb.producer_id = pid;
                cb.producer_epoch = epoch;
                cb.base_sequence = base;
                cb.last_sequence = last_seq;
                cb.last_offset = records - 1;
                pending.insert((t, pid), (epoch, last_seq));
            }
            match b.corrupt {
                Some(0) => cb.size = 0,
                Some(1) => cb.magic = 1,
                Some(2) => cb.timestamp_type = 3,
                Some(3) => cb.last_offset = -1,
                Some(4) => cb.last_sequence = cb.last_sequence.wrapping_add(1),
                Some(5) => cb.byte_offset = i32::MAX - 1,
                Some(_) => cb.producer_id = -5,
                None => {}
            }
            out.push(cb);
        }
        let file = CommitFile {
            deadline_ms: if *slack == 7 { Some(now - 1) } else { Some(now) },
            object_key,
            object_format: 1,
            file_size: i64::from(at + slack).max(0),
            uploader_broker_id: 1,
            owner_ids: self.owners(owners),
            batches: out,
        };
        // The transaction's number: none (0), the producer's current one, or the one before (late).
        let txn_numbers: Vec<u64> = batches
            .iter()
            .map(|b| match (b.producer.as_ref().map(|p| p.0), b.ts_delta.rem_euclid(4)) {
                (Some(p), 1 | 2) if b.txn => self.numbers[usize::from(p)],
                (Some(p), 3) if b.txn => self.numbers[usize::from(p)] - 1,
                _ => 0,
            })
            .collect();
        let txn_numbers = if txn_numbers.iter().all(|&n| n == 0) { vec![] } else { txn_numbers };
        let mut transactional: Vec<bool> = batches.iter().map(|b| b.txn).collect();
        match slack {
            // A flag too few (refused whole), or flags all false (the same as none).
            -3 if !transactional.is_empty() => {
                transactional.pop();
            }
            -2 => {}
            _ if !transactional.contains(&true) => transactional.clear(),
            _ => {}
        }
        FileToCommit { file, transactional, txn_numbers }
    }

    fn sent(&mut self, c: FileToCommit) -> FileToCommit {
        self.sent.push(c.clone());
        if self.sent.len() > 16 {
            self.sent.remove(0);
        }
        c
    }

    fn command(&mut self, op: &TOp, model: &Model) -> Option<Command> {
        let now = self.now;
        let op = match op {
            TOp::Tick { ms } => {
                self.now += ms;
                return None;
            }
            TOp::CreateAcls(b) => Op::CreateAcls(b.clone()),
            TOp::DeleteAcls(f) => Op::DeleteAcls(f.clone()),
            TOp::Create { topic, partitions, name, retention_ms, retention_bytes, settings } => {
                let name = match name {
                    0 => "bad name".to_string(),
                    1 => format!("t{}", (topic + 1) % (TOPICS + 1)),
                    _ => format!("t{topic}"),
                };
                let create = CreateTopic {
                    topic_id: topic_id(*topic),
                    name,
                    num_partitions: *partitions,
                    retention_ms: *retention_ms,
                    retention_bytes: *retention_bytes,
                };
                match settings {
                    Some(s) => Op::CreatePartitions(vec![TopicToCreate { topic: create, settings: s.clone() }]),
                    None => Op::CreatePartitions(vec![create.into()]),
                }
            }
            TOp::DeleteTopic { topic, budget } => {
                Op::DeleteTopics { topic_ids: vec![topic_id(*topic)], budget: *budget }
            }
            TOp::Alter { topic, ms, bytes, changes } => {
                let alter = AlterTopic { topic_id: topic_id(*topic), retention_ms: *ms, retention_bytes: *bytes };
                match changes {
                    Some(c) => Op::AlterTopicConfigs(vec![TopicToAlter { topic: alter, settings: c.clone() }]),
                    None => Op::AlterTopicConfigs(vec![alter.into()]),
                }
            }
            TOp::Retention { budget, producer_expiration_ms, fenced_object_retention_ms } => Op::EnforceRetention {
                budget: *budget,
                producer_expiration_ms: *producer_expiration_ms,
                fenced_object_retention_ms: *fenced_object_retention_ms,
            },
            TOp::Fence { picks } => {
                let known = model.known_keys();
                let fenced = model.fenced_keys();
                let object_keys = picks
                    .iter()
                    .map(|&p| match p % 8 {
                        0 | 1 if !known.is_empty() => known[usize::from(p) % known.len()].clone(),
                        2 if !fenced.is_empty() => fenced[usize::from(p) % fenced.len()].clone(),
                        // The next keys a commit will use: fenced before it arrives.
                        3 | 4 => format!("wal/{:06}", self.next_key + 1 + u32::from(p % 3)),
                        5 => String::new(),
                        _ => self.fresh_key(),
                    })
                    .collect();
                Op::FenceObjects { object_keys }
            }
            TOp::Repeat { pick, new_deadline } => {
                if self.sent.is_empty() {
                    return None;
                }
                let mut c = self.sent[usize::from(*pick) % self.sent.len()].clone();
                if *new_deadline {
                    c.file.deadline_ms = Some(now);
                }
                if c.transactional.is_empty() {
                    Op::CommitFile(c.file)
                } else {
                    Op::CommitFiles(vec![c])
                }
            }
            TOp::DeleteRecords { parts, budget } => Op::DeleteRecords {
                partitions: parts
                    .iter()
                    .map(|&(topic, partition, pick)| {
                        let t = tp(topic, partition);
                        let (lso, hwm) = model.hwm(&t).unwrap_or((0, 0));
                        let offset = match pick % 10 {
                            0 => -1,
                            1 => hwm + 1,
                            2 => -2,
                            3 => lso.saturating_sub(1),
                            _ => lso + (hwm - lso) * i64::from(pick) / 255,
                        };
                        DeleteRecordsPartition { tp: t, offset }
                    })
                    .collect(),
                budget: *budget,
            },
            TOp::AllocateProducerIds { count } => Op::AllocateProducerIds { broker_id: 1, count: *count },
            TOp::Replace { topic, partition, picks, twist } => {
                if twist % 8 == 2 {
                    return self.replaced.clone().map(|r| Command { now_ms: now, op: Op::ReplaceBatches(r) });
                }
                let t = tp(*topic, *partition);
                let stored = model.stored_batches(&t);
                let mut chosen: Vec<BatchRecord> = if stored.is_empty() {
                    // A partition with nothing stored: a batch that never was.
                    vec![BatchRecord {
                        batch_id: 1,
                        object_key: "wal/none".into(),
                        magic: 2,
                        byte_offset: 0,
                        byte_size: 100,
                        base_offset: 0,
                        last_offset: 0,
                        log_append_time: 0,
                        batch_max_timestamp: 0,
                        timestamp_type: 0,
                    }]
                } else {
                    picks.iter().map(|&p| stored[usize::from(p) % stored.len()].clone()).collect()
                };
                chosen.sort_by_key(|b| b.last_offset);
                chosen.dedup_by_key(|b| b.last_offset);
                let mut at = 0i32;
                let mut sources: Vec<String> = vec![];
                let mut batches: Vec<ReplacedBatch> = chosen
                    .iter()
                    .map(|b| {
                        // A marker has no bytes nor object: copied as if it had some (it is never
                        // replaced).
                        let from =
                            if b.object_key.is_empty() { "wal/marker".to_string() } else { b.object_key.clone() };
                        let source = sources.iter().position(|s| *s == from).unwrap_or_else(|| {
                            sources.push(from);
                            sources.len() - 1
                        }) as u32;
                        let byte_size = b.byte_size.max(1);
                        let r = ReplacedBatch {
                            last_offset: b.last_offset,
                            batch_id: b.batch_id,
                            source,
                            byte_offset: at,
                            byte_size,
                        };
                        at += byte_size;
                        r
                    })
                    .collect();
                let i = usize::from(*twist) % batches.len();
                match twist % 8 {
                    0 => batches[i].batch_id += 1,
                    1 => batches[i].byte_size += 1,
                    4 if batches.len() > 1 => batches.swap(0, 1),
                    // Copied from another object than the one it is in (another replace moved it).
                    5 => {
                        sources.push("wal/elsewhere".into());
                        batches[i].source = (sources.len() - 1) as u32;
                    }
                    _ => {}
                }
                let object_key = if twist % 8 == 3 {
                    model.fenced_keys().first().cloned().unwrap_or_else(|| self.fresh_key())
                } else {
                    self.fresh_key()
                };
                let r = ReplaceBatches {
                    object_key,
                    object_format: 1,
                    file_size: i64::from(at) + 1,
                    uploader_broker_id: 1,
                    tp: t,
                    sources,
                    batches,
                };
                self.replaced = Some(r.clone());
                Op::ReplaceBatches(r)
            }
            TOp::StoreGroup { group, generation, members, coordinator, versioned } => {
                let group_id = GROUP_IDS[usize::from(*group)];
                let stored = model.groups.groups.get(group_id).map_or(0, |g| g.version);
                let expected_version = match versioned {
                    0 => stored,
                    1 => stored.wrapping_add(1),
                    _ => 0,
                };
                Op::StoreGroup {
                    group_id: group_id.into(),
                    group: group_record(*generation, *members, *coordinator),
                    expected_version,
                }
            }
            TOp::CommitOffsets { group, fit, generation, member, offsets } => {
                let id = GROUP_IDS[usize::from(*group)];
                let stored = model.groups.groups.get(id).filter(|_| *fit);
                let (generation, member_id) = match stored {
                    Some(g) if !g.members.is_empty() => {
                        (g.generation, g.members[usize::from(*member) % g.members.len()].member_id.clone())
                    }
                    Some(_) => (-1, String::new()),
                    // A transaction coordinator's commit of a transaction's offsets.
                    None if *member == 3 && *generation == 3 => (TXN_OFFSETS_GENERATION, String::new()),
                    None if *member == 3 => (*generation, String::new()),
                    None => (*generation, format!("m{member}")),
                };
                Op::CommitOffsets(CommitOffsets {
                    group_id: id.into(),
                    generation,
                    member_id,
                    offsets: offsets
                        .iter()
                        .map(|&(t, p, offset)| OffsetCommit {
                            tp: tp(t, p),
                            offset,
                            leader_epoch: 1,
                            metadata: (offset % 2 == 0).then(|| "meta".to_string()),
                        })
                        .collect(),
                })
            }
            TOp::DeleteGroups { groups } => {
                Op::DeleteGroups { group_ids: groups.iter().map(|g| GROUP_IDS[usize::from(*g)].to_string()).collect() }
            }
            TOp::DeleteOffsets { group, parts } => Op::DeleteOffsets {
                group_id: GROUP_IDS[usize::from(*group)].into(),
                partitions: parts.iter().map(|&(t, p)| tp(t, p)).collect(),
            },
            TOp::ExpireOffsets { retention_ms, budget } => {
                Op::ExpireOffsets { retention_ms: *retention_ms, budget: *budget }
            }
            TOp::RegisterBroker { broker, incarnation, port, lease_ms, listeners } => {
                Op::RegisterBroker(RegisterBroker {
                    broker_id: i32::from(*broker) - 1,
                    host: "127.0.0.1".into(),
                    // Port 0 is refused.
                    port: if *port == 2 { 0 } else { 9000 + i32::from(*port) },
                    rack: (*port == 1).then(|| "az1".to_string()),
                    incarnation: u64::from(*incarnation),
                    lease_ms: *lease_ms,
                    listeners: match listeners {
                        1 | 2 => vec![
                            NamedListener { name: "PLAINTEXT".into(), host: "127.0.0.1".into(), port: 9000 },
                            NamedListener {
                                name: if *listeners == 2 { "PLAINTEXT" } else { "EXTERNAL" }.into(),
                                host: "10.0.0.1".into(),
                                port: 19000,
                            },
                        ],
                        _ => vec![],
                    },
                })
            }
            TOp::BrokerHeartbeat { broker, incarnation, lease_ms } => Op::BrokerHeartbeat {
                broker_id: i32::from(*broker) - 1,
                incarnation: u64::from(*incarnation),
                lease_ms: *lease_ms,
            },
            TOp::UnregisterBroker { broker, incarnation } => {
                Op::UnregisterBroker { broker_id: i32::from(*broker) - 1, incarnation: u64::from(*incarnation) }
            }
            TOp::Confirm { take, live_too } => {
                let mut keys: Vec<String> =
                    model.to_delete(usize::from(*take)).into_iter().map(|f| f.object_key).collect();
                if *live_too {
                    keys.extend(model.known_keys().into_iter().take(1));
                }
                keys.push("never-committed".into());
                Op::ConfirmFilesDeleted { object_keys: keys }
            }
            TOp::Commit { batches, slack, reuse, owners } => {
                let mut pending = BTreeMap::new();
                let c = self.commit_file(now, batches, slack, reuse, *owners, model, &mut pending);
                let c = self.sent(c);
                if c.transactional.is_empty() {
                    Op::CommitFile(c.file)
                } else {
                    Op::CommitFiles(vec![c])
                }
            }
            TOp::CommitMany(files) => {
                // Several files in one entry, as the leader gathers concurrent commits.
                let mut pending = BTreeMap::new();
                let files: Vec<FileToCommit> = files
                    .iter()
                    .map(|(b, slack, reuse, owners)| {
                        let c = self.commit_file(now, b, slack, reuse, *owners, model, &mut pending);
                        self.sent(c)
                    })
                    .collect();
                Op::CommitFiles(files)
            }
            TOp::EndTxn { producer, commit, epoch, extra } => {
                let pid = 1000 + i64::from(*producer);
                let current = self.epochs[usize::from(*producer)];
                let epoch = match epoch % 8 {
                    0 => current,
                    1 => (current - 1).max(0),
                    _ => {
                        self.epochs[usize::from(*producer)] += 1;
                        current + 1
                    }
                };
                let mut tps: Vec<TopicPartition> =
                    model.open_txns().into_iter().filter(|(_, p)| *p == pid).map(|(t, _)| t).collect();
                tps.extend(extra.map(|(t, p)| tp(t, p)));
                let n = &mut self.numbers[usize::from(*producer)];
                let txn_number = match (epoch / 8) % 4 {
                    0 => 0,
                    3 => *n - 1,
                    _ => {
                        *n += 1;
                        *n - 1
                    }
                };
                let markers = tps
                    .into_iter()
                    .map(|t| TxnMarker {
                        tp: t,
                        producer_id: pid,
                        producer_epoch: epoch,
                        commit: *commit,
                        coordinator_epoch: 1,
                        txn_number,
                    })
                    .collect();
                Op::EndTransaction(markers)
            }
            TOp::StoreTxn { id, state, number, stale } => {
                let transactional_id = if *id == 2 { String::new() } else { format!("txn-{id}") };
                let stored = model.txn_version(&transactional_id);
                let states = [
                    TxnState::Empty,
                    TxnState::Ongoing,
                    TxnState::PrepareCommit,
                    TxnState::PrepareAbort,
                    TxnState::CompleteCommit,
                    TxnState::CompleteAbort,
                    TxnState::PrepareEpochFence,
                    TxnState::Ongoing,
                ];
                let record = TxnRecord {
                    producer_id: 1000 + i64::from(*id),
                    producer_epoch: i16::from(*number),
                    last_producer_id: -1,
                    last_producer_epoch: -1,
                    timeout_ms: 60_000,
                    state: states[usize::from(*state) % states.len()],
                    txn_number: u64::from(*number),
                    partitions: (0..*number).map(|p| tp(1, i32::from(p))).collect(),
                    groups: vec![format!("g{number}")],
                    started_ms: 5,
                    updated_ms: 6,
                    owner: format!("broker-{state}"),
                    version: 77,
                    pending_offsets: (0..*number)
                        .map(|p| PendingOffset {
                            group_id: format!("g{p}"),
                            tp: tp(2, i32::from(p)),
                            offset: i64::from(p) * 10,
                            leader_epoch: -1,
                            metadata: None,
                        })
                        .collect(),
                };
                // The version stored, one past it, or "nothing stored" (a copy from before the id
                // was created, or expired).
                let expected_version = match stale {
                    0 => stored,
                    1 => stored.wrapping_add(1),
                    _ => 0,
                };
                Op::StoreTxn { transactional_id, record, expected_version }
            }
            TOp::ExpireTxn { id, stale } => {
                let transactional_id = if *id == 2 { String::new() } else { format!("txn-{id}") };
                let expected_version = model.txn_version(&transactional_id).wrapping_add(u64::from(*stale));
                Op::ExpireTxn { transactional_id, expected_version }
            }
        };
        Some(Command { now_ms: now, op })
    }
}

fn blank(o: Outcome) -> Outcome {
    let b = |r: Result<(), Failure>| r.map_err(|f| Failure::new(f.code, ""));
    match o {
        Outcome::Topics(v) => Outcome::Topics(v.into_iter().map(|(id, r)| (id, b(r))).collect()),
        Outcome::CommitFile(v) => {
            Outcome::CommitFile(v.into_iter().map(|r| r.map_err(|f| Failure::new(f.code, ""))).collect())
        }
        Outcome::DeleteRecords(v) => {
            Outcome::DeleteRecords(v.into_iter().map(|(tp, r)| (tp, r.map_err(|f| Failure::new(f.code, "")))).collect())
        }
        Outcome::ConfirmFilesDeleted(v) => {
            Outcome::ConfirmFilesDeleted(v.into_iter().map(|(k, r)| (k, b(r))).collect())
        }
        Outcome::CommitFiles(v) => Outcome::CommitFiles(
            v.into_iter().map(|f| f.into_iter().map(|r| r.map_err(|f| Failure::new(f.code, ""))).collect()).collect(),
        ),
        Outcome::ProducerIds(r) => Outcome::ProducerIds(r.map_err(|f| Failure::new(f.code, ""))),
        Outcome::FenceObjects(v) => {
            Outcome::FenceObjects(v.into_iter().map(|(k, r)| (k, r.map_err(|f| Failure::new(f.code, "")))).collect())
        }
        Outcome::Group(r) => Outcome::Group(r.map_err(|f| Failure::new(f.code, ""))),
        Outcome::Offsets(v) => Outcome::Offsets(v.into_iter().map(b).collect()),
        Outcome::Groups(v) => Outcome::Groups(v.into_iter().map(b).collect()),
        Outcome::Broker(r) => Outcome::Broker(r.map_err(|f| Failure::new(f.code, ""))),
        Outcome::AclsCreated(v) => Outcome::AclsCreated(v.into_iter().map(b).collect()),
        Outcome::AclsDeleted(v) => {
            Outcome::AclsDeleted(v.into_iter().map(|r| r.map_err(|f| Failure::new(f.code, ""))).collect())
        }
        Outcome::EndTransaction(v) => {
            Outcome::EndTransaction(v.into_iter().map(|r| r.map_err(|f| Failure::new(f.code, ""))).collect())
        }
        Outcome::Txn(r) => Outcome::Txn(r.map_err(|f| Failure::new(f.code, ""))),
        Outcome::TxnExpired(r) => Outcome::TxnExpired(r.map_err(|f| Failure::new(f.code, ""))),
        Outcome::ReplaceBatches(r) => Outcome::ReplaceBatches(r.map_err(|f| Failure::new(f.code, ""))),
        other => other,
    }
}

fn blank_batches(mut v: PartitionBatches) -> PartitionBatches {
    v.error = v.error.map(|f| Failure::new(f.code, ""));
    v
}

struct Real {
    _dir: tempfile::TempDir,
    db: Db,
    sm: StateMachine,
    /// `None`: every read goes to RocksDB.
    hot: Option<HotKeys>,
}

impl Real {
    fn new(mp: u32, num_mps: u32, cached: bool) -> Real {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let hot = cached.then(StateMachine::hot_keys);
        Real { _dir: dir, db, sm: StateMachine::new(mp, num_mps), hot }
    }

    fn apply(&mut self, cmd: &Command) -> Outcome {
        self.apply_run(std::slice::from_ref(cmd)).remove(0)
    }

    /// Applies `cmds` in one transaction.
    fn apply_run(&mut self, cmds: &[Command]) -> Vec<Outcome> {
        let mut txn = match &mut self.hot {
            Some(hot) => Txn::with_hot(&self.db, hot),
            None => Txn::new(&self.db),
        };
        let out = cmds.iter().map(|cmd| self.sm.apply(&mut txn, cmd).unwrap()).collect();
        txn.commit(false).unwrap();
        out
    }
}

/// Compares the read side of the real state machine with the model.
fn compare_reads(real: &Real, model: &Model, seed: u64, full: bool) {
    let view = real.db.read();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut next = move || rng.u64(..);
    let all: Vec<TopicPartition> =
        (0..=TOPICS).flat_map(|t| (-1..=MAX_PARTITIONS_USED).map(move |p| tp(t, p))).collect();
    let tps: Vec<TopicPartition> =
        if full { all.clone() } else { (0..4).map(|_| all[(next() % all.len() as u64) as usize]).collect() };
    for t in &tps {
        let specials: &[i64] = if full { &[-1, -2, -3, -4, -5, -6] } else { &[-3] };
        let stamps: Vec<i64> =
            specials.iter().copied().chain((0..3).map(|_| (next() % 40_000) as i64 + 980_000)).collect();
        for ts in stamps {
            for committed in [false, true] {
                let want = model.list_offsets(t, ts, committed).map_err(|f| f.code);
                let got = real.sm.list_offsets(&view, t, ts, committed).unwrap().map_err(|f| f.code);
                assert_eq!(got, want, "ListOffsets {t} ts {ts} read_committed {committed}");
            }
        }
    }
    // One FindBatches request over several partitions.
    let reqs: Vec<(TopicPartition, i64, i32)> = tps
        .iter()
        .map(|t| {
            let (lso, hwm) = model.hwm(t).unwrap_or((0, 0));
            let offset = match next() % 6 {
                0 => lso.saturating_sub(1),
                1 => hwm + 1,
                2 => hwm,
                _ => lso + (next() as i64 % (hwm - lso + 1)).max(0),
            };
            let max = if full { i32::MAX } else { [0, 50, 300, 1_000, i32::MAX][(next() % 5) as usize] };
            (*t, offset, max)
        })
        .collect();
    let (fetch_max, max_batches) =
        if full { (i32::MAX, 0) } else { ([0, 200, 2_000, i32::MAX][(next() % 4) as usize], (next() % 4) as i32) };
    for committed in [false, true] {
        let want = model.find_batches(fetch_max, max_batches, &reqs, committed);
        let mut budget = FetchBudget::new(fetch_max, max_batches);
        for ((t, offset, max), want) in reqs.iter().zip(want) {
            let got = real.sm.find_batches(&view, t, *offset, *max, &mut budget, committed).unwrap();
            assert_eq!(
                blank_batches(got),
                blank_batches(want),
                "FindBatches {t} at {offset} max {max} read_committed {committed}"
            );
        }
    }
    // Files.
    let mut keys = model.known_keys();
    if !full {
        keys.retain(|_| next() % 8 == 0);
    }
    keys.push("never-committed".into());
    for k in keys {
        assert_eq!(real.sm.describe_file(&view, &k).unwrap(), model.describe(&k), "DescribeFiles {k}");
    }
    let limit = if full { 100_000 } else { (next() % 5) as usize };
    assert_eq!(real.sm.files_to_delete(&view, limit).unwrap(), model.to_delete(limit), "files to delete");
    // The broker registry, whole and as seen live around each lease's end.
    let brokers = real.sm.brokers(&view).unwrap();
    assert_eq!(brokers, model.registry.brokers.clone().into_iter().collect::<Vec<_>>(), "brokers");
    for t in brokers.iter().flat_map(|(_, b)| [b.lease_until_ms - 1, b.lease_until_ms]) {
        assert_eq!(real.sm.live_brokers(&view, t).unwrap(), model.registry.live(t), "live brokers at {t}");
        assert_eq!(real.sm.registry_generation(&view).unwrap(), model.registry.generation, "registry generation");
    }
    // ACL bindings: all of them, and through filters of every kind.
    let mp = model.metadata_partition();
    let blank_acls = |r: Result<Result<Vec<AclBinding>, Failure>, _>| r.unwrap().map_err(|f: Failure| f.code);
    assert_eq!(
        blank_acls(real.sm.describe_acls(&view, &AclFilter::any())),
        model.acls.describe(mp == 0, &AclFilter::any()).map_err(|f| f.code),
        "DescribeAcls (all)"
    );
    let mut runner = TestRunner::deterministic();
    let filters: Vec<AclFilter> = (0..64).map(|_| acl_filter().new_tree(&mut runner).unwrap().current()).collect();
    for _ in 0..if full { 64 } else { 4 } {
        let f = &filters[(next() % 64) as usize];
        assert_eq!(
            blank_acls(real.sm.describe_acls(&view, f)),
            model.acls.describe(mp == 0, f).map_err(|f| f.code),
            "DescribeAcls {f:?}"
        );
    }
    // The topic catalog, with retention and the broker-enforced settings.
    assert_eq!(real.sm.topics(&view).unwrap(), model.topics(), "ListTopics");
    // Consumer groups.
    assert_eq!(real.sm.list_groups(&view).unwrap(), model.groups.list(), "ListGroups");
    // Transactional ids.
    let txns: Vec<(String, TxnRecord)> = model.txns().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(real.sm.list_transactions(&view).unwrap(), txns, "ListTransactions");
    for id in ["txn-0", "txn-1", ""] {
        assert_eq!(real.sm.transaction(&view, id).unwrap().as_ref(), model.txns().get(id), "Transaction {id:?}");
    }
    for id in GROUP_IDS {
        assert_eq!(real.sm.fetch_offsets(&view, id, None).unwrap(), model.groups.fetch_all(id), "OffsetFetch {id:?}");
        let one = [tp(1, 0)];
        let want: Vec<_> = one
            .iter()
            .map(|t| (*t, model.groups.fetch_all(id).into_iter().find(|(x, _)| x == t).and_then(|(_, o)| o)))
            .collect();
        let want = if id.is_empty() { vec![(one[0], None)] } else { want };
        assert_eq!(real.sm.fetch_offsets(&view, id, Some(&one)).unwrap(), want, "OffsetFetch {id:?} of one");
    }
}

static OPERATIONS: AtomicUsize = AtomicUsize::new(0);
/// Commit batch results by Kafka error code (0 = appended), and duplicates, for the summary.
static BATCH_CODES: std::sync::Mutex<BTreeMap<i16, usize>> = std::sync::Mutex::new(BTreeMap::new());
static DUPLICATES: AtomicUsize = AtomicUsize::new(0);
static PRODUCERS_EXPIRED: AtomicUsize = AtomicUsize::new(0);
/// Fence answers by kind (live, released, fenced, refused) and tombstones forgotten.
static FENCES: std::sync::Mutex<[usize; 4]> = std::sync::Mutex::new([0; 4]);
static FENCED_FORGOTTEN: AtomicUsize = AtomicUsize::new(0);
/// Replaced batches: [moved, changed meanwhile, requests refused].
static REPLACES: std::sync::Mutex<[usize; 3]> = std::sync::Mutex::new([0; 3]);
/// Offset commits by Kafka error code, and offsets expired.
static OFFSET_CODES: std::sync::Mutex<BTreeMap<i16, usize>> = std::sync::Mutex::new(BTreeMap::new());
/// Broker registry answers by Kafka error code (0 = done).
static BROKER_CODES: std::sync::Mutex<BTreeMap<i16, usize>> = std::sync::Mutex::new(BTreeMap::new());
static OFFSETS_EXPIRED: AtomicUsize = AtomicUsize::new(0);
/// Transaction markers [written, nothing to end, refused].
static MARKERS: std::sync::Mutex<[usize; 3]> = std::sync::Mutex::new([0; 3]);
/// Transaction state stores [stored, fenced, refused otherwise].
static TXN_STORES: std::sync::Mutex<[usize; 3]> = std::sync::Mutex::new([0; 3]);
/// Transactional id expirations [expired, fenced, refused (a transaction open)].
static TXN_EXPIRED: std::sync::Mutex<[usize; 3]> = std::sync::Mutex::new([0; 3]);

fn count(outcome: &Outcome) {
    if let Outcome::TxnExpired(r) = outcome {
        TXN_EXPIRED.lock().unwrap()[match r {
            Ok(()) => 0,
            Err(f) if f.code == ErrorCode::TransactionCoordinatorFenced => 1,
            Err(_) => 2,
        }] += 1;
    }
    if let Outcome::Txn(r) = outcome {
        TXN_STORES.lock().unwrap()[match r {
            Ok(_) => 0,
            Err(f) if f.code == ErrorCode::TransactionCoordinatorFenced => 1,
            Err(_) => 2,
        }] += 1;
    }
    if let Outcome::EndTransaction(v) = outcome {
        let mut m = MARKERS.lock().unwrap();
        for r in v {
            m[match r {
                Ok(Some(_)) => 0,
                Ok(None) => 1,
                Err(_) => 2,
            }] += 1;
        }
    }
    if let Outcome::Broker(r) = outcome {
        *BROKER_CODES.lock().unwrap().entry(r.as_ref().map_or_else(|f| f.code.code(), |_| 0)).or_default() += 1;
    }
    if let Outcome::Offsets(v) = outcome {
        let mut codes = OFFSET_CODES.lock().unwrap();
        for r in v {
            *codes.entry(r.as_ref().map_or_else(|f| f.code.code(), |_| 0)).or_default() += 1;
        }
    }
    if let Outcome::ExpireOffsets { offsets_expired, .. } = outcome {
        OFFSETS_EXPIRED.fetch_add(*offsets_expired as usize, Ordering::Relaxed);
    }
    if let Outcome::EnforceRetention(r) = outcome {
        PRODUCERS_EXPIRED.fetch_add(r.producers_expired as usize, Ordering::Relaxed);
        FENCED_FORGOTTEN.fetch_add(r.fenced_forgotten as usize, Ordering::Relaxed);
    }
    if let Outcome::ReplaceBatches(r) = outcome {
        let mut m = REPLACES.lock().unwrap();
        match r {
            Ok(v) => {
                m[0] += v.iter().filter(|x| **x == Replaced::Replaced).count();
                m[1] += v.iter().filter(|x| **x == Replaced::Changed).count();
            }
            Err(_) => m[2] += 1,
        }
    }
    if let Outcome::FenceObjects(v) = outcome {
        let mut f = FENCES.lock().unwrap();
        for (_, r) in v {
            f[match r {
                Ok(FenceAnswer::Live) => 0,
                Ok(FenceAnswer::Released { .. }) => 1,
                Ok(FenceAnswer::Fenced { .. }) => 2,
                Err(_) => 3,
            }] += 1;
        }
    }
    if let Outcome::CommitFiles(files) = outcome {
        files.iter().for_each(|rs| count(&Outcome::CommitFile(rs.clone())));
    }
    if let Outcome::CommitFile(rs) = outcome {
        let mut codes = BATCH_CODES.lock().unwrap();
        for r in rs {
            match r {
                Ok(c) if c.is_duplicate => {
                    DUPLICATES.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => *codes.entry(0).or_default() += 1,
                Err(f) => *codes.entry(f.code.code()).or_default() += 1,
            }
        }
    }
}

/// Applies `run` in one transaction of `batched`; every answer must be the model's.
fn apply_run(batched: &mut Real, run: &mut Vec<(Command, Outcome)>) {
    let cmds: Vec<Command> = run.iter().map(|(c, _)| c.clone()).collect();
    for (got, (cmd, want)) in batched.apply_run(&cmds).into_iter().zip(run.drain(..)) {
        assert_eq!(blank(got), want, "applied in a run of {}: {cmd:?}", cmds.len());
    }
}

fn run_case(ops: &[(TOp, u64)], mp: u32, num_mps: u32) {
    let mut real = Real::new(mp, num_mps, true);
    let mut twin = Real::new(mp, num_mps, false);
    let mut batched = Real::new(mp, num_mps, true);
    // Commands not yet applied by `batched`, with the model's answers.
    let mut run: Vec<(Command, Outcome)> = vec![];
    let mut model = Model::new(mp, num_mps);
    let mut driver = Driver {
        now: 1_000_000,
        next_key: 0,
        epochs: [0; 3],
        numbers: [1; 3],
        mp,
        num_mps,
        sent: vec![],
        replaced: None,
    };
    // Every sequence starts with two topics, so most operations find something to act on.
    let setup = (1..=2).map(|topic| {
        (
            TOp::Create {
                topic,
                partitions: 3,
                name: 9,
                retention_ms: Some(-1),
                retention_bytes: None,
                settings: None,
            },
            0,
        )
    });
    let ops: Vec<(TOp, u64)> = setup.chain(ops.iter().cloned()).collect();
    for (i, (op, seed)) in ops.iter().enumerate() {
        let Some(cmd) = driver.command(op, &model) else { continue };
        let want = blank(model.apply(&cmd));
        count(&want);
        let got = blank(real.apply(&cmd));
        twin.apply(&cmd);
        assert_eq!(got, want, "operation {i}: {cmd:?}");
        run.push((cmd, want));
        // Runs of 6 commands on average (1 to dozens).
        if seed % 6 == 0 {
            apply_run(&mut batched, &mut run);
        }
        compare_reads(&real, &model, *seed, false);
        OPERATIONS.fetch_add(1, Ordering::Relaxed);
    }
    apply_run(&mut batched, &mut run);
    compare_reads(&real, &model, 1, true);
    let digest = |r: &Real| r.sm.digest(&r.db.read()).unwrap();
    assert_eq!(digest(&real), digest(&twin), "replicas that applied the same commands differ (cache)");
    assert_eq!(digest(&real), digest(&batched), "replicas that applied the same commands differ (runs)");
}

#[test]
fn state_machine_matches_the_model_and_replicas_agree_byte_for_byte() {
    let cases: u32 = std::env::var("DISKLESS_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let strategy = (prop::collection::vec((top(), any::<u64>()), 340..480), 0u32..2, 1u32..3);
    runner
        .run(&strategy, |(ops, mp, num_mps)| {
            let mp = mp % num_mps;
            run_case(&ops, mp, num_mps);
            Ok(())
        })
        .unwrap();
    let n = OPERATIONS.load(Ordering::Relaxed);
    println!("model test: {n} operations compared over {cases} sequences");
    println!(
        "commit batch results by error code (0 = appended): {:?}; duplicates recognised: {}; producer states expired: {}",
        BATCH_CODES.lock().unwrap(),
        DUPLICATES.load(Ordering::Relaxed),
        PRODUCERS_EXPIRED.load(Ordering::Relaxed)
    );
    println!(
        "fence answers [live, released, fenced, refused]: {:?}; tombstones forgotten: {}",
        FENCES.lock().unwrap(),
        FENCED_FORGOTTEN.load(Ordering::Relaxed)
    );
    println!(
        "offset commits and deletions by error code (0 = done): {:?}; offsets expired: {}",
        OFFSET_CODES.lock().unwrap(),
        OFFSETS_EXPIRED.load(Ordering::Relaxed)
    );
    let brokers = BROKER_CODES.lock().unwrap().clone();
    println!("broker registry answers by error code (0 = done): {brokers:?}");
    let markers = *MARKERS.lock().unwrap();
    println!("transaction markers [written, nothing to end, refused]: {markers:?}");
    let stores = *TXN_STORES.lock().unwrap();
    let expired = *TXN_EXPIRED.lock().unwrap();
    println!("transactional id expirations [expired, fenced, refused]: {expired:?}");
    println!("transaction state stores [stored, fenced, refused]: {stores:?}");
    let replaces = *REPLACES.lock().unwrap();
    println!("replaced batches [moved, changed meanwhile, requests refused]: {replaces:?}");
    if cases >= 30 {
        assert!(replaces.iter().all(|&n| n > 0), "replaces {replaces:?}");
        assert!(markers.iter().all(|&n| n > 0), "markers {markers:?}");
        assert!(stores.iter().all(|&n| n > 0), "transaction state stores {stores:?}");
        assert!(expired.iter().all(|&n| n > 0), "transactional id expirations {expired:?}");
        let codes = BATCH_CODES.lock().unwrap();
        // Transactional batches refused: a producer's plain batch inside its transaction, a
        // transactional batch without a producer.
        for code in [48, 87] {
            assert!(codes.get(&code).is_some_and(|n| *n > 0), "no batch refused with {code}: {codes:?}");
        }
        assert!(n >= 10_000, "only {n} operations ran");
        // Registrations, heartbeats and refusals of a taken id and of a stale lease all happened.
        for code in [0, 77, 101] {
            assert!(brokers.get(&code).is_some_and(|n| *n > 0), "no registry answer {code}: {brokers:?}");
        }
    }
}
