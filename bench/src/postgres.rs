//! The baseline: a PostgreSQL control plane written after the KIP's reference implementation
//! (Aiven Inkless, `commit_file_v1/v2`): tables for logs, files, batches (indexed by topic,
//! partition, last offset) and producer state, and a `commit_file` function with the reference's
//! statement shape — one `INSERT` of the file, then, in (topic, partition) order so that
//! concurrent commits cannot deadlock, one `UPDATE logs ... RETURNING` per touched partition
//! (it locks the row and assigns the offsets), and one `INSERT` per batch. The batches arrive as
//! typed array parameters (`uuid[]`, `int[]`, `bigint[]`, ...), one array per column, bound in
//! binary by a prepared statement; nothing is parsed from text. Default planner settings (plans
//! cached as PostgreSQL caches them). Owns the SQL only: which server runs it is `pg_server.rs`'s
//! business.

use anyhow::Context;
use tokio_postgres::{Client, NoTls};

pub const SCHEMA: &str = r#"
CREATE TABLE logs (
  topic_id uuid NOT NULL, partition int NOT NULL,
  log_start_offset bigint NOT NULL DEFAULT 0, high_watermark bigint NOT NULL DEFAULT 0, byte_size bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (topic_id, partition));
CREATE TABLE files (
  file_id bigserial PRIMARY KEY, object_key text NOT NULL UNIQUE, format smallint NOT NULL, size bigint NOT NULL,
  uploader int NOT NULL, committed_at bigint NOT NULL, marked_for_deletion_at bigint);
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

-- One commit: batch i is (p_topic[i], p_partition[i], ...); results carry idx = i - 1.
-- A partition with idempotent batches is locked with SELECT ... FOR UPDATE and written once after
-- its batches were checked (a refused batch must not advance the high watermark); any other
-- partition takes one UPDATE ... RETURNING that locks it and reserves all its batches' offsets.
CREATE FUNCTION commit_file(
  p_key text, p_size bigint, p_uploader int, p_now bigint,
  p_topic uuid[], p_partition int[], p_byte_offset bigint[], p_byte_size bigint[], p_records bigint[],
  p_max_timestamp bigint[], p_timestamp_type smallint[],
  p_producer_id bigint[], p_producer_epoch smallint[], p_base_sequence int[], p_last_sequence int[])
RETURNS TABLE (idx int, error_code smallint, assigned_base_offset bigint, log_start_offset bigint, is_duplicate bool)
LANGUAGE plpgsql AS $$
DECLARE
  v_file bigint; b record; v_topic uuid; v_partition int;
  v_found bool := false; v_locked bool := false; v_locked_bytes bigint := 0; v_accepted int := 0;
  v_lso bigint; v_next bigint; v_epoch smallint; v_last_seq int; v_dup bigint;
BEGIN
  INSERT INTO files(object_key, format, size, uploader, committed_at)
    VALUES (p_key, 1, p_size, p_uploader, p_now) RETURNING file_id INTO v_file;
  FOR b IN
    SELECT x.*, (sum(x.records) OVER w)::bigint AS part_records, (sum(x.byte_size) OVER w)::bigint AS part_bytes,
           bool_or(x.producer_id >= 0) OVER w AS part_idempotent
    FROM unnest(p_topic, p_partition, p_byte_offset, p_byte_size, p_records, p_max_timestamp, p_timestamp_type,
                p_producer_id, p_producer_epoch, p_base_sequence, p_last_sequence) WITH ORDINALITY
      AS x(topic_id, partition, byte_offset, byte_size, records, max_timestamp, timestamp_type,
           producer_id, producer_epoch, base_sequence, last_sequence, i)
    WINDOW w AS (PARTITION BY x.topic_id, x.partition)
    ORDER BY x.topic_id, x.partition, x.i
  LOOP
    IF b.topic_id IS DISTINCT FROM v_topic OR b.partition IS DISTINCT FROM v_partition THEN
      IF v_locked THEN
        UPDATE logs l SET high_watermark = v_next, byte_size = l.byte_size + v_locked_bytes
          WHERE l.topic_id = v_topic AND l.partition = v_partition;
      END IF;
      v_topic := b.topic_id; v_partition := b.partition; v_locked_bytes := 0;
      IF b.part_idempotent THEN
        SELECT l.log_start_offset, l.high_watermark INTO v_lso, v_next FROM logs l
          WHERE l.topic_id = b.topic_id AND l.partition = b.partition FOR UPDATE;
        v_found := FOUND; v_locked := FOUND;
      ELSE
        UPDATE logs l SET high_watermark = l.high_watermark + b.part_records, byte_size = l.byte_size + b.part_bytes
          WHERE l.topic_id = b.topic_id AND l.partition = b.partition
          RETURNING l.high_watermark - b.part_records, l.log_start_offset INTO v_next, v_lso;
        v_found := FOUND; v_locked := false;
      END IF;
    END IF;
    idx := b.i - 1; is_duplicate := false;
    IF NOT v_found THEN
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
      INSERT INTO producer_state(topic_id, partition, producer_id, producer_epoch, base_sequence, last_sequence,
                                 assigned_offset, log_append_time)
        VALUES (b.topic_id, b.partition, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, v_next, p_now);
      -- Keep the producer's last 5 batches (Kafka's NUM_BATCHES_TO_RETAIN).
      DELETE FROM producer_state ps WHERE ps.topic_id = b.topic_id AND ps.partition = b.partition
        AND ps.producer_id = b.producer_id AND ps.row_id <= (
          SELECT p2.row_id FROM producer_state p2 WHERE p2.topic_id = b.topic_id AND p2.partition = b.partition
            AND p2.producer_id = b.producer_id ORDER BY p2.row_id DESC LIMIT 1 OFFSET 5);
    END IF;
    INSERT INTO batches(topic_id, partition, base_offset, last_offset, file_id, byte_offset, byte_size,
                        log_append_time, batch_max_timestamp, timestamp_type)
      VALUES (b.topic_id, b.partition, v_next, v_next + b.records - 1, v_file, b.byte_offset, b.byte_size,
              p_now, b.max_timestamp, b.timestamp_type);
    error_code := 0; assigned_base_offset := v_next; log_start_offset := v_lso; RETURN NEXT;
    v_next := v_next + b.records; v_locked_bytes := v_locked_bytes + b.byte_size; v_accepted := v_accepted + 1;
  END LOOP;
  IF v_locked THEN
    UPDATE logs l SET high_watermark = v_next, byte_size = l.byte_size + v_locked_bytes
      WHERE l.topic_id = v_topic AND l.partition = v_partition;
  END IF;
  IF v_accepted = 0 THEN
    UPDATE files SET marked_for_deletion_at = p_now WHERE file_id = v_file;
  END IF;
END $$;
"#;

/// The call a broker makes per file, prepared once per connection.
pub const COMMIT_FILE: &str = "SELECT idx, error_code, assigned_base_offset \
     FROM commit_file($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

pub const FIND_BATCHES: &str =
    "SELECT b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset, \
     b.log_append_time, b.batch_max_timestamp, b.timestamp_type \
     FROM batches b JOIN files f ON f.file_id = b.file_id \
     WHERE b.topic_id = $1 AND b.partition = $2 AND b.last_offset >= $3 ORDER BY b.last_offset LIMIT $4";

pub const LOG_OFFSETS: &str =
    "SELECT log_start_offset, high_watermark FROM logs WHERE topic_id = $1 AND partition = $2";

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

/// Writes all dirty pages out, so that a measurement does not pay for the previous one's.
pub async fn checkpoint(url: &str) -> anyhow::Result<()> {
    connect(url).await?.batch_execute("CHECKPOINT").await.context("CHECKPOINT")
}

/// The server's version and the settings the results depend on, as the server reports them.
pub async fn describe(url: &str) -> anyhow::Result<Vec<(String, String)>> {
    let c = connect(url).await?;
    let mut out = vec![("server_version".to_string(), c.query_one("SHOW server_version", &[]).await?.get(0))];
    for name in [
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_level",
        "synchronous_standby_names",
        "shared_buffers",
        "max_wal_size",
        "checkpoint_timeout",
        "plan_cache_mode",
    ] {
        let v: String = c.query_one(&format!("SHOW {name}"), &[]).await?.get(0);
        out.push((name.to_string(), v));
    }
    Ok(out)
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
