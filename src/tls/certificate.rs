//! One certificate as served: its chain and key, checked to belong together
//! when it is loaded, with the DNS names it covers and its validity read
//! from the leaf once, so nothing is parsed during a handshake.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::ring::default_provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// A chain with its key, and what the leaf says.
#[derive(Debug)]
pub struct Certificate {
    /// The DNS names of the leaf's subjectAltName, lower case, wildcards
    /// (`*.example.com`) as written.
    pub names: Vec<String>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub key: Arc<CertifiedKey>,
}

/// Why a chain and key can't be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    #[error("no certificate in the PEM data")]
    NoCertificate,
    #[error("no private key in the PEM data")]
    NoKey,
    #[error("the PEM data can't be read: {0}")]
    Pem(String),
    #[error("the private key can't be used: {0}")]
    Key(String),
    #[error("the private key does not belong to the certificate")]
    Mismatch,
    #[error("the certificate can't be read: {0}")]
    Parse(String),
    #[error("the certificate names no DNS name in its subjectAltName")]
    NoNames,
}

impl Certificate {
    /// From PEM text: the chain (leaf first, as `fullchain.pem` has it) and
    /// the key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Result<Certificate, CertificateError> {
        let chain = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| CertificateError::Pem(error.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| match error {
            rustls::pki_types::pem::Error::NoItemsFound => CertificateError::NoKey,
            error => CertificateError::Pem(error.to_string()),
        })?;
        Certificate::from_der(chain, key)
    }

    pub fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Certificate, CertificateError> {
        let leaf = chain.first().ok_or(CertificateError::NoCertificate)?;
        let (names, not_before, not_after) = read_leaf(leaf)?;
        let signing_key = default_provider()
            .key_provider
            .load_private_key(key)
            .map_err(|error| CertificateError::Key(error.to_string()))?;
        let key = CertifiedKey::new(chain, signing_key);
        match key.keys_match() {
            Ok(()) => {}
            // The key's public half can't be derived for every key type;
            // only a known mismatch is refused.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(_) => return Err(CertificateError::Mismatch),
        }
        Ok(Certificate {
            names,
            not_before,
            not_after,
            key: Arc::new(key),
        })
    }

    /// Whether the certificate covers `host` (lower case): by one of its
    /// names, a wildcard covering exactly one label (RFC 6125 §6.4.3).
    pub fn covers(&self, host: &str) -> bool {
        self.names.iter().any(|name| match name.strip_prefix("*.") {
            Some(parent) => host
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == parent),
            None => name == host,
        })
    }
}

fn read_leaf(
    leaf: &CertificateDer<'_>,
) -> Result<(Vec<String>, SystemTime, SystemTime), CertificateError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|error| CertificateError::Parse(error.to_string()))?;
    let names: Vec<String> = parsed
        .subject_alternative_name()
        .map_err(|error| CertificateError::Parse(error.to_string()))?
        .map(|extension| {
            extension
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(name) => {
                        Some(name.trim_end_matches('.').to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        return Err(CertificateError::NoNames);
    }
    let validity = parsed.validity();
    Ok((
        names,
        system_time(validity.not_before.timestamp()),
        system_time(validity.not_after.timestamp()),
    ))
}

fn system_time(unix_seconds: i64) -> SystemTime {
    match u64::try_from(unix_seconds) {
        Ok(seconds) => SystemTime::UNIX_EPOCH + Duration::from_secs(seconds),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// A self-signed certificate for `names`, for tests.
#[cfg(test)]
pub(crate) fn test_certificate(names: &[&str]) -> Arc<Certificate> {
    let names = names
        .iter()
        .map(|name| name.to_string())
        .collect::<Vec<_>>();
    let certified = rcgen::generate_simple_self_signed(names).unwrap();
    Arc::new(
        Certificate::from_pem(
            certified.cert.pem().as_bytes(),
            certified.signing_key.serialize_pem().as_bytes(),
        )
        .unwrap(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(names: &[&str]) -> (String, String) {
        let names = names
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>();
        let certified = rcgen::generate_simple_self_signed(names).unwrap();
        (certified.cert.pem(), certified.signing_key.serialize_pem())
    }

    #[test]
    fn names_come_from_the_subject_alt_name_in_lower_case() {
        let (chain, key) = self_signed(&["App.Example.com", "*.apps.example.com"]);
        let certificate = Certificate::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(certificate.names, ["app.example.com", "*.apps.example.com"]);
        assert!(certificate.not_after > certificate.not_before);
    }

    #[test]
    fn a_wildcard_covers_exactly_one_label() {
        let (chain, key) = self_signed(&["*.example.com"]);
        let certificate = Certificate::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
        assert!(certificate.covers("a.example.com"));
        assert!(!certificate.covers("example.com"));
        assert!(!certificate.covers("a.b.example.com"));
        assert!(!certificate.covers(".example.com"));
    }

    #[test]
    fn a_key_of_another_certificate_is_a_mismatch() {
        let (chain, _) = self_signed(&["a.example.com"]);
        let (_, other_key) = self_signed(&["a.example.com"]);
        let error = Certificate::from_pem(chain.as_bytes(), other_key.as_bytes()).unwrap_err();
        assert_eq!(error, CertificateError::Mismatch);
    }

    #[test]
    fn missing_parts_are_named() {
        let (chain, key) = self_signed(&["a.example.com"]);
        assert_eq!(
            Certificate::from_pem(b"", key.as_bytes()).unwrap_err(),
            CertificateError::NoCertificate
        );
        assert_eq!(
            Certificate::from_pem(chain.as_bytes(), b"").unwrap_err(),
            CertificateError::NoKey
        );
    }
}
