//! `BrokerService`: the broker shim's own gRPC API (topics, produce, fetch, delete records,
//! list offsets) over the shim's pipeline. Kafka clients get the Kafka protocol later; this API is
//! what the demo client and the end-to-end tests use.

use std::sync::Arc;

use bytes::Bytes;
use diskless_proto::broker::broker_service_server::BrokerService;
use diskless_proto::broker::*;
use diskless_proto::v1 as c;
use diskless_proto::ErrorCode;
use tonic::{Request, Response, Status};

use crate::error::KafkaError;
use crate::fetch::FetchPartition;
use crate::shim::Shim;

pub struct BrokerApi {
    shim: Arc<Shim>,
}

impl BrokerApi {
    pub fn new(shim: Arc<Shim>) -> BrokerApi {
        BrokerApi { shim }
    }

    async fn topic_id(&self, name: &str) -> Result<[u8; 16], KafkaError> {
        match self.shim.cluster.topic(name).await {
            Ok(Some(t)) => Ok(t.id),
            Ok(None) => Err(KafkaError::new(ErrorCode::UnknownTopicOrPartition, format!("no topic named {name:?}"))),
            Err(s) => Err(KafkaError::unavailable("list topics", &s)),
        }
    }
}

fn fields(e: &Option<KafkaError>) -> (i32, Option<String>) {
    match e {
        None => (0, None),
        Some(e) => (e.code.wire(), Some(e.message.clone())),
    }
}

#[tonic::async_trait]
impl BrokerService for BrokerApi {
    async fn create_topic(
        &self,
        request: Request<CreateTopicRequest>,
    ) -> Result<Response<CreateTopicResponse>, Status> {
        let r = request.into_inner();
        let id = uuid::Uuid::new_v4();
        let req = c::CreatePartitionsRequest {
            topics: vec![c::create_partitions_request::CreatablePartitions {
                topic_id: id.as_bytes().to_vec(),
                name: r.name.clone(),
                num_partitions: r.partitions,
                configs: Some(c::TopicConfigs {
                    retention_ms: r.retention_ms,
                    retention_bytes: r.retention_bytes,
                    ..Default::default()
                }),
            }],
            timeout_ms: 30_000,
        };
        let out = self.shim.cluster.call_once(|mut cl| async move { cl.create_partitions(req).await }).await;
        let err = match out {
            Ok(resp) => {
                resp.topics.into_iter().next().and_then(|t| KafkaError::from_wire(t.error_code, t.error_message))
            }
            Err(s) => Some(KafkaError::unavailable("create topic", &s)),
        };
        let (error_code, error_message) = fields(&err);
        let topic_id = if err.is_none() { id.as_bytes().to_vec() } else { vec![] };
        Ok(Response::new(CreateTopicResponse { error_code, error_message, topic_id }))
    }

    async fn delete_topic(
        &self,
        request: Request<DeleteTopicRequest>,
    ) -> Result<Response<DeleteTopicResponse>, Status> {
        let name = request.into_inner().name;
        let err = match self.topic_id(&name).await {
            Err(e) => Some(e),
            Ok(id) => {
                let req = c::DeleteTopicsRequest {
                    topics: vec![c::delete_topics_request::DeletableTopicState { topic_id: id.to_vec() }],
                    timeout_ms: 30_000,
                };
                self.shim.cluster.forget_topic(&name);
                match self.shim.cluster.call_once(|mut cl| async move { cl.delete_topics(req).await }).await {
                    Ok(r) => r
                        .responses
                        .into_iter()
                        .next()
                        .and_then(|t| KafkaError::from_wire(t.error_code, t.error_message)),
                    Err(s) => Some(KafkaError::unavailable("delete topic", &s)),
                }
            }
        };
        let (error_code, error_message) = fields(&err);
        Ok(Response::new(DeleteTopicResponse { error_code, error_message }))
    }

    async fn produce(&self, request: Request<ProduceRequest>) -> Result<Response<ProduceResponse>, Status> {
        let r = request.into_inner();
        let result = match self.topic_id(&r.topic).await {
            Ok(id) => self.shim.producer.produce(id, r.partition, Bytes::from(r.records)).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            if e.code == ErrorCode::UnknownTopicOrPartition {
                self.shim.cluster.forget_topic(&r.topic);
            }
        }
        let ok = result.as_ref().ok();
        let (error_code, error_message) = fields(&result.as_ref().err().cloned());
        Ok(Response::new(ProduceResponse {
            error_code,
            error_message,
            base_offset: ok.map_or(-1, |a| a.base_offset),
            log_append_time: ok.map_or(-1, |a| a.log_append_time),
            log_start_offset: ok.map_or(-1, |a| a.log_start_offset),
        }))
    }

    async fn fetch(&self, request: Request<FetchRequest>) -> Result<Response<FetchResponse>, Status> {
        let r = request.into_inner();
        let result = match self.topic_id(&r.topic).await {
            Err(e) => Err(e),
            Ok(id) => {
                let part = FetchPartition {
                    topic_id: id,
                    partition: r.partition,
                    offset: r.offset,
                    max_bytes: r.max_bytes,
                    read_committed: false,
                };
                self.shim.fetcher.fetch(&[part], r.max_bytes).await.map(|mut v| v.remove(0))
            }
        };
        Ok(Response::new(match result {
            Ok(f) => {
                let (error_code, error_message) = fields(&f.error);
                FetchResponse {
                    error_code,
                    error_message,
                    high_watermark: f.high_watermark,
                    log_start_offset: f.log_start_offset,
                    records: f.records.to_vec(),
                }
            }
            Err(e) => FetchResponse {
                error_code: e.code.wire(),
                error_message: Some(e.message),
                high_watermark: -1,
                log_start_offset: -1,
                records: vec![],
            },
        }))
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        let r = request.into_inner();
        let result = match self.topic_id(&r.topic).await {
            Err(e) => Err(e),
            Ok(id) => self.shim.cluster.delete_records_before(id, r.partition, r.offset, 30_000).await,
        };
        let (error_code, error_message) = fields(&result.as_ref().err().cloned());
        Ok(Response::new(DeleteRecordsResponse {
            error_code,
            error_message,
            low_watermark: *result.as_ref().unwrap_or(&-1),
        }))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let r = request.into_inner();
        let result = match self.topic_id(&r.topic).await {
            Err(e) => Err(e),
            Ok(id) => self.shim.cluster.list_offset(id, r.partition, r.timestamp).await,
        };
        let (error_code, error_message) = fields(&result.as_ref().err().cloned());
        let (timestamp, offset) = *result.as_ref().unwrap_or(&(-1, -1));
        Ok(Response::new(ListOffsetsResponse { error_code, error_message, offset, timestamp }))
    }

    async fn inject_storage_fault(
        &self,
        request: Request<StorageFaultRequest>,
    ) -> Result<Response<StorageFaultResponse>, Status> {
        use crate::storage::faulty::{Action, Operation};
        let Some(faults) = &self.shim.store_faults else {
            return Err(Status::permission_denied("fault injection is off (allow_fault_injection = false)"));
        };
        let r = request.into_inner();
        let mut ops: Vec<Operation> = r
            .operations()
            .map(|o| match o {
                StorageOperation::Put => Operation::Put,
                StorageOperation::Get => Operation::Get,
                StorageOperation::Delete => Operation::Delete,
                StorageOperation::List => Operation::List,
            })
            .collect();
        if ops.is_empty() {
            ops = vec![Operation::Put, Operation::Get, Operation::Delete, Operation::List];
        }
        let action = match r.action() {
            StorageFaultAction::Heal => None,
            StorageFaultAction::Delay => Some(Action::Delay(std::time::Duration::from_millis(r.delay_ms))),
            StorageFaultAction::Fail => Some(Action::Fail),
            StorageFaultAction::FailAfter => Some(Action::FailAfter),
            StorageFaultAction::Hang => Some(Action::Hang),
        };
        tracing::warn!(?ops, ?action, percent = r.percent, "object storage fault injected");
        faults.set(&ops, action, r.percent);
        Ok(Response::new(StorageFaultResponse {}))
    }
}
