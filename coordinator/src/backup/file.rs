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
//! acts on any of it ([`Backup::open`]), so a damaged or truncated file is refused whole. The
//! reader is total on hostile bytes: any file is a backup or an error naming it and the offset,
//! never a panic, and nothing is allocated by a length before the file is known to hold it.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::raft::snapshot::CrcWriter;

const MAGIC: &[u8; 8] = b"DLBACKUP";
const END: &[u8; 8] = b"DLBKEND1";
/// 2: the records of this release (a backup of an earlier release is not restored).
const FORMAT: u32 = 2;
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
        read_crc(&mut r, &mut fixed, &mut crc)
            .map_err(|_| bad(path, format!("{len} bytes, shorter than a backup's 16-byte header at offset 0")))?;
        if &fixed[..8] != MAGIC {
            return Err(bad(path, "it does not start with DLBACKUP (offset 0)"));
        }
        let format = u32::from_be_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]);
        if format != FORMAT {
            return Err(bad(path, format!("format {format} at offset 8, this release reads format {FORMAT}")));
        }
        let header_len = u32::from_be_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]);
        if header_len > MAX_HEADER {
            return Err(bad(
                path,
                format!(
                    "a header length of {header_len} bytes at offset 12, out of range (damaged; at most {MAX_HEADER})"
                ),
            ));
        }
        let body_offset = 16 + u64::from(header_len);
        // The file must hold the header before it is read into memory.
        if len < body_offset + 12 {
            return Err(bad(
                path,
                format!("the length at offset 12 announces a {header_len}-byte header, more than the file holds: truncated at offset {len}"),
            ));
        }
        let mut json = vec![0u8; header_len as usize];
        read_crc(&mut r, &mut json, &mut crc).map_err(|e| bad(path, format!("at offset 16: the header: {e}")))?;
        let header: Header = serde_json::from_slice(&json)
            .map_err(|e| bad(path, format!("the header at offset 16 ({header_len} bytes) is damaged ({e})")))?;
        let expected =
            header.partitions.iter().try_fold(body_offset + 12, |sum, p| sum.checked_add(p.bytes)).ok_or_else(
                || bad(path, "the header's section lengths add up past any file (damaged header at offset 16)"),
            )?;
        if len < expected {
            return Err(bad(path, format!("truncated at offset {len}: the header announces {expected} bytes")));
        }
        if len > expected {
            return Err(bad(
                path,
                format!("{} bytes more than the header announces, from offset {expected} on", len - expected),
            ));
        }
        let body = expected - 12 - body_offset;
        let sections: Vec<u32> = header.partitions.iter().map(|p| p.metadata_partition).collect();
        let mut sorted = sections.clone();
        sorted.sort_unstable();
        let n = header.num_metadata_partitions;
        // Compared without building 0..n: `n` is whatever the header says.
        if sorted.len() as u64 != u64::from(n) || sorted.iter().enumerate().any(|(i, &g)| g as usize != i) {
            return Err(bad(
                path,
                format!("the header (offset 16) lists sections {sections:?}, not one per metadata partition 0..{n}"),
            ));
        }
        let mut left = body;
        let mut buf = vec![0u8; (1 << 20).min(body as usize)];
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            read_crc(&mut r, &mut buf[..n], &mut crc)
                .map_err(|e| bad(path, format!("at offset {}: {e}", expected - 12 - left)))?;
            left -= n as u64;
        }
        let end_at = expected - 12;
        let mut end = [0u8; 12];
        r.read_exact(&mut end).map_err(|e| bad(path, format!("at offset {end_at}: {e}")))?;
        if &end[..8] != END {
            return Err(bad(
                path,
                format!("no end mark at offset {end_at}, where the header says the file ends (damaged)"),
            ));
        }
        crc = crc32c::crc32c_append(crc, END);
        let stored = u32::from_be_bytes([end[8], end[9], end[10], end[11]]);
        if stored != crc {
            return Err(bad(
                path,
                format!("the end checksum at offset {} does not match (the file is damaged)", end_at + 8),
            ));
        }
        Ok(Backup { path: path.to_path_buf(), header, body_offset, checksum: crc })
    }

    /// Reads every section through `visit` (partition, the offset of the file where its section
    /// starts, its bytes as a reader that stops at the section's end). Each section must be read to
    /// its end by `visit`.
    pub fn for_each_section(
        &self,
        visit: &mut dyn FnMut(&Partition, u64, &mut dyn Read) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut f = File::open(&self.path)?;
        f.seek(SeekFrom::Start(self.body_offset))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut at = self.body_offset;
        for p in &self.header.partitions {
            let mut section = (&mut r).take(p.bytes);
            let place = || {
                format!(
                    "{}: metadata partition {} (the section at offsets {at}..{})",
                    self.path.display(),
                    p.metadata_partition,
                    at + p.bytes
                )
            };
            visit(p, at, &mut section).with_context(place)?;
            anyhow::ensure!(
                section.limit() == 0,
                "{}: the section holds {} bytes after its snapshot, from offset {} on",
                place(),
                section.limit(),
                at + p.bytes - section.limit()
            );
            at += p.bytes;
        }
        Ok(())
    }

    /// Checks every section: a whole snapshot with a good CRC, of the right length, of the
    /// partition and applied log id the header says.
    pub fn verify(&self) -> anyhow::Result<()> {
        self.for_each_section(&mut |p, at, r| {
            let meta = crate::raft::snapshot::read_from_at(&mut &mut *r, at, &mut |_, _| Ok(()))
                .map_err(|e| bad(&self.path, format!("damaged section: {e}")))?;
            let l = meta.last_log_id.map(|l| (l.index, l.leader_id.term, l.leader_id.node_id)).unwrap_or_default();
            if l != (p.applied_index, p.applied_term, p.applied_leader) {
                return Err(bad(
                    &self.path,
                    format!(
                        "the applied log id of the section's header (at offset {}) does not match the file's header",
                        at + 12
                    ),
                ));
            }
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

    /// A snapshot stream of `n` pairs of metadata partition 0's keys.
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
        b.for_each_section(&mut |_, _, r| {
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

    /// A backup of two small sections (partitions 1, then 0); its bytes and one section's.
    fn small_backup(dir: &Path) -> (PathBuf, Vec<u8>, Vec<u8>) {
        let db = Db::open(&dir.join("db")).unwrap();
        let mut t = Txn::new(&db);
        for i in 0..5u32 {
            let mut k = vec![0, 0, 0, 0, b'T'];
            k.extend_from_slice(&i.to_be_bytes());
            t.put(k, vec![i as u8; 3]);
        }
        db.write(t.into_write_batch(), false).unwrap();
        let s = section(&db);
        let path = dir.join("b.backup");
        let mut w = Writer::create(&path).unwrap();
        for g in [1, 0] {
            w.write(&s).unwrap();
            w.end_section(partition(g, s.len())).unwrap();
        }
        w.finish(header()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        (path, bytes, s)
    }

    /// `bytes` as a backup file is refused (by `open` or `verify`) naming the file and an offset
    /// within it; returns the offset.
    fn refused(path: &Path, bytes: &[u8], what: &str) -> u64 {
        std::fs::write(path, bytes).unwrap();
        let e = Backup::open(path).and_then(|b| b.verify()).err().unwrap_or_else(|| panic!("{what}: accepted"));
        let m = format!("{e:#}");
        assert!(m.contains(&path.display().to_string()) && m.contains("not a usable backup file"), "{what}: {m}");
        let at = crate::raft::snapshot::tests::offset_named(&m);
        assert!(at <= bytes.len() as u64, "{what}: offset {at} of {} bytes: {m}", bytes.len());
        at
    }

    /// A backup file made by hand: `json` as the header, `body` as the sections, a good end mark
    /// and checksum.
    fn handmade(json: &[u8], body: &[u8]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&FORMAT.to_be_bytes());
        b.extend_from_slice(&(json.len() as u32).to_be_bytes());
        b.extend_from_slice(json);
        b.extend_from_slice(body);
        b.extend_from_slice(END);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn a_backup_cut_anywhere_is_an_error_naming_its_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes, _) = small_backup(dir.path());
        for cut in 0..bytes.len() {
            refused(&path, &bytes[..cut], &format!("cut at {cut}"));
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(refused(&path, &longer, "a byte more"), bytes.len() as u64);
    }

    #[test]
    fn a_backup_with_any_byte_damaged_is_an_error_naming_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes, _) = small_backup(dir.path());
        let mut rng = crate::raft::snapshot::tests::damage(0x9e37_79b9_7f4a_7c15);
        for _ in 0..300 {
            let (at, mask) = crate::raft::snapshot::tests::flip(&mut rng, bytes.len());
            let mut bad = bytes.clone();
            bad[at] ^= mask;
            refused(&path, &bad, &format!("byte {at} ^ {mask:#04x}"));
        }
    }

    #[test]
    fn a_backup_header_length_of_any_size_is_an_error_naming_its_offset_before_anything_is_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes, _) = small_backup(dir.path());
        let real = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
        for len in [0x7fff_ffffu32, 0x8000_0000, 0xffff_ffff, MAX_HEADER + 1] {
            let mut bad = bytes.clone();
            bad[12..16].copy_from_slice(&len.to_be_bytes());
            assert_eq!(refused(&path, &bad, &format!("length {len:#x}")), 12, "length {len:#x}");
        }
        // In range, but more than the file holds: refused from the file's size, not by reading.
        for len in [MAX_HEADER, bytes.len() as u32, 0, real - 1, real + 1] {
            let mut bad = bytes.clone();
            bad[12..16].copy_from_slice(&len.to_be_bytes());
            refused(&path, &bad, &format!("length {len}"));
        }
    }

    #[test]
    fn a_header_announcing_impossible_sections_is_an_error_not_a_panic_or_an_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.backup");
        let p = |g: u32, bytes: &str| {
            format!(
                r#"{{"metadata_partition":{g},"applied_index":0,"applied_term":0,"applied_leader":0,"digest":"d","bytes":{bytes},"node_id":1}}"#
            )
        };
        let h = |n: u64, parts: &[String]| {
            format!(
                r#"{{"format":1,"cluster_id":"c","num_metadata_partitions":{n},"created_at_ms":0,"taken_through":"x","partitions":[{}]}}"#,
                parts.join(",")
            )
        };
        let max = u64::MAX.to_string();
        let cases = [
            ("section lengths that overflow", h(2, &[p(0, &max), p(1, &max)])),
            ("a section longer than the file", h(1, &[p(0, "1000000000000")])),
            ("a negative section length", h(1, &[p(0, "-1")])),
            ("4 billion metadata partitions", h(u64::from(u32::MAX), &[p(0, "0"), p(1, "0")])),
            ("more metadata partitions than a u32", h(1 << 40, &[p(0, "0")])),
            ("a partition listed twice", h(2, &[p(0, "0"), p(0, "0")])),
            ("an empty section", h(1, &[p(0, "0")])),
        ];
        for (what, json) in cases {
            refused(&path, &handmade(json.as_bytes(), &[]), what);
        }
        // The same header, well formed, opens (so each case above fails for its own reason).
        let ok = handmade(h(0, &[]).as_bytes(), &[]);
        std::fs::write(&path, &ok).unwrap();
        Backup::open(&path).and_then(|b| b.verify()).unwrap();
    }

    #[test]
    fn a_damaged_section_behind_a_good_end_checksum_is_an_error_naming_its_offset_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes, s) = small_backup(dir.path());
        let body_offset = 16 + u32::from_be_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let body = &bytes[body_offset..bytes.len() - 12];
        let json = &bytes[16..body_offset];
        let mut rng = crate::raft::snapshot::tests::damage(0x2545_f491_4f6c_dd1d);
        for _ in 0..100 {
            let (at, mask) = crate::raft::snapshot::tests::flip(&mut rng, body.len());
            let mut bad = body.to_vec();
            bad[at] ^= mask;
            let what = format!("section byte {at} ^ {mask:#04x}");
            let named = refused(&path, &handmade(json, &bad), &what);
            // Within the damaged section (the first or the second).
            let section = (body_offset + at / s.len() * s.len()) as u64;
            assert!((section..=section + s.len() as u64).contains(&named), "{what}: offset {named}");
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
