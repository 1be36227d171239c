//! Kafka request frames off the socket: an `i32` size, then a request header and body. Bytes from
//! a client are hostile: a frame's size is checked before its buffer is allocated (at most
//! `max_request_bytes`, Kafka's `socket.request.max.bytes`; at least a v0 request header's 8
//! bytes), and the header is decoded without trusting anything it says.
//!
//! What does not parse is a [`Malformed`] frame: the listener closes the connection, as Kafka's
//! `SocketServer` does when `RequestContext.parseRequest` throws `InvalidRequestException`, logs
//! it at debug level and counts it (`diskless_broker_kafka_malformed_requests_total`, by reason).
//! This module owns framing only; it decides nothing about what a request may do.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The smallest request: a v0 header (api key i16, api version i16, correlation id i32).
pub const MIN_FRAME_BYTES: usize = 8;

/// Why a frame was refused: the label of the malformed-requests metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Its size is negative or above the limit.
    TooLarge,
    /// Shorter than a request header.
    TooShort,
    /// The header does not decode.
    Header,
    /// An API key Kafka does not define.
    UnknownApi,
    /// An API this broker does not serve, or a version of it outside what it speaks.
    UnsupportedVersion,
    /// The body does not decode at the header's version.
    Body,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::TooLarge,
        Reason::TooShort,
        Reason::Header,
        Reason::UnknownApi,
        Reason::UnsupportedVersion,
        Reason::Body,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Reason::TooLarge => "too_large",
            Reason::TooShort => "too_short",
            Reason::Header => "header",
            Reason::UnknownApi => "unknown_api",
            Reason::UnsupportedVersion => "unsupported_version",
            Reason::Body => "body",
        }
    }
}

/// A frame the broker refuses: the connection is closed.
#[derive(Debug, thiserror::Error)]
#[error("malformed request ({}): {detail}", reason.label())]
pub struct Malformed {
    pub reason: Reason,
    pub detail: String,
}

impl Malformed {
    /// Counts it: the connection it came on is being closed.
    pub fn count(&self) {
        let m = &crate::metrics::get().malformed_requests;
        m.get_or_create(&crate::metrics::Malformed { reason: self.reason.label() }).inc();
    }

    /// Makes every reason's series exist from the start, at 0.
    pub fn register_metrics() {
        let m = &crate::metrics::get().malformed_requests;
        for r in Reason::ALL {
            let _ = m.get_or_create(&crate::metrics::Malformed { reason: r.label() });
        }
    }

    pub fn new(reason: Reason, detail: impl Into<String>) -> Malformed {
        Malformed { reason, detail: detail.into() }
    }

    /// A body that did not decode (kafka-protocol's error, with the API's name).
    pub fn body(api: ApiKey, version: i16, e: anyhow::Error) -> Malformed {
        Malformed::new(Reason::Body, format!("{api:?} v{version}: {e:#}"))
    }
}

/// Reads one size-prefixed frame; `None` at a clean end of stream. A size outside
/// `MIN_FRAME_BYTES..=max` is refused before anything is allocated for it.
pub async fn read_frame<R: AsyncRead + Unpin>(rd: &mut R, max: usize) -> anyhow::Result<Option<Bytes>> {
    let mut size = [0u8; 4];
    match rd.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(size);
    let Ok(len) = usize::try_from(size) else {
        return Err(Malformed::new(Reason::TooLarge, format!("frame size {size} is negative")).into());
    };
    if len > max {
        return Err(Malformed::new(Reason::TooLarge, format!("frame of {len} bytes (limit {max})")).into());
    }
    if len < MIN_FRAME_BYTES {
        return Err(Malformed::new(
            Reason::TooShort,
            format!("frame of {len} bytes is shorter than a request header ({MIN_FRAME_BYTES})"),
        )
        .into());
    }
    let mut buf = BytesMut::zeroed(len);
    rd.read_exact(&mut buf).await.map_err(|e| anyhow::anyhow!("truncated request frame: {e}"))?;
    Ok(Some(buf.freeze()))
}

/// Decodes the request header at the front of `frame` (which is left holding the body): the API
/// key must be one Kafka defines, the header must decode at the version that API's version
/// implies.
pub fn decode_header(frame: &mut Bytes) -> Result<(ApiKey, RequestHeader), Malformed> {
    if frame.len() < MIN_FRAME_BYTES {
        return Err(Malformed::new(
            Reason::TooShort,
            format!("{} bytes is shorter than a request header", frame.len()),
        ));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = ApiKey::try_from(key).map_err(|_| Malformed::new(Reason::UnknownApi, format!("API key {key}")))?;
    let header = RequestHeader::decode(frame, api.request_header_version(version))
        .map_err(|e| Malformed::new(Reason::Header, format!("{api:?} v{version}: {e:#}")))?;
    Ok((api, header))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8], max: usize) -> anyhow::Result<Option<Bytes>> {
        let mut rd = bytes;
        read_frame(&mut rd, max).await
    }

    fn reason(e: anyhow::Error) -> Reason {
        e.downcast::<Malformed>().expect("a Malformed frame").reason
    }

    #[tokio::test]
    async fn frame_sizes_outside_a_header_and_the_limit_are_refused_before_allocating() {
        assert!(read(&[], 100).await.unwrap().is_none(), "a clean end of stream");
        assert_eq!(reason(read(&(-1i32).to_be_bytes(), 100).await.unwrap_err()), Reason::TooLarge);
        assert_eq!(reason(read(&i32::MAX.to_be_bytes(), 100).await.unwrap_err()), Reason::TooLarge);
        for n in 0..8i32 {
            let mut f = n.to_be_bytes().to_vec();
            f.extend(std::iter::repeat_n(0u8, n as usize));
            assert_eq!(reason(read(&f, 100).await.unwrap_err()), Reason::TooShort, "{n} bytes");
        }
        let mut f = 8i32.to_be_bytes().to_vec();
        f.extend([0, 18, 0, 0, 0, 0, 0, 7]);
        assert_eq!(read(&f, 100).await.unwrap().unwrap().len(), 8);
        // A frame announced whole but cut short is an I/O error, not a refusal.
        let e = read(&f[..10], 100).await.unwrap_err();
        assert!(e.downcast_ref::<Malformed>().is_none(), "{e:#}");
    }

    #[test]
    fn headers_decode_or_are_refused_without_panicking() {
        // ApiVersions v0 (header v1: a nullable client id follows the correlation id).
        let mut ok = Bytes::from_static(&[0, 18, 0, 0, 0, 0, 0, 7, 0, 1, b'c', 0xff]);
        let (api, h) = decode_header(&mut ok).unwrap();
        assert_eq!((api, h.correlation_id, h.client_id.as_deref()), (ApiKey::ApiVersions, 7, Some("c")));
        assert_eq!(&ok[..], &[0xff], "the body is left");
        let mut unknown = Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1]);
        assert_eq!(decode_header(&mut unknown).unwrap_err().reason, Reason::UnknownApi);
        // The client id claims 0x7f7f bytes: more than the frame has.
        let mut short = Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0x7f]);
        assert_eq!(decode_header(&mut short).unwrap_err().reason, Reason::Header);
        for n in 0..8 {
            let mut b = Bytes::from(vec![0u8; n]);
            assert_eq!(decode_header(&mut b).unwrap_err().reason, Reason::TooShort);
        }
    }
}
