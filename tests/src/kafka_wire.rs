//! Raw Kafka requests for tests that need a field no client library exposes (a producer id, a
//! Metadata answer's brokers, FindCoordinator's owner): one request framed by hand over a TCP
//! stream, its answer read back and decoded (`kafka-protocol`).
//!
//! Test code only: panics on any transport or decoding failure, which fails the test.

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `req` (API `api` at `version`) over `stream` and returns the decoded answer, checking
/// that it carries `correlation_id` and nothing after the body.
pub async fn kafka_request<Req, Resp>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    req: &Req,
) -> Resp
where
    Req: Encodable + HeaderVersion,
    Resp: Decodable + HeaderVersion,
{
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("diskless-tests")));
    let mut body = BytesMut::new();
    header.encode(&mut body, Req::header_version(version)).expect("encode request header");
    req.encode(&mut body, version).expect("encode request");
    let mut frame = BytesMut::with_capacity(4 + body.len());
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await.expect("send request");
    let len = stream.read_i32().await.expect("response size");
    let mut buf = vec![0u8; usize::try_from(len).expect("response size is not negative")];
    stream.read_exact(&mut buf).await.expect("response");
    let mut buf = bytes::Bytes::from(buf);
    let h = ResponseHeader::decode(&mut buf, Resp::header_version(version)).expect("response header");
    assert_eq!(h.correlation_id, correlation_id, "answer to another request");
    let resp = Resp::decode(&mut buf, version).expect("decode response");
    assert!(!buf.has_remaining(), "bytes left after the response body");
    resp
}

/// One request over a fresh connection to `addr`.
pub async fn kafka_call<Req, Resp>(addr: &str, api: ApiKey, version: i16, req: &Req) -> Resp
where
    Req: Encodable + HeaderVersion,
    Resp: Decodable + HeaderVersion,
{
    let mut stream = TcpStream::connect(addr).await.expect("connect to the Kafka listener");
    kafka_request(&mut stream, api, version, 1, req).await
}

/// Sends a request of any API (`kafka-protocol`'s `RequestKind`) at `version` over `stream`, with
/// an unknown tagged field in the header when `header_tag` and the header is flexible; returns the
/// decoded answer, or `None` when the broker closed the connection instead.
pub async fn kafka_any(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    header_tag: bool,
    req: &kafka_protocol::messages::RequestKind,
) -> Option<kafka_protocol::messages::ResponseKind> {
    let hv = api.request_header_version(version);
    let mut header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("diskless-conformance")));
    if header_tag && hv >= 2 {
        header.unknown_tagged_fields.insert(9_999, bytes::Bytes::from_static(b"ignored"));
    }
    let mut body = BytesMut::new();
    header.encode(&mut body, hv).expect("encode request header");
    req.encode(&mut body, version).expect("encode request");
    let mut buf = exchange(stream, &body).await?;
    let h = ResponseHeader::decode(&mut buf, api.response_header_version(version)).expect("response header");
    assert_eq!(h.correlation_id, correlation_id, "{api:?} v{version}: answer to another request");
    let resp = kafka_protocol::messages::ResponseKind::decode(api, &mut buf, version)
        .unwrap_or_else(|e| panic!("{api:?} v{version}: the answer does not decode: {e}"));
    assert!(!buf.has_remaining(), "{api:?} v{version}: bytes left after the response body");
    Some(resp)
}

/// Sends one frame (`body`: header and request, unframed) and reads the answer's bytes; `None`
/// when the connection was closed instead.
pub async fn exchange(stream: &mut TcpStream, body: &[u8]) -> Option<bytes::Bytes> {
    let mut frame = BytesMut::with_capacity(4 + body.len());
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(body);
    stream.write_all(&frame).await.ok()?;
    let len = stream.read_i32().await.ok()?;
    let mut buf = vec![0u8; usize::try_from(len).expect("response size is not negative")];
    stream.read_exact(&mut buf).await.ok()?;
    Some(bytes::Bytes::from(buf))
}
