//! Answers on their way out: a started request's answer ([`Pending`]), a response header and body
//! encoded at the request's version ([`encode`], a [`Reply`]), and the small conversions every handler needs (texts and topic names
//! as kafka-protocol's types). Owns no framing (the connection writes the size prefix) and decides
//! nothing about what an answer says.

use bytes::BytesMut;
use futures_util::future::BoxFuture;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// An encoded response (header and body, without the size prefix), or none (acks=0 produce).
/// An error closes the connection.
pub type Reply = anyhow::Result<Option<BytesMut>>;

/// A started request: its answer, once it is ready.
pub type Pending = BoxFuture<'static, Reply>;

/// A request answered at once.
pub fn ready(r: Reply) -> Pending {
    Box::pin(async move { r })
}

/// Encodes a response header and body for `api` at `version`.
pub fn encode<R: Encodable>(api: ApiKey, header: &RequestHeader, version: i16, body: &R) -> Reply {
    let response_header = ResponseHeader::default().with_correlation_id(header.correlation_id);
    let hv = api.response_header_version(version);
    let mut out = BytesMut::with_capacity(response_header.compute_size(hv)? + body.compute_size(version)?);
    response_header.encode(&mut out, hv)?;
    body.encode(&mut out, version)?;
    Ok(Some(out))
}

/// A string as kafka-protocol carries it.
pub fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A topic name as kafka-protocol carries it.
pub fn topic_name(s: &str) -> TopicName {
    TopicName(text(s))
}

/// An error message field.
pub fn message(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}
