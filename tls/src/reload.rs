//! A value built from files, rebuilt when one of them changes (size or modification time): the
//! certificate rotation without a restart. Checked on use (one `stat` per file per new connection,
//! nothing per request); a rebuild that fails (a half-written file) keeps the previous value and is
//! tried again on the next use.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

type Stamp = Vec<Option<(SystemTime, u64)>>;

pub struct Reloading<T> {
    paths: Vec<PathBuf>,
    build: Box<dyn Fn() -> anyhow::Result<T> + Send + Sync>,
    current: Mutex<(Stamp, Arc<T>)>,
    what: &'static str,
}

fn stamp(paths: &[PathBuf]) -> Stamp {
    paths.iter().map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len())))).collect()
}

impl<T> Reloading<T> {
    /// Builds the value now (an error here is a configuration error).
    pub fn new(
        what: &'static str,
        paths: Vec<PathBuf>,
        build: impl Fn() -> anyhow::Result<T> + Send + Sync + 'static,
    ) -> anyhow::Result<Reloading<T>> {
        let s = stamp(&paths);
        let value = Arc::new(build()?);
        Ok(Reloading { paths, build: Box::new(build), current: Mutex::new((s, value)), what })
    }

    /// The value for the files as they are now.
    pub fn get(&self) -> Arc<T> {
        let now = stamp(&self.paths);
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.0 != now {
            match (self.build)() {
                Ok(v) => {
                    tracing::info!(what = self.what, "TLS files changed: reloaded");
                    *cur = (now, Arc::new(v));
                }
                Err(e) => tracing::warn!(
                    what = self.what,
                    "TLS files changed but do not load (kept the previous ones): {e:#}"
                ),
            }
        }
        cur.1.clone()
    }
}
