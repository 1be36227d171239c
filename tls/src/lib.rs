//! Mutual TLS for every gRPC listener and client of the coordinator and the broker (rustls).
//!
//! Owns: the certificate settings (`config`), files reloaded when they change (`reload`), the
//! identities a certificate names (`identity`), the server's accept loop that hands tonic plain or
//! TLS connections carrying the client's identity (`server`), the client connector (`client`), and
//! certificate generation for local setups and tests (`certs`). It must not decide what an identity
//! may do: roles and peer membership are the coordinator's (`server::authz` there).

pub mod certs;
pub mod client;
pub mod config;
pub mod identity;
pub mod reload;
pub mod server;

pub use client::ClientTls;
pub use config::TlsFiles;
pub use identity::PeerIdentity;
pub use server::{ConnInfo, PlainServerTls, ServerTls};

/// rustls needs one process-wide crypto provider when several are compiled in (object_store's
/// dependencies bring aws-lc-rs); installs aws-lc-rs unless one is installed already.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
