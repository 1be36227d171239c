//! The systems under test (our cluster; PostgreSQL, plain or with a synchronous standby) behind
//! one set of operations, so every workload runs the same way on each. Owns the wire calls; it
//! must not decide what to measure (`workload.rs`) or start servers (`ours.rs`, `pg_server.rs`).

use std::sync::Arc;

use anyhow::Context;
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::*;
use tonic::transport::Channel;
use uuid::Uuid;

use crate::postgres;

/// A channel to the node at `addr` (`host:port`), with mutual TLS when `tls` is given.
pub fn channel(addr: &str, tls: &Option<Arc<diskless_tls::ClientTls>>) -> anyhow::Result<Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect_timeout(std::time::Duration::from_secs(2));
    Ok(diskless_tls::client::channel(endpoint, tls.clone()))
}

/// One batch coordinate of a commit: partition, record count and size in the file.
#[derive(Debug, Clone, Copy)]
pub struct Coord {
    pub partition: i32,
    pub records: i64,
    pub bytes: i64,
}

/// A client connection of one system (one per simulated broker).
pub enum Conn {
    /// Commits and strict reads go through the broker's client (each metadata partition's part
    /// straight to its leader, as a broker does); FindBatches to this connection's node.
    Ours { reader: Reader, broker: Arc<diskless_broker_shim::cluster::ClusterClient>, last_applied: Vec<AppliedIndex> },
    /// One connection with its statements prepared once, as a broker's connection pool would.
    Pg { client: Arc<tokio_postgres::Client>, commit: tokio_postgres::Statement, reader: Reader },
}

/// The read half of a connection: cheap to clone, and clones may run requests concurrently
/// (multiplexed on one HTTP/2 connection, or pipelined on one PostgreSQL connection).
#[derive(Clone)]
pub enum Reader {
    /// FindBatches to one node; strict reads through the broker's client (to the leader).
    Ours(CoordinatorServiceClient<Channel>, Arc<diskless_broker_shim::cluster::ClusterClient>),
    Pg {
        client: Arc<tokio_postgres::Client>,
        find: tokio_postgres::Statement,
        offsets: tokio_postgres::Statement,
    },
}

#[derive(Clone)]
pub enum System {
    Ours {
        addrs: Vec<String>,
        /// Mutual TLS to every node (`--tls`): the client certificate the bench presents.
        tls: Option<Arc<diskless_tls::ClientTls>>,
    },
    /// `replicated`: the server has a synchronous standby (only the name differs here).
    Pg { url: String, replicated: bool },
}

impl System {
    pub fn name(&self) -> &'static str {
        match self {
            System::Ours { .. } => "raft-coordinator",
            System::Pg { replicated: false, .. } => "postgresql",
            System::Pg { replicated: true, .. } => "postgresql-replicated",
        }
    }

    /// Called before every measurement: PostgreSQL writes its dirty pages out (CHECKPOINT), so
    /// that no measurement pays for the previous one's; our nodes start their stage timings
    /// afresh (see [`stages`](Self::stages)).
    pub async fn before_measurement(&self) -> anyhow::Result<()> {
        match self {
            System::Ours { .. } => self.node_stages(true).await.map(drop),
            System::Pg { url, .. } => postgres::checkpoint(url).await,
        }
    }

    /// Where our log entries' time went on each node since the last measurement started
    /// (`coordinator/src/raft/stages.rs`: append → durable → applied, apply, proposal), one line
    /// per node; `None` for PostgreSQL.
    pub async fn stages(&self) -> anyhow::Result<Option<String>> {
        let nodes = self.node_stages(false).await?;
        if nodes.is_empty() {
            return Ok(None);
        }
        let lines = nodes
            .iter()
            .map(|(id, stages)| {
                let figures = stages
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {:.2}/{:.2} ms ({})",
                            s.name,
                            s.p50_us as f64 / 1000.0,
                            s.p99_us as f64 / 1000.0,
                            s.count
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("  node {id}: {figures}")
            })
            .collect::<Vec<_>>();
        Ok(Some(lines.join("\n")))
    }

    /// Every node's stage figures (P50/P99 per stage), resetting them when `reset`.
    async fn node_stages(&self, reset: bool) -> anyhow::Result<Vec<(u64, Vec<diskless_proto::admin::StageLatency>)>> {
        let System::Ours { addrs, tls } = self else { return Ok(vec![]) };
        let mut out = vec![];
        for a in addrs {
            let mut c = diskless_proto::admin::admin_service_client::AdminServiceClient::new(channel(a, tls)?);
            let s = c
                .status(diskless_proto::admin::StatusRequest { with_digest: false, reset_stages: reset })
                .await
                .with_context(|| format!("status of {a}"))?
                .into_inner();
            out.push((s.node_id, s.stages));
        }
        Ok(out)
    }

    /// A new connection; `i` spreads connections over the nodes.
    pub async fn connect(&self, i: usize) -> anyhow::Result<Conn> {
        match self {
            System::Ours { addrs, tls } => {
                let ch = channel(&addrs[i % addrs.len()], tls)?;
                let broker = Arc::new(
                    diskless_broker_shim::cluster::ClusterClient::connect_with(addrs, Default::default(), tls.clone())
                        .await?,
                );
                Ok(Conn::Ours {
                    reader: Reader::Ours(
                        CoordinatorServiceClient::new(ch).max_decoding_message_size(256 << 20),
                        broker.clone(),
                    ),
                    broker,
                    last_applied: vec![],
                })
            }
            System::Pg { url, .. } => {
                let c = postgres::connect(url).await?;
                let commit = c.prepare(postgres::COMMIT_FILE).await.context("prepare commit_file")?;
                let find = c.prepare(postgres::FIND_BATCHES).await?;
                let offsets = c.prepare(postgres::LOG_OFFSETS).await?;
                let client = Arc::new(c);
                Ok(Conn::Pg { client: client.clone(), commit, reader: Reader::Pg { client, find, offsets } })
            }
        }
    }

    /// Creates a topic of `partitions` partitions.
    pub async fn create_topic(&self, topic: Uuid, partitions: i32) -> anyhow::Result<()> {
        match self {
            System::Ours { addrs, tls } => {
                let mut c = CoordinatorServiceClient::new(channel(&addrs[0], tls)?);
                let r = c
                    .create_partitions(CreatePartitionsRequest {
                        topics: vec![create_partitions_request::CreatablePartitions {
                            topic_id: topic.as_bytes().to_vec(),
                            name: format!("bench-{}", topic.simple()),
                            num_partitions: partitions,
                            configs: Some(TopicConfigs { retention_ms: Some(-1), ..Default::default() }),
                        }],
                        timeout_ms: 30_000,
                    })
                    .await?
                    .into_inner();
                anyhow::ensure!(r.topics[0].error_code == 0, "create topic: {:?}", r.topics[0].error_message);
            }
            System::Pg { url, .. } => {
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

impl Conn {
    /// Commits one file of `coords` batches (laid out one after another in the file); returns
    /// how many were accepted.
    pub async fn commit(&mut self, key: &str, topic: Uuid, coords: &[Coord], now: i64) -> anyhow::Result<usize> {
        let mut byte_offsets = Vec::with_capacity(coords.len());
        let mut file_size = 0i64;
        for c in coords {
            byte_offsets.push(file_size);
            file_size += c.bytes;
        }
        match self {
            Conn::Ours { broker, last_applied, .. } => {
                let batches = coords
                    .iter()
                    .zip(&byte_offsets)
                    .enumerate()
                    .map(|(i, (c, &at))| commit_file_request::CommitBatch {
                        magic: 2,
                        request_id: i as i32,
                        topic_id: topic.as_bytes().to_vec(),
                        partition_index: c.partition,
                        byte_offset: at as i32,
                        size: c.bytes as i32,
                        base_offset: 0,
                        last_offset: c.records - 1,
                        batch_max_timestamp: now,
                        timestamp_type: 0,
                        producer_id: -1,
                        producer_epoch: -1,
                        base_sequence: -1,
                        last_sequence: -1,
                        is_transactional: false,
                        txn_number: 0,
                    })
                    .collect();
                let r = broker
                    .commit_file(
                        CommitFileRequest {
                            object_key: key.into(),
                            object_format: 1,
                            file_size,
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
            Conn::Pg { client, commit, .. } => {
                let n = coords.len();
                let topics = vec![topic; n];
                let partitions: Vec<i32> = coords.iter().map(|c| c.partition).collect();
                let sizes: Vec<i64> = coords.iter().map(|c| c.bytes).collect();
                let records: Vec<i64> = coords.iter().map(|c| c.records).collect();
                let max_timestamps = vec![now; n];
                let timestamp_types = vec![0i16; n];
                let producer_ids = vec![-1i64; n];
                let epochs = vec![-1i16; n];
                let sequences = vec![-1i32; n];
                let rows = client
                    .query(
                        commit,
                        &[
                            &key,
                            &file_size,
                            &1i32,
                            &now,
                            &topics,
                            &partitions,
                            &byte_offsets,
                            &sizes,
                            &records,
                            &max_timestamps,
                            &timestamp_types,
                            &producer_ids,
                            &epochs,
                            &sequences,
                            &sequences,
                        ],
                    )
                    .await
                    .context("commit_file")?;
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
            Conn::Ours { reader, last_applied, .. } => {
                let min_applied = if min_index { last_applied.clone() } else { vec![] };
                reader.find(topic, partition, offset, max, min_applied).await
            }
            Conn::Pg { reader, .. } => reader.find(topic, partition, offset, max, vec![]).await,
        }
    }

    /// The high watermark, strictly.
    pub async fn latest(&mut self, topic: Uuid, partition: i32) -> anyhow::Result<i64> {
        self.reader().latest(topic, partition).await
    }

    pub fn reader(&self) -> &Reader {
        match self {
            Conn::Ours { reader, .. } | Conn::Pg { reader, .. } => reader,
        }
    }
}

impl Reader {
    /// Finds up to `max` batches of one partition from `offset` (on ours, once the replica has
    /// applied `min_applied`).
    pub async fn find(
        &self,
        topic: Uuid,
        partition: i32,
        offset: i64,
        max: i32,
        min_applied: Vec<AppliedIndex>,
    ) -> anyhow::Result<usize> {
        match self {
            Reader::Ours(client, _) => {
                let r = client
                    .clone()
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
                        min_applied,
                        isolation_level: 0,
                    })
                    .await?
                    .into_inner();
                let p = &r.topics[0].partitions[0];
                anyhow::ensure!(p.error_code == 0, "find batches: {:?}", p.error_message);
                Ok(p.batches.len())
            }
            Reader::Pg { client, find, offsets } => {
                let limit = i64::from(max);
                let find_params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&topic, &partition, &offset, &limit];
                let offset_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&topic, &partition];
                // Both queries pipelined on the connection, as a FindBatches answer needs both.
                let (rows, _) =
                    futures_util::try_join!(client.query(find, &find_params), client.query(offsets, &offset_params))?;
                Ok(rows.len())
            }
        }
    }

    /// The high watermark, strictly.
    pub async fn latest(&self, topic: Uuid, partition: i32) -> anyhow::Result<i64> {
        match self {
            Reader::Ours(_, broker) => {
                // As a broker asks: straight to the metadata partition's leader.
                let (_, offset) = broker
                    .list_offset(*topic.as_bytes(), partition, -1)
                    .await
                    .map_err(|e| anyhow::anyhow!("list offsets: {e:?}"))?;
                Ok(offset)
            }
            Reader::Pg { client, offsets, .. } => {
                let row = client.query_one(offsets, &[&topic, &partition]).await?;
                Ok(row.get(1))
            }
        }
    }
}
