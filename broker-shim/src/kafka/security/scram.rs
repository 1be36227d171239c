//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the server side, as Kafka speaks them:
//! no channel binding (`n,,`), user names escaped with `=2C` and `=3D`, extensions after the nonce
//! ignored except `tokenauth` (delegation tokens are not supported), at least 4096 iterations.
//!
//! Owns one exchange (a state machine fed the client's messages); the salted credential and the
//! hash functions are `salted`'s, the users `credentials`'. Proofs are compared in constant time.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use subtle::ConstantTimeEq;

use super::credentials::Credentials;
use super::mechanism::{AuthFailed, Exchange, Step};
use super::salted::{Keys, ScramHash, MIN_ITERATIONS};

enum State {
    First,
    Final {
        user: String,
        keys: Keys,
        gs2_header: String,
        nonce: String,
        client_first_bare: String,
        server_first: String,
    },
    Over,
}

pub struct ScramExchange {
    hash: ScramHash,
    credentials: std::sync::Arc<Credentials>,
    state: State,
}

impl ScramExchange {
    pub fn new(hash: ScramHash, credentials: std::sync::Arc<Credentials>) -> ScramExchange {
        ScramExchange { hash, credentials, state: State::First }
    }

    fn failed(&self) -> AuthFailed {
        AuthFailed::invalid_credentials(self.hash.mechanism())
    }
}

fn malformed(what: &str) -> AuthFailed {
    AuthFailed(format!("Invalid SCRAM {what}"))
}

/// A SCRAM `saslname`: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed.
fn unescape_name(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

fn printable_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

impl Exchange for ScramExchange {
    fn step(&mut self, token: &[u8]) -> Result<Step, AuthFailed> {
        let text = std::str::from_utf8(token).map_err(|_| malformed("message (not UTF-8)"))?;
        match std::mem::replace(&mut self.state, State::Over) {
            State::First => {
                // gs2-header: cbind-flag "," [authzid] ","
                let mut it = text.splitn(3, ',');
                let (Some(flag), Some(authzid), Some(bare)) = (it.next(), it.next(), it.next()) else {
                    return Err(malformed("client-first message"));
                };
                if flag != "n" && flag != "y" {
                    return Err(AuthFailed("SCRAM channel binding is not supported".into()));
                }
                let mut fields = bare.split(',');
                let user = fields.next().and_then(|f| f.strip_prefix("n=")).and_then(unescape_name);
                let nonce = fields.next().and_then(|f| f.strip_prefix("r="));
                let (Some(user), Some(client_nonce)) = (user, nonce) else {
                    return Err(malformed("client-first message"));
                };
                if !printable_nonce(client_nonce) || user.is_empty() {
                    return Err(malformed("client-first message"));
                }
                if fields.any(|f| f.starts_with("tokenauth=")) {
                    return Err(AuthFailed("Delegation tokens are not supported".into()));
                }
                if let Some(a) = authzid.strip_prefix("a=") {
                    if unescape_name(a).as_deref() != Some(user.as_str()) {
                        return Err(AuthFailed(
                            "Authentication failed: Invalid user credentials (authorization id differs from the user)"
                                .into(),
                        ));
                    }
                } else if !authzid.is_empty() {
                    return Err(malformed("client-first message"));
                }
                let Some(keys) = self.credentials.scram(&user, self.hash).and_then(|c| c.keys()) else {
                    return Err(self.failed());
                };
                if keys.iterations < MIN_ITERATIONS {
                    return Err(self.failed());
                }
                let mut random = [0u8; 24];
                getrandom::fill(&mut random).map_err(|_| AuthFailed("no randomness for the server nonce".into()))?;
                let nonce = format!("{client_nonce}{}", B64.encode(random));
                let server_first = format!("r={nonce},s={},i={}", B64.encode(&keys.salt), keys.iterations);
                let gs2_header = format!("{flag},{authzid},");
                self.state = State::Final {
                    user,
                    keys,
                    gs2_header,
                    nonce,
                    client_first_bare: bare.to_string(),
                    server_first: server_first.clone(),
                };
                Ok(Step::Challenge(server_first.into_bytes()))
            }
            State::Final { user, keys, gs2_header, nonce, client_first_bare, server_first } => {
                let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
                    return Err(malformed("client-final message"));
                };
                let mut fields = without_proof.split(',');
                let binding = fields.next().and_then(|f| f.strip_prefix("c="));
                let got_nonce = fields.next().and_then(|f| f.strip_prefix("r="));
                if binding.and_then(|b| B64.decode(b).ok()).as_deref() != Some(gs2_header.as_bytes()) {
                    return Err(malformed("channel binding in the client-final message"));
                }
                // Kafka accepts a nonce that ends with the one it sent: librdkafka 2.0 sends its own
                // nonce again in front of it. The proof covers the message as sent either way.
                if !got_nonce.is_some_and(|n| n.ends_with(nonce.as_str())) {
                    return Err(malformed("nonce in the client-final message"));
                }
                let proof = B64.decode(proof).map_err(|_| malformed("proof"))?;
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let client_signature = self.hash.hmac(&keys.stored_key, auth_message.as_bytes());
                if proof.len() != client_signature.len() {
                    return Err(self.failed());
                }
                let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
                if !bool::from(self.hash.hash(&client_key).ct_eq(&keys.stored_key)) {
                    return Err(self.failed());
                }
                let server_signature = self.hash.hmac(&keys.server_key, auth_message.as_bytes());
                Ok(Step::Done { reply: format!("v={}", B64.encode(server_signature)).into_bytes(), user })
            }
            State::Over => Err(AuthFailed("SCRAM exchange already finished".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::security::salted::ScramCredential;

    /// The client side of RFC 5802, enough to drive the server in tests.
    fn client_final(hash: ScramHash, password: &str, client_first_bare: &str, server_first: &str) -> (String, Vec<u8>) {
        client_final_with(hash, password, client_first_bare, server_first, "")
    }

    /// As librdkafka 2.0 does with `prefix` its client nonce: `r=<prefix><server nonce>`.
    fn client_final_with(
        hash: ScramHash,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
        prefix: &str,
    ) -> (String, Vec<u8>) {
        let mut fields = server_first.split(',');
        let nonce = format!("{prefix}{}", fields.next().unwrap().strip_prefix("r=").unwrap());
        let salt = B64.decode(fields.next().unwrap().strip_prefix("s=").unwrap()).unwrap();
        let iterations: u32 = fields.next().unwrap().strip_prefix("i=").unwrap().parse().unwrap();
        let salted = hash.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        let stored_key = hash.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hash.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let server_signature = hash.hmac(&hash.hmac(&salted, b"Server Key"), auth_message.as_bytes());
        (format!("{without_proof},p={}", B64.encode(proof)), server_signature)
    }

    fn run(hash: ScramHash, stored_password: &str, password: &str, user: &str) -> Result<Step, AuthFailed> {
        let mut creds = Credentials::default();
        creds.set("al=ice,x", hash, ScramCredential::new(hash, stored_password, 4096).unwrap());
        let mut ex = ScramExchange::new(hash, std::sync::Arc::new(creds));
        let bare = format!("n={user},r=fyko+d2lbbFgONRv9qkxdawL");
        let Step::Challenge(first) = ex.step(format!("n,,{bare}").as_bytes())? else { panic!("a challenge") };
        let first = String::from_utf8(first).unwrap();
        assert!(first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"));
        let (fin, server_signature) = client_final(hash, password, &bare, &first);
        let step = ex.step(fin.as_bytes())?;
        if let Step::Done { reply, .. } = &step {
            assert_eq!(reply, format!("v={}", B64.encode(server_signature)).as_bytes());
        }
        Ok(step)
    }

    #[test]
    fn the_right_password_authenticates_and_a_wrong_one_does_not() {
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            let step = run(hash, "s3cret", "s3cret", "al=3Dice=2Cx").unwrap();
            assert!(matches!(step, Step::Done { ref user, .. } if user == "al=ice,x"), "{step:?}");
            let e = run(hash, "s3cret", "wrong", "al=3Dice=2Cx").unwrap_err();
            assert!(e.0.contains("invalid credentials"), "{e}");
            let e = run(hash, "s3cret", "s3cret", "nobody").unwrap_err();
            assert!(e.0.contains("invalid credentials"), "{e}");
        }
    }

    #[test]
    fn librdkafka_2_0_nonce_with_its_client_nonce_in_front_authenticates() {
        let hash = ScramHash::Sha256;
        let mut creds = Credentials::default();
        creds.set("u", hash, ScramCredential::new(hash, "pw", 4096).unwrap());
        let mut ex = ScramExchange::new(hash, std::sync::Arc::new(creds));
        let bare = "n=u,r=-=abc~";
        let Step::Challenge(first) = ex.step(format!("n,,{bare}").as_bytes()).unwrap() else { panic!() };
        let first = String::from_utf8(first).unwrap();
        let (fin, _) = client_final_with(hash, "pw", bare, &first, "-=abc~");
        assert!(matches!(ex.step(fin.as_bytes()), Ok(Step::Done { .. })));
    }
}
