//! SASL authentication of one Kafka connection, before any other request (Kafka's
//! SaslServerAuthenticator): the client may ask for ApiVersions, then SaslHandshake (v0 or v1)
//! names a mechanism, then the mechanism's tokens travel in SaslAuthenticate requests (handshake
//! v1) or as bare size-prefixed frames (handshake v0). Any other request before authentication
//! closes the connection; a failed authentication answers SASL_AUTHENTICATION_FAILED (58) with the
//! reason and closes it. Sessions do not expire (`session_lifetime_ms` 0: no re-authentication).
//!
//! Owns the exchange of frames and the versions of the two SASL APIs; the mechanisms are `plain`
//! and `scram`. ApiVersions is answered with what the listener hands in ([`ApiVersions`]): this
//! module must not reach for the listener's API table or handlers.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use diskless_proto::ErrorCode;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Message, StrBytes, VersionRange};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::credentials::{Credentials, CredentialsFile};
use super::mechanism::{Exchange, Mechanism, Step};
use super::plain::PlainExchange;
use super::salted::ScramHash;
use super::scram::ScramExchange;
use crate::kafka::frame::{decode_header, read_frame, Malformed};
use crate::kafka::response::{encode, Reply};

/// The versions of SaslHandshake and SaslAuthenticate spoken (the listener's API table lists
/// these).
pub const HANDSHAKE_VERSIONS: VersionRange = SaslHandshakeRequest::VERSIONS;
pub const AUTHENTICATE_VERSIONS: VersionRange = SaslAuthenticateRequest::VERSIONS;

/// The listener's ApiVersions answer, which a client may ask for before authenticating.
pub type ApiVersions = fn(&RequestHeader) -> Reply;

/// How long a client has from connecting to being authenticated.
const AUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest frame accepted before authentication (Kafka's `sasl.server.max.receive.size`).
const MAX_AUTH_FRAME: usize = 512 << 10;

/// The SASL settings of the broker's SASL listeners.
pub struct SaslServer {
    pub mechanisms: Vec<Mechanism>,
    pub credentials: CredentialsFile,
}

impl SaslServer {
    pub fn new(config: &super::config::SaslConfig) -> anyhow::Result<SaslServer> {
        let credentials = CredentialsFile::open(&config.credentials).context("[kafka.sasl] credentials")?;
        Ok(SaslServer { mechanisms: config.mechanisms.clone(), credentials })
    }

    fn mechanism_names(&self) -> Vec<StrBytes> {
        self.mechanisms.iter().map(|m| StrBytes::from_static_str(m.name())).collect()
    }
}

enum Phase {
    /// Before SaslHandshake.
    Handshake,
    /// After it: tokens in SaslAuthenticate requests (`raw` false) or bare frames (`raw` true).
    Exchange { exchange: Box<dyn Exchange>, raw: bool },
}

async fn write_frame<S: AsyncWrite + Unpin>(stream: &mut S, body: &[u8]) -> anyhow::Result<()> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(body);
    stream.write_all(&out).await?;
    stream.flush().await?;
    Ok(())
}

async fn reply<S: AsyncWrite + Unpin>(stream: &mut S, r: Reply) -> anyhow::Result<()> {
    if let Some(body) = r? {
        write_frame(stream, &body).await?;
    }
    Ok(())
}

/// Authenticates the client on `stream`; the user's name once it is, an error (the connection is
/// to be closed) otherwise.
pub async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    server: &SaslServer,
    stream: &mut S,
    api_versions: ApiVersions,
) -> anyhow::Result<String> {
    tokio::time::timeout(AUTH_TIMEOUT, exchange(server, stream, api_versions))
        .await
        .map_err(|_| anyhow::anyhow!("not authenticated within {AUTH_TIMEOUT:?}"))?
}

/// A new exchange of `mechanism` for one client, with the credentials as they are now.
fn start(mechanism: Mechanism, credentials: std::sync::Arc<Credentials>) -> Box<dyn Exchange> {
    match mechanism {
        Mechanism::Plain => Box::new(PlainExchange::new(credentials)),
        Mechanism::ScramSha256 => Box::new(ScramExchange::new(ScramHash::Sha256, credentials)),
        Mechanism::ScramSha512 => Box::new(ScramExchange::new(ScramHash::Sha512, credentials)),
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    server: &SaslServer,
    stream: &mut S,
    api_versions: ApiVersions,
) -> anyhow::Result<String> {
    let mut phase = Phase::Handshake;
    loop {
        let mut frame =
            read_frame(stream, MAX_AUTH_FRAME).await?.context("connection closed before SASL authentication")?;
        if let Phase::Exchange { exchange, raw: true } = &mut phase {
            // Handshake v0: the frame is a bare token, and so is the answer.
            match exchange.step(&frame) {
                Ok(Step::Challenge(c)) => {
                    write_frame(stream, &c).await?;
                    continue;
                }
                Ok(Step::Done { reply, user }) => {
                    write_frame(stream, &reply).await?;
                    return Ok(user);
                }
                Err(e) => anyhow::bail!("SASL authentication failed: {e}"),
            }
        }
        let (api, header) = decode_header(&mut frame)?;
        let v = header.request_api_version;
        if api == ApiKey::ApiVersions {
            reply(stream, api_versions(&header)).await?;
            continue;
        }
        let range = match api {
            ApiKey::SaslHandshake => Some(HANDSHAKE_VERSIONS),
            ApiKey::SaslAuthenticate => Some(AUTHENTICATE_VERSIONS),
            _ => None,
        };
        anyhow::ensure!(range.is_some_and(|r| (r.min..=r.max).contains(&v)), "{api:?} v{v} before SASL authentication");
        match (api, &mut phase) {
            (ApiKey::SaslHandshake, Phase::Handshake) => {
                let req = SaslHandshakeRequest::decode(&mut frame, v).map_err(|e| Malformed::body(api, v, e))?;
                let wanted = req.mechanism.to_string();
                let mechanism = Mechanism::from_name(&wanted).filter(|m| server.mechanisms.contains(m));
                let code = if mechanism.is_some() { ErrorCode::None } else { ErrorCode::UnsupportedSaslMechanism };
                let body = SaslHandshakeResponse::default()
                    .with_error_code(code.code())
                    .with_mechanisms(server.mechanism_names());
                reply(stream, encode(api, &header, v, &body)).await?;
                let Some(mechanism) = mechanism else {
                    anyhow::bail!("SASL mechanism {wanted:?} is not enabled");
                };
                phase = Phase::Exchange { exchange: start(mechanism, server.credentials.get()), raw: v == 0 };
            }
            (ApiKey::SaslAuthenticate, Phase::Exchange { exchange, raw: false }) => {
                let req = SaslAuthenticateRequest::decode(&mut frame, v).map_err(|e| Malformed::body(api, v, e))?;
                let (body, outcome) = match exchange.step(&req.auth_bytes) {
                    Ok(Step::Challenge(c)) => {
                        (SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(c)), None)
                    }
                    Ok(Step::Done { reply, user }) => {
                        (SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(reply)), Some(Ok(user)))
                    }
                    Err(e) => (
                        SaslAuthenticateResponse::default()
                            .with_error_code(ErrorCode::SaslAuthenticationFailed.code())
                            .with_error_message(Some(StrBytes::from_string(e.0.clone()))),
                        Some(Err(anyhow::anyhow!("SASL authentication failed: {e}"))),
                    ),
                };
                reply(stream, encode(api, &header, v, &body.with_session_lifetime_ms(0))).await?;
                if let Some(outcome) = outcome {
                    return outcome;
                }
            }
            _ => anyhow::bail!("{api:?} out of order in the SASL exchange"),
        }
    }
}

/// SaslHandshake or SaslAuthenticate once the connection is authenticated, or on a listener
/// without SASL: ILLEGAL_SASL_STATE (re-authentication is not supported).
pub fn illegal_state(api: ApiKey, header: &RequestHeader) -> Reply {
    let v = header.request_api_version;
    let message = Some(StrBytes::from_static_str("SASL authentication is not expected on this connection now"));
    match api {
        ApiKey::SaslHandshake => encode(
            api,
            header,
            v,
            &SaslHandshakeResponse::default().with_error_code(ErrorCode::IllegalSaslState.code()),
        ),
        _ => encode(
            api,
            header,
            v,
            &SaslAuthenticateResponse::default()
                .with_error_code(ErrorCode::IllegalSaslState.code())
                .with_error_message(message),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::security::salted::ScramCredential;
    use bytes::BytesMut;
    use kafka_protocol::protocol::Encodable;
    use tokio::io::AsyncReadExt;

    fn no_api_versions(_: &RequestHeader) -> Reply {
        anyhow::bail!("no ApiVersions in these tests")
    }

    fn server(dir: &std::path::Path) -> SaslServer {
        let path = dir.join("users.toml");
        let mut c = Credentials::default();
        c.set("alice", ScramHash::Sha256, ScramCredential::new(ScramHash::Sha256, "pw", 4096).unwrap());
        c.write(&path).unwrap();
        SaslServer::new(&super::super::config::SaslConfig {
            mechanisms: vec![Mechanism::Plain, Mechanism::ScramSha256],
            credentials: path,
        })
        .unwrap()
    }

    fn frame<R: Encodable>(api: ApiKey, version: i16, correlation: i32, body: &R) -> Vec<u8> {
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation);
        let hv = api.request_header_version(version);
        let mut b = BytesMut::new();
        header.encode(&mut b, hv).unwrap();
        body.encode(&mut b, version).unwrap();
        let mut out = (b.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&b);
        out
    }

    async fn read<S: AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
        let mut size = [0u8; 4];
        s.read_exact(&mut size).await.unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        s.read_exact(&mut body).await.unwrap();
        body
    }

    #[tokio::test]
    async fn handshake_v0_then_a_bare_plain_token_authenticates() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(dir.path());
        let (mut client, mut conn) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(async move { authenticate(&server, &mut conn, no_api_versions).await });
        let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        client.write_all(&frame(ApiKey::SaslHandshake, 0, 1, &hs)).await.unwrap();
        let mut answer = Bytes::from(read(&mut client).await);
        let _ = ResponseHeader::decode(&mut answer, 0).unwrap();
        let r = SaslHandshakeResponse::decode(&mut answer, 0).unwrap();
        assert_eq!(r.error_code, 0);
        let token = b"\0alice\0pw";
        let mut bare = (token.len() as i32).to_be_bytes().to_vec();
        bare.extend_from_slice(token);
        client.write_all(&bare).await.unwrap();
        assert_eq!(read(&mut client).await, Vec::<u8>::new(), "an empty last token");
        assert_eq!(task.await.unwrap().unwrap(), "alice");
    }

    #[tokio::test]
    async fn a_wrong_password_gets_58_and_other_requests_before_authentication_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let server = std::sync::Arc::new(server(dir.path()));
        let (mut client, mut conn) = tokio::io::duplex(1 << 16);
        let s = server.clone();
        let task = tokio::spawn(async move { authenticate(&s, &mut conn, no_api_versions).await });
        let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        client.write_all(&frame(ApiKey::SaslHandshake, 1, 1, &hs)).await.unwrap();
        read(&mut client).await;
        let auth = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0alice\0wrong"));
        client.write_all(&frame(ApiKey::SaslAuthenticate, 2, 2, &auth)).await.unwrap();
        let mut answer = Bytes::from(read(&mut client).await);
        let _ = ResponseHeader::decode(&mut answer, ApiKey::SaslAuthenticate.response_header_version(2)).unwrap();
        let r = SaslAuthenticateResponse::decode(&mut answer, 2).unwrap();
        assert_eq!(r.error_code, ErrorCode::SaslAuthenticationFailed.code());
        assert!(r.error_message.unwrap().contains("invalid credentials"));
        assert!(task.await.unwrap().is_err(), "the connection is to be closed");

        let (mut client, mut conn) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(async move { authenticate(&server, &mut conn, no_api_versions).await });
        client.write_all(&frame(ApiKey::Metadata, 4, 1, &MetadataRequest::default())).await.unwrap();
        let e = task.await.unwrap().unwrap_err();
        assert!(e.to_string().contains("before SASL authentication"), "{e}");
    }
}
