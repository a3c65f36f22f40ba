//! What ACME validation asks of dockhand's listeners while an order runs:
//! the key authorization answered at `/.well-known/acme-challenge/<token>`
//! on plain HTTP (HTTP-01, RFC 8555 §8.3), and the self-signed certificate
//! answered to a TLS handshake that offers only `acme-tls/1` (TLS-ALPN-01,
//! RFC 8737). The ACME side sets them before telling the CA it is ready,
//! and takes them away when the authorization is done.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls::sign::CertifiedKey;

/// The path prefix of HTTP-01 challenge requests.
pub const HTTP01_PATH_PREFIX: &str = "/.well-known/acme-challenge/";

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN_PROTOCOL: &[u8] = b"acme-tls/1";

#[derive(Default)]
pub struct AcmeChallenges {
    /// Token → key authorization.
    http01: RwLock<HashMap<String, String>>,
    /// Server name (lower case) → challenge certificate.
    tls_alpn01: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl AcmeChallenges {
    /// The answer to a plain-HTTP request for `path`, when it is a
    /// challenge dockhand is waiting to be asked.
    pub fn http01_answer(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(HTTP01_PATH_PREFIX)?;
        let answers = self.http01.read().unwrap_or_else(|e| e.into_inner());
        answers.get(token).cloned()
    }

    pub fn set_http01(&self, token: &str, key_authorization: &str) {
        let mut answers = self.http01.write().unwrap_or_else(|e| e.into_inner());
        answers.insert(token.to_owned(), key_authorization.to_owned());
    }

    pub fn remove_http01(&self, token: &str) {
        let mut answers = self.http01.write().unwrap_or_else(|e| e.into_inner());
        answers.remove(token);
    }

    /// The challenge certificate for `server_name`, while one is set.
    pub fn tls_alpn01(&self, server_name: &str) -> Option<Arc<CertifiedKey>> {
        let certificates = self.tls_alpn01.read().unwrap_or_else(|e| e.into_inner());
        certificates.get(&server_name.to_ascii_lowercase()).cloned()
    }

    pub fn set_tls_alpn01(&self, server_name: &str, certificate: Arc<CertifiedKey>) {
        let mut certificates = self.tls_alpn01.write().unwrap_or_else(|e| e.into_inner());
        certificates.insert(server_name.to_ascii_lowercase(), certificate);
    }

    pub fn remove_tls_alpn01(&self, server_name: &str) {
        let mut certificates = self.tls_alpn01.write().unwrap_or_else(|e| e.into_inner());
        certificates.remove(&server_name.to_ascii_lowercase());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_token_that_is_set_is_answered() {
        let challenges = AcmeChallenges::default();
        challenges.set_http01("abc", "abc.thumbprint");
        assert_eq!(
            challenges
                .http01_answer("/.well-known/acme-challenge/abc")
                .as_deref(),
            Some("abc.thumbprint")
        );
        assert_eq!(
            challenges.http01_answer("/.well-known/acme-challenge/abd"),
            None
        );
        assert_eq!(challenges.http01_answer("/abc"), None);
        challenges.remove_http01("abc");
        assert_eq!(
            challenges.http01_answer("/.well-known/acme-challenge/abc"),
            None
        );
    }
}
