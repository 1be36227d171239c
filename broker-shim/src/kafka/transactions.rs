//! The Kafka APIs of transactions (protocols v1, KIP-98 with KIP-360, and v2, KIP-890 part 2):
//! InitProducerId with a transactional id, AddPartitionsToTxn (v0–v3, the producer's form),
//! AddOffsetsToTxn, EndTxn (v0–v4, and v5+: transactions v2, the bumped epoch answered),
//! TxnOffsetCommit (v5+ adding its group to the transaction), DescribeTransactions and
//! ListTransactions, over the broker's
//! `transactions::TransactionCoordinator`; FindCoordinator(TRANSACTION) is `groups`'.
//!
//! Follows Kafka's `KafkaApis` (`handleInitProducerIdRequest`, `handleAddPartitionsToTxnRequest`,
//! `handleAddOffsetsToTxnRequest`, `handleEndTxnRequest`, `handleTxnOffsetCommitRequest`,
//! `handleDescribeTransactionsRequest`,
//! `handleListTransactionsRequest`): WRITE on the transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic added (TOPIC_AUTHORIZATION_FAILED,
//! the others OPERATION_NOT_ATTEMPTED), READ on the group of AddOffsetsToTxn and TxnOffsetCommit
//! (and on its topics), DESCRIBE on the ids
//! described or listed; NOT_COORDINATOR from a broker that does not coordinate the id. Topic
//! names are mapped to ids here, through the catalog cache.

use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::group_access::{may, metadata_fits, owned};
use super::response::{encode, text as s, Reply};
use super::session::Session;
use crate::authz::{Access, Operation, Resource};
use crate::coordinators::groups::offsets::Committer;
use crate::coordinators::transactions::TxnPartition;

/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless `access` allows `op` on `id`.
fn authorize(access: &Access, op: Operation, id: &str) -> Result<(), ErrorCode> {
    if id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    if !access.allowed(op, Resource::TransactionalId, id) {
        return Err(ErrorCode::TransactionalIdAuthorizationFailed);
    }
    Ok(())
}

/// PRODUCER_FENCED as a request of version `v` reads it: clients of versions before `knows`
/// (InitProducerId 4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn 2) predate the code and are
/// told INVALID_PRODUCER_EPOCH, which they handle alike (Kafka's `KafkaApis` does the same).
fn fenced_for(code: ErrorCode, v: i16, knows: i16) -> ErrorCode {
    if code == ErrorCode::ProducerFenced && v < knows {
        ErrorCode::InvalidProducerEpoch
    } else {
        code
    }
}

/// [`authorize`], then [`owned`] (transactional ids are owned as consumer groups are).
fn admit(l: &Session, access: &Access, op: Operation, id: &str) -> Result<(), ErrorCode> {
    authorize(access, op, id)?;
    owned(l, id)
}

/// InitProducerId for a transactional id (`producer_ids` sends the others here).
pub(super) async fn init_producer_id(l: &Session, header: &RequestHeader, req: InitProducerIdRequest) -> Reply {
    let v = header.request_api_version;
    let id = req.transactional_id.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
    let access = l.access().await;
    let expected = (v >= 3 && req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    let r = match admit(l, &access, Operation::Write, &id) {
        Ok(()) => l.shim.transactions.init_producer_id(&id, req.transaction_timeout_ms, expected).await,
        Err(e) => Err(e),
    };
    let body = match r {
        Ok((pid, epoch)) => {
            InitProducerIdResponse::default().with_producer_id(ProducerId(pid)).with_producer_epoch(epoch)
        }
        Err(code) => InitProducerIdResponse::default()
            .with_error_code(fenced_for(code, v, 4).code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    encode(ApiKey::InitProducerId, header, v, &body)
}

pub(super) async fn add_partitions_to_txn(
    l: &Session,
    header: &RequestHeader,
    req: AddPartitionsToTxnRequest,
) -> Reply {
    let v = header.request_api_version;
    let id = req.v3_and_below_transactional_id.0.to_string();
    let access = l.access().await;
    // Per topic: its partitions and their ids, or why not.
    let mut topics: Vec<(TopicName, Vec<i32>, Result<[u8; 16], ErrorCode>)> = vec![];
    for t in &req.v3_and_below_topics {
        let found = match l.topic(&access, Operation::Write, t.name.as_str()).await {
            Ok(meta) if t.partitions.iter().all(|&p| l.partition(&meta, p).is_ok()) => Ok(meta.id),
            Ok(_) => Err(ErrorCode::UnknownTopicOrPartition),
            Err(e) => Err(e.code),
        };
        topics.push((t.name.clone(), t.partitions.clone(), found));
    }
    let any_bad = topics.iter().any(|t| t.2.is_err());
    // Kafka's order: the transactional id's authorization, the topics, then the coordinator.
    let overall: Result<(), ErrorCode> = match authorize(&access, Operation::Write, &id) {
        Err(e) => Err(e),
        Ok(()) if any_bad => Ok(()),
        Ok(()) if owned(l, &id).is_err() => Err(ErrorCode::NotCoordinator),
        Ok(()) => {
            let parts: Vec<TxnPartition> = topics
                .iter()
                .flat_map(|(_, ps, found)| ps.iter().filter_map(move |&p| Some((*found.as_ref().ok()?, p))))
                .collect();
            let pid = req.v3_and_below_producer_id.0;
            l.shim.transactions.add_partitions(&id, pid, req.v3_and_below_producer_epoch, &parts).await
        }
    };
    let results = topics
        .into_iter()
        .map(|(name, partitions, found)| {
            let code = match (&overall, found) {
                (Err(e), _) => fenced_for(*e, v, 2),
                (Ok(()), Err(e)) => e,
                (Ok(()), Ok(_)) if any_bad => ErrorCode::OperationNotAttempted,
                (Ok(()), Ok(_)) => ErrorCode::None,
            };
            add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default()
                .with_name(name)
                .with_results_by_partition(
                    partitions
                        .into_iter()
                        .map(|p| {
                            add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(code.code())
                        })
                        .collect(),
                )
        })
        .collect();
    let body = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    encode(ApiKey::AddPartitionsToTxn, header, v, &body)
}

pub(super) async fn add_offsets_to_txn(l: &Session, header: &RequestHeader, req: AddOffsetsToTxnRequest) -> Reply {
    let v = header.request_api_version;
    let id = req.transactional_id.0.to_string();
    let group = req.group_id.0.to_string();
    let access = l.access().await;
    let r = match admit(l, &access, Operation::Write, &id) {
        Err(e) => Err(e),
        Ok(()) if !access.allowed(Operation::Read, Resource::Group, &group) => Err(ErrorCode::GroupAuthorizationFailed),
        Ok(()) => l.shim.transactions.add_offsets(&id, req.producer_id.0, req.producer_epoch, &group).await,
    };
    let code = fenced_for(r.err().unwrap_or(ErrorCode::None), v, 2);
    encode(ApiKey::AddOffsetsToTxn, header, v, &AddOffsetsToTxnResponse::default().with_error_code(code.code()))
}

pub(super) async fn end_txn(l: &Session, header: &RequestHeader, req: EndTxnRequest) -> Reply {
    let v = header.request_api_version;
    let id = req.transactional_id.0.to_string();
    let access = l.access().await;
    let (pid, epoch, commit) = (req.producer_id.0, req.producer_epoch, req.committed);
    let t = &l.shim.transactions;
    // v5+ is transactions v2 (KIP-890 part 2): the epoch bumped, the new one answered.
    let r = match admit(l, &access, Operation::Write, &id) {
        Ok(()) if v >= 5 => t.end_txn_v2(&id, pid, epoch, commit).await,
        Ok(()) => t.end_txn(&id, pid, epoch, commit).await.map(|()| (-1, -1)),
        Err(e) => Err(e),
    };
    let body = match r {
        Ok((pid, epoch)) => EndTxnResponse::default().with_producer_id(ProducerId(pid)).with_producer_epoch(epoch),
        Err(code) => EndTxnResponse::default()
            .with_error_code(fenced_for(code, v, 2).code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    encode(ApiKey::EndTxn, header, v, &body)
}

pub(super) async fn describe_transactions(
    l: &Session,
    header: &RequestHeader,
    req: DescribeTransactionsRequest,
) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    let mut states = vec![];
    for id in &req.transactional_ids {
        let name = id.0.to_string();
        let base = describe_transactions_response::TransactionState::default()
            .with_transactional_id(id.clone())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_state(s(""))
            .with_transaction_start_time_ms(-1);
        let r = match admit(l, &access, Operation::Describe, &name) {
            Err(e) => Err(e),
            Ok(()) => match l.shim.transactions.describe(&name).await {
                Ok(Some(t)) => Ok(t),
                // Kafka's answer for an id with no state.
                Ok(None) => Err(ErrorCode::TransactionalIdNotFound),
                Err(e) => Err(e),
            },
        };
        states.push(match r {
            Err(code) => base.with_error_code(code.code()),
            Ok(t) => {
                let mut by_topic: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
                for p in &t.partitions {
                    let id: Option<[u8; 16]> = p.topic_id.as_slice().try_into().ok();
                    let topic = id.and_then(|id| l.shim.cluster.cached_topic_name(&id));
                    let topic =
                        topic.unwrap_or_else(|| uuid::Uuid::from_slice(&p.topic_id).unwrap_or_default().to_string());
                    by_topic.entry(topic).or_default().push(p.partition_index);
                }
                base.with_producer_id(ProducerId(t.producer_id))
                    .with_producer_epoch(t.producer_epoch as i16)
                    .with_transaction_state(s(&t.state))
                    .with_transaction_timeout_ms(t.timeout_ms)
                    .with_transaction_start_time_ms(t.started_ms)
                    .with_topics(
                        by_topic
                            .into_iter()
                            .map(|(topic, partitions)| {
                                describe_transactions_response::TopicData::default()
                                    .with_topic(TopicName(s(&topic)))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    )
            }
        });
    }
    encode(
        ApiKey::DescribeTransactions,
        header,
        v,
        &DescribeTransactionsResponse::default().with_transaction_states(states),
    )
}

pub(super) async fn list_transactions(l: &Session, header: &RequestHeader, req: ListTransactionsRequest) -> Reply {
    let v = header.request_api_version;
    let access = l.access().await;
    const STATES: [&str; 7] =
        ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "PrepareEpochFence"];
    let unknown: Vec<StrBytes> = req.state_filters.iter().filter(|f| !STATES.contains(&f.as_str())).cloned().collect();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let body = match l.shim.transactions.list().await {
        Err(code) => ListTransactionsResponse::default().with_error_code(code.code()),
        Ok(listed) => {
            let states = listed
                .transactions
                .into_iter()
                .filter(|(id, t)| {
                    access.allowed(Operation::Describe, Resource::TransactionalId, id)
                        && (req.state_filters.is_empty() || req.state_filters.iter().any(|f| f.as_str() == t.state))
                        && (req.producer_id_filters.is_empty()
                            || req.producer_id_filters.iter().any(|p| p.0 == t.producer_id))
                        && (v < 1
                            || req.duration_filter < 0
                            || (t.state == "Ongoing" && now - t.started_ms >= req.duration_filter))
                })
                .map(|(id, t)| {
                    list_transactions_response::TransactionState::default()
                        .with_transactional_id(TransactionalId(s(&id)))
                        .with_producer_id(ProducerId(t.producer_id))
                        .with_transaction_state(s(&t.state))
                })
                .collect();
            // As Kafka answers while some of its transaction-state partitions are loading: what it
            // has, and COORDINATOR_LOAD_IN_PROGRESS.
            let code = if listed.missing.is_some() { ErrorCode::CoordinatorLoadInProgress } else { ErrorCode::None };
            ListTransactionsResponse::default().with_error_code(code.code()).with_transaction_states(states)
        }
    };
    encode(ApiKey::ListTransactions, header, v, &body.with_unknown_state_filters(unknown))
}

/// TxnOffsetCommit, on the group's coordinator: the member checked as OffsetCommit checks it (v3+
/// name one), the offsets kept with the transaction until it ends (`stage_offsets`).
pub(super) async fn txn_offset_commit(l: &Session, header: &RequestHeader, req: TxnOffsetCommitRequest) -> Reply {
    let v = header.request_api_version;
    let id = req.transactional_id.0.to_string();
    let group_id = req.group_id.0.to_string();
    let member_id = req.member_id.to_string();
    let access = l.access().await;
    let mut check = authorize(&access, Operation::Write, &id)
        .and_then(|()| may(&access, Operation::Read, &group_id))
        .and_then(|()| owned(l, &group_id));
    // Kafka's `validateOffsetCommit` for a transactional commit: a member and generation are
    // checked when named; without them the commit is taken whatever the group's state.
    if check.is_ok() {
        let by = Committer::Transactional;
        check = l.shim.held.check_commit(&group_id, &member_id, req.generation_id, by).await;
    }
    // Per topic: the name, and per partition its index and the error so far.
    let mut answers: Vec<(TopicName, Vec<(i32, ErrorCode)>)> = vec![];
    let mut offsets = vec![];
    for t in &req.topics {
        let meta = l.topic(&access, Operation::Read, t.name.as_str()).await;
        let mut parts = vec![];
        for p in &t.partitions {
            let code = match (&check, &meta) {
                (Err(code), _) => *code,
                (_, Err(e)) if e.code == ErrorCode::TopicAuthorizationFailed => e.code,
                (_, Err(_)) => ErrorCode::UnknownTopicOrPartition,
                (Ok(()), Ok(m)) if l.partition(m, p.partition_index).is_err() => ErrorCode::UnknownTopicOrPartition,
                _ if !metadata_fits(p.committed_metadata.as_deref()) => ErrorCode::OffsetMetadataTooLarge,
                (Ok(()), Ok(m)) => {
                    offsets.push(diskless_proto::v1::PendingOffset {
                        group_id: group_id.clone(),
                        topic_id: m.id.to_vec(),
                        partition_index: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                    });
                    ErrorCode::None
                }
            };
            parts.push((p.partition_index, code));
        }
        answers.push((t.name.clone(), parts));
    }
    if !offsets.is_empty() {
        // v5+ (transactions v2) adds the group to the transaction itself, as Kafka's group
        // coordinator does (no AddOffsetsToTxn); a fenced producer reads INVALID_PRODUCER_EPOCH.
        let add_group = v >= 5;
        let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
        let staged = l.shim.transactions.stage_offsets(&id, pid, epoch, &group_id, offsets, add_group).await;
        let staged = staged.map_err(|c| if add_group { fenced_for(c, 0, 1) } else { c });
        if let Err(code) = staged {
            for (_, parts) in &mut answers {
                for (_, c) in parts.iter_mut().filter(|(_, c)| *c == ErrorCode::None) {
                    *c = code;
                }
            }
        }
    }
    let topics = answers
        .into_iter()
        .map(|(name, parts)| {
            txn_offset_commit_response::TxnOffsetCommitResponseTopic::default().with_name(name).with_partitions(
                parts
                    .into_iter()
                    .map(|(p, c)| {
                        txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                            .with_partition_index(p)
                            .with_error_code(c.code())
                    })
                    .collect(),
            )
        })
        .collect();
    encode(ApiKey::TxnOffsetCommit, header, v, &TxnOffsetCommitResponse::default().with_topics(topics))
}
