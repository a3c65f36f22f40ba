//! The admin listener's one rule: with a token, every path but `/healthz`
//! (and the dashboard page, which holds no data) needs
//! `Authorization: Bearer <token>`; without one, the listener is on loopback
//! (checked at start, in `check_exposure`).

use std::fmt;
use std::net::SocketAddr;

use http::header::AUTHORIZATION;
use http::HeaderMap;

/// The secret the admin API asks for; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    /// `None` for an empty token (blank lines and surrounding whitespace
    /// of a token file are not part of it).
    pub fn new(text: &str) -> Option<AdminToken> {
        let text = text.trim();
        (!text.is_empty()).then(|| AdminToken(text.to_owned()))
    }

    /// Whether `headers` carry this token as a bearer credential.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(given) = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "))
        else {
            return false;
        };
        same_secret(given, self.0.as_bytes())
    }

    /// As a header value, for `dockhand healthcheck`.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(redacted)")
    }
}

/// Compares in time that depends only on the expected token's length: every
/// byte is looked at whatever the given one holds, so how long an answer
/// takes says nothing about how much of a guess was right.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let mut difference = u8::from(given.len() != expected.len());
    for (index, byte) in expected.iter().enumerate() {
        let other = given.get(index).copied().unwrap_or(!byte);
        difference |= std::hint::black_box(byte ^ other);
    }
    difference == 0
}

/// Why the admin listener may not serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the admin listener {address} is reachable from other machines, and has no token: set --admin-token or --admin-token-file, or listen on loopback (127.0.0.1:8081)")]
pub struct ExposedWithoutToken {
    address: SocketAddr,
}

/// Refuses a listener off loopback without a token: the API shows every
/// host, container and address, and the dashboard offers nothing else.
pub fn check_exposure(
    address: SocketAddr,
    token: Option<&AdminToken>,
) -> Result<(), ExposedWithoutToken> {
    match (address.ip().is_loopback(), token) {
        (false, None) => Err(ExposedWithoutToken { address }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with_authorization(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = AdminToken::new("s3cret\n").unwrap();
        assert!(token.admits(&with_authorization("Bearer s3cret")));
        for wrong in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "Bearer S3cret",
            "bearer s3cret",
            "Basic s3cret",
            "s3cret",
            "Bearer ",
        ] {
            assert!(!token.admits(&with_authorization(wrong)), "{wrong}");
        }
        assert!(!token.admits(&HeaderMap::new()));
    }

    #[test]
    fn a_blank_token_is_none() {
        assert_eq!(AdminToken::new(" \n"), None);
        assert_eq!(
            format!("{:?}", AdminToken::new("x")),
            "Some(AdminToken(redacted))"
        );
    }

    #[test]
    fn off_loopback_needs_a_token() {
        let token = AdminToken::new("t");
        let public: SocketAddr = "0.0.0.0:8081".parse().unwrap();
        let loopback: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        let error = check_exposure(public, None).unwrap_err().to_string();
        assert!(error.contains("--admin-token"), "{error}");
        assert_eq!(check_exposure(public, token.as_ref()), Ok(()));
        assert_eq!(check_exposure(loopback, None), Ok(()));
        assert_eq!(check_exposure("[::1]:8081".parse().unwrap(), None), Ok(()));
    }
}
