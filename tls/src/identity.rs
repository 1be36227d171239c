//! Who a certificate names: its subject alternative names (DNS names and IP addresses) and its
//! subject's common name. Roles and peer checks match any of them.
//!
//! Read with a small DER walk of the fields needed (the certificate was verified by rustls before
//! it gets here; a malformed one yields an error, never a panic).

use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The common name, if any.
    pub common_name: Option<String>,
    /// DNS names and IP addresses (as text) of the subject alternative names.
    pub alt_names: Vec<String>,
}

/// One DER element: its tag, its contents, and what follows it.
fn tlv(input: &[u8]) -> anyhow::Result<(u8, &[u8], &[u8])> {
    let bad = || anyhow::anyhow!("malformed DER");
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    let (&first, rest) = rest.split_first().ok_or_else(bad)?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        anyhow::ensure!((1..=4).contains(&n) && rest.len() >= n, "malformed DER length");
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    anyhow::ensure!(rest.len() >= len, "truncated DER");
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The elements of a constructed value's contents.
fn elements(mut input: &[u8]) -> anyhow::Result<Vec<(u8, &[u8])>> {
    let mut out = vec![];
    while !input.is_empty() {
        let (tag, value, rest) = tlv(input)?;
        out.push((tag, value));
        input = rest;
    }
    Ok(out)
}

const OID_TAG: u8 = 0x06;
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

impl PeerIdentity {
    /// The identities of a DER certificate.
    pub fn from_der(der: &[u8]) -> anyhow::Result<PeerIdentity> {
        let (_, cert, _) = tlv(der)?;
        let (_, tbs, _) = tlv(cert)?;
        let fields = elements(tbs)?;
        // [0] version (optional), serial, signature algorithm, issuer, validity, subject, key,
        // then [1], [2] unique ids and [3] extensions.
        let skip = usize::from(fields.first().is_some_and(|(t, _)| *t == 0xa0));
        let subject = fields.get(skip + 4).ok_or_else(|| anyhow::anyhow!("certificate without a subject"))?.1;
        let mut common_name = None;
        for (_, rdn) in elements(subject)? {
            for (_, attr) in elements(rdn)? {
                let parts = elements(attr)?;
                if let [(OID_TAG, oid), (_, value)] = parts.as_slice() {
                    if *oid == CN_OID && common_name.is_none() {
                        common_name = Some(String::from_utf8_lossy(value).into_owned());
                    }
                }
            }
        }
        let mut alt_names = Vec::new();
        if let Some((_, exts)) = fields.iter().find(|(t, _)| *t == 0xa3) {
            let (_, list, _) = tlv(exts)?;
            for (_, ext) in elements(list)? {
                let parts = elements(ext)?;
                let Some((OID_TAG, oid)) = parts.first() else { continue };
                if *oid != SAN_OID {
                    continue;
                }
                let Some((_, octets)) = parts.last() else { continue };
                let (_, names, _) = tlv(octets)?;
                for (tag, value) in elements(names)? {
                    match tag {
                        0x82 => alt_names.push(String::from_utf8_lossy(value).into_owned()),
                        0x87 => {
                            if let Ok(a) = <[u8; 4]>::try_from(value) {
                                alt_names.push(IpAddr::from(a).to_string());
                            } else if let Ok(a) = <[u8; 16]>::try_from(value) {
                                alt_names.push(IpAddr::from(a).to_string());
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(PeerIdentity { common_name, alt_names })
    }

    /// Every name this certificate holds.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.common_name.iter().chain(self.alt_names.iter()).map(String::as_str)
    }

    /// Whether the certificate names `name` (exactly).
    pub fn has(&self, name: &str) -> bool {
        self.names().any(|n| n == name)
    }

    /// The name used in messages: the common name, else the first alternative name.
    pub fn display(&self) -> &str {
        self.names().next().unwrap_or("(a certificate without names)")
    }
}

impl std::fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_name_and_alt_names_are_read() {
        let ca = crate::certs::Ca::new("test ca").unwrap();
        let leaf = ca.issue("node-1", &["node-1.example", "127.0.0.1", "::1"]).unwrap();
        let der = leaf.cert_der().unwrap();
        let id = PeerIdentity::from_der(&der).unwrap();
        assert_eq!(id.common_name.as_deref(), Some("node-1"));
        assert_eq!(id.alt_names, vec!["node-1.example".to_string(), "127.0.0.1".to_string(), "::1".to_string()]);
        assert!(id.has("127.0.0.1") && id.has("node-1") && !id.has("node-2"));
        assert_eq!(id.to_string(), "node-1");
        let bare = PeerIdentity::from_der(&ca.issue("operator", &[]).unwrap().cert_der().unwrap()).unwrap();
        assert_eq!((bare.common_name.as_deref(), bare.alt_names.len()), (Some("operator"), 0));
        assert!(PeerIdentity::from_der(&der[..der.len() / 2]).is_err(), "truncated: an error, no panic");
        assert!(PeerIdentity::from_der(&[0x30, 0x84, 0xff]).is_err());
    }
}
