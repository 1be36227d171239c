//! The fault suite's long runs (`tests/nemesis.sh` builds and runs this): a seeded nemesis against
//! a real cluster for as long as asked, then the checker; exits 1 when it finds an anomaly, keeping
//! the history and every process's log and data. Also re-checks a saved history file.

use std::time::Duration;

use clap::Parser;
use diskless_cluster_tests::nemesis::{self, faults::Kind};

#[derive(Debug, Parser)]
#[command(name = "nemesis", about = "Jepsen-style fault runs against a local diskless cluster")]
struct Args {
    /// Minutes of faults.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Coordinator nodes (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Broker processes.
    #[arg(long, default_value_t = 2)]
    brokers: usize,
    /// Metadata partitions (Raft groups).
    #[arg(long, default_value_t = 4)]
    groups: u32,
    /// The seed (random when absent; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Object storage on a moto S3 server instead of a local directory.
    #[arg(long)]
    s3: bool,
    /// Only these fault kinds (comma separated); all by default.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Keep the files of a passing run too.
    #[arg(long)]
    keep: bool,
    /// Do not run: judge this saved history file and print the anomalies.
    #[arg(long)]
    check: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.check {
        let events = nemesis::history::History::load(path)?;
        let anomalies = nemesis::checker::check(&events);
        for a in &anomalies {
            println!("{}: {}", a.kind, a.detail);
        }
        println!("{} events, {} anomalies (history checks only)", events.len(), anomalies.len());
        std::process::exit(if anomalies.is_empty() { 0 } else { 1 });
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let mut config = nemesis::Config::new(seed, Duration::from_secs_f64(args.minutes * 60.0));
    config.shape.nodes = args.nodes;
    config.shape.brokers = args.brokers;
    config.shape.metadata_partitions = args.groups;
    config.shape.s3 = args.s3;
    config.keep = args.keep;
    config.replay = format!(
        "tests/nemesis.sh --minutes {} --nodes {} --brokers {} --groups {} --seed {seed}{}{}",
        args.minutes,
        args.nodes,
        args.brokers,
        args.groups,
        if args.s3 { " --s3" } else { "" },
        if args.faults.is_empty() { String::new() } else { format!(" --faults {}", args.faults.join(",")) }
    );
    if !args.faults.is_empty() {
        config.faults = args
            .faults
            .iter()
            .map(|f| Kind::parse(f).ok_or_else(|| anyhow::anyhow!("unknown fault kind {f:?}")))
            .collect::<anyhow::Result<_>>()?;
    }
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(nemesis::run(config))?;
    println!("{}", result.summary.text);
    if let Some(dir) = &result.kept {
        println!("files kept in {}", dir.display());
    }
    std::process::exit(if result.summary.failed == 0 { 0 } else { 1 });
}
