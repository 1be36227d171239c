//! `CoordinatorService`: the KIP-1164 API on every node, as conversions between the wire and the
//! domain, one file per family of calls.
//!
//! Each handler checks and converts its request (`server::convert`), splits it by metadata
//! partition, runs each part where it must run, and merges the parts' answers back in request
//! order (`fan_out`). Mutations and strict reads run on the metadata partition's leader through
//! `node::route`: locally when this node leads it, otherwise forwarded once as the typed command
//! to the leader. Clients may therefore send any request to any node; clients that know the
//! topology (AdminService.Status) save the hop by sending each part to its leader with the
//! `x-diskless-local` header (`request`: served here, never forwarded). FindBatches alone is served
//! by this node's own replicas (`find_batches`).
//!
//! Per-item problems are Kafka error codes in the response; a part that could not be routed gets
//! what `convert::route_failure` says (NOT_LEADER_OR_FOLLOWER, retriable, or REQUEST_TIMED_OUT when
//! the outcome is unknown) for its items.
//!
//! | file | calls |
//! | --- | --- |
//! | `request` | every call's timeout and `x-diskless-local` |
//! | `fan_out` | the split by metadata partition, the parts run at once, the merge |
//! | `topics` | CreatePartitions, DeleteTopics, AlterTopicConfigs (catalog first), ListTopics |
//! | `commit` | CommitFile |
//! | `offsets` | ListOffsets, DeleteRecords |
//! | `find_batches` | FindBatches |
//! | `files` | DescribeFiles, ListFilesToDelete, FenceObjects, ConfirmFilesDeleted |
//! | `producer_ids` | AllocateProducerIds |
//! | `producers` | DescribeProducers |
//! | `consumer_groups` | StoreGroup, CommitOffsets, FetchOffsets, ListGroups, DeleteGroups, DeleteOffsets |
//! | `broker_registry` | RegisterBroker, BrokerHeartbeat, UnregisterBroker, ListBrokers |
//! | `acls` | CreateAcls, DescribeAcls, DeleteAcls |
//! | `transactions` | EndTransaction |
//! | `transaction_state` | StoreTransaction, DescribeTransactions, ListTransactions |
//! | `share_states` | StoreShareState, ReadShareStates, DeleteShareStates (KIP-932 share groups) |
//! | `replace` | ReplaceBatches (KIP-1165 object consolidation's atomic replace) |
//! | `watch` | WatchPartitions (this node's replica's changes, streamed; never forwarded) |
//!
//! This module must not decide where a part runs (that is `node::route`) nor apply rules of the
//! domain (that is `state_machine`).

mod acls;
mod broker_registry;
mod commit;
mod consumer_groups;
mod fan_out;
mod files;
mod find_batches;
mod offsets;
mod producer_ids;
mod producers;
mod replace;
mod request;
mod share_states;
mod topics;
mod transaction_state;
mod transactions;
mod watch;

use std::sync::Arc;

use diskless_proto::v1::coordinator_service_server::CoordinatorService;
use diskless_proto::v1::*;
use tonic::{Request, Response, Status};

pub use request::LOCAL_HEADER;

use crate::node::Node;

/// The service; every node serves it.
pub struct CoordinatorApi {
    node: Arc<Node>,
}

impl CoordinatorApi {
    pub fn new(node: Arc<Node>) -> CoordinatorApi {
        CoordinatorApi { node }
    }
}

#[tonic::async_trait]
impl CoordinatorService for CoordinatorApi {
    type WatchPartitionsStream = watch::WatchStream;

    async fn watch_partitions(
        &self,
        r: Request<WatchPartitionsRequest>,
    ) -> Result<Response<Self::WatchPartitionsStream>, Status> {
        self.serve_watch_partitions(r).await
    }

    async fn create_partitions(
        &self,
        r: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        self.serve_create_partitions(r).await
    }

    async fn delete_topics(&self, r: Request<DeleteTopicsRequest>) -> Result<Response<DeleteTopicsResponse>, Status> {
        self.serve_delete_topics(r).await
    }

    async fn alter_topic_configs(
        &self,
        r: Request<AlterTopicConfigsRequest>,
    ) -> Result<Response<AlterTopicConfigsResponse>, Status> {
        self.serve_alter_topic_configs(r).await
    }

    async fn commit_file(&self, r: Request<CommitFileRequest>) -> Result<Response<CommitFileResponse>, Status> {
        self.serve_commit_file(r).await
    }

    async fn end_transaction(
        &self,
        r: Request<EndTransactionRequest>,
    ) -> Result<Response<EndTransactionResponse>, Status> {
        self.serve_end_transaction(r).await
    }

    async fn store_transaction(
        &self,
        r: Request<StoreTransactionRequest>,
    ) -> Result<Response<StoreTransactionResponse>, Status> {
        self.serve_store_transaction(r).await
    }

    async fn describe_transactions(
        &self,
        r: Request<DescribeTransactionsRequest>,
    ) -> Result<Response<DescribeTransactionsResponse>, Status> {
        self.serve_describe_transactions(r).await
    }

    async fn replace_batches(
        &self,
        r: Request<ReplaceBatchesRequest>,
    ) -> Result<Response<ReplaceBatchesResponse>, Status> {
        self.serve_replace_batches(r).await
    }

    async fn store_share_state(
        &self,
        r: Request<StoreShareStateRequest>,
    ) -> Result<Response<StoreShareStateResponse>, Status> {
        self.serve_store_share_state(r).await
    }

    async fn read_share_states(
        &self,
        r: Request<ReadShareStatesRequest>,
    ) -> Result<Response<ReadShareStatesResponse>, Status> {
        self.serve_read_share_states(r).await
    }

    async fn delete_share_states(
        &self,
        r: Request<DeleteShareStatesRequest>,
    ) -> Result<Response<DeleteShareStatesResponse>, Status> {
        self.serve_delete_share_states(r).await
    }

    async fn list_transactions(
        &self,
        r: Request<ListTransactionsRequest>,
    ) -> Result<Response<ListTransactionsResponse>, Status> {
        self.serve_list_transactions(r).await
    }

    async fn describe_producers(
        &self,
        r: Request<DescribeProducersRequest>,
    ) -> Result<Response<DescribeProducersResponse>, Status> {
        self.serve_describe_producers(r).await
    }

    async fn delete_records(
        &self,
        r: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        self.serve_delete_records(r).await
    }

    async fn list_offsets(&self, r: Request<ListOffsetsRequest>) -> Result<Response<ListOffsetsResponse>, Status> {
        self.serve_list_offsets(r).await
    }

    async fn find_batches(&self, r: Request<FindBatchesRequest>) -> Result<Response<FindBatchesResponse>, Status> {
        self.serve_find_batches(r).await
    }

    async fn describe_files(
        &self,
        r: Request<DescribeFilesRequest>,
    ) -> Result<Response<DescribeFilesResponse>, Status> {
        self.serve_describe_files(r).await
    }

    async fn list_files_to_delete(
        &self,
        r: Request<ListFilesToDeleteRequest>,
    ) -> Result<Response<ListFilesToDeleteResponse>, Status> {
        self.serve_list_files_to_delete(r).await
    }

    async fn confirm_files_deleted(
        &self,
        r: Request<ConfirmFilesDeletedRequest>,
    ) -> Result<Response<ConfirmFilesDeletedResponse>, Status> {
        self.serve_confirm_files_deleted(r).await
    }

    async fn allocate_producer_ids(
        &self,
        r: Request<AllocateProducerIdsRequest>,
    ) -> Result<Response<AllocateProducerIdsResponse>, Status> {
        self.serve_allocate_producer_ids(r).await
    }

    async fn fence_objects(&self, r: Request<FenceObjectsRequest>) -> Result<Response<FenceObjectsResponse>, Status> {
        self.serve_fence_objects(r).await
    }

    async fn store_group(&self, r: Request<StoreGroupRequest>) -> Result<Response<StoreGroupResponse>, Status> {
        self.serve_store_group(r).await
    }

    async fn commit_offsets(
        &self,
        r: Request<CommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        self.serve_commit_offsets(r).await
    }

    async fn fetch_offsets(&self, r: Request<FetchOffsetsRequest>) -> Result<Response<FetchOffsetsResponse>, Status> {
        self.serve_fetch_offsets(r).await
    }

    async fn list_groups(&self, r: Request<ListGroupsRequest>) -> Result<Response<ListGroupsResponse>, Status> {
        self.serve_list_groups(r).await
    }

    async fn delete_groups(&self, r: Request<DeleteGroupsRequest>) -> Result<Response<DeleteGroupsResponse>, Status> {
        self.serve_delete_groups(r).await
    }

    async fn delete_offsets(
        &self,
        r: Request<DeleteOffsetsRequest>,
    ) -> Result<Response<DeleteOffsetsResponse>, Status> {
        self.serve_delete_offsets(r).await
    }

    async fn register_broker(
        &self,
        r: Request<RegisterBrokerRequest>,
    ) -> Result<Response<RegisterBrokerResponse>, Status> {
        self.serve_register_broker(r).await
    }

    async fn broker_heartbeat(
        &self,
        r: Request<BrokerHeartbeatRequest>,
    ) -> Result<Response<BrokerHeartbeatResponse>, Status> {
        self.serve_broker_heartbeat(r).await
    }

    async fn unregister_broker(
        &self,
        r: Request<UnregisterBrokerRequest>,
    ) -> Result<Response<UnregisterBrokerResponse>, Status> {
        self.serve_unregister_broker(r).await
    }

    async fn list_brokers(&self, r: Request<ListBrokersRequest>) -> Result<Response<ListBrokersResponse>, Status> {
        self.serve_list_brokers(r).await
    }

    async fn list_topics(&self, r: Request<ListTopicsRequest>) -> Result<Response<ListTopicsResponse>, Status> {
        self.serve_list_topics(r).await
    }

    async fn create_acls(&self, r: Request<CreateAclsRequest>) -> Result<Response<CreateAclsResponse>, Status> {
        self.serve_create_acls(r).await
    }

    async fn describe_acls(&self, r: Request<DescribeAclsRequest>) -> Result<Response<DescribeAclsResponse>, Status> {
        self.serve_describe_acls(r).await
    }

    async fn delete_acls(&self, r: Request<DeleteAclsRequest>) -> Result<Response<DeleteAclsResponse>, Status> {
        self.serve_delete_acls(r).await
    }
}
