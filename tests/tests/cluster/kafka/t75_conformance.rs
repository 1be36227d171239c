//! Protocol conformance: for every API the broker advertises (ApiVersions) and every version in its
//! range, a request built from the protocol schema (`kafka-protocol`'s messages, at that version)
//! naming what does not exist — a topic, a group — and its answer checked field by field against
//! what a Kafka broker answers: the error of each item (UNKNOWN_TOPIC_OR_PARTITION,
//! GROUP_ID_NOT_FOUND, SECURITY_DISABLED without an authorizer, …, as Kafka's `KafkaApis` gives
//! them), the correlation id, nothing left after the body, `throttle_time_ms` 0. Every flexible
//! request also carries an unknown tagged field in its header, which must be ignored. A version
//! past the range closes the connection, as Kafka's `SocketServer` does; ApiVersions at any
//! version is answered (v0 and UNSUPPORTED_VERSION when it is not spoken).
//!
//! The clients' side of the same answers (librdkafka, kafka-python, aiokafka) is
//! `tests/python/kafka_conformance.py`.

use std::collections::BTreeMap;

use bytes::{BufMut, BytesMut};
use diskless_cluster_tests::*;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::net::TcpStream;

const UNKNOWN: &str = "no-such-topic";
const NO_GROUP: &str = "no-such-group";
const NO_TXN: &str = "no-such-transactional-id";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn topic(v: &str) -> TopicName {
    TopicName(s(v))
}

/// The request of `api` at version `v` that names what does not exist, and the error codes a
/// Kafka broker answers it with (every error field of the answer, in order).
fn fixture(api: ApiKey, v: i16) -> (RequestKind, Vec<i16>) {
    use RequestKind as R;
    match api {
        ApiKey::Produce => (
            R::Produce(ProduceRequest::default().with_acks(-1).with_timeout_ms(5_000).with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(topic(UNKNOWN))
                    .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0)]),
            ])),
            vec![3],
        ),
        ApiKey::Fetch => (
            R::Fetch(
                FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(0)
                    .with_min_bytes(1)
                    .with_max_bytes(if v >= 3 { 1 << 20 } else { i32::MAX })
                    .with_topics(vec![fetch_request::FetchTopic::default()
                        .with_topic(topic(UNKNOWN))
                        .with_partitions(vec![fetch_request::FetchPartition::default()
                            .with_partition(0)
                            .with_partition_max_bytes(1 << 20)])]),
            ),
            // The top-level code (v7+; 0 before), then the partition's.
            vec![0, 3],
        ),
        ApiKey::ListOffsets => (
            R::ListOffsets(ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default().with_name(topic(UNKNOWN)).with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1),
                ]),
            ])),
            vec![3],
        ),
        ApiKey::Metadata => (
            R::Metadata(
                MetadataRequest::default()
                    .with_topics(Some(vec![
                        metadata_request::MetadataRequestTopic::default().with_name(Some(topic(UNKNOWN)))
                    ]))
                    .with_allow_auto_topic_creation(v < 4), // v4+; auto-creation is off anyway
            ),
            vec![3],
        ),
        ApiKey::OffsetCommit => (
            R::OffsetCommit(OffsetCommitRequest::default().with_group_id(GroupId(s(NO_GROUP))).with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default().with_name(topic(UNKNOWN)).with_partitions(
                    vec![offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(5)],
                ),
            ])),
            vec![3],
        ),
        ApiKey::OffsetFetch if v >= 8 => (
            R::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s(NO_GROUP)))
                        .with_topics(Some(vec![offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(topic(UNKNOWN))
                            .with_partition_indexes(vec![0])])),
                ])),
            // Kafka: an unknown partition of a group has no offset (−1), and no error.
            vec![0, 0],
        ),
        ApiKey::OffsetFetch => (
            R::OffsetFetch(OffsetFetchRequest::default().with_group_id(GroupId(s(NO_GROUP))).with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(topic(UNKNOWN))
                    .with_partition_indexes(vec![0]),
            ]))),
            // The top-level code (v2+; 0 before), then the partition's: no offset (−1), no error.
            vec![0, 0],
        ),
        ApiKey::FindCoordinator => (
            R::FindCoordinator(
                FindCoordinatorRequest::default()
                    .with_key(if v < 4 { s(NO_GROUP) } else { s("") })
                    .with_coordinator_keys(if v >= 4 { vec![s(NO_GROUP)] } else { vec![] }),
            ),
            vec![0],
        ),
        ApiKey::Heartbeat => (
            R::Heartbeat(
                HeartbeatRequest::default()
                    .with_group_id(GroupId(s(NO_GROUP)))
                    .with_generation_id(1)
                    .with_member_id(s("conformance-member")),
            ),
            vec![25],
        ),
        ApiKey::SyncGroup => (
            R::SyncGroup(
                SyncGroupRequest::default()
                    .with_group_id(GroupId(s(NO_GROUP)))
                    .with_generation_id(1)
                    .with_member_id(s("conformance-member"))
                    .with_protocol_type(if v >= 5 { Some(s("consumer")) } else { None })
                    .with_protocol_name(if v >= 5 { Some(s("range")) } else { None }),
            ),
            vec![25],
        ),
        ApiKey::LeaveGroup if v >= 3 => (
            R::LeaveGroup(LeaveGroupRequest::default().with_group_id(GroupId(s(NO_GROUP))).with_members(vec![
                leave_group_request::MemberIdentity::default().with_member_id(s("conformance-member")),
            ])),
            // Kafka's `classicGroupLeave`: an unknown group is UNKNOWN_MEMBER_ID for the request.
            vec![25],
        ),
        ApiKey::LeaveGroup => (
            R::LeaveGroup(
                LeaveGroupRequest::default()
                    .with_group_id(GroupId(s(NO_GROUP)))
                    .with_member_id(s("conformance-member")),
            ),
            vec![25],
        ),
        ApiKey::JoinGroup => (
            R::JoinGroup(
                JoinGroupRequest::default()
                    .with_group_id(GroupId(s(&format!("conformance-join-{v}"))))
                    .with_session_timeout_ms(10_000)
                    .with_rebalance_timeout_ms(if v >= 1 { 10_000 } else { -1 })
                    .with_protocol_type(s("consumer"))
                    .with_protocols(
                        vec![join_group_request::JoinGroupRequestProtocol::default().with_name(s("range"))],
                    ),
            ),
            // v4+: a member without an id is given one and asked to join again.
            if v >= 4 { vec![79] } else { vec![0] },
        ),
        ApiKey::DescribeGroups => {
            (R::DescribeGroups(DescribeGroupsRequest::default().with_groups(vec![GroupId(s(NO_GROUP))])), vec![0])
        }
        ApiKey::ListGroups => (R::ListGroups(ListGroupsRequest::default()), vec![0]),
        ApiKey::SaslHandshake => {
            (R::SaslHandshake(SaslHandshakeRequest::default().with_mechanism(s("PLAIN"))), vec![34])
        }
        ApiKey::SaslAuthenticate => (R::SaslAuthenticate(SaslAuthenticateRequest::default()), vec![34]),
        ApiKey::ApiVersions => (
            R::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(if v >= 3 { s("conformance") } else { s("") })
                    .with_client_software_version(if v >= 3 { s("1") } else { s("") }),
            ),
            vec![0],
        ),
        ApiKey::CreateTopics => (
            R::CreateTopics(
                CreateTopicsRequest::default().with_timeout_ms(15_000).with_validate_only(v >= 1).with_topics(vec![
                    create_topics_request::CreatableTopic::default()
                        .with_name(topic(&format!("conformance-created-{v}")))
                        .with_num_partitions(1)
                        .with_replication_factor(-1)
                        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                            .with_name(s("diskless.enable"))
                            .with_value(Some(s("true")))]),
                ]),
            ),
            vec![0],
        ),
        ApiKey::DeleteTopics => (
            R::DeleteTopics(
                DeleteTopicsRequest::default()
                    .with_timeout_ms(15_000)
                    .with_topic_names(if v < 6 { vec![topic(UNKNOWN)] } else { vec![] })
                    .with_topics(if v >= 6 {
                        vec![delete_topics_request::DeleteTopicState::default().with_name(Some(topic(UNKNOWN)))]
                    } else {
                        vec![]
                    }),
            ),
            vec![3],
        ),
        ApiKey::DeleteRecords => (
            R::DeleteRecords(DeleteRecordsRequest::default().with_timeout_ms(5_000).with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default().with_name(topic(UNKNOWN)).with_partitions(vec![
                    delete_records_request::DeleteRecordsPartition::default().with_partition_index(0).with_offset(1),
                ]),
            ])),
            vec![3],
        ),
        ApiKey::InitProducerId => (
            R::InitProducerId(
                InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000),
            ),
            vec![0],
        ),
        ApiKey::OffsetForLeaderEpoch => (
            R::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(
                vec![offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(topic(UNKNOWN))
                    .with_partitions(vec![offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_leader_epoch(0)])],
            )),
            vec![3],
        ),
        ApiKey::CreatePartitions => (
            R::CreatePartitions(
                CreatePartitionsRequest::default().with_timeout_ms(15_000).with_validate_only(true).with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default().with_name(topic(UNKNOWN)).with_count(3),
                ]),
            ),
            vec![3],
        ),
        ApiKey::DescribeConfigs => (
            R::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(UNKNOWN)),
            ])),
            vec![3],
        ),
        ApiKey::AlterConfigs => (
            R::AlterConfigs(AlterConfigsRequest::default().with_validate_only(true).with_resources(vec![
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(UNKNOWN))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(s("retention.ms"))
                        .with_value(Some(s("1000")))]),
            ])),
            vec![3],
        ),
        ApiKey::IncrementalAlterConfigs => (
            R::IncrementalAlterConfigs(
                IncrementalAlterConfigsRequest::default().with_validate_only(true).with_resources(vec![
                    incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(s(UNKNOWN))
                        .with_configs(vec![incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s("retention.ms"))
                            .with_config_operation(0)
                            .with_value(Some(s("1000")))]),
                ]),
            ),
            vec![3],
        ),
        ApiKey::DeleteGroups => {
            (R::DeleteGroups(DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(NO_GROUP))])), vec![69])
        }
        ApiKey::OffsetDelete => (
            R::OffsetDelete(OffsetDeleteRequest::default().with_group_id(GroupId(s(NO_GROUP))).with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default().with_name(topic(UNKNOWN)).with_partitions(
                    vec![offset_delete_request::OffsetDeleteRequestPartition::default().with_partition_index(0)],
                ),
            ])),
            vec![69],
        ),
        ApiKey::DescribeAcls => (
            R::DescribeAcls(
                DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(1)
                    .with_operation(1)
                    .with_permission_type(1),
            ),
            vec![54],
        ),
        ApiKey::CreateAcls => (
            R::CreateAcls(CreateAclsRequest::default().with_creations(
                vec![create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:alice"))
                .with_host(s("*"))
                .with_operation(3)
                .with_permission_type(3)],
            )),
            vec![54],
        ),
        ApiKey::DeleteAcls => (
            R::DeleteAcls(DeleteAclsRequest::default().with_filters(
                vec![delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1)],
            )),
            vec![54],
        ),
        // A join without its rebalance timeout (Kafka's validation).
        ApiKey::ConsumerGroupHeartbeat => (
            R::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(s(NO_GROUP)))
                    .with_member_id(s("conformance-member")),
            ),
            vec![42],
        ),
        ApiKey::ConsumerGroupDescribe => (
            R::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(NO_GROUP))]),
            ),
            vec![69],
        ),
        // Share groups: a join without subscribed topics (Kafka's validation), an unknown group, a
        // share fetch without a session, an acknowledgement opening one.
        ApiKey::ShareGroupHeartbeat => (
            R::ShareGroupHeartbeat(
                ShareGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(s(NO_GROUP)))
                    .with_member_id(s("conformance-member")),
            ),
            vec![42],
        ),
        ApiKey::ShareGroupDescribe => (
            R::ShareGroupDescribe(ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(NO_GROUP))])),
            vec![69],
        ),
        ApiKey::ShareFetch => (
            R::ShareFetch(
                ShareFetchRequest::default()
                    .with_group_id(Some(GroupId(s(NO_GROUP))))
                    .with_member_id(Some(s("conformance-member")))
                    .with_share_session_epoch(1),
            ),
            vec![122],
        ),
        ApiKey::ShareAcknowledge => (
            R::ShareAcknowledge(
                ShareAcknowledgeRequest::default()
                    .with_group_id(Some(GroupId(s(NO_GROUP))))
                    .with_member_id(Some(s("conformance-member")))
                    .with_share_session_epoch(0),
            ),
            vec![123],
        ),
        ApiKey::DescribeShareGroupOffsets => (
            R::DescribeShareGroupOffsets(DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(GroupId(s(NO_GROUP)))
                    .with_topics(None),
            ])),
            vec![0],
        ),
        ApiKey::AlterShareGroupOffsets => (
            R::AlterShareGroupOffsets(AlterShareGroupOffsetsRequest::default().with_group_id(GroupId(s(NO_GROUP)))),
            vec![69],
        ),
        ApiKey::DeleteShareGroupOffsets => (
            R::DeleteShareGroupOffsets(DeleteShareGroupOffsetsRequest::default().with_group_id(GroupId(s(NO_GROUP)))),
            vec![69],
        ),
        ApiKey::AddPartitionsToTxn => (
            R::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(s(NO_TXN)))
                    .with_v3_and_below_producer_id(ProducerId(1))
                    .with_v3_and_below_topics(vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(topic(UNKNOWN))
                        .with_partitions(vec![0])]),
            ),
            vec![3],
        ),
        ApiKey::AddOffsetsToTxn => (
            R::AddOffsetsToTxn(
                AddOffsetsToTxnRequest::default()
                    .with_transactional_id(TransactionalId(s(NO_TXN)))
                    .with_producer_id(ProducerId(1))
                    .with_group_id(GroupId(s(NO_GROUP))),
            ),
            vec![49],
        ),
        ApiKey::EndTxn => (
            R::EndTxn(
                EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(s(NO_TXN)))
                    .with_producer_id(ProducerId(1))
                    .with_committed(true),
            ),
            vec![49],
        ),
        ApiKey::TxnOffsetCommit => (
            R::TxnOffsetCommit(
                TxnOffsetCommitRequest::default()
                    .with_transactional_id(TransactionalId(s(NO_TXN)))
                    .with_group_id(GroupId(s(NO_GROUP)))
                    .with_producer_id(ProducerId(1))
                    .with_generation_id(-1)
                    .with_topics(vec![txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(topic(UNKNOWN))
                        .with_partitions(vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                            .with_committed_offset(1)])]),
            ),
            vec![3],
        ),
        ApiKey::DescribeTransactions => (
            R::DescribeTransactions(
                DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s(NO_TXN))]),
            ),
            vec![105],
        ),
        ApiKey::ListTransactions => (R::ListTransactions(ListTransactionsRequest::default()), vec![0]),
        ApiKey::DescribeProducers => (
            R::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(topic(UNKNOWN))
                    .with_partition_indexes(vec![0]),
            ])),
            vec![3],
        ),
        other => panic!("the broker advertises {other:?}, which this suite does not know: add its fixture"),
    }
}

/// Every error field of an answer, in order, and its `throttle_time_ms` (0 where it has none).
fn codes(r: &ResponseKind) -> (Vec<i16>, i32) {
    use ResponseKind as R;
    match r {
        R::Produce(r) => (
            r.responses.iter().flat_map(|t| t.partition_responses.iter().map(|p| p.error_code)).collect(),
            r.throttle_time_ms,
        ),
        R::Fetch(r) => {
            let mut c = vec![r.error_code];
            c.extend(r.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            (c, r.throttle_time_ms)
        }
        R::ListOffsets(r) => {
            (r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect(), r.throttle_time_ms)
        }
        R::Metadata(r) => (r.topics.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::OffsetCommit(r) => {
            (r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect(), r.throttle_time_ms)
        }
        R::OffsetFetch(r) if !r.groups.is_empty() => {
            let mut c = vec![];
            for g in &r.groups {
                c.push(g.error_code);
                c.extend(g.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            }
            (c, r.throttle_time_ms)
        }
        R::OffsetFetch(r) => {
            let mut c = vec![r.error_code];
            c.extend(r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            (c, r.throttle_time_ms)
        }
        R::FindCoordinator(r) if !r.coordinators.is_empty() => {
            (r.coordinators.iter().map(|c| c.error_code).collect(), r.throttle_time_ms)
        }
        R::FindCoordinator(r) => (vec![r.error_code], r.throttle_time_ms),
        R::Heartbeat(r) => (vec![r.error_code], r.throttle_time_ms),
        R::SyncGroup(r) => (vec![r.error_code], r.throttle_time_ms),
        R::LeaveGroup(r) if !r.members.is_empty() => {
            let mut c = vec![r.error_code];
            c.extend(r.members.iter().map(|m| m.error_code));
            (c, r.throttle_time_ms)
        }
        R::LeaveGroup(r) => (vec![r.error_code], r.throttle_time_ms),
        R::JoinGroup(r) => (vec![r.error_code], r.throttle_time_ms),
        R::DescribeGroups(r) => (r.groups.iter().map(|g| g.error_code).collect(), r.throttle_time_ms),
        R::ListGroups(r) => (vec![r.error_code], r.throttle_time_ms),
        R::SaslHandshake(r) => (vec![r.error_code], 0),
        R::SaslAuthenticate(r) => (vec![r.error_code], 0),
        R::ApiVersions(r) => (vec![r.error_code], r.throttle_time_ms),
        R::CreateTopics(r) => (r.topics.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::DeleteTopics(r) => (r.responses.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::DeleteRecords(r) => {
            (r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect(), r.throttle_time_ms)
        }
        R::InitProducerId(r) => (vec![r.error_code], r.throttle_time_ms),
        R::OffsetForLeaderEpoch(r) => {
            (r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect(), r.throttle_time_ms)
        }
        R::CreatePartitions(r) => (r.results.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::DescribeConfigs(r) => (r.results.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::AlterConfigs(r) => (r.responses.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::IncrementalAlterConfigs(r) => (r.responses.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::DeleteGroups(r) => (r.results.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::OffsetDelete(r) => {
            let mut c = vec![r.error_code];
            c.extend(r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            (c, r.throttle_time_ms)
        }
        R::DescribeAcls(r) => (vec![r.error_code], r.throttle_time_ms),
        R::CreateAcls(r) => (r.results.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::DeleteAcls(r) => (r.filter_results.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::ConsumerGroupHeartbeat(r) => (vec![r.error_code], r.throttle_time_ms),
        R::ConsumerGroupDescribe(r) => (r.groups.iter().map(|g| g.error_code).collect(), r.throttle_time_ms),
        R::ShareGroupHeartbeat(r) => (vec![r.error_code], r.throttle_time_ms),
        R::ShareGroupDescribe(r) => (r.groups.iter().map(|g| g.error_code).collect(), r.throttle_time_ms),
        R::ShareFetch(r) => {
            let mut c = vec![r.error_code];
            c.extend(r.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            (c, r.throttle_time_ms)
        }
        R::ShareAcknowledge(r) => {
            let mut c = vec![r.error_code];
            c.extend(r.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            (c, r.throttle_time_ms)
        }
        R::DescribeShareGroupOffsets(r) => (r.groups.iter().map(|g| g.error_code).collect(), r.throttle_time_ms),
        R::AlterShareGroupOffsets(r) => {
            let mut c = vec![r.error_code];
            c.extend(r.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            (c, r.throttle_time_ms)
        }
        R::DeleteShareGroupOffsets(r) => {
            let mut c = vec![r.error_code];
            c.extend(r.responses.iter().map(|t| t.error_code));
            (c, r.throttle_time_ms)
        }
        R::AddPartitionsToTxn(r) => (
            r.results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
                .collect(),
            r.throttle_time_ms,
        ),
        R::AddOffsetsToTxn(r) => (vec![r.error_code], r.throttle_time_ms),
        R::EndTxn(r) => (vec![r.error_code], r.throttle_time_ms),
        R::TxnOffsetCommit(r) => {
            (r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect(), r.throttle_time_ms)
        }
        R::DescribeTransactions(r) => (r.transaction_states.iter().map(|t| t.error_code).collect(), r.throttle_time_ms),
        R::ListTransactions(r) => (vec![r.error_code], r.throttle_time_ms),
        R::DescribeProducers(r) => {
            (r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect(), r.throttle_time_ms)
        }
        other => panic!("no reader for {other:?}"),
    }
}

/// A request header and an empty body for `api` at a version the broker does not speak.
fn unspoken(api: i16, version: i16, header_version: i16) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(s("diskless-conformance")));
    let mut b = BytesMut::new();
    header.encode(&mut b, header_version).unwrap();
    b.put_slice(&[0; 8]);
    b.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_api_and_version_answers_as_kafka_does() {
    let c = Cluster::start(3, Options { metadata_partitions: 2, ..Default::default() }).await;
    let broker = BrokerProc::start(
        &c,
        "a",
        &TestStorage::Local(c.path("objects")),
        &BrokerOptions { kafka: true, ..BrokerOptions::default() },
    )
    .await;
    let addr = broker.kafka_addr.clone().unwrap();
    let versions: ApiVersionsResponse = kafka_call(&addr, ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
    assert_eq!(versions.error_code, 0);

    let mut checked = 0;
    let mut differences: BTreeMap<String, String> = BTreeMap::new();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    for a in &versions.api_keys {
        let api = ApiKey::try_from(a.api_key).expect("an API kafka-protocol knows");
        for v in a.min_version..=a.max_version {
            let (req, want) = fixture(api, v);
            let correlation = 1000 + checked;
            let Some(resp) = kafka_any(&mut stream, api, v, correlation, true, &req).await else {
                panic!("{api:?} v{v}: the connection was closed (a spoken version must be answered)");
            };
            let (got, throttle) = codes(&resp);
            if got != want {
                differences.insert(format!("{api:?} v{v}"), format!("error codes {got:?}, Kafka's {want:?}"));
            }
            assert_eq!(throttle, 0, "{api:?} v{v}: throttle_time_ms");
            checked += 1;
        }
        // One version past the range closes the connection (ApiVersions excepted).
        if api != ApiKey::ApiVersions {
            let past = a.max_version + 1;
            let hv = api.request_header_version(a.max_version);
            let closed = exchange(&mut stream, &unspoken(a.api_key, past, hv)).await.is_none();
            assert!(closed, "{api:?} v{past} (unspoken) must close the connection");
            stream = TcpStream::connect(&addr).await.unwrap();
        }
    }
    assert!(differences.is_empty(), "answers that differ from Kafka's: {differences:#?}");
    println!("FIGURE conformance: {checked} API versions of {} APIs answered as Kafka does", versions.api_keys.len());

    // ApiVersions at a version it does not speak: v0, UNSUPPORTED_VERSION, the list.
    let body = unspoken(ApiKey::ApiVersions as i16, 127, 1);
    let mut raw = exchange(&mut stream, &body).await.expect("ApiVersions is answered whatever its version");
    let h = ResponseHeader::decode(&mut raw, 0).unwrap();
    assert_eq!(h.correlation_id, 7);
    let r = ApiVersionsResponse::decode(&mut raw, 0).unwrap();
    assert_eq!(r.error_code, 35);
    assert_eq!(r.api_keys.len(), versions.api_keys.len());

    // The same answers through three clients' own APIs.
    if kafka_clients_available() {
        run_python_checks("kafka_conformance.py", vec![addr], "ALL CONFORMANCE CHECKS PASSED").await;
    }
}
