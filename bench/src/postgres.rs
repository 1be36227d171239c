//! The baseline: a PostgreSQL control plane written after the published design of the KIP's
//! reference implementation (Aiven Inkless): tables for logs, files, batches (indexed by topic,
//! partition, last offset) and producer state; a `commit_file` function that locks the touched
//! log rows in sorted order, checks producer state, assigns offsets from the high watermark and
//! inserts the batches; find-batches and list-offsets queries. `synchronous_commit = on`.
//!
//! The bench starts a private PostgreSQL 15 on a loopback port (initdb as the `postgres` user) in
//! a temporary directory, or uses one given by URL.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use tokio_postgres::{Client, NoTls};

pub const SCHEMA: &str = r#"
CREATE TABLE logs (
  topic_id uuid NOT NULL, partition int NOT NULL,
  log_start_offset bigint NOT NULL DEFAULT 0, high_watermark bigint NOT NULL DEFAULT 0, byte_size bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (topic_id, partition));
CREATE TABLE files (
  file_id bigserial PRIMARY KEY, object_key text NOT NULL UNIQUE, format smallint NOT NULL, size bigint NOT NULL,
  uploader int NOT NULL, committed_at bigint NOT NULL, live_bytes bigint NOT NULL, marked_for_deletion_at bigint);
CREATE TABLE batches (
  batch_id bigserial PRIMARY KEY, topic_id uuid NOT NULL, partition int NOT NULL,
  base_offset bigint NOT NULL, last_offset bigint NOT NULL, file_id bigint NOT NULL,
  byte_offset bigint NOT NULL, byte_size bigint NOT NULL, log_append_time bigint NOT NULL,
  batch_max_timestamp bigint NOT NULL, timestamp_type smallint NOT NULL);
CREATE INDEX batches_by_last_offset ON batches (topic_id, partition, last_offset);
CREATE TABLE producer_state (
  topic_id uuid NOT NULL, partition int NOT NULL, producer_id bigint NOT NULL, row_id bigserial,
  producer_epoch smallint NOT NULL, base_sequence int NOT NULL, last_sequence int NOT NULL,
  assigned_offset bigint NOT NULL, log_append_time bigint NOT NULL,
  PRIMARY KEY (topic_id, partition, producer_id, row_id));
CREATE TYPE commit_batch AS (
  idx int, topic_id uuid, partition int, byte_offset bigint, byte_size bigint, base_offset bigint, last_offset bigint,
  batch_max_timestamp bigint, timestamp_type smallint, producer_id bigint, producer_epoch smallint,
  base_sequence int, last_sequence int);

CREATE FUNCTION commit_file(p_key text, p_size bigint, p_uploader int, p_now bigint, p_batches commit_batch[])
RETURNS TABLE (idx int, error_code smallint, assigned_base_offset bigint, log_start_offset bigint, is_duplicate bool)
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
DECLARE
  v_file bigint; b commit_batch; v_lso bigint; v_hwm bigint; v_count bigint; v_live bigint := 0;
  v_epoch smallint; v_last_seq int; v_dup bigint;
BEGIN
  INSERT INTO files(object_key, format, size, uploader, committed_at, live_bytes)
    VALUES (p_key, 1, p_size, p_uploader, p_now, 0) RETURNING file_id INTO v_file;
  -- Lock every touched log row, in sorted order, so concurrent commits cannot deadlock.
  PERFORM 1 FROM logs l
    WHERE (l.topic_id, l.partition) IN (SELECT DISTINCT x.topic_id, x.partition FROM unnest(p_batches) x)
    ORDER BY l.topic_id, l.partition FOR UPDATE;
  FOREACH b IN ARRAY p_batches LOOP
    idx := b.idx; is_duplicate := false;
    SELECT l.log_start_offset, l.high_watermark INTO v_lso, v_hwm FROM logs l
      WHERE l.topic_id = b.topic_id AND l.partition = b.partition;
    IF NOT FOUND THEN
      error_code := 3; assigned_base_offset := -1; log_start_offset := -1; RETURN NEXT; CONTINUE;
    END IF;
    IF b.producer_id >= 0 THEN
      SELECT ps.assigned_offset INTO v_dup FROM producer_state ps
        WHERE ps.topic_id = b.topic_id AND ps.partition = b.partition AND ps.producer_id = b.producer_id
          AND ps.producer_epoch = b.producer_epoch AND ps.base_sequence = b.base_sequence AND ps.last_sequence = b.last_sequence;
      IF FOUND THEN
        error_code := 0; assigned_base_offset := v_dup; log_start_offset := v_lso; is_duplicate := true; RETURN NEXT; CONTINUE;
      END IF;
      SELECT ps.producer_epoch, ps.last_sequence INTO v_epoch, v_last_seq FROM producer_state ps
        WHERE ps.topic_id = b.topic_id AND ps.partition = b.partition AND ps.producer_id = b.producer_id
        ORDER BY ps.row_id DESC LIMIT 1;
      IF FOUND AND b.producer_epoch < v_epoch THEN
        error_code := 47; assigned_base_offset := -1; log_start_offset := -1; RETURN NEXT; CONTINUE;
      ELSIF (NOT FOUND OR b.producer_epoch > v_epoch) AND b.base_sequence <> 0 THEN
        error_code := 45; assigned_base_offset := -1; log_start_offset := -1; RETURN NEXT; CONTINUE;
      ELSIF FOUND AND b.producer_epoch = v_epoch
            AND b.base_sequence <> (CASE WHEN v_last_seq = 2147483647 THEN 0 ELSE v_last_seq + 1 END) THEN
        error_code := 45; assigned_base_offset := -1; log_start_offset := -1; RETURN NEXT; CONTINUE;
      END IF;
    END IF;
    v_count := b.last_offset - b.base_offset + 1;
    INSERT INTO batches(topic_id, partition, base_offset, last_offset, file_id, byte_offset, byte_size,
                        log_append_time, batch_max_timestamp, timestamp_type)
      VALUES (b.topic_id, b.partition, v_hwm, v_hwm + v_count - 1, v_file, b.byte_offset, b.byte_size,
              p_now, b.batch_max_timestamp, b.timestamp_type);
    UPDATE logs l SET high_watermark = v_hwm + v_count, byte_size = l.byte_size + b.byte_size
      WHERE l.topic_id = b.topic_id AND l.partition = b.partition;
    IF b.producer_id >= 0 THEN
      INSERT INTO producer_state(topic_id, partition, producer_id, producer_epoch, base_sequence, last_sequence,
                                 assigned_offset, log_append_time)
        VALUES (b.topic_id, b.partition, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, v_hwm, p_now);
      DELETE FROM producer_state ps WHERE ps.topic_id = b.topic_id AND ps.partition = b.partition
        AND ps.producer_id = b.producer_id AND ps.row_id NOT IN (
          SELECT p2.row_id FROM producer_state p2 WHERE p2.topic_id = b.topic_id AND p2.partition = b.partition
            AND p2.producer_id = b.producer_id ORDER BY p2.row_id DESC LIMIT 5);
    END IF;
    v_live := v_live + b.byte_size;
    error_code := 0; assigned_base_offset := v_hwm; log_start_offset := v_lso; RETURN NEXT;
  END LOOP;
  UPDATE files SET live_bytes = v_live, marked_for_deletion_at = CASE WHEN v_live = 0 THEN p_now END
    WHERE file_id = v_file;
END $$;
"#;

pub const FIND_BATCHES: &str =
    "SELECT b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset, \
     b.log_append_time, b.batch_max_timestamp, b.timestamp_type \
     FROM batches b JOIN files f ON f.file_id = b.file_id \
     WHERE b.topic_id = $1 AND b.partition = $2 AND b.last_offset >= $3 ORDER BY b.last_offset LIMIT $4";

pub const LOG_OFFSETS: &str =
    "SELECT log_start_offset, high_watermark FROM logs WHERE topic_id = $1 AND partition = $2";

/// A private PostgreSQL server, stopped when dropped.
pub struct PgServer {
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
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

impl PgServer {
    /// initdb + start on `port` (loopback only), tuned for this machine, fsync and synchronous
    /// commit on.
    pub fn start(port: u16) -> anyhow::Result<PgServer> {
        let tmp = tempfile::Builder::new().prefix("diskless-bench-pg-").tempdir()?;
        let dir = tmp.path().to_path_buf();
        Command::new("chown").arg("postgres").arg(&dir).status()?;
        let initdb = pg_bin("initdb")?;
        let pg_ctl = pg_bin("pg_ctl")?;
        let data = dir.join("data");
        as_postgres(&format!("{} -D {} -A trust -U postgres >/dev/null", initdb.display(), data.display()))?;
        let opts = format!(
            "-p {port} -k {d} -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=1GB \
             -c synchronous_commit=on -c fsync=on -c wal_level=minimal -c max_wal_senders=0 -c max_wal_size=4GB \
             -c checkpoint_timeout=30min",
            d = dir.display()
        );
        as_postgres(&format!(
            "{} -D {} -o '{opts}' -l {}/log -w start >/dev/null",
            pg_ctl.display(),
            data.display(),
            dir.display()
        ))?;
        Ok(PgServer { dir, _tmp: Some(tmp), url: format!("host=127.0.0.1 port={port} user=postgres dbname=postgres") })
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Ok(pg_ctl) = pg_bin("pg_ctl") {
            let _ = as_postgres(&format!(
                "{} -D {} -m fast stop >/dev/null",
                pg_ctl.display(),
                self.dir.join("data").display()
            ));
        }
    }
}

pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.with_context(|| format!("connect to {url}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// Creates the schema (dropping what a previous run left).
pub async fn install(url: &str) -> anyhow::Result<()> {
    let c = connect(url).await?;
    c.batch_execute(
        "DROP FUNCTION IF EXISTS commit_file; DROP TABLE IF EXISTS batches, files, logs, producer_state; DROP TYPE IF EXISTS commit_batch;",
    )
    .await?;
    c.batch_execute(SCHEMA).await.context("install schema")?;
    Ok(())
}

/// The plan of the find-batches query, to show it walks the index.
pub async fn explain_find(c: &Client, topic: uuid::Uuid) -> anyhow::Result<String> {
    let rows = c
        .query(
            &format!(
                "EXPLAIN {}",
                FIND_BATCHES
                    .replace("$1", &format!("'{topic}'::uuid"))
                    .replace("$2", "0")
                    .replace("$3", "1000")
                    .replace("$4", "10")
            ),
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n"))
}
