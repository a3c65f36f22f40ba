//! One order, start to end (RFC 8555 §7.4): the order for a set of names,
//! each authorization's challenge answered through `AcmeChallenges`
//! (HTTP-01 on the plain-HTTP listener, or TLS-ALPN-01 on the HTTPS one with
//! a certificate carrying the acmeIdentifier extension, RFC 8737 §3), the
//! CA told, the order polled until ready, finalized with a new key, and the
//! chain fetched. The answers are taken away when the order ends, however
//! it ends. Storing and serving the result is the caller's.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier, NewOrder,
    OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, CustomExtension, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::client::{describe, problem_detail};
use super::storage::Storage;
use crate::settings::AcmeChallenge;
use crate::tls::TlsState;

/// How long the CA may take to validate, and then to issue.
const VALIDATION_LIMIT: Duration = Duration::from_secs(120);

/// An issued certificate, as PEM.
pub struct Issued {
    pub chain: String,
    pub key: String,
}

/// Orders a certificate for `names` (sorted), replacing `replaces` when the
/// CA offers renewal information.
pub async fn order(
    account: &Account,
    names: &[String],
    replaces: Option<CertificateIdentifier<'static>>,
    challenge: AcmeChallenge,
    tls: &Arc<TlsState>,
    storage: &Storage,
) -> Result<Issued, String> {
    let challenges = &tls.challenges;
    let identifiers: Vec<Identifier> = names.iter().cloned().map(Identifier::Dns).collect();
    let mut new_order = NewOrder::new(&identifiers);
    if let Some(replaces) = replaces {
        new_order = new_order.replaces(replaces);
    }
    let mut order = account
        .new_order(&new_order)
        .await
        .map_err(|e| describe(&e))?;
    let mut answers = Answers {
        tls: tls.clone(),
        storage: storage.clone(),
        http01: Vec::new(),
        tls_alpn01: Vec::new(),
    };
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization.map_err(|e| describe(&e))?;
        if authorization.status == AuthorizationStatus::Valid {
            continue;
        }
        let name = match authorization.identifier().identifier {
            Identifier::Dns(name) => name.clone(),
            other => return Err(format!("the CA asked about {other:?}, not a DNS name")),
        };
        let kind = match challenge {
            AcmeChallenge::Http01 => ChallengeType::Http01,
            AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        };
        let mut handle = authorization
            .challenge(kind.clone())
            .ok_or_else(|| format!("the CA offers no {kind:?} challenge for {name}"))?;
        let key_authorization = handle.key_authorization();
        match challenge {
            AcmeChallenge::Http01 => {
                challenges.set_http01(&handle.token, key_authorization.as_str());
                answers.http01.push(handle.token.clone());
                // For the replicas sharing the storage, which the CA may ask.
                let (storage, token) = (storage.clone(), handle.token.clone());
                let answer = key_authorization.as_str().to_owned();
                tokio::task::spawn_blocking(move || storage.save_http01(&token, &answer))
                    .await
                    .map_err(|error| error.to_string())?
                    .map_err(|error| format!("storing the HTTP-01 answer: {error}"))?;
            }
            AcmeChallenge::TlsAlpn01 => {
                let certificate = tls_alpn01_certificate(&name, key_authorization.digest())?;
                challenges.set_tls_alpn01(&name, certificate);
                answers.tls_alpn01.push(name.clone());
            }
        }
        handle.set_ready().await.map_err(|e| describe(&e))?;
    }
    let polling = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .backoff(1.5)
        .timeout(VALIDATION_LIMIT);
    let status = order.poll_ready(&polling).await.map_err(|e| describe(&e))?;
    if status != OrderStatus::Ready {
        return Err(validation_failure(&mut order).await);
    }
    drop(answers);
    let key = order.finalize().await.map_err(|e| describe(&e))?;
    let chain = order
        .poll_certificate(&polling)
        .await
        .map_err(|e| describe(&e))?;
    Ok(Issued { chain, key })
}

/// Why the CA found the order invalid: the first challenge's error.
async fn validation_failure(order: &mut instant_acme::Order) -> String {
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        if let Ok(state) = authorization.refresh().await {
            for challenge in &state.challenges {
                if let Some(problem) = &challenge.error {
                    return problem_detail(problem);
                }
            }
        }
    }
    "the CA found the order invalid".to_owned()
}

/// The self-signed certificate a TLS-ALPN-01 validation is answered with:
/// the one name, and the SHA-256 of the key authorization in the critical
/// acmeIdentifier extension (RFC 8737 §3).
fn tls_alpn01_certificate(
    name: &str,
    digest: impl AsRef<[u8]>,
) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
    let mut params = CertificateParams::new(vec![name.to_owned()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest.as_ref())];
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let certificate = params.self_signed(&key).map_err(|e| e.to_string())?;
    // Not through `Certificate`: webpki refuses the critical extension it
    // does not know when checking that key and certificate match, and the
    // CA is the only client that ever sees this certificate.
    let signing_key = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            key.serialize_der(),
        )))
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(rustls::sign::CertifiedKey::new(
        vec![CertificateDer::from(certificate.der().to_vec())],
        signing_key,
    )))
}

/// The challenge answers an order set, taken away when it is dropped.
struct Answers {
    tls: Arc<TlsState>,
    storage: Storage,
    http01: Vec<String>,
    tls_alpn01: Vec<String>,
}

impl Drop for Answers {
    fn drop(&mut self) {
        for token in &self.http01 {
            self.tls.challenges.remove_http01(token);
        }
        let (storage, tokens) = (self.storage.clone(), std::mem::take(&mut self.http01));
        tokio::task::spawn_blocking(move || {
            for token in tokens {
                if let Err(error) = storage.remove_http01(&token) {
                    tracing::warn!(%error, %token, "a stored HTTP-01 answer could not be removed");
                }
            }
        });
        for name in &self.tls_alpn01 {
            self.tls.challenges.remove_tls_alpn01(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8737 §3: the one name, and the digest in a critical
    /// acmeIdentifier extension (OID 1.3.6.1.5.5.7.1.31).
    #[test]
    fn the_tls_alpn_01_certificate_carries_the_digest_in_a_critical_extension() {
        let digest = [7u8; 32];
        let key = tls_alpn01_certificate("a.example.com", digest).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(key.cert[0].as_ref()).unwrap();
        let extension = parsed
            .extensions()
            .iter()
            .find(|extension| extension.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier");
        assert!(extension.critical);
        assert_eq!(
            &extension.value[2..],
            &digest,
            "an OCTET STRING of the digest"
        );
        let names = parsed.subject_alternative_name().unwrap().unwrap();
        assert_eq!(names.value.general_names.len(), 1);
    }
}
