//! `diskless-bench`: the coordinator's latency and throughput side by side with a PostgreSQL
//! control plane built after the KIP's reference implementation, in one run, on one machine.
//!
//! ```text
//! cargo run --release -p diskless-bench -- [--smoke] [--out bench-results]
//!     [--coordinators a:7001,b:7001,c:7001]   (default: start a local 3-node cluster, fsync on)
//!     [--postgres-url URL | --no-postgres]     (default: start a private PostgreSQL on a loopback port)
//! ```
//! Workloads (each on both systems): CommitFile of `--batches` (64) batches over `--partitions`
//! (1,000) partitions from 1, 8 and 32 clients at saturation and at a fixed offered rate;
//! FindBatches (from any replica; with and without a minimum index); strict ListOffsets; and
//! FindBatches depth: a partition 10k batches deep against one `--deep` (10M) deep. Prints the
//! table with ratios, writes `results.json` and `commit-latency.svg` to `--out`.

mod ours;
mod postgres;
mod report;
mod system;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use report::Row;
use system::System;
use uuid::Uuid;
use workload::Read;

#[derive(Debug, Parser)]
#[command(name = "diskless-bench", about = "Coordinator vs PostgreSQL control plane, side by side")]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// A few seconds in all: keeps the benchmark working (the test suite runs it).
    #[arg(long)]
    smoke: bool,
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// A running coordinator cluster to measure instead of a local one.
    #[arg(long, value_delimiter = ',')]
    coordinators: Vec<String>,
    #[arg(long)]
    postgres_url: Option<String>,
    #[arg(long)]
    no_postgres: bool,
    /// Seconds per measurement (default 15; smoke 1).
    #[arg(long)]
    seconds: Option<u64>,
    #[arg(long, default_value_t = 64)]
    batches: usize,
    #[arg(long, default_value_t = 1000)]
    partitions: i32,
    /// Batches in the deep partition of the depth test (default 10,000,000; smoke 20,000).
    #[arg(long)]
    deep: Option<u64>,
    /// Offered commit rate of the fixed-rate workload, commits/s (8 clients).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Metadata partitions of the local cluster.
    #[arg(long, default_value_t = 8)]
    metadata_partitions: u32,
    /// Where the local cluster's data goes (default: the system's temporary directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Runs one coordinator node (the bench starts its local cluster this way).
    Node {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Cmd::Node { args }) = &args.cmd {
        let server = <diskless_coordinator::cli::ServerArgs as clap::Parser>::parse_from(
            std::iter::once("node".to_string()).chain(args.iter().cloned()),
        );
        diskless_coordinator::cli::init_logging(&server.log);
        return tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(diskless_coordinator::cli::run_server(server));
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(args))
}

struct Progress {
    step: usize,
    total: usize,
    started: Instant,
}

impl Progress {
    fn say(&mut self, what: &str) {
        self.step += 1;
        eprintln!("[{}/{} {:>5.0} s] {what}", self.step, self.total, self.started.elapsed().as_secs_f64());
    }
}

async fn run(a: Args) -> anyhow::Result<()> {
    let secs = Duration::from_secs(a.seconds.unwrap_or(if a.smoke { 1 } else { 15 }));
    let deep = a.deep.unwrap_or(if a.smoke { 20_000 } else { 10_000_000 });
    let shallow = 10_000.min(deep);
    let clients: &[usize] = if a.smoke { &[1, 4] } else { &[1, 8, 32] };
    let partitions = if a.smoke { a.partitions.min(100) } else { a.partitions };
    std::fs::create_dir_all(&a.out)?;

    // The systems.
    let _cluster;
    let ours = if a.coordinators.is_empty() {
        eprintln!("starting a local 3-node coordinator cluster (fsync on) ...");
        let c = ours::LocalCluster::start(a.metadata_partitions, a.data_dir.clone()).await?;
        let addrs = c.addrs.clone();
        _cluster = Some(c);
        System::Ours { addrs }
    } else {
        _cluster = None;
        System::Ours { addrs: a.coordinators.clone() }
    };
    let _pg;
    let mut systems = vec![ours];
    if !a.no_postgres {
        let url = match &a.postgres_url {
            Some(u) => u.clone(),
            None => {
                eprintln!("starting a private PostgreSQL (fsync and synchronous_commit on) ...");
                let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
                let s = postgres::PgServer::start(port)?;
                let url = s.url.clone();
                _pg = Some(s);
                url
            }
        };
        postgres::install(&url).await?;
        systems.push(System::Pg { url });
    }

    let per_system = clients.len() + 5;
    let mut p = Progress { step: 0, total: per_system * systems.len(), started: Instant::now() };
    let mut rows: Vec<Row> = vec![];
    let mut notes: Vec<String> = vec![];
    for sys in &systems {
        let name = sys.name();
        let topic = Uuid::new_v4();
        sys.create_topic(topic, partitions).await?;
        for &c in clients {
            p.say(&format!("{name}: CommitFile {} batches, {c} clients, saturation", a.batches));
            let m = workload::commits(sys, topic, partitions, a.batches, c, secs, None).await?;
            rows.push(Row::new(&format!("commit {} batches, C={c:<2} saturation", a.batches), name, c, &m));
        }
        let rate_clients = if a.smoke { 4 } else { 8 };
        p.say(&format!("{name}: CommitFile at {} commits/s offered, {rate_clients} clients", a.rate));
        let m = workload::commits(sys, topic, partitions, a.batches, rate_clients, secs, Some(a.rate)).await?;
        rows.push(Row::new(&format!("commit {} batches, {:.0}/s offered", a.batches, a.rate), name, rate_clients, &m));

        // Reads over the partitions the commits filled.
        let mut conn = sys.connect(0).await?;
        let mut parts = vec![];
        for part in 0..partitions.min(200) {
            parts.push((part, conn.latest(topic, part).await?));
        }
        let readers = if a.smoke { 4 } else { 8 };
        for (label, kind) in [
            ("FindBatches, any replica", Read::Find { min_index: false }),
            ("FindBatches, with min index", Read::Find { min_index: true }),
            ("ListOffsets latest (strict)", Read::Latest),
        ] {
            p.say(&format!("{name}: {label}, {readers} clients"));
            let m = workload::reads(sys, topic, &parts, readers, secs, kind).await?;
            rows.push(Row::new(&format!("{label}, C={readers}"), name, readers, &m));
        }

        p.say(&format!("{name}: depth — FindBatches at {shallow} vs {deep} stored batches"));
        let depth_topic = Uuid::new_v4();
        sys.create_topic(depth_topic, 2).await?;
        workload::fill(sys, depth_topic, 0, shallow).await?;
        workload::fill(sys, depth_topic, 1, deep).await?;
        let mut ms = vec![];
        for (part, n) in [(0, shallow as i64), (1, deep as i64)] {
            let m = workload::reads(sys, depth_topic, &[(part, n)], 4, secs, Read::Find { min_index: false }).await?;
            rows.push(Row::new(&format!("FindBatches at depth {n}, C=4"), name, 4, &m));
            ms.push(m);
        }
        notes.push(format!(
            "{name}: FindBatches p50 at {deep} deep ÷ at {shallow} deep = {:.2} (p99 {:.2})",
            ms[1].ms(0.5) / ms[0].ms(0.5).max(1e-9),
            ms[1].ms(0.99) / ms[0].ms(0.99).max(1e-9)
        ));
        if let System::Pg { url } = sys {
            let c = postgres::connect(url).await?;
            notes.push(format!("postgresql find-batches plan:\n{}", postgres::explain_find(&c, depth_topic).await?));
        }
    }

    let theirs = if systems.len() > 1 { systems[1].name() } else { "-" };
    let table = report::table(&rows, systems[0].name(), theirs);
    println!("\n{table}");
    for n in &notes {
        println!("{n}");
    }
    let json = serde_json::json!({
        "machine": { "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0) },
        "seconds_per_measurement": secs.as_secs(),
        "batches_per_commit": a.batches,
        "partitions": partitions,
        "rows": rows,
        "notes": notes,
    });
    std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    report::plot(&rows, &a.out.join("commit-latency.svg"))?;
    std::fs::write(a.out.join("table.txt"), &table)?;
    eprintln!("wrote {}/results.json, table.txt and commit-latency.svg", a.out.display());
    Ok(())
}
