//! Demo client of the broker shim: produces real Kafka record batches (kafka-protocol's encoder)
//! and reads them back.
//!
//! ```text
//! diskless-demo --broker 127.0.0.1:9192 create --topic demo --partitions 4
//! diskless-demo produce --topic demo --partitions 4 --messages 1000 [--batch 50]
//! diskless-demo consume --topic demo --partition 0 [--from 0]
//! ```

use bytes::Bytes;
use clap::{Parser, Subcommand};
use diskless_broker_shim::records::{self, NOT_IDEMPOTENT};
use diskless_proto::broker::broker_service_client::BrokerServiceClient;
use diskless_proto::broker::*;
use kafka_protocol::records::Compression;

#[derive(Debug, Parser)]
#[command(name = "diskless-demo", about = "Produce to and consume from diskless topics through a broker shim")]
struct Args {
    #[arg(long, env = "DISKLESS_BROKER", default_value = "127.0.0.1:9192")]
    broker: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    Create {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
    },
    Produce {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        #[arg(long, default_value_t = 100)]
        messages: usize,
        /// Records per batch.
        #[arg(long, default_value_t = 10)]
        batch: usize,
    },
    Consume {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 0)]
        partition: i32,
        #[arg(long, default_value_t = 0)]
        from: i64,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut c = BrokerServiceClient::connect(format!("http://{}", args.broker)).await?;
    match args.cmd {
        Cmd::Create { topic, partitions } => {
            let r = c
                .create_topic(CreateTopicRequest {
                    name: topic.clone(),
                    partitions,
                    retention_ms: None,
                    retention_bytes: None,
                })
                .await?
                .into_inner();
            anyhow::ensure!(r.error_code == 0, "create {topic}: {:?}", r.error_message);
            println!("created {topic} with {partitions} partitions");
        }
        Cmd::Produce { topic, partitions, messages, batch } => {
            let started = std::time::Instant::now();
            let mut sent = 0;
            let mut tasks = vec![];
            while sent < messages {
                let n = batch.min(messages - sent);
                let partition = ((sent / batch) % partitions as usize) as i32;
                let recs: Vec<_> = (sent..sent + n)
                    .map(|i| (Some(Bytes::from(format!("key-{i}"))), Some(Bytes::from(format!("message {i}")))))
                    .collect();
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
                let records = records::encode(&recs, now, Compression::None, NOT_IDEMPOTENT)?.to_vec();
                let mut c = c.clone();
                let topic = topic.clone();
                tasks.push(tokio::spawn(async move { c.produce(ProduceRequest { topic, partition, records }).await }));
                sent += n;
            }
            for t in tasks {
                let r = t.await??.into_inner();
                anyhow::ensure!(r.error_code == 0, "produce: {:?}", r.error_message);
            }
            println!("produced {messages} messages in {:.2?}", started.elapsed());
        }
        Cmd::Consume { topic, partition, from } => {
            let mut offset = from;
            loop {
                let r = c
                    .fetch(FetchRequest { topic: topic.clone(), partition, offset, max_bytes: 1 << 20 })
                    .await?
                    .into_inner();
                anyhow::ensure!(r.error_code == 0, "fetch: {:?}", r.error_message);
                if r.records.is_empty() {
                    println!("-- end of partition {partition} (high watermark {})", r.high_watermark);
                    break;
                }
                for m in records::decode(Bytes::from(r.records))? {
                    let key = m.key.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                    let value = m.value.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                    println!("{}\t{}\t{}", m.offset, key, value);
                    offset = m.offset + 1;
                }
            }
        }
    }
    Ok(())
}
