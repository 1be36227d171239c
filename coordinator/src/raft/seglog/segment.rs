//! The segment files of one directory's Raft log: their names, preparing one (zero-filled and
//! synced before use, so that no append allocates blocks or changes the file's size, and an
//! `fdatasync` only writes data), switching to a new one, and reading one back.
//!
//! A segment starts with a header (magic, sequence number, CRC32C) and holds records from
//! [`FIRST`] on (`record.rs`). A spare segment (`spare.tmp`) is prepared ahead of need; it becomes
//! segment `seq` by a rename followed by a directory fsync. It must not decide what records mean.
//! [`scan`] is total on hostile bytes: a file of any content reads to its first invalid record or
//! is an error naming the file and the offset, never a panic.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::record::{self, Kind, Next};

const MAGIC: &[u8; 8] = b"DLRLOG01";
/// Where the first record of a segment starts.
pub const FIRST: u64 = 64;
const SPARE: &str = "spare.tmp";
const SUFFIX: &str = ".seg";

pub fn path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}{SUFFIX}"))
}

/// The sequence numbers of the segments in `dir`, in order.
pub fn list(dir: &Path) -> io::Result<Vec<u64>> {
    let mut seqs = vec![];
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        if let Some(hex) = name.strip_suffix(SUFFIX) {
            if let Ok(seq) = u64::from_str_radix(hex, 16) {
                if hex.len() == 16 {
                    seqs.push(seq);
                }
            }
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes a spare left by an earlier run (it may be partly written).
pub fn remove_spare(dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(dir.join(SPARE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes a spare segment of `bytes` zeros and syncs it.
pub fn prepare_spare(dir: &Path, bytes: u64) -> io::Result<()> {
    let path = dir.join(SPARE);
    let f = OpenOptions::new().create(true).truncate(true).write(true).open(&path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    f.sync_all()
}

/// Makes segment `seq` of `bytes` bytes from the spare (prepared now if there is none of that
/// size), writes its header and makes its name durable. Its header is durable with the first
/// sync of its records.
pub fn activate(dir: &Path, seq: u64, bytes: u64) -> io::Result<File> {
    let spare = dir.join(SPARE);
    if std::fs::metadata(&spare).map(|m| m.len()).ok() != Some(bytes) {
        prepare_spare(dir, bytes)?;
    }
    let path = path(dir, seq);
    std::fs::rename(&spare, &path)?;
    let f = OpenOptions::new().read(true).write(true).open(&path)?;
    f.write_all_at(&header(seq), 0)?;
    sync_dir(dir)?;
    Ok(f)
}

/// A segment's header: magic, sequence number, CRC32C of both.
pub(super) fn header(seq: u64) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&h[..16]);
    h[16..].copy_from_slice(&crc.to_le_bytes());
    h
}

pub fn open(dir: &Path, seq: u64, writable: bool) -> io::Result<File> {
    OpenOptions::new().read(true).write(writable).open(path(dir, seq))
}

/// One record found by [`scan`], located.
#[derive(Debug, Clone, Copy)]
pub struct Found {
    pub kind: Kind,
    pub partition: u32,
    pub index: u64,
    pub offset: u64,
    pub len: u32,
}

/// What a segment holds.
#[derive(Debug)]
pub struct Scanned {
    /// The header is all zeros: the segment was switched to, but nothing in it was ever synced.
    pub blank: bool,
    pub records: Vec<Found>,
    /// Where reading stopped: the seal's offset, or the first byte that is not a valid record.
    pub end: u64,
    pub sealed: bool,
    /// Why reading stopped before a seal (zeros, or a torn or corrupt record).
    pub stopped: Option<String>,
    /// Just past the file's last non-zero byte: bytes of a torn tail may lie in `[end, this)`.
    pub written_end: u64,
    /// The bytes in `[end, written_end)` when not sealed (a torn tail, to keep aside).
    pub tail: Vec<u8>,
}

/// Reads segment `seq` of `dir` (a header that names another segment or is damaged, but not
/// blank, is an error: the file is not what its name says).
pub fn scan(dir: &Path, seq: u64) -> io::Result<Scanned> {
    let path = path(dir, seq);
    let bytes = std::fs::read(&path)?;
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {why}", path.display()));
    let head = bytes
        .get(..20)
        .ok_or_else(|| bad(format!("{} bytes, shorter than a segment header (20 bytes at offset 0)", bytes.len())))?;
    let written_end = bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p as u64 + 1);
    if head.iter().all(|&b| b == 0) {
        // `written_end` > 0: records behind a blank header (the caller keeps them aside).
        return Ok(Scanned {
            blank: true,
            records: vec![],
            end: FIRST,
            sealed: false,
            stopped: None,
            written_end,
            tail: vec![],
        });
    }
    if head != header(seq) {
        return Err(bad(format!("its header (20 bytes at offset 0) is not that of segment {seq:016x}")));
    }
    let mut out =
        Scanned { blank: false, records: vec![], end: FIRST, sealed: false, stopped: None, written_end, tail: vec![] };
    let mut at = FIRST as usize;
    loop {
        match record::parse(bytes.get(at..).unwrap_or_default()) {
            Next::Record(r) if r.kind == Kind::Seal => {
                out.sealed = true;
                break;
            }
            Next::Record(r) => {
                out.records.push(Found {
                    kind: r.kind,
                    partition: r.partition,
                    index: r.index,
                    offset: at as u64,
                    len: r.len as u32,
                });
                at += r.len;
            }
            Next::End => {
                out.stopped = Some("zeros (nothing written after it)".into());
                break;
            }
            Next::Invalid(why) => {
                out.stopped = Some(why);
                break;
            }
        }
    }
    out.end = at as u64;
    if !out.sealed && written_end > out.end {
        out.tail = bytes[at..written_end as usize].to_vec();
    }
    Ok(out)
}

/// Zeros `[from, to)` of `file` (a torn tail, so that nothing of it can be read as a record once
/// writing resumes at `from`) and syncs it.
pub fn wipe(file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_data()
}

/// Writes a seal at `offset` of `file` and syncs it.
pub fn seal(file: &File, offset: u64) -> io::Result<()> {
    let mut b = Vec::with_capacity(record::size(0));
    record::encode(&mut b, Kind::Seal, 0, 0, &[]);
    file.write_all_at(&b, offset)?;
    file.sync_data()
}
