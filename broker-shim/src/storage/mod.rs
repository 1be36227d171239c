//! Object storage for WAL segments, through the `object_store` crate: a local directory (default),
//! memory (tests), S3 and S3-compatible servers, GCS and Azure by URL.
//!
//! Owns: building the store from configuration, object keys (`<prefix><uuid>`), write-once puts
//! (`If-None-Match: *`: a key is never overwritten), ranged reads, idempotent deletes, listing with
//! ages (streamed page by page). It must not know what a segment holds. `faulty` wraps the store for
//! the fault suite.

pub mod config;
pub mod faulty;

use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

pub use config::StorageConfig;

/// An object and when it was last written.
#[derive(Debug, Clone)]
pub struct Listed {
    pub key: String,
    pub last_modified: SystemTime,
    pub size: u64,
}

#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    /// Where the store is, for logs.
    pub describe: String,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({})", self.describe)
    }
}

impl Storage {
    pub fn new(config: &StorageConfig) -> anyhow::Result<Storage> {
        let (store, describe): (Arc<dyn ObjectStore>, String) = match config {
            StorageConfig::Local { path } => {
                std::fs::create_dir_all(path).with_context(|| format!("create {}", path.display()))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .with_context(|| format!("open {}", path.display()))?
                    .with_automatic_cleanup(true)
                    .with_fsync(true);
                (Arc::new(fs), format!("local directory {}", path.display()))
            }
            StorageConfig::Memory => (Arc::new(object_store::memory::InMemory::new()), "memory".into()),
            StorageConfig::S3 {
                bucket,
                endpoint,
                region,
                access_key_id,
                secret_access_key,
                path_style,
                allow_http,
            } => {
                let mut b = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_virtual_hosted_style_request(!path_style)
                    .with_allow_http(*allow_http);
                if let Some(e) = endpoint {
                    b = b.with_endpoint(e);
                }
                if let Some(k) = access_key_id {
                    b = b.with_access_key_id(k);
                }
                if let Some(s) = secret_access_key {
                    b = b.with_secret_access_key(s);
                }
                let s3 = b.build().context("configure S3")?;
                (Arc::new(s3), format!("s3://{bucket} at {}", endpoint.as_deref().unwrap_or("AWS")))
            }
            StorageConfig::Url { url, options } => {
                let parsed = url::Url::parse(url).with_context(|| format!("object store URL {url:?}"))?;
                let (store, prefix) =
                    object_store::parse_url_opts(&parsed, options.iter()).context("configure store")?;
                let store: Arc<dyn ObjectStore> = if prefix.as_ref().is_empty() {
                    Arc::from(store)
                } else {
                    Arc::new(object_store::prefix::PrefixStore::new(store, prefix))
                };
                (store, url.clone())
            }
        };
        Ok(Storage { store, describe })
    }

    /// The same store behind a fault-injection wrapper (tests only; see [`faulty`]).
    pub fn with_faults(self) -> (Storage, Arc<faulty::StoreFaults>) {
        let faults = Arc::new(faulty::StoreFaults::default());
        let store: Arc<dyn ObjectStore> = Arc::new(faulty::FaultyStore::new(self.store, faults.clone()));
        (Storage { store, describe: format!("{} (fault injection on)", self.describe) }, faults)
    }

    /// The same store, its requests counted and timed (see `metrics::object_store`).
    pub fn metered(self) -> Storage {
        let store: Arc<dyn ObjectStore> = Arc::new(crate::metrics::object_store::MeteredStore::new(self.store));
        Storage { store, describe: self.describe }
    }

    /// A fresh, unique object key under `prefix`.
    pub fn new_key(prefix: &str) -> String {
        format!("{prefix}{}", uuid::Uuid::new_v4())
    }

    /// Writes an object that must not exist yet.
    pub async fn put_new(&self, key: &str, bytes: Bytes) -> Result<(), object_store::Error> {
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        self.store.put_opts(&Path::from(key), PutPayload::from(bytes), opts).await.map(|_| ())
    }

    /// Reads byte ranges of an object (the store may merge them into fewer requests).
    pub async fn get_ranges(&self, key: &str, ranges: &[Range<u64>]) -> Result<Vec<Bytes>, object_store::Error> {
        self.store.get_ranges(&Path::from(key), ranges).await
    }

    /// Reads a whole object.
    pub async fn get(&self, key: &str) -> Result<Bytes, object_store::Error> {
        self.store.get(&Path::from(key)).await?.bytes().await
    }

    /// Deletes an object; a missing object is fine (deletion is idempotent).
    pub async fn delete(&self, key: &str) -> Result<(), object_store::Error> {
        match self.store.delete(&Path::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every object under `prefix` (collected: for tests and small listings).
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>, object_store::Error> {
        self.list_stream(prefix).try_collect().await
    }

    /// The objects under `prefix`, as the store pages them: a bucket of any size is walked without
    /// holding its listing in memory.
    pub fn list_stream(&self, prefix: &str) -> BoxStream<'static, Result<Listed, object_store::Error>> {
        let prefix = prefix.trim_end_matches('/');
        let p = (!prefix.is_empty()).then(|| Path::from(prefix));
        self.store
            .list(p.as_ref())
            .map_ok(|m| Listed { key: m.location.to_string(), last_modified: m.last_modified.into(), size: m.size })
            .boxed()
    }

    /// Overwrites an object (tests use it to damage data on purpose).
    pub async fn overwrite(&self, key: &str, bytes: Bytes) -> Result<(), object_store::Error> {
        self.store.put(&Path::from(key), PutPayload::from(bytes)).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn write_once_ranges_delete_and_list_on_a_local_directory() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(&StorageConfig::Local { path: dir.path().to_path_buf() }).unwrap();
        let key = Storage::new_key("wal/");
        s.put_new(&key, Bytes::from_static(b"0123456789")).await.unwrap();
        assert!(matches!(
            s.put_new(&key, Bytes::from_static(b"x")).await,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        let r = s.get_ranges(&key, &[1..3, 7..10]).await.unwrap();
        assert_eq!((&r[0][..], &r[1][..]), (&b"12"[..], &b"789"[..]));
        let listed = s.list("wal/").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key, key);
        s.delete(&key).await.unwrap();
        s.delete(&key).await.unwrap();
        assert!(s.list("wal/").await.unwrap().is_empty());
    }
}
