//! What ACME validation asks of dockhand's listeners while an order runs:
//! the key authorization answered at `/.well-known/acme-challenge/<token>`
//! on plain HTTP (HTTP-01, RFC 8555 §8.3), and the self-signed certificate
//! answered to a TLS handshake that offers only `acme-tls/1` (TLS-ALPN-01,
//! RFC 8737). The ACME side sets them before telling the CA it is ready,
//! and takes them away when the authorization is done. Replicas sharing
//! `--acme-storage` also write their HTTP-01 answers there, since the CA
//! may ask any of them: a token not known here is looked for in that folder.

use std::collections::HashMap;
use std::path::PathBuf;
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
    /// Where replicas sharing the ACME storage write HTTP-01 answers.
    shared_http01: RwLock<Option<PathBuf>>,
}

/// The longest token looked for in the shared folder (RFC 8555 §8.3: 128
/// bits of base64url at least; CAs send 43 characters).
const MAX_TOKEN_LEN: usize = 256;

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

    /// Looks for tokens not known here in `dir`, where every replica
    /// sharing the ACME storage writes its answers.
    pub fn share_http01_through(&self, dir: PathBuf) {
        *self
            .shared_http01
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(dir);
    }

    /// The file another replica may have written the answer for `path` in:
    /// only for a token of base64url characters, so a request can't name
    /// any other file.
    pub fn shared_http01_file(&self, path: &str) -> Option<PathBuf> {
        let token = path.strip_prefix(HTTP01_PATH_PREFIX)?;
        let valid = (1..=MAX_TOKEN_LEN).contains(&token.len())
            && token
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
        let shared = self.shared_http01.read().unwrap_or_else(|e| e.into_inner());
        Some(shared.as_ref()?.join(token)).filter(|_| valid)
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
    }

    #[test]
    fn only_base64url_tokens_are_looked_for_in_the_shared_folder() {
        let challenges = AcmeChallenges::default();
        let path = "/.well-known/acme-challenge/a-B_9";
        assert_eq!(challenges.shared_http01_file(path), None, "not shared yet");
        challenges.share_http01_through("/acme/challenges".into());
        assert_eq!(
            challenges.shared_http01_file(path),
            Some("/acme/challenges/a-B_9".into())
        );
        for outside in ["..", "../account.json", "a/b", "a.b", "", "%2e%2e"] {
            let path = format!("{HTTP01_PATH_PREFIX}{outside}");
            assert_eq!(challenges.shared_http01_file(&path), None, "{outside}");
        }
        assert_eq!(challenges.shared_http01_file("/other/a"), None);
        assert_eq!(challenges.http01_answer("/abc"), None);
        challenges.remove_http01("abc");
        assert_eq!(
            challenges.http01_answer("/.well-known/acme-challenge/abc"),
            None
        );
    }
}
