//! Certificate generation for local setups and tests (`coordctl certs`): a CA, and certificates it
//! signs for nodes, brokers and operators, each usable as server and as client (mutual TLS). A
//! production cluster brings certificates from its own PKI; these are files of the same shape.

use std::path::Path;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use crate::TlsFiles;

/// A certificate authority that can sign certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// A signed certificate and its private key, PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    /// A new self-signed CA valid for ten years.
    pub fn new(common_name: &str) -> anyhow::Result<Ca> {
        let mut params = ca_params(common_name);
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(3650);
        let key = KeyPair::generate().context("generate a CA key")?;
        let cert = params.self_signed(&key).context("sign the CA certificate")?;
        let (cert_pem, key_pem) = (cert.pem(), key.serialize_pem());
        Ok(Ca { issuer: Issuer::new(params, key), cert_pem, key_pem })
    }

    /// A CA made by [`Ca::new`], from its certificate and key files (the certificates it signs
    /// name it as issuer by its common name, and are checked with its key).
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Ca> {
        use rustls_pki_types::pem::PemObject;
        let cert_pem = std::fs::read_to_string(cert).with_context(|| format!("read {}", cert.display()))?;
        let key_pem = std::fs::read_to_string(key).with_context(|| format!("read {}", key.display()))?;
        let pair = KeyPair::from_pem(&key_pem).with_context(|| format!("parse {}", key.display()))?;
        let der = rustls_pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .with_context(|| format!("parse {}", cert.display()))?;
        let name = crate::PeerIdentity::from_der(&der)?
            .common_name
            .with_context(|| format!("{}: a CA certificate without a common name", cert.display()))?;
        Ok(Ca { issuer: Issuer::new(ca_params(&name), pair), cert_pem, key_pem })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `ca.pem` and `ca.key` (mode 0600) into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        write(&dir.join("ca.pem"), &self.cert_pem, false)?;
        write(&dir.join("ca.key"), &self.key_pem, true)
    }

    /// A certificate for `common_name` with the subject alternative names `alt_names` (DNS names,
    /// or IP addresses where they parse as one), for server and client use, valid for `days` from
    /// a day ago.
    pub fn issue(&self, common_name: &str, alt_names: &[&str]) -> anyhow::Result<Issued> {
        let now = OffsetDateTime::now_utc();
        self.issue_valid(common_name, alt_names, now - Duration::days(1), now + Duration::days(825))
    }

    /// Like [`Ca::issue`], valid from `not_before` to `not_after` (tests make expired ones).
    pub fn issue_valid(
        &self,
        common_name: &str,
        alt_names: &[&str],
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> anyhow::Result<Issued> {
        let mut params = CertificateParams::new(alt_names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .context("subject alternative names")?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate().context("generate a key")?;
        let cert = params.signed_by(&key, &self.issuer).context("sign the certificate")?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

impl Issued {
    /// The certificate, DER.
    pub fn cert_der(&self) -> anyhow::Result<Vec<u8>> {
        use rustls_pki_types::pem::PemObject;
        let c = rustls_pki_types::CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).context("PEM")?;
        Ok(c.to_vec())
    }

    /// Writes `<name>.pem` and `<name>.key` (mode 0600) into `dir`; the files to configure, with
    /// `dir/ca.pem` as the trusted CA.
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<TlsFiles> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        write(&cert, &self.cert_pem, false)?;
        write(&key, &self.key_pem, true)?;
        Ok(TlsFiles::new(cert, key, dir.join("ca.pem")))
    }
}

/// Writes a file whole: a temporary file renamed over the target, so a process reloading it never
/// reads half of it.
fn write(path: &Path, text: &str, secret: bool) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("write {}", tmp.display()))?;
    f.sync_all().with_context(|| format!("sync {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))
}
