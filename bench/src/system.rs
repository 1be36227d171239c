//! The two systems behind one set of operations, so every workload runs the same way on both.

use std::sync::Arc;

use anyhow::Context;
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::*;
use tonic::transport::Channel;
use uuid::Uuid;

use crate::postgres;

/// One batch coordinate of a commit: partition and record count.
#[derive(Debug, Clone, Copy)]
pub struct Coord {
    pub partition: i32,
    pub records: i64,
}

/// A client connection of one system (one per simulated broker).
pub enum Conn {
    /// Commits go through the broker's client (each metadata partition's part straight to its
    /// leader, as a broker does); reads to this connection's node.
    Ours {
        client: CoordinatorServiceClient<Channel>,
        broker: Box<diskless_broker_shim::coordinator::Coordinators>,
        last_applied: Vec<GroupIndex>,
    },
    Pg(
        tokio_postgres::Client,
        Arc<tokio_postgres::Statement>,
        Arc<tokio_postgres::Statement>,
        Arc<tokio_postgres::Statement>,
    ),
}

#[derive(Clone)]
pub enum System {
    Ours { addrs: Vec<String> },
    Pg { url: String },
}

impl System {
    pub fn name(&self) -> &'static str {
        match self {
            System::Ours { .. } => "raft-coordinator",
            System::Pg { .. } => "postgresql",
        }
    }

    /// A new connection; `i` spreads connections over the nodes.
    pub async fn connect(&self, i: usize) -> anyhow::Result<Conn> {
        match self {
            System::Ours { addrs } => {
                let a = &addrs[i % addrs.len()];
                let ch =
                    tonic::transport::Endpoint::from_shared(format!("http://{a}"))?.tcp_nodelay(true).connect().await?;
                let broker = diskless_broker_shim::coordinator::Coordinators::connect(addrs).await?;
                Ok(Conn::Ours {
                    client: CoordinatorServiceClient::new(ch).max_decoding_message_size(256 << 20),
                    broker: Box::new(broker),
                    last_applied: vec![],
                })
            }
            System::Pg { url } => {
                let c = postgres::connect(url).await?;
                let commit = c
                    .prepare("SELECT idx, error_code, assigned_base_offset FROM commit_file($1, $2, $3, $4, $5::text::commit_batch[])")
                    .await?;
                let find = c.prepare(postgres::FIND_BATCHES).await?;
                let offsets = c.prepare(postgres::LOG_OFFSETS).await?;
                Ok(Conn::Pg(c, Arc::new(commit), Arc::new(find), Arc::new(offsets)))
            }
        }
    }

    /// Creates a topic of `partitions` partitions.
    pub async fn create_topic(&self, topic: Uuid, partitions: i32) -> anyhow::Result<()> {
        match self {
            System::Ours { addrs } => {
                let mut c = CoordinatorServiceClient::connect(format!("http://{}", addrs[0])).await?;
                let r = c
                    .create_partitions(CreatePartitionsRequest {
                        topics: vec![create_partitions_request::CreatablePartitions {
                            topic_id: topic.as_bytes().to_vec(),
                            name: format!("bench-{}", topic.simple()),
                            num_partitions: partitions,
                            configs: Some(TopicConfigs { retention_ms: Some(-1), retention_bytes: None }),
                        }],
                        timeout_ms: 30_000,
                    })
                    .await?
                    .into_inner();
                anyhow::ensure!(r.topics[0].error_code == 0, "create topic: {:?}", r.topics[0].error_message);
            }
            System::Pg { url } => {
                let c = postgres::connect(url).await?;
                c.execute(
                    "INSERT INTO logs(topic_id, partition) SELECT $1, p FROM generate_series(0, $2 - 1) p",
                    &[&topic, &partitions],
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// The body of a composite `commit_batch` array literal element.
fn pg_batch(i: usize, topic: Uuid, c: &Coord) -> String {
    format!("\"({i},{topic},{},{},16384,0,{},0,0,-1,-1,-1,-1)\"", c.partition, i * 16384, c.records - 1)
}

impl Conn {
    /// Commits one file of `coords` batches; returns how many were accepted.
    pub async fn commit(&mut self, key: &str, topic: Uuid, coords: &[Coord], now: i64) -> anyhow::Result<usize> {
        match self {
            Conn::Ours { broker, last_applied, .. } => {
                let batches = coords
                    .iter()
                    .enumerate()
                    .map(|(i, c)| commit_file_request::CommitBatch {
                        magic: 2,
                        request_id: i as i32,
                        topic_id: topic.as_bytes().to_vec(),
                        partition_index: c.partition,
                        byte_offset: i as i32 * 16_384,
                        size: 16_384,
                        base_offset: 0,
                        last_offset: c.records - 1,
                        batch_max_timestamp: now,
                        timestamp_type: 0,
                        producer_id: -1,
                        producer_epoch: -1,
                        base_sequence: -1,
                        last_sequence: -1,
                    })
                    .collect();
                let r = broker
                    .commit_file(
                        CommitFileRequest {
                            object_key: key.into(),
                            object_format: 1,
                            file_size: 16_384 * coords.len() as i64,
                            owner_ids: vec![],
                            batches,
                            timeout_ms: 30_000,
                            uploader_broker_id: 1,
                        },
                        std::time::Instant::now() + std::time::Duration::from_secs(30),
                    )
                    .await;
                *last_applied = r.applied;
                Ok(r.batches.iter().filter(|b| b.error_code == 0).count())
            }
            Conn::Pg(c, commit, _, _) => {
                let array = format!(
                    "{{{}}}",
                    coords.iter().enumerate().map(|(i, x)| pg_batch(i, topic, x)).collect::<Vec<_>>().join(",")
                );
                let size = 16_384i64 * coords.len() as i64;
                let rows =
                    c.query(commit.as_ref(), &[&key, &size, &1i32, &now, &array]).await.context("commit_file")?;
                Ok(rows.iter().filter(|r| r.get::<_, i16>(1) == 0).count())
            }
        }
    }

    /// Finds up to `max` batches of one partition from `offset`; with `min_index`, a replica must
    /// first have applied this connection's last commit.
    pub async fn find(
        &mut self,
        topic: Uuid,
        partition: i32,
        offset: i64,
        max: i32,
        min_index: bool,
    ) -> anyhow::Result<usize> {
        match self {
            Conn::Ours { client, last_applied, .. } => {
                let r = client
                    .find_batches(FindBatchesRequest {
                        fetch_max_bytes: i32::MAX,
                        max_batches_per_partition: max,
                        topics: vec![find_batches_request::FindBatchesTopic {
                            topic_id: topic.as_bytes().to_vec(),
                            partitions: vec![find_batches_request::FindBatchesPartition {
                                partition_index: partition,
                                offset,
                                max_partition_fetch_bytes: i32::MAX,
                            }],
                        }],
                        timeout_ms: 10_000,
                        min_applied: if min_index { last_applied.clone() } else { vec![] },
                    })
                    .await?
                    .into_inner();
                let p = &r.topics[0].partitions[0];
                anyhow::ensure!(p.error_code == 0, "find batches: {:?}", p.error_message);
                Ok(p.batches.len())
            }
            Conn::Pg(c, _, find, offsets) => {
                let limit = i64::from(max);
                let find_params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&topic, &partition, &offset, &limit];
                let offset_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&topic, &partition];
                // Both queries pipelined on the connection, as a FindBatches answer needs both.
                let (rows, _) = futures_util::try_join!(
                    c.query(find.as_ref(), &find_params),
                    c.query(offsets.as_ref(), &offset_params)
                )?;
                Ok(rows.len())
            }
        }
    }

    /// The high watermark, strictly.
    pub async fn latest(&mut self, topic: Uuid, partition: i32) -> anyhow::Result<i64> {
        match self {
            Conn::Ours { client, .. } => {
                let r = client
                    .list_offsets(ListOffsetsRequest {
                        topics: vec![list_offsets_request::ListOffsetsTopic {
                            topic_id: topic.as_bytes().to_vec(),
                            partitions: vec![list_offsets_request::ListOffsetsPartition {
                                partition_index: partition,
                                timestamp: -1,
                            }],
                        }],
                        timeout_ms: 10_000,
                    })
                    .await?
                    .into_inner();
                Ok(r.topics[0].partitions[0].offset)
            }
            Conn::Pg(c, _, _, offsets) => {
                let row = c.query_one(offsets.as_ref(), &[&topic, &partition]).await?;
                Ok(row.get(1))
            }
        }
    }
}
