//! The vocabulary of SASL mechanisms: their names (`Mechanism`, as `[kafka.sasl] mechanisms`
//! spells them), and what an authentication exchange is (`Exchange`: a state machine fed the
//! client's tokens, answering with a `Step` or `AuthFailed`). The mechanisms themselves are
//! `plain` and `scram`; `sasl` starts the one a client picks. Nothing here reads the network or
//! the credentials.

use serde::{Deserialize, Serialize};

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
