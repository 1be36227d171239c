//! The SASL users: a TOML file of salted SCRAM credentials per user and hash (no password is
//! stored), read again when it changes (one `stat` per authentication), and edited whole by
//! `diskless-broker scram-credential`.
//!
//! ```toml
//! [users.alice.SCRAM-SHA-256]
//! salt = "…"          # base64
//! iterations = 8192
//! stored_key = "…"    # base64 H(HMAC(SaltedPassword, "Client Key"))
//! server_key = "…"    # base64 HMAC(SaltedPassword, "Server Key")
//! ```
//!
//! PLAIN checks a password against the user's SCRAM-SHA-512 or SCRAM-SHA-256 credential.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::salted::{ScramCredential, ScramHash};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserCredentials {
    #[serde(rename = "SCRAM-SHA-256", default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<ScramCredential>,
    #[serde(rename = "SCRAM-SHA-512", default, skip_serializing_if = "Option::is_none")]
    pub sha512: Option<ScramCredential>,
}

/// Every user's credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    #[serde(default)]
    pub users: BTreeMap<String, UserCredentials>,
}

impl Credentials {
    pub fn parse(text: &str) -> anyhow::Result<Credentials> {
        Ok(toml::from_str(text)?)
    }

    pub fn scram(&self, user: &str, hash: ScramHash) -> Option<&ScramCredential> {
        let u = self.users.get(user)?;
        match hash {
            ScramHash::Sha256 => u.sha256.as_ref(),
            ScramHash::Sha512 => u.sha512.as_ref(),
        }
    }

    pub fn set(&mut self, user: &str, hash: ScramHash, credential: ScramCredential) {
        let u = self.users.entry(user.to_string()).or_default();
        match hash {
            ScramHash::Sha256 => u.sha256 = Some(credential),
            ScramHash::Sha512 => u.sha512 = Some(credential),
        }
    }

    /// SASL/PLAIN: whether `password` is `user`'s (against one of the user's SCRAM credentials).
    pub fn check_password(&self, user: &str, password: &[u8]) -> bool {
        for hash in [ScramHash::Sha512, ScramHash::Sha256] {
            if let Some(c) = self.scram(user, hash) {
                return c.matches(hash, password);
            }
        }
        false
    }

    /// Reads `path`; a missing file is an empty one.
    pub fn read(path: &Path) -> anyhow::Result<Credentials> {
        match std::fs::read_to_string(path) {
            Ok(text) => Credentials::parse(&text).with_context(|| format!("parse {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Credentials::default()),
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }

    /// Writes the whole file (mode 0600, through a temporary file renamed over it, so a broker
    /// reading it never sees half of it).
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let text = toml::to_string(self)?;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("create {}", tmp.display()))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))
    }
}

type Stamp = Option<(SystemTime, u64)>;

/// The credentials file as it is now: read at start (an error then is a configuration error),
/// read again when its modification time or size changes; a file that no longer parses keeps the
/// previous credentials (logged).
pub struct CredentialsFile {
    path: PathBuf,
    current: Mutex<(Stamp, Arc<Credentials>)>,
}

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl CredentialsFile {
    pub fn open(path: &Path) -> anyhow::Result<CredentialsFile> {
        anyhow::ensure!(path.exists(), "SASL credentials file {} does not exist", path.display());
        let s = stamp(path);
        let c = Credentials::read(path)?;
        if c.users.is_empty() {
            tracing::warn!(path = %path.display(), "the SASL credentials file names no user: every SASL client is refused");
        }
        Ok(CredentialsFile { path: path.to_path_buf(), current: Mutex::new((s, Arc::new(c))) })
    }

    pub fn get(&self) -> Arc<Credentials> {
        let now = stamp(&self.path);
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.0 != now {
            match Credentials::read(&self.path) {
                Ok(c) => {
                    tracing::info!(path = %self.path.display(), users = c.users.len(), "SASL credentials reloaded");
                    *cur = (now, Arc::new(c));
                }
                Err(e) => tracing::warn!("SASL credentials changed but do not load (kept the previous ones): {e:#}"),
            }
        }
        cur.1.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_and_checks_passwords_without_storing_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        let mut c = Credentials::default();
        c.set("alice", ScramHash::Sha256, ScramCredential::new(ScramHash::Sha256, "pw-a", 4096).unwrap());
        c.set("bob", ScramHash::Sha512, ScramCredential::new(ScramHash::Sha512, "pw-b", 4096).unwrap());
        c.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("pw-a") && text.contains("[users.alice.SCRAM-SHA-256]"), "{text}");
        let file = CredentialsFile::open(&path).unwrap();
        let read = file.get();
        assert_eq!(*read, c);
        assert!(read.check_password("alice", b"pw-a"));
        assert!(!read.check_password("alice", b"pw-b"));
        assert!(read.check_password("bob", b"pw-b"));
        assert!(!read.check_password("carol", b"pw-a"));
    }
}
