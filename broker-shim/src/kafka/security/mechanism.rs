//! SASL mechanisms: their names, and one authentication exchange (a state machine fed the
//! client's tokens, answering the server's). PLAIN is here; SCRAM in `scram`. Credentials come
//! from `credentials`; nothing here reads the network.

use serde::{Deserialize, Serialize};

use super::credentials::Credentials;
use super::scram::{ScramExchange, ScramHash};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        [Mechanism::Plain, Mechanism::ScramSha256, Mechanism::ScramSha512].into_iter().find(|m| m.name() == name)
    }

    /// A new exchange for one client with the credentials as they are now.
    pub fn start(self, credentials: std::sync::Arc<Credentials>) -> Box<dyn Exchange> {
        match self {
            Mechanism::Plain => Box::new(PlainExchange { credentials }),
            Mechanism::ScramSha256 => Box::new(ScramExchange::new(ScramHash::Sha256, credentials)),
            Mechanism::ScramSha512 => Box::new(ScramExchange::new(ScramHash::Sha512, credentials)),
        }
    }
}

/// What an exchange answers to a client token.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this challenge; the client sends another token.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; send `reply` (possibly empty) as the last server message.
    Done { reply: Vec<u8>, user: String },
}

/// Why authentication failed: the message goes to the client (it names no secret, and does not
/// tell an unknown user from a wrong password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthFailed(pub String);

impl AuthFailed {
    pub fn invalid_credentials(mechanism: Mechanism) -> AuthFailed {
        AuthFailed(format!(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
            mechanism.name()
        ))
    }
}

pub trait Exchange: Send {
    fn step(&mut self, token: &[u8]) -> Result<Step, AuthFailed>;
}

/// PLAIN (RFC 4616): one token `authzid NUL authcid NUL password`, checked against the user's
/// salted SCRAM credential (no plaintext password is stored anywhere).
struct PlainExchange {
    credentials: std::sync::Arc<Credentials>,
}

impl Exchange for PlainExchange {
    fn step(&mut self, token: &[u8]) -> Result<Step, AuthFailed> {
        let malformed = || AuthFailed("Invalid SASL/PLAIN response: expected authzid NUL authcid NUL password".into());
        let mut parts = token.split(|b| *b == 0);
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        let user = std::str::from_utf8(user).map_err(|_| malformed())?;
        anyhow_free_ensure(!user.is_empty() && !password.is_empty(), malformed)?;
        if !authzid.is_empty() && authzid != user.as_bytes() {
            return Err(AuthFailed(
                "Authentication failed: client requested an authorization id that is different from username".into(),
            ));
        }
        if self.credentials.check_password(user, password) {
            Ok(Step::Done { reply: vec![], user: user.to_string() })
        } else {
            Err(AuthFailed::invalid_credentials(Mechanism::Plain))
        }
    }
}

fn anyhow_free_ensure(ok: bool, err: impl FnOnce() -> AuthFailed) -> Result<(), AuthFailed> {
    if ok {
        Ok(())
    } else {
        Err(err())
    }
}
