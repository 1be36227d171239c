//! The broker shim server's command line (`diskless-broker --config broker.toml`). In the library
//! so test harnesses can build the same server.

use std::path::PathBuf;

use crate::config::ShimConfig;
use crate::service::BrokerApi;
use crate::shim::Shim;
use crate::storage::StorageConfig;
use anyhow::Context;
use clap::{Parser, Subcommand};
use diskless_proto::broker::broker_service_server::BrokerServiceServer;

#[derive(Debug, Parser)]
#[command(name = "diskless-broker", version, about = "Broker shim for Kafka diskless topics")]
struct Args {
    /// TOML configuration file.
    #[arg(long, env = "DISKLESS_BROKER_CONFIG")]
    config: Option<PathBuf>,
    /// host:port for the broker API (overrides the file).
    #[arg(long, env = "DISKLESS_BROKER_LISTEN")]
    listen: Option<String>,
    /// Coordinator nodes, comma separated (overrides the file).
    #[arg(long, env = "DISKLESS_COORDINATORS")]
    coordinators: Option<String>,
    /// Store WAL segments in this local directory (overrides the file).
    #[arg(long, env = "DISKLESS_STORAGE_DIR")]
    storage_dir: Option<PathBuf>,
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log: String,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Adds or replaces a user's salted SCRAM credentials in a Kafka SASL credentials file
    /// (`[kafka.sasl] credentials`; brokers read it again when it changes). The password is read
    /// from standard input (one line) unless --password is given.
    ScramCredential {
        /// The credentials file (created when missing).
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        user: String,
        #[arg(long, env = "DISKLESS_SCRAM_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// SCRAM-SHA-256, SCRAM-SHA-512 or both (PLAIN clients are checked against either).
        #[arg(long, value_delimiter = ',', default_value = "SCRAM-SHA-256,SCRAM-SHA-512")]
        mechanisms: Vec<String>,
        #[arg(long, default_value_t = 8192)]
        iterations: u32,
        /// Remove the user instead.
        #[arg(long)]
        delete: bool,
    },
}

fn scram_credential(cmd: Cmd) -> anyhow::Result<()> {
    use crate::kafka::security::credentials::Credentials;
    use crate::kafka::security::salted::{ScramCredential, ScramHash};
    let Cmd::ScramCredential { file, user, password, mechanisms, iterations, delete } = cmd;
    let mut creds = Credentials::read(&file)?;
    if delete {
        anyhow::ensure!(creds.users.remove(&user).is_some(), "{} has no user {user:?}", file.display());
        creds.write(&file)?;
        println!("removed {user} from {}", file.display());
        return Ok(());
    }
    let password = match password {
        Some(p) => p,
        None => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).context("read the password from standard input")?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    anyhow::ensure!(!password.is_empty() && !user.is_empty(), "an empty user name or password");
    for m in &mechanisms {
        let hash = match m.as_str() {
            "SCRAM-SHA-256" => ScramHash::Sha256,
            "SCRAM-SHA-512" => ScramHash::Sha512,
            other => anyhow::bail!("unknown SCRAM mechanism {other:?} (SCRAM-SHA-256 or SCRAM-SHA-512)"),
        };
        creds.set(&user, hash, ScramCredential::new(hash, &password, iterations)?);
    }
    creds.write(&file)?;
    println!("set {} credentials of {user} in {}", mechanisms.join(" and "), file.display());
    Ok(())
}

fn config(a: &Args) -> anyhow::Result<ShimConfig> {
    let mut table: toml::Table = match &a.config {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?.parse()?,
        None => toml::Table::new(),
    };
    if let Some(l) = &a.listen {
        table.insert("listen".into(), l.clone().into());
    }
    if let Some(c) = &a.coordinators {
        let list: Vec<toml::Value> = c.split(',').map(|s| toml::Value::from(s.trim())).collect();
        table.insert("coordinators".into(), toml::Value::Array(list));
    }
    if let Some(d) = &a.storage_dir {
        let storage = StorageConfig::Local { path: d.clone() };
        table.insert("storage".into(), toml::Value::try_from(storage)?);
    }
    let c: ShimConfig = table.try_into().context("invalid broker configuration")?;
    c.validate()?;
    Ok(c)
}

/// The server binary's `main`.
pub fn main() -> anyhow::Result<()> {
    main_from(std::env::args())
}

/// [`main`] with these command-line arguments (the first is the program's name): the benchmark
/// runs its broker by re-executing itself this way.
pub fn main_from(argv: impl IntoIterator<Item = String>) -> anyhow::Result<()> {
    let mut args = Args::parse_from(argv);
    if let Some(cmd) = args.cmd.take() {
        return scram_credential(cmd);
    }
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log).unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let config = config(&args)?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .with_context(|| format!("listen on {}", config.listen))?;
        let addr = listener.local_addr()?;
        let shim = Shim::start(config.settings()?).await?;
        println!("diskless-broker listening on {addr}");
        if let Some(k) = &config.kafka {
            for (name, addr) in crate::kafka::start_listeners(&shim, k).await? {
                println!("diskless-broker Kafka listener {name} on {addr}");
            }
        }
        if let Some(m) = &config.metrics_addr {
            let m = shim.start_metrics(m).await?;
            println!("diskless-broker metrics on http://{m}/metrics");
        }
        // The registry task ends early only when another live broker holds this broker's id.
        let registry = shim.start_registry();
        let (fatal_tx, mut fatal_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
        let shutdown = async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
            let registry_failed = async {
                match registry {
                    Some(task) => match task.await {
                        Ok(Err(e)) => e,
                        Ok(Ok(())) => std::future::pending().await,
                        Err(e) => anyhow::anyhow!("the broker registry task failed: {e}"),
                    },
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
                e = registry_failed => {
                    tracing::error!(error = %format!("{e:#}"), "stopping");
                    let _ = fatal_tx.send(e);
                }
            }
            tracing::info!("shutting down: committing what was accepted");
        };
        let tls = match &config.tls {
            Some(f) => Some(diskless_tls::ServerTls::new(f).context("[tls] of the broker API")?),
            None => None,
        };
        let incoming = diskless_tls::server::incoming(listener, tls, "broker API");
        let health = crate::health::start(&shim).await;
        tonic::transport::Server::builder()
            .add_service(health)
            .add_service(
                BrokerServiceServer::new(BrokerApi::new(shim.clone()))
                    .max_decoding_message_size(64 << 20)
                    .max_encoding_message_size(256 << 20),
            )
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await?;
        let fatal = fatal_rx.try_recv().ok();
        if fatal.is_none() && shim.advertised {
            shim.registry.unregister().await;
        }
        shim.shutdown().await;
        match fatal {
            Some(e) => Err(e),
            None => anyhow::Ok(()),
        }
    })
}
