//! A tower layer around the gRPC server that counts every request by method and status code and
//! times it (arrival → response headers), so no handler has to.
//!
//! The status code is the `grpc-status` of a trailers-only response — how tonic answers a handler
//! that returns an error — and `OK` otherwise (a stream failing after its first message counts as
//! `OK`). Method labels are the paths of the services this crate serves, taken once from the
//! descriptor set (plus health and reflection); any other path counts as `unknown`, so a client
//! cannot grow the label set. Per request: one map lookup, no allocation, no lock across an await.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::Instant;

use prost::Message;

use super::{get, Method, MethodCode};

/// gRPC status codes by number.
const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// Methods served besides ours.
const OTHER_METHODS: [&str; 4] = [
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// Every known method path, as a `'static` label (built once: the services are fixed).
static METHODS: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| {
    let mut out: HashMap<String, &'static str> = HashMap::new();
    let set = prost_types::FileDescriptorSet::decode(diskless_proto::FILE_DESCRIPTOR_SET).unwrap_or_default();
    let ours = set.file.iter().flat_map(|f| {
        let package = f.package().to_string();
        f.service.iter().flat_map(move |s| {
            let package = package.clone();
            s.method.iter().map(move |m| format!("/{package}.{}/{}", s.name(), m.name()))
        })
    });
    for path in ours.chain(OTHER_METHODS.iter().map(|s| s.to_string())) {
        // Leaked once per method of a fixed set: labels must be 'static to cost nothing per request.
        let label: &'static str = Box::leak(path.clone().into_boxed_str());
        out.insert(path, label);
    }
    out
});

/// The label of a request path.
pub fn method_label(path: &str) -> &'static str {
    METHODS.get(path).copied().unwrap_or("unknown")
}

/// The layer: `Server::builder().layer(GrpcMetricsLayer)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> tower_layer::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner }
    }
}

#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for GrpcMetrics<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Timed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = method_label(req.uri().path());
        Timed { inner: self.inner.call(req), method, started: Instant::now() }
    }
}

pin_project_lite::pin_project! {
    /// The inner response future, recorded when it resolves.
    pub struct Timed<F> {
        #[pin]
        inner: F,
        method: &'static str,
        started: Instant,
    }
}

impl<F, RB, E> Future for Timed<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let r = std::task::ready!(this.inner.poll(cx));
        let code = match &r {
            Ok(resp) => resp
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok())
                .map_or("OK", |c| CODES.get(c).copied().unwrap_or("UNKNOWN")),
            Err(_) => "TRANSPORT_ERROR",
        };
        let m = get();
        m.grpc_requests.get_or_create(&MethodCode { method: this.method, code }).inc();
        m.grpc_duration.get_or_create(&Method { method: this.method }).observe(this.started.elapsed().as_secs_f64());
        Poll::Ready(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_methods_get_their_path_and_others_do_not_grow_the_labels() {
        assert_eq!(
            method_label("/diskless.coordinator.v1.CoordinatorService/CommitFile"),
            "/diskless.coordinator.v1.CoordinatorService/CommitFile"
        );
        assert_eq!(method_label("/diskless.admin.v1.AdminService/Status"), "/diskless.admin.v1.AdminService/Status");
        assert_eq!(method_label("/x.Y/Z"), "unknown");
    }
}
