//! The salted SCRAM credential (RFC 5802): what the broker stores for a user and a hash
//! (`ScramCredential`: salt, iterations, StoredKey, ServerKey; never the password), how it is made
//! from a password, and the hash functions SCRAM and PLAIN compute with (RustCrypto's sha2, hmac,
//! pbkdf2; keys compared in constant time). No exchange and no file: `scram` and `plain`
//! authenticate with it, `credentials` keeps it.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::mechanism::Mechanism;

/// Kafka's lower bound on iterations for SCRAM-SHA-256/512.
pub const MIN_ITERATIONS: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub fn mechanism(self) -> Mechanism {
        match self {
            ScramHash::Sha256 => Mechanism::ScramSha256,
            ScramHash::Sha512 => Mechanism::ScramSha512,
        }
    }

    pub(super) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        match self {
            ScramHash::Sha256 => run::<hmac::Hmac<sha2::Sha256>>(key, data),
            ScramHash::Sha512 => run::<hmac::Hmac<sha2::Sha512>>(key, data),
        }
    }

    pub(super) fn hash(self, data: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        match self {
            ScramHash::Sha256 => sha2::Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => sha2::Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with HMAC of this hash, one block.
    pub(super) fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramHash::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<sha2::Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// What the broker stores for one user and one SCRAM hash (base64 in the credentials file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScramCredential {
    pub salt: String,
    pub iterations: u32,
    pub stored_key: String,
    pub server_key: String,
}

/// A credential decoded for use.
pub(super) struct Keys {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// The credential of `password` with a new random salt.
    pub fn new(hash: ScramHash, password: &str, iterations: u32) -> anyhow::Result<ScramCredential> {
        anyhow::ensure!(iterations >= MIN_ITERATIONS, "SCRAM needs at least {MIN_ITERATIONS} iterations");
        let mut salt = [0u8; 32];
        getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("random salt: {e}"))?;
        let salted = hash.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        Ok(ScramCredential {
            salt: B64.encode(salt),
            iterations,
            stored_key: B64.encode(hash.hash(&client_key)),
            server_key: B64.encode(hash.hmac(&salted, b"Server Key")),
        })
    }

    pub(super) fn keys(&self) -> Option<Keys> {
        Some(Keys {
            salt: B64.decode(&self.salt).ok()?,
            iterations: self.iterations,
            stored_key: B64.decode(&self.stored_key).ok()?,
            server_key: B64.decode(&self.server_key).ok()?,
        })
    }

    /// Whether `password` is the one this credential was made from (for SASL/PLAIN).
    pub fn matches(&self, hash: ScramHash, password: &[u8]) -> bool {
        let Some(k) = self.keys() else { return false };
        if k.iterations < MIN_ITERATIONS {
            return false;
        }
        let salted = hash.salted_password(password, &k.salt, k.iterations);
        let stored = hash.hash(&hash.hmac(&salted, b"Client Key"));
        bool::from(stored.ct_eq(&k.stored_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7677_test_vector_verifies() {
        // RFC 7677 section 3: user "user", password "pencil".
        let hash = ScramHash::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = hash.salted_password(b"pencil", &salt, 4096);
        let client_key = hash.hmac(&salted, b"Client Key");
        let cred = ScramCredential {
            salt: "W22ZaJ0SNY7soEsUEjb6gQ==".into(),
            iterations: 4096,
            stored_key: B64.encode(hash.hash(&client_key)),
            server_key: B64.encode(hash.hmac(&salted, b"Server Key")),
        };
        let bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth = format!("{bare},{server_first},{without_proof}");
        let k = cred.keys().unwrap();
        let sig = hash.hmac(&k.stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        assert_eq!(B64.encode(proof), "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        assert_eq!(
            B64.encode(hash.hmac(&k.server_key, auth.as_bytes())),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert!(cred.matches(hash, b"pencil") && !cred.matches(hash, b"pencil2"));
    }
}
