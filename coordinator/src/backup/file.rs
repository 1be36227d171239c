//! The backup file: every metadata partition's state in one file, checked end to end.
//!
//! Format (version 1), integers big-endian:
//! `"DLBACKUP"`, u32 format version, u32 header length, the header (JSON, [`Header`]: cluster id,
//! number of metadata partitions, per partition its applied log id, state digest and section
//! length), then one *section* per partition in the header's order — each exactly the bytes of a
//! snapshot file (`raft::snapshot`: its own header, pairs and CRC32C) — then `"DLBKEND1"` and the
//! CRC32C of every byte before it.
//!
//! Written under a temporary name (the sections first, in a second temporary file, since the
//! header needs their lengths), checked whole, fsynced and renamed: a file under the final name
//! is complete. Reading checks the length, the end checksum and every section before a caller
//! acts on any of it ([`Backup::open`]), so a damaged or truncated file is refused whole.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::raft::snapshot::CrcWriter;

const MAGIC: &[u8; 8] = b"DLBACKUP";
const END: &[u8; 8] = b"DLBKEND1";
const FORMAT: u32 = 1;
/// The largest header accepted (a few hundred bytes per partition).
const MAX_HEADER: u32 = 16 << 20;

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format: u32,
    /// The source cluster's id (hex).
    pub cluster_id: String,
    pub num_metadata_partitions: u32,
    /// When the backup was taken (ms since the Unix epoch), and through which node.
    pub created_at_ms: u64,
    pub taken_through: String,
    /// One per metadata partition, in the order of the sections.
    pub partitions: Vec<Partition>,
}

/// One metadata partition's section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    pub metadata_partition: u32,
    /// The applied log id the state reflects: index, term, and its leader id's node.
    pub applied_index: u64,
    pub applied_term: u64,
    pub applied_leader: u64,
    /// Hex SHA-256 of the state (`StateMachine::digest`, as `Status` reports it).
    pub digest: String,
    /// Length of the section (a snapshot file), in bytes.
    pub bytes: u64,
    /// The node (its leader then) that streamed it.
    pub node_id: u64,
}

fn bad(path: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{} is not a usable backup file: {why}", path.display())
}

/// Writes a backup: sections one after the other, then [`finish`](Self::finish). Dropped
/// unfinished, it removes its temporary files.
pub struct Writer {
    path: PathBuf,
    body_path: PathBuf,
    body: BufWriter<File>,
    /// Bytes in the body when the current section started.
    section_start: u64,
    written: u64,
    partitions: Vec<Partition>,
    done: bool,
}

impl Writer {
    pub fn create(path: &Path) -> anyhow::Result<Writer> {
        let body_path = temp_name(path, "body");
        let body = File::create(&body_path).with_context(|| format!("create {}", body_path.display()))?;
        Ok(Writer {
            path: path.to_path_buf(),
            body_path,
            body: BufWriter::with_capacity(1 << 20, body),
            section_start: 0,
            written: 0,
            partitions: vec![],
            done: false,
        })
    }

    /// Appends bytes of the current section.
    pub fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.body.write_all(bytes).with_context(|| format!("write {}", self.body_path.display()))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Bytes of the current section so far.
    pub fn section_bytes(&self) -> u64 {
        self.written - self.section_start
    }

    /// Drops the current section's bytes (its stream broke; it will be taken again).
    pub fn discard_section(&mut self) -> anyhow::Result<()> {
        self.body.flush()?;
        self.body.get_mut().set_len(self.section_start)?;
        self.body.get_mut().seek(SeekFrom::Start(self.section_start))?;
        self.written = self.section_start;
        Ok(())
    }

    /// Ends the current section, described by `p` (whose `bytes` must be its length).
    pub fn end_section(&mut self, p: Partition) -> anyhow::Result<()> {
        anyhow::ensure!(
            p.bytes == self.section_bytes(),
            "metadata partition {}: {} bytes announced, {} received",
            p.metadata_partition,
            p.bytes,
            self.section_bytes()
        );
        self.section_start = self.written;
        self.partitions.push(p);
        Ok(())
    }

    /// Writes the file: header, sections, end checksum; checks it whole, fsyncs, renames it into
    /// place. Returns its size.
    pub fn finish(mut self, mut header: Header) -> anyhow::Result<u64> {
        header.format = FORMAT;
        header.partitions = std::mem::take(&mut self.partitions);
        self.body.flush()?;
        let part = temp_name(&self.path, "part");
        {
            let f = File::create(&part).with_context(|| format!("create {}", part.display()))?;
            let mut w = CrcWriter { inner: BufWriter::with_capacity(1 << 20, f), crc: 0 };
            let json = serde_json::to_vec(&header)?;
            w.put(MAGIC)?;
            w.put(&FORMAT.to_be_bytes())?;
            w.put(&(json.len() as u32).to_be_bytes())?;
            w.put(&json)?;
            let mut body = BufReader::with_capacity(1 << 20, File::open(&self.body_path)?);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = body.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                w.put(&buf[..n])?;
            }
            w.put(END)?;
            let crc = w.crc;
            let mut inner = w.inner;
            inner.write_all(&crc.to_be_bytes())?;
            let f = inner.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
        }
        let checked = Backup::open(&part).and_then(|b| {
            b.verify()?;
            Ok(b)
        });
        if let Err(e) = checked {
            let _ = fs::remove_file(&part);
            return Err(e.context("the backup just written does not read back"));
        }
        fs::rename(&part, &self.path)
            .with_context(|| format!("rename {} to {}", part.display(), self.path.display()))?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        self.done = true;
        let _ = fs::remove_file(&self.body_path);
        Ok(fs::metadata(&self.path)?.len())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.body_path);
        if !self.done {
            let _ = fs::remove_file(temp_name(&self.path, "part"));
        }
    }
}

fn temp_name(path: &Path, what: &str) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{what}"));
    path.with_file_name(name)
}

/// A backup file whose length, header and end checksum were checked.
#[derive(Debug)]
pub struct Backup {
    pub path: PathBuf,
    pub header: Header,
    /// Where the first section starts.
    body_offset: u64,
    /// The end checksum (identifies the backup's content).
    pub checksum: u32,
}

impl Backup {
    /// Opens `path`: reads the header, checks the file's length against it and the end checksum
    /// over every byte. Sections are checked by [`verify`](Self::verify).
    pub fn open(path: &Path) -> anyhow::Result<Backup> {
        let f = File::open(path).with_context(|| format!("open {}", path.display()))?;
        let len = f.metadata()?.len();
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut crc = 0u32;
        let mut fixed = [0u8; 16];
        read_crc(&mut r, &mut fixed, &mut crc).map_err(|_| bad(path, "shorter than a backup's header"))?;
        if &fixed[..8] != MAGIC {
            return Err(bad(path, "it does not start with DLBACKUP"));
        }
        let format = u32::from_be_bytes(fixed[8..12].try_into()?);
        if format != FORMAT {
            return Err(bad(path, format!("format {format}, this release reads format {FORMAT}")));
        }
        let header_len = u32::from_be_bytes(fixed[12..16].try_into()?);
        if header_len > MAX_HEADER {
            return Err(bad(path, "header length out of range (damaged)"));
        }
        let mut json = vec![0u8; header_len as usize];
        read_crc(&mut r, &mut json, &mut crc).map_err(|_| bad(path, "truncated in the header"))?;
        let header: Header = serde_json::from_slice(&json).map_err(|e| bad(path, format!("damaged header ({e})")))?;
        let body_offset = 16 + header_len as u64;
        let body: u64 = header.partitions.iter().map(|p| p.bytes).sum();
        let expected = body_offset + body + 12;
        if len < expected {
            return Err(bad(path, format!("truncated: {len} bytes, the header announces {expected}")));
        }
        if len > expected {
            return Err(bad(path, format!("{} bytes more than the header announces", len - expected)));
        }
        let sections: Vec<u32> = header.partitions.iter().map(|p| p.metadata_partition).collect();
        let mut sorted = sections.clone();
        sorted.sort_unstable();
        if sorted != (0..header.num_metadata_partitions).collect::<Vec<_>>() {
            return Err(bad(
                path,
                format!(
                    "the header lists sections {sections:?}, not one per metadata partition 0..{}",
                    header.num_metadata_partitions
                ),
            ));
        }
        let mut left = body;
        let mut buf = vec![0u8; 1 << 20];
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            read_crc(&mut r, &mut buf[..n], &mut crc).map_err(|e| bad(path, e))?;
            left -= n as u64;
        }
        let mut end = [0u8; 12];
        r.read_exact(&mut end).map_err(|e| bad(path, e))?;
        if &end[..8] != END {
            return Err(bad(path, "no end mark where the header says the file ends (damaged)"));
        }
        crc = crc32c::crc32c_append(crc, END);
        let stored = u32::from_be_bytes(end[8..12].try_into()?);
        if stored != crc {
            return Err(bad(path, "end checksum mismatch (the file is damaged)"));
        }
        Ok(Backup { path: path.to_path_buf(), header, body_offset, checksum: crc })
    }

    /// Reads every section through `visit` (partition, its bytes as a reader that stops at the
    /// section's end). Each section must be read to its end by `visit`.
    pub fn for_each_section(
        &self,
        visit: &mut dyn FnMut(&Partition, &mut dyn Read) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut f = File::open(&self.path)?;
        f.seek(SeekFrom::Start(self.body_offset))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        for p in &self.header.partitions {
            let mut section = (&mut r).take(p.bytes);
            visit(p, &mut section)
                .with_context(|| format!("{}: metadata partition {}", self.path.display(), p.metadata_partition))?;
            anyhow::ensure!(
                section.limit() == 0,
                "{}: metadata partition {}: the section holds {} bytes after its snapshot",
                self.path.display(),
                p.metadata_partition,
                section.limit()
            );
        }
        Ok(())
    }

    /// Checks every section: a whole snapshot with a good CRC, of the right length, of the
    /// partition and applied log id the header says.
    pub fn verify(&self) -> anyhow::Result<()> {
        self.for_each_section(&mut |p, r| {
            let meta = crate::raft::snapshot::read_from(&mut &mut *r, &mut |_, _| Ok(()))
                .map_err(|e| anyhow::anyhow!("damaged section: {e}"))?;
            let l = meta.last_log_id;
            anyhow::ensure!(
                l.map(|l| (l.index, l.leader_id.term, l.leader_id.node_id)).unwrap_or_default()
                    == (p.applied_index, p.applied_term, p.applied_leader),
                "the section's applied log id does not match the header"
            );
            Ok(())
        })
    }
}

fn read_crc(r: &mut impl Read, buf: &mut [u8], crc: &mut u32) -> io::Result<()> {
    r.read_exact(buf)?;
    *crc = crc32c::crc32c_append(*crc, buf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::SnapshotMeta;
    use crate::storage::{Db, Txn};

    /// A snapshot stream of `n` pairs of group 0's keys.
    fn section(db: &Db) -> Vec<u8> {
        let meta = SnapshotMeta::default();
        crate::raft::snapshot::write_to(&db.read(), &[0; 4], &[0, 0, 0, 1], &|_| false, &meta, Vec::new()).unwrap()
    }

    fn partition(g: u32, bytes: usize) -> Partition {
        Partition {
            metadata_partition: g,
            applied_index: 0,
            applied_term: 0,
            applied_leader: 0,
            digest: "d".into(),
            bytes: bytes as u64,
            node_id: 1,
        }
    }

    fn header() -> Header {
        Header {
            format: 0,
            cluster_id: "c".into(),
            num_metadata_partitions: 2,
            created_at_ms: 0,
            taken_through: "x".into(),
            partitions: vec![],
        }
    }

    #[test]
    fn a_backup_reads_back_and_any_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("db")).unwrap();
        let mut t = Txn::new(&db);
        for i in 0..500u32 {
            let mut k = vec![0, 0, 0, 0, b'T'];
            k.extend_from_slice(&i.to_be_bytes());
            t.put(k, vec![i as u8; 40]);
        }
        db.write(t.into_write_batch(), false).unwrap();
        let s = section(&db);
        let path = dir.path().join("b.backup");
        let mut w = Writer::create(&path).unwrap();
        w.write(&s[..100]).unwrap();
        w.discard_section().unwrap(); // a broken stream, taken again
        for g in [1, 0] {
            w.write(&s).unwrap();
            w.end_section(partition(g, s.len())).unwrap();
        }
        let size = w.finish(header()).unwrap();
        let b = Backup::open(&path).unwrap();
        b.verify().unwrap();
        assert_eq!(b.header.partitions.iter().map(|p| p.metadata_partition).collect::<Vec<_>>(), [1, 0]);
        let mut pairs = 0;
        b.for_each_section(&mut |_, r| {
            crate::raft::snapshot::read_from(&mut &mut *r, &mut |_, _| {
                pairs += 1;
                Ok(())
            })?;
            Ok(())
        })
        .unwrap();
        assert_eq!(pairs, 1000);
        assert!(!dir.path().join("b.backup.body").exists() && !dir.path().join("b.backup.part").exists());

        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, size);
        for at in [0, 9, 20, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            let e = Backup::open(&path).and_then(|b| b.verify()).err().unwrap_or_else(|| panic!("byte {at} flipped"));
            assert!(format!("{e:#}").contains("not a usable backup file"), "{e:#}");
        }
        for len in [0, 10, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..len]).unwrap();
            assert!(Backup::open(&path).is_err(), "truncated to {len}");
        }
    }

    #[test]
    fn a_section_of_the_wrong_length_is_not_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.backup");
        let mut w = Writer::create(&path).unwrap();
        w.write(b"abc").unwrap();
        assert!(w.end_section(partition(0, 4)).is_err());
        drop(w);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "no temporary file left");
    }
}
