//! An object store wrapper that counts, times and counts the failures of every request, by
//! operation (`put`, `get`, `delete`, `list`, `copy`). It wraps the outermost store, so injected
//! faults count as errors too. A listing is one request timed until its stream ends; a GET is timed
//! until its response starts (the body streams after). It must not change what a request returns.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

use super::{get, Operation};

const PUT: Operation = Operation { operation: "put" };
const GET: Operation = Operation { operation: "get" };
const DELETE: Operation = Operation { operation: "delete" };
const LIST: Operation = Operation { operation: "list" };
const COPY: Operation = Operation { operation: "copy" };

#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn ObjectStore>,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> MeteredStore {
        MeteredStore { inner }
    }
}

impl fmt::Display for MeteredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

/// Counts one request of `op` started at `started` with its outcome.
fn record(op: &Operation, started: Instant, ok: bool) {
    let m = get();
    m.store_requests.get_or_create(op).inc();
    m.store_duration.get_or_create(op).observe(started.elapsed().as_secs_f64());
    if !ok {
        m.store_errors.get_or_create(op).inc();
    }
}

async fn metered<T>(op: Operation, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let started = Instant::now();
    let r = f.await;
    record(&op, started, r.is_ok());
    r
}

/// Records a listing when its stream is dropped (ended or abandoned).
struct Listing {
    started: Instant,
    ok: bool,
}

impl Listing {
    fn note(&mut self, ok: bool) {
        self.ok &= ok;
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        record(&LIST, self.started, self.ok);
    }
}

#[tonic::async_trait]
impl ObjectStore for MeteredStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        metered(PUT, self.inner.put_opts(location, payload, opts)).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        metered(PUT, self.inner.put_multipart_opts(location, opts)).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        metered(GET, self.inner.get_opts(location, options)).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        metered(GET, self.inner.get_ranges(location, ranges)).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        let inner = self.inner.clone();
        locations
            .then(move |p| {
                let inner = inner.clone();
                async move {
                    let p = p?;
                    let started = Instant::now();
                    let r = inner.delete(&p).await.map(|()| p);
                    // A missing object is not a failed request: deletion is idempotent.
                    let ok = matches!(&r, Ok(_) | Err(object_store::Error::NotFound { .. }));
                    record(&DELETE, started, ok);
                    r
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let mut listing = Listing { started: Instant::now(), ok: true };
        self.inner
            .list(prefix)
            .map(move |item| {
                listing.note(item.is_ok());
                item
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        metered(LIST, self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        metered(COPY, self.inner.copy_opts(from, to, options)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_and_failures_are_counted_by_operation() {
        let s = MeteredStore::new(Arc::new(object_store::memory::InMemory::new()));
        let before = get().store_requests.get_or_create_owned(&PUT).get();
        let errors_before = get().store_errors.get_or_create_owned(&GET).get();
        s.put(&Path::from("a"), PutPayload::from_static(b"x")).await.unwrap();
        assert!(s.get(&Path::from("missing")).await.is_err());
        assert!(get().store_requests.get_or_create_owned(&PUT).get() > before);
        assert!(get().store_errors.get_or_create_owned(&GET).get() > errors_before);
        let listed: Vec<_> = s.list(None).collect().await;
        assert_eq!(listed.len(), 1);
        s.delete(&Path::from("a")).await.unwrap();
    }
}
