//! Snapshot files: one metadata partition's state keys at one applied log id, streamed to and from
//! disk so a snapshot is never held in memory whole.
//!
//! Format (version 1), all integers big-endian:
//! `"DLSNAP01"`, u32 header length, header (bincode of the openraft `SnapshotMeta`), then pairs
//! `u32 key length (> 0), key, u32 value length, value` in key order, then `u32 0`, then the CRC32C
//! of every preceding byte. A file is written to a temporary name, fsynced and renamed, so a file
//! with the final name is whole; a reader still checks the CRC before installing. The reader is
//! total on hostile bytes: a damaged file or stream is an error naming the file and the offset,
//! never a panic, and no length field allocates more than the bytes that follow it.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::{io_err, SnapshotMeta};
use crate::storage::{codec, KvRead};

const MAGIC: &[u8; 8] = b"DLSNAP01";
const EXT: &str = "snap";

/// A snapshot file on local disk: what openraft hands around as `SnapshotData`.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    pub path: PathBuf,
}

/// The snapshot directory of `partition` under a data directory.
pub fn partition_dir(data_dir: &Path, partition: u32) -> PathBuf {
    data_dir.join("snapshots").join(format!("{partition:04}"))
}

/// The file name a snapshot of `meta` gets: sortable by applied index.
fn file_name(meta: &SnapshotMeta) -> String {
    let (index, term) = meta.last_log_id.as_ref().map_or((0, 0), |l| (l.index, l.leader_id.term));
    format!("{index:020}-{term:020}.{EXT}")
}

/// A writer that keeps the CRC-32C of everything written through it (snapshot and backup files).
pub(crate) struct CrcWriter<W: Write> {
    pub(crate) inner: W,
    pub(crate) crc: u32,
}

impl<W: Write> CrcWriter<W> {
    pub(crate) fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.inner.write_all(bytes)
    }
}

/// Writes the state keys in `[from, to)` of `view` (minus keys for which `skip` is true) with
/// `meta` into `dir`; returns the file. Older snapshot files in `dir` are removed afterwards.
pub fn write(
    view: &dyn KvRead,
    from: &[u8],
    to: &[u8],
    skip: &dyn Fn(&[u8]) -> bool,
    meta: &SnapshotMeta,
    dir: &Path,
) -> io::Result<SnapshotFile> {
    fs::create_dir_all(dir)?;
    let final_path = dir.join(file_name(meta));
    let tmp = dir.join(format!("{}.tmp", file_name(meta)));
    let f = File::create(&tmp)?;
    let inner = write_to(view, from, to, skip, meta, BufWriter::with_capacity(1 << 20, f))?;
    let f = inner.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    fs::rename(&tmp, &final_path)?;
    sync_dir(dir)?;
    remove_older(dir, &final_path)?;
    Ok(SnapshotFile { path: final_path })
}

/// Writes a whole snapshot (format above: header, pairs, end mark, CRC) of the state keys in
/// `[from, to)` of `view` (minus keys for which `skip` is true) to `out`, and gives `out` back.
/// Streams: nothing is held in memory but the pair being written.
pub fn write_to<W: Write>(
    view: &dyn KvRead,
    from: &[u8],
    to: &[u8],
    skip: &dyn Fn(&[u8]) -> bool,
    meta: &SnapshotMeta,
    out: W,
) -> io::Result<W> {
    let mut w = CrcWriter { inner: out, crc: 0 };
    let header = codec::encode(meta).map_err(io_err)?;
    w.put(MAGIC)?;
    w.put(&(header.len() as u32).to_be_bytes())?;
    w.put(&header)?;
    let mut write_err = None;
    view.scan(from, to, &mut |k, v| {
        if skip(k) {
            return Ok(true);
        }
        let r = (|| {
            w.put(&(k.len() as u32).to_be_bytes())?;
            w.put(k)?;
            w.put(&(v.len() as u32).to_be_bytes())?;
            w.put(v)
        })();
        match r {
            Ok(()) => Ok(true),
            Err(e) => {
                write_err = Some(e);
                Ok(false)
            }
        }
    })
    .map_err(io_err)?;
    if let Some(e) = write_err {
        return Err(e);
    }
    w.put(&0u32.to_be_bytes())?;
    let crc = w.crc;
    let mut inner = w.inner;
    inner.write_all(&crc.to_be_bytes())?;
    inner.flush()?;
    Ok(inner)
}

/// Moves a received snapshot file into `dir` under its final name (after checking it).
pub fn adopt(received: &Path, dir: &Path) -> io::Result<(SnapshotFile, SnapshotMeta)> {
    let meta = verify(received)?;
    fs::create_dir_all(dir)?;
    let final_path = dir.join(file_name(&meta));
    if received != final_path {
        match fs::rename(received, &final_path) {
            Ok(()) => {}
            // Received in another data directory (the replica moved meanwhile): copy it over.
            Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
                copy_synced(received, &final_path)?;
                fs::remove_file(received)?;
            }
            Err(e) => return Err(e),
        }
        sync_dir(dir)?;
    }
    Ok((SnapshotFile { path: final_path }, meta))
}

/// Copies `from` to `to` durably: through a temporary file, fsynced, renamed.
fn copy_synced(from: &Path, to: &Path) -> io::Result<()> {
    let tmp = to.with_extension("tmp");
    fs::copy(from, &tmp)?;
    File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, to)
}

/// Copies the newest snapshot file of `from` into `to` (a replica moving between data
/// directories) unless `to` has it already, then removes the older ones of `to`. Durable.
pub fn copy_newest(from: &Path, to: &Path) -> io::Result<()> {
    let Some(newest) = list(from)?.pop() else { return Ok(()) };
    let Some(name) = newest.file_name() else { return Ok(()) };
    fs::create_dir_all(to)?;
    let target = to.join(name);
    if !target.exists() {
        copy_synced(&newest, &target)?;
        sync_dir(to)?;
    }
    remove_older(to, &target)
}

/// The newest snapshot file in `dir`, if any.
pub fn newest(dir: &Path) -> io::Result<Option<SnapshotFile>> {
    Ok(list(dir)?.pop().map(|path| SnapshotFile { path }))
}

/// Removes the snapshot files in `dir` older than `keep` (names sort by applied index; a newer
/// file, e.g. one being installed, is never touched).
pub fn remove_older(dir: &Path, keep: &Path) -> io::Result<()> {
    for p in list(dir)? {
        if p.as_path() < keep {
            fs::remove_file(&p)?;
        }
    }
    Ok(())
}

/// Removes what an interrupted write or transfer left behind (`*.tmp`, `receiving-*.part`).
pub fn remove_partial(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let p = e?.path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.ends_with(".tmp") || (name.starts_with("receiving-") && name.ends_with(".part")) {
            fs::remove_file(&p)?;
        }
    }
    Ok(())
}

fn list(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = vec![];
    match fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries {
                let p = e?.path();
                if p.extension().is_some_and(|x| x == EXT) {
                    files.push(p);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    files.sort();
    Ok(files)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads the header of a snapshot file (without checking the whole file).
pub fn read_meta(path: &Path) -> io::Result<SnapshotMeta> {
    let mut f = BufReader::new(File::open(path)?);
    let mut r = Tracked { inner: &mut f, crc: 0, at: 0, base: 0 };
    read_header(&mut r).map_err(|e| named(path, e))
}

fn corrupt(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("snapshot file {}: {why}", path.display()))
}

/// `e` with the file it came from (its message already names the offset).
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("snapshot file {}: {e}", path.display()))
}

/// The largest key or value a snapshot may hold (RocksDB values of this project are far smaller).
const MAX_FIELD: u32 = 64 << 20;

/// Bytes a length field may have allocated before they are read: a field grows by this much at a
/// time, so a lying length costs no more memory than the bytes that are there.
const CHUNK: usize = 64 << 10;

/// A reader that keeps the CRC-32C of what it read and where it is, and words every failure as
/// "at offset N" (of the stream: `base` is where the stream starts in its file).
struct Tracked<'r, R: Read> {
    inner: &'r mut R,
    crc: u32,
    at: u64,
    base: u64,
}

impl<R: Read> Tracked<'_, R> {
    /// An error about what lies at `at` (an offset of the stream).
    fn bad_at(&self, at: u64, why: impl std::fmt::Display) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, format!("at offset {}: {why}", self.base + at))
    }

    /// Reads `buf.len()` bytes (`what` they are, for the error when they are not all there).
    fn exact(&mut self, buf: &mut [u8], what: &str) -> io::Result<()> {
        match self.inner.read_exact(buf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(self.bad_at(self.at, format!("truncated: {what} of {} bytes is not all there", buf.len())))
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("at offset {}: {e}", self.base + self.at))),
        }
        self.crc = crc32c::crc32c_append(self.crc, buf);
        self.at += buf.len() as u64;
        Ok(())
    }

    fn u32(&mut self, what: &str) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.exact(&mut b, what)?;
        Ok(u32::from_be_bytes(b))
    }

    /// A length field (at most `MAX_FIELD`), then that many bytes into `buf`, grown only as they
    /// arrive. `None` for the end mark when `zero_ends`.
    fn field(&mut self, buf: &mut Vec<u8>, what: &str, zero_ends: bool) -> io::Result<Option<()>> {
        let at = self.at;
        let len = self.u32(&format!("{what} length"))?;
        if len == 0 && zero_ends {
            return Ok(None);
        }
        if len > MAX_FIELD {
            return Err(self.bad_at(at, format!("{what} length of {len} bytes out of range (at most {MAX_FIELD})")));
        }
        buf.clear();
        let len = len as usize;
        while buf.len() < len {
            let from = buf.len();
            buf.resize(from + (len - from).min(CHUNK), 0);
            self.exact(&mut buf[from..], what)?;
        }
        Ok(Some(()))
    }
}

fn read_header<R: Read>(r: &mut Tracked<'_, R>) -> io::Result<SnapshotMeta> {
    let mut magic = [0u8; 8];
    r.exact(&mut magic, "the magic")?;
    if &magic != MAGIC {
        return Err(r.bad_at(0, "not a snapshot file (bad magic)"));
    }
    let mut header = vec![];
    r.field(&mut header, "header", false)?;
    codec::decode(b"snapshot header", &header).map_err(|e| r.bad_at(12, format!("the header does not decode: {e}")))
}

/// Reads every pair of the file in order, then checks the CRC. `visit` sees pairs before the CRC
/// is known: callers that must not act on a damaged file call [`verify`] first.
pub fn for_each_pair(path: &Path, visit: &mut dyn FnMut(&[u8], &[u8]) -> io::Result<()>) -> io::Result<SnapshotMeta> {
    let mut r = BufReader::with_capacity(1 << 20, File::open(path)?);
    let meta = read_from(&mut r, visit).map_err(|e| named(path, e))?;
    let mut rest = [0u8; 1];
    if r.read(&mut rest)? != 0 {
        let at = r.stream_position()? - 1;
        return Err(corrupt(path, &format!("at offset {at}: bytes after the checksum")));
    }
    Ok(meta)
}

/// Reads one whole snapshot (format above) from `r`, up to and including its CRC, which it
/// checks; `visit` sees every pair on the way (before the CRC is known). Reads nothing past the
/// CRC, so snapshots can be embedded in a larger stream (a backup file).
pub fn read_from(r: &mut impl Read, visit: &mut dyn FnMut(&[u8], &[u8]) -> io::Result<()>) -> io::Result<SnapshotMeta> {
    read_from_at(r, 0, visit)
}

/// [`read_from`] of a snapshot that starts at `offset` of its file: errors name offsets of the
/// file. Total on hostile bytes: whatever `r` yields is a snapshot or an error naming the offset,
/// never a panic, and no length field allocates more than the bytes that follow it.
pub fn read_from_at(
    r: &mut impl Read,
    offset: u64,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> io::Result<()>,
) -> io::Result<SnapshotMeta> {
    let mut r = Tracked { inner: r, crc: 0, at: 0, base: offset };
    let meta = read_header(&mut r)?;
    let (mut k, mut v) = (Vec::new(), Vec::new());
    loop {
        let pair = r.at;
        if r.field(&mut k, "key", true)?.is_none() {
            break;
        }
        r.field(&mut v, "value", false)?;
        visit(&k, &v).map_err(|e| io::Error::new(e.kind(), format!("the pair at offset {}: {e}", offset + pair)))?;
    }
    let computed = r.crc;
    let at = r.at;
    let stored = r.u32("the checksum")?;
    if stored != computed {
        return Err(r.bad_at(at, format!("checksum mismatch (stored {stored:08x}, computed {computed:08x})")));
    }
    Ok(meta)
}

/// Checks a whole file; returns its metadata.
pub fn verify(path: &Path) -> io::Result<SnapshotMeta> {
    for_each_pair(path, &mut |_, _| Ok(()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::storage::{Db, Txn};

    /// Damage that is random but the same on every run: a generator seeded with `seed`, and
    /// [`flip`] to pick a byte and a non-zero mask.
    pub(crate) fn damage(seed: u64) -> fastrand::Rng {
        fastrand::Rng::with_seed(seed)
    }

    /// A position below `n` and a non-zero mask to flip there.
    pub(crate) fn flip(rng: &mut fastrand::Rng, n: usize) -> (usize, u8) {
        (rng.usize(..n), rng.u8(1..))
    }

    /// The offset an error names ("... at offset N ..."; the last one named).
    pub(crate) fn offset_named(e: &dyn std::fmt::Display) -> u64 {
        let m = e.to_string();
        let at = m.rfind("offset ").unwrap_or_else(|| panic!("no offset named: {m}"));
        m[at + 7..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or_else(|_| panic!("{m}"))
    }

    /// A snapshot of 20 small pairs, as bytes.
    fn small_snapshot() -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("db")).unwrap();
        let mut t = Txn::new(&db);
        for i in 0..20u32 {
            t.put(i.to_be_bytes().to_vec(), vec![i as u8; (i % 7) as usize]);
        }
        db.write(t.into_write_batch(), false).unwrap();
        let applied = crate::raft::LogId::new(openraft::vote::leader_id_adv::LeaderId { term: 3, node_id: 1 }, 9);
        let meta = SnapshotMeta { last_log_id: Some(applied), ..SnapshotMeta::default() };
        let out = write_to(&db.read(), &[0], &[0xff; 5], &|_| false, &meta, Vec::new()).unwrap();
        out
    }

    /// `bytes` as a snapshot file fails `verify` naming the file and an offset within it; the same
    /// bytes as a stream embedded at offset 1000 name that offset shifted by 1000.
    fn refused(dir: &Path, bytes: &[u8], what: &str) -> u64 {
        let path = dir.join("bad.snap");
        fs::write(&path, bytes).unwrap();
        let e = verify(&path).err().unwrap_or_else(|| panic!("{what}: verified"));
        assert!(e.to_string().contains(&path.display().to_string()), "{what}: {e}");
        let at = offset_named(&e);
        assert!(at <= bytes.len() as u64, "{what}: offset {at} of {} bytes: {e}", bytes.len());
        let e = read_from_at(&mut &bytes[..], 1000, &mut |_, _| Ok(())).err();
        // A stream is read up to its checksum: bytes after it are the embedding file's business.
        if let Some(e) = e {
            assert_eq!(offset_named(&e), at + 1000, "{what}: {e}");
        }
        at
    }

    #[test]
    fn a_snapshot_cut_anywhere_is_an_error_naming_its_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let good = small_snapshot();
        refused(dir.path(), &[], "empty");
        for cut in 0..good.len() {
            let at = refused(dir.path(), &good[..cut], &format!("cut at {cut}"));
            assert!(at <= cut as u64, "cut at {cut}: offset {at}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(refused(dir.path(), &longer, "a byte after the checksum"), good.len() as u64);
    }

    #[test]
    fn a_snapshot_with_any_byte_damaged_is_an_error_naming_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let good = small_snapshot();
        let mut rng = damage(0x9e37_79b9_7f4a_7c15);
        for _ in 0..300 {
            let (at, mask) = flip(&mut rng, good.len());
            let mut bad = good.clone();
            bad[at] ^= mask;
            refused(dir.path(), &bad, &format!("byte {at} ^ {mask:#04x}"));
        }
    }

    #[test]
    fn a_snapshot_length_field_of_any_size_is_an_error_naming_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let good = small_snapshot();
        let header_len = u32::from_be_bytes(good[8..12].try_into().unwrap()) as usize;
        let key_at = 12 + header_len;
        let key_len = u32::from_be_bytes(good[key_at..key_at + 4].try_into().unwrap()) as usize;
        let value_at = key_at + 4 + key_len;
        for field in [8, key_at, value_at] {
            for len in [0x7fff_ffffu32, 0x8000_0000, 0xffff_ffff, MAX_FIELD + 1] {
                let mut bad = good.clone();
                bad[field..field + 4].copy_from_slice(&len.to_be_bytes());
                let at = refused(dir.path(), &bad, &format!("length {len:#x} at {field}"));
                assert_eq!(at, field as u64, "length {len:#x} at {field}");
            }
            // In range but longer than what follows: truncated, past the field.
            let mut bad = good.clone();
            bad[field..field + 4].copy_from_slice(&MAX_FIELD.to_be_bytes());
            let at = refused(dir.path(), &bad, &format!("length {MAX_FIELD} at {field}"));
            assert!(at > field as u64, "length {MAX_FIELD} at {field}: offset {at}");
        }
    }

    #[test]
    fn a_length_field_longer_than_the_bytes_left_allocates_no_more_than_what_is_there() {
        let mut bytes = MAX_FIELD.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[7; 10]);
        let mut src = &bytes[..];
        let mut r = Tracked { inner: &mut src, crc: 0, at: 0, base: 0 };
        let mut buf = vec![];
        let e = r.field(&mut buf, "value", false).unwrap_err();
        assert!(e.to_string().contains("at offset 4: truncated"), "{e}");
        assert!(buf.capacity() <= 2 * CHUNK, "{} bytes claimed for 10 bytes there", buf.capacity());
    }

    #[test]
    fn a_written_snapshot_reads_back_and_damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("db")).unwrap();
        let mut t = Txn::new(&db);
        for i in 0..1000u32 {
            t.put(i.to_be_bytes().to_vec(), vec![i as u8; (i % 50) as usize]);
        }
        db.write(t.into_write_batch(), false).unwrap();
        let meta = SnapshotMeta::default();
        let snaps = dir.path().join("snaps");
        let f = write(&db.read(), &[0], &[0xff; 5], &|k| k[3] == 7, &meta, &snaps).unwrap();
        let mut n = 0;
        for_each_pair(&f.path, &mut |k, v| {
            let i = u32::from_be_bytes(k.try_into().unwrap());
            assert_ne!(i % 256, 7);
            assert_eq!(v, vec![i as u8; (i % 50) as usize]);
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1000 - 4);
        assert_eq!(newest(&snaps).unwrap().unwrap().path, f.path);

        let mut bytes = fs::read(&f.path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        let bad = dir.path().join("bad.snap");
        fs::write(&bad, &bytes).unwrap();
        assert!(verify(&bad).is_err());
        bytes.truncate(mid);
        fs::write(&bad, &bytes).unwrap();
        assert!(verify(&bad).is_err());
    }
}
