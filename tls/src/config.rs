//! The TLS settings of one listener or client: three PEM files.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A certificate chain, its private key and the CA certificates trusted for the other side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// This side's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA certificates (PEM) the other side's certificate must chain to.
    pub ca: PathBuf,
    /// Servers only: refuse clients without a certificate of `ca` (mutual TLS). Default: true.
    #[serde(default = "yes")]
    pub require_client_cert: bool,
}

fn yes() -> bool {
    true
}

impl TlsFiles {
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>, ca: impl Into<PathBuf>) -> TlsFiles {
        TlsFiles { cert: cert.into(), key: key.into(), ca: ca.into(), require_client_cert: true }
    }

    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        vec![self.cert.clone(), self.key.clone(), self.ca.clone()]
    }
}
