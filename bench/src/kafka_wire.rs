//! A light Kafka client for the data-path phase: one connection, requests framed by hand
//! (`kafka-protocol`), split into a sending half and a receiving half so a producer can pipeline
//! as librdkafka does (up to its in-flight limit) and a consumer can long-poll. It owns only the
//! bytes on the socket; what to send is the phase's.

use anyhow::Context;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

pub struct Sender {
    wr: OwnedWriteHalf,
    correlation: i32,
}

pub struct Receiver {
    rd: OwnedReadHalf,
}

pub async fn connect(addr: &str) -> anyhow::Result<(Sender, Receiver)> {
    let s = TcpStream::connect(addr).await.with_context(|| format!("connect to {addr}"))?;
    s.set_nodelay(true)?;
    let (rd, wr) = s.into_split();
    Ok((Sender { wr, correlation: 0 }, Receiver { rd }))
}

impl Sender {
    /// The correlation id the next `send` uses.
    pub fn next_correlation(&self) -> i32 {
        self.correlation.wrapping_add(1)
    }

    /// Sends `req` at `version`; returns its correlation id.
    pub async fn send<R: Request>(&mut self, req: &R, version: i16) -> anyhow::Result<i32> {
        self.correlation = self.correlation.wrapping_add(1);
        let key = ApiKey::try_from(R::KEY).map_err(|_| anyhow::anyhow!("unknown API key {}", R::KEY))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("diskless-bench")));
        let mut body = BytesMut::new();
        header.encode(&mut body, key.request_header_version(version))?;
        req.encode(&mut body, version)?;
        let mut frame = BytesMut::with_capacity(4 + body.len());
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.wr.write_all(&frame).await.context("send request")?;
        Ok(self.correlation)
    }
}

impl Receiver {
    /// The next answer, decoded as `R` at `version`, with its correlation id.
    pub async fn recv<R: Decodable + HeaderVersion>(&mut self, version: i16) -> anyhow::Result<(i32, R)> {
        let size = self.rd.read_i32().await.context("read response size")?;
        anyhow::ensure!((0..=256 << 20).contains(&size), "response frame of {size} bytes");
        let mut buf = BytesMut::zeroed(size as usize);
        self.rd.read_exact(&mut buf).await.context("read response")?;
        let mut buf: Bytes = buf.freeze();
        let h = ResponseHeader::decode(&mut buf, R::header_version(version))?;
        let r = R::decode(&mut buf, version)?;
        anyhow::ensure!(!buf.has_remaining(), "{} bytes after the response", buf.remaining());
        Ok((h.correlation_id, r))
    }
}

/// One request and its answer over a connection used for nothing else meanwhile.
pub async fn call<R: Request>(conn: &mut (Sender, Receiver), req: &R, version: i16) -> anyhow::Result<R::Response> {
    let id = conn.0.send(req, version).await?;
    let (got, r) = conn.1.recv::<R::Response>(version).await?;
    anyhow::ensure!(got == id, "answer to request {got} while waiting for {id}");
    Ok(r)
}
