//! Recovery at open: the segments of a data directory checked and replayed into the in-memory
//! index, a torn tail kept aside and zeroed, writing resumed after the last good record. Follows the
//! replay rules and the crash-safety rules of the segmented log (`mod.rs`); it must not write
//! anything but the torn tail's evidence, the zeroing and a new segment.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context;

use super::record::Kind;
use super::{segment, Inner, Loc, SegLog, Segment};

impl SegLog {
    pub(super) fn load(dir: &Path, segment_bytes: u64, writable: bool) -> anyhow::Result<SegLog> {
        let seqs = if dir.exists() { segment::list(dir)? } else { vec![] };
        // The last sequence number has no successor to switch to.
        if let Some(&seq) = seqs.last().filter(|&&s| s == u64::MAX) {
            anyhow::bail!(
                "the Raft log in {} is corrupt: {} is numbered past any log",
                dir.display(),
                segment::path(dir, seq).display()
            );
        }
        for w in seqs.windows(2) {
            anyhow::ensure!(
                w[1] == w[0] + 1,
                "the Raft log in {} is missing segments between {:016x} and {:016x}: the directory is damaged",
                dir.display(),
                w[0],
                w[1]
            );
        }
        let mut inner = Inner {
            segments: BTreeMap::new(),
            current: 0,
            offset: segment::FIRST,
            capacity: 0,
            partitions: HashMap::new(),
            spare: None,
            buf: vec![],
            relocating: false,
            failed: None,
        };
        // The last segment unless it is sealed: where its records end, its size, and up to where
        // bytes of a torn tail may lie.
        let mut tail: Option<(u64, u64, u64)> = None;
        for (i, &seq) in seqs.iter().enumerate() {
            let last = i + 1 == seqs.len();
            let s = segment::scan(dir, seq).with_context(|| format!("read the Raft log in {}", dir.display()))?;
            if s.blank && last {
                // Switched to but never synced: it holds nothing acknowledged. Kept aside, not
                // deleted, if anything but zeros is in it (evidence, should it be damage).
                if writable {
                    if s.written_end > 0 {
                        let aside = dir.join(format!("{seq:016x}.blank-header"));
                        tracing::warn!(
                            segment = seq,
                            "the Raft log's last segment has no header; moved aside to {}",
                            aside.display()
                        );
                        std::fs::rename(segment::path(dir, seq), aside)?;
                    } else {
                        std::fs::remove_file(segment::path(dir, seq))?;
                    }
                    segment::sync_dir(dir)?;
                }
                continue;
            }
            if s.blank {
                anyhow::bail!(
                    "the Raft log in {} is corrupt: {} has a blank header (zeros at offset 0) but is not the last segment",
                    dir.display(),
                    segment::path(dir, seq).display()
                );
            }
            if !s.sealed && !last {
                anyhow::bail!(
                    "the Raft log in {} is corrupt: {} has {} at offset {} before its seal",
                    dir.display(),
                    segment::path(dir, seq).display(),
                    s.stopped.as_deref().unwrap_or("an error"),
                    s.end
                );
            }
            if !s.sealed {
                if s.written_end > s.end && writable {
                    // Bytes past the last good record: a write torn by a crash (never synced, so
                    // never acknowledged) or damage — indistinguishable here. Kept in a file
                    // before they are zeroed.
                    let aside = dir.join(format!("{seq:016x}-{}.torn", s.end));
                    std::fs::write(&aside, &s.tail)?;
                    tracing::warn!(
                        dir = %dir.display(),
                        segment = seq,
                        offset = s.end,
                        "the Raft log ends at {}; the {} bytes after it (a torn write) are kept in {} and zeroed",
                        s.stopped.as_deref().unwrap_or("?"),
                        s.written_end - s.end,
                        aside.display()
                    );
                }
                let size = std::fs::metadata(segment::path(dir, seq))?.len();
                tail = Some((s.end, size, s.written_end));
            }
            let file = Arc::new(segment::open(dir, seq, writable)?);
            inner.segments.insert(seq, Segment { file, tops: HashMap::new() });
            for r in &s.records {
                inner.replay(seq, r.kind, r.partition, r.index, r.offset, r.len);
            }
        }
        let log = SegLog {
            dir: dir.to_path_buf(),
            segment_bytes,
            writable,
            inner: Mutex::new(inner),
            relocated: Default::default(),
            fresh: seqs.is_empty(),
        };
        if writable {
            let mut inner = log.lock();
            match tail {
                // Writing resumes where the records end, once what a torn write left there is gone.
                Some((end, size, written_end)) => {
                    let current = *inner.segments.keys().last().context("the last segment")?;
                    segment::wipe(&inner.segments[&current].file, end, written_end.max(end))
                        .context("wipe the torn tail of the Raft log")?;
                    inner.current = current;
                    inner.offset = end;
                    inner.capacity = size;
                }
                None => {
                    let next = inner.segments.last_key_value().map_or(1, |(s, _)| s + 1);
                    log.start_segment(&mut inner, next, segment_bytes).context("start a Raft log segment")?;
                }
            }
            log.collect(&mut inner).context("delete unused Raft log segments")?;
        }
        Ok(log)
    }
}

impl Inner {
    /// Applies one record found at open (segment `seq`, at `offset`) to the index.
    fn replay(&mut self, seq: u64, kind: Kind, g: u32, index: u64, offset: u64, len: u32) {
        match kind {
            Kind::Entry => {
                self.partitions.entry(g).or_default().put(index, Loc { seg: seq, offset, len });
                if let Some(s) = self.segments.get_mut(&seq) {
                    let top = s.tops.entry(g).or_insert(0);
                    *top = (*top).max(index);
                }
            }
            Kind::Truncate => {
                if let Some(pl) = self.partitions.get_mut(&g) {
                    pl.truncate(index);
                }
            }
            Kind::Drop => self.forget(g),
            Kind::Seal => {}
        }
    }
}
