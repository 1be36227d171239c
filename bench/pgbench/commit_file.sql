-- pgbench script: one CommitFile of 64 batches over the 1,000 partitions of topic :topic, the
-- bench's commit workload, for cross-checking diskless-bench's PostgreSQL figures (see README,
-- Benchmarks). The arrays are built on the server; diskless-bench binds them from the client.
-- 1/0 (a failed transaction in pgbench's report) unless all 64 batches were accepted.
SELECT 1 / (count(*) FILTER (WHERE error_code = 0) / 64) FROM commit_file(
  gen_random_uuid()::text, 64 * 16384, 1, 0,
  array_fill(CAST(:topic AS uuid), ARRAY[64]),
  ARRAY(SELECT (random() * 999)::int FROM generate_series(1, 64)),
  ARRAY(SELECT g * 16384::bigint FROM generate_series(0, 63) g),
  array_fill(16384::bigint, ARRAY[64]),
  array_fill(10::bigint, ARRAY[64]),
  array_fill(0::bigint, ARRAY[64]),
  array_fill(0::smallint, ARRAY[64]),
  array_fill(-1::bigint, ARRAY[64]),
  array_fill(-1::smallint, ARRAY[64]),
  array_fill(-1, ARRAY[64]),
  array_fill(-1, ARRAY[64]));
