//! The private PostgreSQL servers the bench starts: a primary on a loopback port and, for the
//! replicated variant, a synchronous streaming standby on another loopback port, each in its own
//! temporary directory, stopped when dropped. Owns the servers' configuration: every setting that
//! differs from PostgreSQL 15's defaults is in [`SETTINGS`] with the reason for it. It must not
//! know the baseline's schema (`postgres.rs`) or run workloads.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

/// The settings that differ from the defaults, as a control plane's operators would set them on
/// this machine, and why. Durability stays at the defaults: `fsync`, `full_page_writes` and
/// `synchronous_commit` on (named here so the results say so).
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("listen_addresses", "127.0.0.1", "a private server: loopback only (plus a Unix socket in its directory)"),
    (
        "shared_buffers",
        "1GB",
        "the default 128MB is a placeholder; operators give PostgreSQL a share of RAM. 1GB holds the \
         commit workloads' working set (log rows, index tails) many times over",
    ),
    (
        "max_wal_size",
        "4GB",
        "the default 1GB forces a checkpoint every ~1GB of WAL (the 10M-batch fill writes several); \
         raised as operators do, so no checkpoint starts inside a measurement",
    ),
    ("checkpoint_timeout", "15min", "same reason (default 5min); every measurement starts after a CHECKPOINT instead"),
    ("fsync", "on", "the default, stated: an acknowledged commit is on disk"),
    ("full_page_writes", "on", "the default, stated"),
    ("synchronous_commit", "on", "the default, stated: the commit waits for its WAL flush (and the standby's, if any)"),
];

/// Extra settings of the replicated variant's primary.
pub const REPLICATED_SETTINGS: &[(&str, &str, &str)] = &[(
    "synchronous_standby_names",
    STANDBY_NAME,
    "every commit also waits until the standby has flushed its WAL (with synchronous_commit = on)",
)];

const STANDBY_NAME: &str = "standby1";

/// A private PostgreSQL server (with its synchronous standby, if replicated), stopped when
/// dropped.
pub struct PgServer {
    /// Data directories to stop, standby first.
    data_dirs: Vec<PathBuf>,
    _tmp: tempfile::TempDir,
    pub url: String,
}

fn pg_bin(name: &str) -> anyhow::Result<PathBuf> {
    for v in ["17", "16", "15", "14"] {
        let p = Path::new("/usr/lib/postgresql").join(v).join("bin").join(name);
        if p.exists() {
            return Ok(p);
        }
    }
    anyhow::bail!("PostgreSQL's {name} not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

fn as_postgres(cmd: &str) -> anyhow::Result<()> {
    let st = Command::new("su").args(["postgres", "-s", "/bin/sh", "-c", cmd]).status().context("su postgres")?;
    anyhow::ensure!(st.success(), "`{cmd}` failed");
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Appends `settings` to a data directory's `postgresql.auto.conf` (read at start).
fn configure(data: &Path, port: u16, socket_dir: &Path, settings: &[(&str, &str, &str)]) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.auto.conf"))
        .context("open postgresql.auto.conf")?;
    writeln!(f, "port = {port}")?;
    writeln!(f, "unix_socket_directories = '{}'", socket_dir.display())?;
    for (k, v, _) in settings {
        writeln!(f, "{k} = '{v}'")?;
    }
    Ok(())
}

fn start_server(data: &Path, log: &Path) -> anyhow::Result<()> {
    as_postgres(&format!(
        "{} -D {} -l {} -w -t 120 start >/dev/null",
        pg_bin("pg_ctl")?.display(),
        data.display(),
        log.display()
    ))
}

impl PgServer {
    /// initdb + start a primary on a free loopback port; with `replicated`, also a streaming
    /// standby (pg_basebackup of the primary) that every commit waits for, and waits until the
    /// primary reports it synchronous.
    pub async fn start(replicated: bool) -> anyhow::Result<PgServer> {
        let tmp = tempfile::Builder::new().prefix("diskless-bench-pg-").tempdir()?;
        let dir = tmp.path().to_path_buf();
        let st = Command::new("chown").arg("postgres").arg(&dir).status()?;
        anyhow::ensure!(st.success(), "chown postgres {}", dir.display());
        let primary = dir.join("primary");
        let port = free_port()?;
        as_postgres(&format!(
            "{} -D {} -A trust -U postgres >/dev/null",
            pg_bin("initdb")?.display(),
            primary.display()
        ))?;
        let mut settings = SETTINGS.to_vec();
        if replicated {
            settings.extend_from_slice(REPLICATED_SETTINGS);
        }
        configure(&primary, port, &dir, &settings)?;
        start_server(&primary, &dir.join("primary.log"))?;
        let mut server = PgServer {
            data_dirs: vec![primary.clone()],
            _tmp: tmp,
            url: format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"),
        };
        if replicated {
            let standby = dir.join("standby");
            let standby_port = free_port()?;
            // initdb's pg_hba.conf (-A trust) admits replication connections from 127.0.0.1.
            as_postgres(&format!(
                "{} -h 127.0.0.1 -p {port} -U postgres -D {} -X stream -c fast >/dev/null",
                pg_bin("pg_basebackup")?.display(),
                standby.display()
            ))?;
            // The copy carries the primary's auto.conf; the later lines win.
            configure(
                &standby,
                standby_port,
                &dir,
                &[(
                    "primary_conninfo",
                    &format!("host=127.0.0.1 port={port} user=postgres application_name={STANDBY_NAME}"),
                    "",
                )],
            )?;
            as_postgres(&format!("touch {}", standby.join("standby.signal").display()))?;
            start_server(&standby, &dir.join("standby.log"))?;
            server.data_dirs.insert(0, standby);
            server.wait_synchronous(Duration::from_secs(60)).await?;
        }
        Ok(server)
    }

    async fn wait_synchronous(&self, timeout: Duration) -> anyhow::Result<()> {
        let c = crate::postgres::connect(&self.url).await?;
        let deadline = Instant::now() + timeout;
        loop {
            let rows = c
                .query(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'",
                    &[&STANDBY_NAME],
                )
                .await?;
            if rows.iter().any(|r| r.get::<_, String>(0) == "sync") {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the standby did not become synchronous in {timeout:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Ok(pg_ctl) = pg_bin("pg_ctl") {
            for d in &self.data_dirs {
                let _ = as_postgres(&format!("{} -D {} -m fast -w stop >/dev/null", pg_ctl.display(), d.display()));
            }
        }
    }
}
