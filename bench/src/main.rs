//! `diskless-bench`: the coordinator's latency and throughput side by side with a PostgreSQL
//! control plane built after the KIP's reference implementation, in one run, on one machine.
//!
//! ```text
//! cargo run --release -p diskless-bench -- [--smoke] [--out bench-results]
//!     [--coordinators a:7001,b:7001,c:7001 | --no-ours]  (default: a local 3-node cluster, fsync on)
//!     [--postgres-url URL | --no-postgres]                (default: private PostgreSQL servers on loopback)
//!     [--postgres-plain | --postgres-replicated]          (default: both variants, one after the other)
//! ```
//! Each system is measured in a phase of its own, with nothing else of the bench running: our
//! cluster is started, measured and stopped; then a PostgreSQL primary; then a PostgreSQL primary
//! with a synchronous standby on loopback (equal durability: every commit is on two disks).
//! Workloads (the same clients on each): CommitFile of `--batches` (64) batches over
//! `--partitions` (1,000) partitions from 1, 8 and 32 clients at saturation and at a fixed offered
//! rate; the reference implementation's fan-out (`--fanout-batches` 1,500 batches over
//! `--fanout-partitions` 600 partitions, 4 MiB files) from 1 and 8 clients; FindBatches (from any
//! replica; with a minimum index; at `--find-rate` 10k requests/s offered, open loop); strict
//! ListOffsets at 8 clients; FindBatches on a partition 10k batches deep against one `--deep`
//! (10M) deep; and our cluster's idle CPU (no traffic). Prints one table per PostgreSQL variant
//! with ratios, writes `results.json`, `table.txt` and `commit-latency.svg` to `--out`.

mod data_path;
mod idle_cpu;
mod kafka_wire;
mod ours;
mod pg_server;
mod postgres;
mod report;
mod system;
mod workload;

// The bench runs our nodes by re-executing itself: the nodes' allocator.
#[global_allocator]
static ALLOCATOR: diskless_coordinator::NodeAllocator = diskless_coordinator::NodeAllocator;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use report::Row;
use system::System;
use uuid::Uuid;
use workload::{CommitShape, Read};

#[derive(Debug, Parser)]
#[command(name = "diskless-bench", about = "Coordinator vs PostgreSQL control plane, side by side")]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// A few seconds per system: keeps the benchmark working (the test suite runs it).
    #[arg(long)]
    smoke: bool,
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// A running coordinator cluster to measure instead of a local one.
    #[arg(long, value_delimiter = ',')]
    coordinators: Vec<String>,
    /// Measure PostgreSQL only.
    #[arg(long, conflicts_with = "coordinators")]
    no_ours: bool,
    /// A running PostgreSQL to measure instead of the private ones (the schema is recreated).
    #[arg(long, conflicts_with = "no_postgres")]
    postgres_url: Option<String>,
    #[arg(long)]
    no_postgres: bool,
    /// Of the private PostgreSQL servers, only the one with a synchronous standby.
    #[arg(long, conflicts_with_all = ["postgres_plain", "postgres_url", "no_postgres"])]
    postgres_replicated: bool,
    /// Of the private PostgreSQL servers, only the plain one (no standby).
    #[arg(long, conflicts_with_all = ["postgres_url", "no_postgres"])]
    postgres_plain: bool,
    /// Seconds per measurement (default 15; smoke 0.5).
    #[arg(long)]
    seconds: Option<f64>,
    #[arg(long, default_value_t = 64)]
    batches: usize,
    #[arg(long, default_value_t = 1000)]
    partitions: i32,
    /// Batches per commit of the fan-out workload (smoke: a tenth).
    #[arg(long, default_value_t = 1500)]
    fanout_batches: usize,
    /// Partitions the fan-out workload's commits cover (smoke: a tenth).
    #[arg(long, default_value_t = 600)]
    fanout_partitions: i32,
    /// File size of the fan-out workload, bytes (split evenly over its batches).
    #[arg(long, default_value_t = 4 << 20)]
    fanout_file_bytes: i64,
    /// Batches in the deep partition of the depth test (default 10,000,000; smoke 20,000).
    #[arg(long)]
    deep: Option<u64>,
    /// Offered commit rate of the fixed-rate workload, commits/s (8 clients).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Offered FindBatches rate of the open-loop read workload, requests/s (default 10,000; smoke 1,000).
    #[arg(long)]
    find_rate: Option<f64>,
    /// Seconds over which our idle cluster's CPU is measured (default 20; smoke 2).
    #[arg(long)]
    idle_seconds: Option<u64>,
    /// Run only the workloads whose row label contains one of these (e.g. `--only commit`),
    /// and skip the idle CPU measurement.
    #[arg(long)]
    only: Vec<String>,
    /// Metadata partitions of the local cluster (the coordinator's default).
    #[arg(long, default_value_t = diskless_coordinator::node::config::DEFAULT_METADATA_PARTITIONS)]
    metadata_partitions: u32,
    /// The local cluster with mutual TLS on its listener (nodes and clients present certificates of
    /// a CA made for the run), to measure what TLS costs.
    #[arg(long, conflicts_with = "coordinators")]
    tls: bool,
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
    /// Runs the broker (the data-path phase starts its broker this way).
    Broker {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The data-path phase: produce and end-to-end latency, idle long-polling consumers.
    DataPath(data_path::DataPathArgs),
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Cmd::Broker { args }) = &args.cmd {
        return diskless_broker_shim::cli::main_from(std::iter::once("broker".to_string()).chain(args.iter().cloned()));
    }
    if let Some(Cmd::DataPath(a)) = args.cmd {
        return tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(data_path::run(a));
    }
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

/// What every system is measured with (the arguments, resolved for smoke or full runs).
struct Plan {
    secs: Duration,
    commit: CommitShape,
    clients: Vec<usize>,
    rate: f64,
    rate_clients: usize,
    fan_out: CommitShape,
    fan_out_clients: Vec<usize>,
    readers: usize,
    find_rate: f64,
    deep: u64,
    shallow: u64,
    idle: Duration,
    only: Vec<String>,
}

impl Plan {
    fn new(a: &Args) -> Plan {
        let tenth = |n: usize| if a.smoke { (n / 10).max(1) } else { n };
        let fanout_batches = tenth(a.fanout_batches);
        let deep = a.deep.unwrap_or(if a.smoke { 20_000 } else { 10_000_000 });
        Plan {
            secs: Duration::from_secs_f64(a.seconds.unwrap_or(if a.smoke { 0.5 } else { 15.0 })),
            commit: CommitShape {
                batches: a.batches,
                partitions: if a.smoke { a.partitions.min(100) } else { a.partitions },
                batch_bytes: 16_384,
                fan_out: false,
            },
            clients: if a.smoke { vec![1, 4] } else { vec![1, 8, 32] },
            rate: a.rate,
            rate_clients: if a.smoke { 4 } else { 8 },
            fan_out: CommitShape {
                batches: fanout_batches,
                partitions: tenth(a.fanout_partitions as usize) as i32,
                batch_bytes: a.fanout_file_bytes / a.fanout_batches.max(1) as i64,
                fan_out: true,
            },
            fan_out_clients: if a.smoke { vec![1] } else { vec![1, 8] },
            readers: if a.smoke { 4 } else { 8 },
            find_rate: a.find_rate.unwrap_or(if a.smoke { 1_000.0 } else { 10_000.0 }),
            deep,
            shallow: 10_000.min(deep),
            idle: Duration::from_secs(a.idle_seconds.unwrap_or(if a.smoke { 2 } else { 20 })),
            only: a.only.clone(),
        }
    }
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

/// Everything measured, in the order measured.
#[derive(Default)]
struct Results {
    rows: Vec<Row>,
    notes: Vec<String>,
    phases: Vec<serde_json::Value>,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The PostgreSQL variants to measure: `(replicated, url given)`.
fn postgres_variants(a: &Args) -> Vec<bool> {
    if a.no_postgres {
        vec![]
    } else if a.postgres_url.is_some() || a.postgres_plain {
        vec![false]
    } else if a.postgres_replicated {
        vec![true]
    } else {
        vec![false, true]
    }
}

async fn run(a: Args) -> anyhow::Result<()> {
    let plan = Plan::new(&a);
    std::fs::create_dir_all(&a.out)?;
    let variants = postgres_variants(&a);
    let measure_ours = !a.no_ours;
    let systems = usize::from(measure_ours) + variants.len();
    anyhow::ensure!(systems > 0, "nothing to measure");
    let idle = measure_ours && a.only.is_empty() && a.coordinators.is_empty();
    let total = plan.steps().len() * systems + usize::from(idle);
    let mut p = Progress { step: 0, total, started: Instant::now() };
    let mut res = Results::default();

    // Phase 1: our cluster alone.
    if measure_ours {
        let load = load_average();
        let (sys, cluster) = if a.coordinators.is_empty() {
            eprintln!("starting a local 3-node coordinator cluster (fsync on) ...");
            let c = ours::LocalCluster::start(a.metadata_partitions, a.data_dir.clone(), a.tls).await?;
            (System::Ours { addrs: c.addrs.clone(), tls: c.client_tls.clone() }, Some(c))
        } else {
            (System::Ours { addrs: a.coordinators.clone(), tls: None }, None)
        };
        let idle = match &cluster {
            Some(c) if idle => {
                p.say(&format!("raft-coordinator: idle CPU, {} s without traffic", plan.idle.as_secs()));
                let pct = idle_cpu::measure(&c.pids(), plan.idle).await?;
                res.notes.push(format!(
                    "raft-coordinator: idle CPU of the 3-node cluster ({} metadata partitions, no traffic, {} s): {} % of one core per node",
                    a.metadata_partitions,
                    plan.idle.as_secs(),
                    pct.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" / ")
                ));
                serde_json::json!({ "seconds": plan.idle.as_secs(), "percent_of_one_core_per_node": pct })
            }
            _ => serde_json::Value::Null,
        };
        if a.tls {
            res.notes.push("raft-coordinator: mutual TLS on every connection (clients and nodes)".to_string());
        }
        measure(&sys, &plan, &mut p, &mut res).await?;
        drop(cluster);
        res.phases.push(serde_json::json!({
            "system": sys.name(), "load_average_before": load, "load_average_after": load_average(), "idle_cpu": idle,
        }));
    }

    // Phases 2 and 3: PostgreSQL alone, then PostgreSQL with its synchronous standby.
    for replicated in variants {
        let load = load_average();
        let (url, server) = match &a.postgres_url {
            Some(u) => (u.clone(), None),
            None => {
                eprintln!(
                    "starting a private PostgreSQL{} (fsync and synchronous_commit on) ...",
                    if replicated { " with a synchronous standby" } else { "" }
                );
                let s = pg_server::PgServer::start(replicated).await?;
                (s.url.clone(), Some(s))
            }
        };
        postgres::install(&url).await?;
        let sys = System::Pg { url: url.clone(), replicated };
        let settings = postgres::describe(&url).await?;
        measure(&sys, &plan, &mut p, &mut res).await?;
        drop(server);
        res.phases.push(serde_json::json!({
            "system": sys.name(), "load_average_before": load, "load_average_after": load_average(),
            "server_settings": settings.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        }));
    }

    let ours_name = System::Ours { addrs: vec![], tls: None }.name();
    let mut baselines: Vec<&str> = vec![];
    for r in &res.rows {
        if r.system != ours_name && !baselines.contains(&r.system.as_str()) {
            baselines.push(&r.system);
        }
    }
    if baselines.is_empty() {
        baselines.push("-");
    }
    let table = baselines.iter().map(|b| report::table(&res.rows, ours_name, b)).collect::<Vec<_>>().join("\n");
    println!("\n{table}");
    for n in &res.notes {
        println!("{n}");
    }
    let json = serde_json::json!({
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "load_average_at_end": load_average(),
        },
        "seconds_per_measurement": plan.secs.as_secs_f64(),
        "batches_per_commit": plan.commit.batches,
        "partitions": plan.commit.partitions,
        "fan_out": { "batches": plan.fan_out.batches, "partitions": plan.fan_out.partitions, "batch_bytes": plan.fan_out.batch_bytes },
        "postgres_settings": pg_server::SETTINGS.iter().chain(pg_server::REPLICATED_SETTINGS)
            .map(|(k, v, why)| serde_json::json!({ "name": k, "value": v, "why": why })).collect::<Vec<_>>(),
        "phases": res.phases,
        "rows": res.rows,
        "notes": res.notes,
    });
    std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    report::plot(&res.rows, &a.out.join("commit-latency.svg"))?;
    std::fs::write(a.out.join("table.txt"), &table)?;
    eprintln!("wrote {}/results.json, table.txt and commit-latency.svg", a.out.display());
    Ok(())
}

/// One measurement step of a system's phase.
#[derive(Debug, Clone, Copy)]
enum Step {
    Commits {
        clients: usize,
    },
    CommitsOffered,
    FanOut {
        clients: usize,
    },
    Reads(&'static str, Read),
    FindOffered,
    /// Two rows: FindBatches at the shallow and at the deep partition.
    Depth,
}

impl Plan {
    /// The steps of one system's phase, in order, each with the label of its row, filtered by
    /// `--only`.
    fn steps(&self) -> Vec<(Step, String)> {
        let (b, readers) = (self.commit.batches, self.readers);
        let mut steps = vec![];
        for &clients in &self.clients {
            steps.push((Step::Commits { clients }, format!("commit {b} batches, C={clients:<2} saturation")));
        }
        steps.push((Step::CommitsOffered, format!("commit {b} batches, {:.0}/s offered", self.rate)));
        for &clients in &self.fan_out_clients {
            let label = format!("fan-out {} over {} parts, C={clients}", self.fan_out.batches, self.fan_out.partitions);
            steps.push((Step::FanOut { clients }, label));
        }
        for (label, kind) in [
            ("FindBatches, any replica", Read::Find { min_index: false }),
            ("FindBatches, with min index", Read::Find { min_index: true }),
            ("ListOffsets latest (strict)", Read::Latest),
        ] {
            steps.push((Step::Reads(label, kind), format!("{label}, C={readers}")));
        }
        steps.push((Step::FindOffered, format!("FindBatches, {:.0}/s offered", self.find_rate)));
        steps.push((Step::Depth, "FindBatches at depth".to_string()));
        steps.retain(|(_, label)| self.only.is_empty() || self.only.iter().any(|o| label.contains(o.as_str())));
        steps
    }
}

/// Every workload on one system (the only one running).
async fn measure(sys: &System, plan: &Plan, p: &mut Progress, res: &mut Results) -> anyhow::Result<()> {
    let name = sys.name();
    let secs = plan.secs;
    let shape = plan.commit;
    let topic = Uuid::new_v4();
    sys.create_topic(topic, shape.partitions).await?;
    let fan = plan.fan_out;
    let fan_topic = Uuid::new_v4();
    let mut fan_topic_created = false;
    // The partitions the commits filled and their high watermarks, learned before the first read.
    let mut parts: Vec<(i32, i64)> = vec![];
    let readers = plan.readers;
    for (step, label) in plan.steps() {
        if matches!(step, Step::Reads(..) | Step::FindOffered) && parts.is_empty() {
            let mut conn = sys.connect(0).await?;
            for part in 0..shape.partitions.min(200) {
                parts.push((part, conn.latest(topic, part).await?));
            }
        }
        match step {
            Step::Commits { clients } => {
                p.say(&format!("{name}: CommitFile {} batches, {clients} clients, saturation", shape.batches));
                sys.before_measurement().await?;
                let m = workload::commits(sys, topic, shape, clients, secs, None).await?;
                res.rows.push(Row::new(&label, name, clients, &m));
                note_stages(sys, &label, res).await?;
            }
            Step::CommitsOffered => {
                let rc = plan.rate_clients;
                p.say(&format!("{name}: CommitFile at {} commits/s offered, {rc} clients", plan.rate));
                sys.before_measurement().await?;
                let m = workload::commits(sys, topic, shape, rc, secs, Some(plan.rate)).await?;
                res.rows.push(Row::new(&label, name, rc, &m));
                note_stages(sys, &label, res).await?;
            }
            Step::FanOut { clients } => {
                if !fan_topic_created {
                    sys.create_topic(fan_topic, fan.partitions).await?;
                    fan_topic_created = true;
                }
                p.say(&format!(
                    "{name}: fan-out CommitFile {} batches over {} partitions ({} KiB), {clients} clients",
                    fan.batches,
                    fan.partitions,
                    fan.batch_bytes * fan.batches as i64 / 1024
                ));
                sys.before_measurement().await?;
                let m = workload::commits(sys, fan_topic, fan, clients, secs, None).await?;
                res.rows.push(Row::new(&label, name, clients, &m));
                note_stages(sys, &label, res).await?;
            }
            Step::Reads(what, kind) => {
                p.say(&format!("{name}: {what}, {readers} clients"));
                sys.before_measurement().await?;
                let m = workload::reads(sys, topic, &parts, readers, secs, kind).await?;
                res.rows.push(Row::new(&label, name, readers, &m));
            }
            Step::FindOffered => {
                p.say(&format!(
                    "{name}: FindBatches at {:.0}/s offered (open loop), {readers} connections",
                    plan.find_rate
                ));
                sys.before_measurement().await?;
                let find = Read::Find { min_index: false };
                let m = workload::reads_offered(sys, topic, &parts, readers, plan.find_rate, secs, find).await?;
                res.rows.push(Row::new(&label, name, readers, &m));
            }
            Step::Depth => depth(sys, plan, p, res).await?,
        }
    }
    Ok(())
}

/// Notes where our entries' time went during the measurement `label` (P50/P99 and count per
/// stage and node): the per-stage breakdown of commit latency.
async fn note_stages(sys: &System, label: &str, res: &mut Results) -> anyhow::Result<()> {
    if let Some(stages) = sys.stages().await? {
        res.notes.push(format!("{} stages during \"{}\" (P50/P99, entries):\n{stages}", sys.name(), label.trim()));
    }
    Ok(())
}

/// FindBatches on a partition `plan.shallow` batches deep and on one `plan.deep` deep.
async fn depth(sys: &System, plan: &Plan, p: &mut Progress, res: &mut Results) -> anyhow::Result<()> {
    let name = sys.name();
    let (shallow, deep) = (plan.shallow, plan.deep);
    p.say(&format!("{name}: depth — FindBatches at {shallow} vs {deep} stored batches"));
    let depth_topic = Uuid::new_v4();
    sys.create_topic(depth_topic, 2).await?;
    workload::fill(sys, depth_topic, 0, shallow).await?;
    workload::fill(sys, depth_topic, 1, deep).await?;
    let mut ms = vec![];
    for (part, n) in [(0, shallow as i64), (1, deep as i64)] {
        sys.before_measurement().await?;
        let m = workload::reads(sys, depth_topic, &[(part, n)], 4, plan.secs, Read::Find { min_index: false }).await?;
        res.rows.push(Row::new(&format!("FindBatches at depth {n}, C=4"), name, 4, &m));
        ms.push(m);
    }
    res.notes.push(format!(
        "{name}: FindBatches p50 at {deep} deep ÷ at {shallow} deep = {:.2} (p99 {:.2})",
        ms[1].ms(0.5) / ms[0].ms(0.5).max(1e-9),
        ms[1].ms(0.99) / ms[0].ms(0.99).max(1e-9)
    ));
    if let System::Pg { url, .. } = sys {
        let c = postgres::connect(url).await?;
        res.notes.push(format!("{name} find-batches plan:\n{}", postgres::explain_find(&c, depth_topic).await?));
    }
    Ok(())
}
