//! Which batches of one partition a consolidation job rewrites, decided from what FindBatches
//! answered (pure: no clock, no I/O; `now` comes in).
//!
//! The policy: one level. Batches still in WAL objects (the mixed segments brokers upload) move,
//! oldest first, into one object per partition of up to `target_bytes`, once they are
//! `min_age_ms` old and at least `min_batches` of them wait; batches already in a consolidated
//! object stay there, transaction markers have no bytes and never move, and batches within
//! `expiry_margin_ms` of their retention deadline are left to retention (rewriting what is about
//! to be deleted costs a PUT and saves nothing). So an object is rewritten at most once, and a
//! replay of an old partition reads large ranges of few objects (AutoMQ's stream split and
//! Redpanda's L0 → L1 reconciliation are the same shape; WarpStream adds a second level, left
//! for later here).

use super::config::ConsolidationConfig;

/// A batch as FindBatches answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub batch_id: i64,
    pub object_key: String,
    pub byte_offset: i64,
    pub byte_size: i64,
    pub base_offset: i64,
    pub last_offset: i64,
    /// When it was committed.
    pub log_append_time: i64,
    /// The timestamp retention counts (Kafka's: the append time for LogAppendTime batches).
    pub retention_time: i64,
    pub marker: bool,
}

/// What one job rewrites: batches of one partition in offset order, and their bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub batches: Vec<Found>,
    pub bytes: i64,
}

/// The batches of a partition to rewrite now, from `found` (its batches in offset order from
/// where the job looks); `retention_ms` its topic's (negative: none); `merged` whether an object
/// is a consolidated one. `None`: nothing worth a rewrite yet.
pub fn plan(
    found: &[Found],
    now: i64,
    config: &ConsolidationConfig,
    retention_ms: i64,
    merged: impl Fn(&str) -> bool,
) -> Option<Plan> {
    let mut out = Plan { batches: vec![], bytes: 0 };
    let old_enough = now.saturating_sub(i64::try_from(config.min_age_ms).unwrap_or(i64::MAX));
    for b in found {
        if b.log_append_time > old_enough {
            break; // younger ones follow (offsets are appended in commit order)
        }
        let expiring = retention_ms >= 0
            && b.retention_time.saturating_add(retention_ms).saturating_sub(now) < config.expiry_margin_ms;
        if b.marker || b.byte_size <= 0 || merged(&b.object_key) || expiring {
            continue;
        }
        let target = i64::try_from(config.target_bytes).unwrap_or(i64::MAX);
        if !out.batches.is_empty() && out.bytes.saturating_add(b.byte_size) > target {
            break;
        }
        out.bytes = out.bytes.saturating_add(b.byte_size);
        out.batches.push(b.clone());
    }
    (out.batches.len() >= config.min_batches.max(1)).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(base: i64, key: &str, size: i64, at: i64) -> Found {
        Found {
            batch_id: base,
            object_key: key.into(),
            byte_offset: 0,
            byte_size: size,
            base_offset: base,
            last_offset: base,
            log_append_time: at,
            retention_time: at,
            marker: false,
        }
    }

    fn config() -> ConsolidationConfig {
        ConsolidationConfig {
            min_age_ms: 100,
            target_bytes: 1_000,
            min_batches: 2,
            expiry_margin_ms: 50,
            ..ConsolidationConfig::default()
        }
    }

    fn merged(k: &str) -> bool {
        k.starts_with("merged")
    }

    fn bases(p: Option<Plan>) -> Option<Vec<i64>> {
        p.map(|p| p.batches.iter().map(|b| b.base_offset).collect())
    }

    #[test]
    fn old_batches_in_wal_objects_move_oldest_first_up_to_the_target() {
        let f: Vec<Found> = (0..6).map(|i| found(i, "wal/a", 300, 10 * i)).collect();
        assert_eq!(bases(plan(&f, 1_000, &config(), -1, merged)), Some(vec![0, 1, 2]), "3 × 300 fit in 1,000");
    }

    #[test]
    fn young_batches_stop_the_run_and_too_few_wait() {
        let f = vec![found(0, "wal/a", 10, 0), found(1, "wal/b", 10, 950), found(2, "wal/c", 10, 0)];
        assert_eq!(bases(plan(&f, 1_000, &config(), -1, merged)), None, "one old batch is not worth a rewrite");
        let f = vec![found(0, "wal/a", 10, 0), found(1, "wal/b", 10, 10), found(2, "wal/c", 10, 990)];
        assert_eq!(bases(plan(&f, 1_000, &config(), -1, merged)), Some(vec![0, 1]));
    }

    #[test]
    fn merged_batches_markers_and_batches_about_to_expire_stay() {
        let marker = Found { marker: true, byte_size: 0, ..found(3, "", 0, 0) };
        let f = vec![
            found(0, "merged/x", 10, 0),
            found(1, "wal/a", 10, 0),
            found(2, "wal/a", 10, 0),
            marker,
            found(4, "wal/b", 10, 500),
        ];
        assert_eq!(bases(plan(&f, 1_000, &config(), -1, merged)), Some(vec![1, 2, 4]));
        // Retention 540 ms: batches from time 0 expire at 540, within 50 ms of now (500)... and
        // those from 500 do not.
        assert_eq!(bases(plan(&f, 500 + 100, &config(), 540, merged)), None);
        assert_eq!(bases(plan(&f, 1_000, &config(), 10_000, merged)), Some(vec![1, 2, 4]));
    }
}
