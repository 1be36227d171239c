//! Snapshot files: one metadata partition's state keys at one applied log id, streamed to and from
//! disk so a snapshot is never held in memory whole.
//!
//! Format (version 1), all integers big-endian:
//! `"DLSNAP01"`, u32 header length, header (bincode of the openraft `SnapshotMeta`), then pairs
//! `u32 key length (> 0), key, u32 value length, value` in key order, then `u32 0`, then the CRC32C
//! of every preceding byte. A file is written to a temporary name, fsynced and renamed, so a file
//! with the final name is whole; a reader still checks the CRC before installing.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
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

/// The snapshot directory of `group` under a data directory.
pub fn group_dir(data_dir: &Path, group: u32) -> PathBuf {
    data_dir.join("snapshots").join(format!("{group:04}"))
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
    let mut r = BufReader::new(File::open(path)?);
    let (meta, _) = read_header(&mut r, &mut 0)?;
    Ok(meta)
}

fn corrupt(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("snapshot file {}: {why}", path.display()))
}

fn read_exact_crc(r: &mut impl Read, buf: &mut [u8], crc: &mut u32) -> io::Result<()> {
    r.read_exact(buf)?;
    *crc = crc32c::crc32c_append(*crc, buf);
    Ok(())
}

fn read_u32(r: &mut impl Read, crc: &mut u32) -> io::Result<u32> {
    let mut b = [0u8; 4];
    read_exact_crc(r, &mut b, crc)?;
    Ok(u32::from_be_bytes(b))
}

/// The largest key or value a snapshot may hold (RocksDB values of this project are far smaller).
const MAX_FIELD: u32 = 64 << 20;

fn read_header(r: &mut impl Read, crc: &mut u32) -> io::Result<(SnapshotMeta, usize)> {
    let mut magic = [0u8; 8];
    read_exact_crc(r, &mut magic, crc)?;
    if &magic != MAGIC {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a snapshot file (bad magic)"));
    }
    let len = read_u32(r, crc)?;
    if len > MAX_FIELD {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot header too long"));
    }
    let mut header = vec![0u8; len as usize];
    read_exact_crc(r, &mut header, crc)?;
    let meta = codec::decode(b"snapshot header", &header).map_err(io_err)?;
    Ok((meta, 12 + len as usize))
}

/// Reads every pair of the file in order, then checks the CRC. `visit` sees pairs before the CRC
/// is known: callers that must not act on a damaged file call [`verify`] first.
pub fn for_each_pair(path: &Path, visit: &mut dyn FnMut(&[u8], &[u8]) -> io::Result<()>) -> io::Result<SnapshotMeta> {
    let mut r = BufReader::with_capacity(1 << 20, File::open(path)?);
    let meta = read_from(&mut r, visit).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => corrupt(path, "truncated"),
        io::ErrorKind::InvalidData => corrupt(path, &e.to_string()),
        _ => e,
    })?;
    let mut rest = [0u8; 1];
    if r.read(&mut rest)? != 0 {
        return Err(corrupt(path, "bytes after the checksum"));
    }
    Ok(meta)
}

/// Reads one whole snapshot (format above) from `r`, up to and including its CRC, which it
/// checks; `visit` sees every pair on the way (before the CRC is known). Reads nothing past the
/// CRC, so snapshots can be embedded in a larger stream (a backup file).
pub fn read_from(r: &mut impl Read, visit: &mut dyn FnMut(&[u8], &[u8]) -> io::Result<()>) -> io::Result<SnapshotMeta> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {why}"));
    let mut crc = 0;
    let (meta, _) = read_header(r, &mut crc)?;
    let (mut k, mut v) = (Vec::new(), Vec::new());
    loop {
        let klen = read_u32(r, &mut crc)?;
        if klen == 0 {
            break;
        }
        if klen > MAX_FIELD {
            return Err(bad("key length out of range"));
        }
        k.resize(klen as usize, 0);
        read_exact_crc(r, &mut k, &mut crc)?;
        let vlen = read_u32(r, &mut crc)?;
        if vlen > MAX_FIELD {
            return Err(bad("value length out of range"));
        }
        v.resize(vlen as usize, 0);
        read_exact_crc(r, &mut v, &mut crc)?;
        visit(&k, &v)?;
    }
    let mut stored = [0u8; 4];
    r.read_exact(&mut stored)?;
    if u32::from_be_bytes(stored) != crc {
        return Err(bad("checksum mismatch"));
    }
    Ok(meta)
}

/// Checks a whole file; returns its metadata.
pub fn verify(path: &Path) -> io::Result<SnapshotMeta> {
    for_each_pair(path, &mut |_, _| Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Db, Txn};

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
