//! `basic_auth`: HTTP Basic authentication (RFC 7617) against bcrypt or
//! argon2id hashes. Hashing is slow on purpose, so it runs on the blocking
//! pool, never on a request thread, and a client's failed attempts are
//! limited (`FAILURES`): past them it gets `429` without a hash being
//! tried. Credentials that passed are remembered by their SHA-256 (the
//! password itself is not kept) so a logged-in client's every request
//! does not pay for a hash.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};

use super::rate_limit::RateLimiter;
use super::Refusal;
use crate::config::middleware::{BasicAuth, BasicAuthUser, PasswordHash, RateLimit, RateLimitKey};
use crate::sync::lock;

/// Failed attempts a client may make: 10 at once, then one every 6 s.
pub const FAILURES: RateLimit = RateLimit {
    average: 10,
    burst: 10,
    period: Duration::from_secs(60),
    by: RateLimitKey::Client,
};

/// How many passed credentials are remembered; past it, all are forgotten
/// (and hashed again at their next request).
const MOST_REMEMBERED: usize = 1024;

type Digest = [u8; 32];

/// One location's users and what it remembers of their attempts.
pub struct BasicAuthState {
    settings: Arc<BasicAuth>,
    /// The `WWW-Authenticate` sent with every `401`.
    challenge: HeaderValue,
    failures: Arc<RateLimiter>,
    passed: Mutex<HashSet<Digest>>,
}

impl BasicAuthState {
    /// `failures`: where the location's failed logins are counted (kept
    /// across route-table builds), with the setting `FAILURES`.
    pub fn new(settings: BasicAuth, failures: Arc<RateLimiter>) -> BasicAuthState {
        let challenge = format!("Basic realm=\"{}\", charset=\"UTF-8\"", settings.realm);
        BasicAuthState {
            // The realm was checked to fit in a quoted string.
            challenge: HeaderValue::from_str(&challenge).expect("a checked realm"),
            settings: Arc::new(settings),
            failures,
            passed: Mutex::default(),
        }
    }

    /// Whether the `forward` setting keeps the credentials for the upstream.
    pub fn forwards_credentials(&self) -> bool {
        self.settings.forward
    }

    /// Checks the request's credentials.
    pub async fn check(&self, client: IpAddr, headers: &HeaderMap) -> Result<(), Refusal> {
        let unauthorized = || Refusal::Unauthorized(self.challenge.clone());
        let no_headers = HeaderMap::new();
        let failures_left = self.failures.available(client, &no_headers, Instant::now());
        if let Err(wait) = failures_left {
            return Err(Refusal::RateLimited(wait));
        }
        let Some(value) = headers.get(AUTHORIZATION) else {
            return Err(unauthorized());
        };
        let digest = sha256(value.as_bytes());
        if lock(&self.passed).contains(&digest) {
            return Ok(());
        }
        let verified = match credentials(value) {
            Some((name, password)) => self.verify(name, password).await,
            None => false,
        };
        if !verified {
            let _ = self.failures.take(client, &no_headers, Instant::now());
            return Err(unauthorized());
        }
        let mut passed = lock(&self.passed);
        if passed.len() >= MOST_REMEMBERED {
            passed.clear();
        }
        passed.insert(digest);
        Ok(())
    }

    /// Hashes `password` for the user `name` on the blocking pool. An
    /// unknown user costs a hash too, so the time taken does not tell
    /// which users exist.
    async fn verify(&self, name: String, password: String) -> bool {
        let settings = self.settings.clone();
        let hashed = tokio::task::spawn_blocking(move || {
            let user = settings.users.iter().find(|user| user.name == name);
            match (user, settings.users.first()) {
                (Some(user), _) => matches(user, &password),
                (None, Some(anyone)) => {
                    let _ = matches(anyone, &password);
                    false
                }
                // No users (a users file that could not be read): no one
                // is let in.
                (None, None) => false,
            }
        });
        hashed.await.unwrap_or(false)
    }
}

/// The user name and password of a `Basic` `Authorization` value.
fn credentials(value: &HeaderValue) -> Option<(String, String)> {
    let text = value.to_str().ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (name, password) = decoded.split_once(':')?;
    Some((name.to_owned(), password.to_owned()))
}

fn matches(user: &BasicAuthUser, password: &str) -> bool {
    match &user.hash {
        PasswordHash::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
        PasswordHash::Argon2id(hash) => {
            use argon2::password_hash::PasswordVerifier;
            argon2::PasswordHash::new(hash).is_ok_and(|parsed| {
                argon2::Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
        }
    }
}

fn sha256(bytes: &[u8]) -> Digest {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `htpasswd -nbB alice secret`, at the lowest cost to keep tests fast.
    fn alice() -> BasicAuthUser {
        let hash = bcrypt::hash("secret", 4).unwrap();
        crate::config::middleware::user(&format!("alice:{hash}")).unwrap()
    }

    fn state(users: Vec<BasicAuthUser>) -> BasicAuthState {
        let settings = BasicAuth {
            users,
            users_file: None,
            realm: "admin".into(),
            forward: false,
        };
        BasicAuthState::new(settings, Arc::new(RateLimiter::new(FAILURES)))
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap(),
        );
        headers
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

    #[tokio::test]
    async fn the_right_password_passes_and_others_get_the_challenge() {
        let state = state(vec![alice()]);
        assert_eq!(state.check(CLIENT, &basic("alice", "secret")).await, Ok(()));
        // Remembered: passes again without a hash.
        assert_eq!(state.check(CLIENT, &basic("alice", "secret")).await, Ok(()));
        for headers in [
            basic("alice", "wrong"),
            basic("bob", "secret"),
            HeaderMap::new(),
        ] {
            let Err(Refusal::Unauthorized(challenge)) = state.check(CLIENT, &headers).await else {
                panic!("not refused")
            };
            assert_eq!(challenge, "Basic realm=\"admin\", charset=\"UTF-8\"");
        }
    }

    #[tokio::test]
    async fn argon2id_hashes_are_checked_too() {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let salt = SaltString::encode_b64(b"sixteen byte salt").unwrap();
        let hash = argon2::Argon2::default()
            .hash_password(b"hunter2", &salt)
            .unwrap()
            .to_string();
        let user = crate::config::middleware::user(&format!("carol:{hash}")).unwrap();
        let state = state(vec![user]);
        assert_eq!(
            state.check(CLIENT, &basic("carol", "hunter2")).await,
            Ok(())
        );
        assert!(state
            .check(CLIENT, &basic("carol", "hunter3"))
            .await
            .is_err());
    }

    #[tokio::test]
    async fn failed_attempts_are_limited_per_client() {
        let state = state(vec![alice()]);
        for _ in 0..FAILURES.burst {
            assert!(matches!(
                state.check(CLIENT, &basic("alice", "guess")).await,
                Err(Refusal::Unauthorized(_))
            ));
        }
        // Even the right password waits now: no hash is tried.
        assert!(matches!(
            state.check(CLIENT, &basic("alice", "secret")).await,
            Err(Refusal::RateLimited(_))
        ));
        // Another client is not held back.
        let other = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(state.check(other, &basic("alice", "secret")).await, Ok(()));
    }
}
