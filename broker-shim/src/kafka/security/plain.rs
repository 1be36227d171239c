//! SASL/PLAIN (RFC 4616): one token, the password checked against the user's salted SCRAM
//! credential (`credentials`): no plaintext password is stored anywhere. On a SASL_PLAINTEXT
//! listener the password crosses the network in the clear (`config` warns).

use super::credentials::Credentials;
use super::mechanism::{AuthFailed, Exchange, Mechanism, Step};

/// PLAIN (RFC 4616): one token `authzid NUL authcid NUL password`, checked against the user's
/// salted SCRAM credential (no plaintext password is stored anywhere).
pub struct PlainExchange {
    credentials: std::sync::Arc<Credentials>,
}

impl PlainExchange {
    pub fn new(credentials: std::sync::Arc<Credentials>) -> PlainExchange {
        PlainExchange { credentials }
    }
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
        if user.is_empty() || password.is_empty() {
            return Err(malformed());
        }
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
