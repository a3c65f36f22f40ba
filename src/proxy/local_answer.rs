//! Answers dockhand gives itself instead of forwarding: today the ACME
//! HTTP-01 challenge (RFC 8555 §8.3), asked by the CA on plain HTTP for any
//! host while an order waits for it. It comes before routing, so a host
//! that is not served yet, or that redirects to HTTPS (`to_https`), can
//! still prove it.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response};

use super::body::ProxyBody;
use super::client_identity::{PeerInfo, Scheme};
use crate::tls::TlsState;

/// The key authorization for a pending HTTP-01 challenge's path, on plain
/// HTTP `GET` (this replica's, or one another replica sharing the ACME
/// storage wrote there); `None` for every other request.
pub async fn acme_challenge<B>(
    tls: &TlsState,
    peer: &PeerInfo,
    request: &Request<B>,
) -> Option<Response<ProxyBody>> {
    if peer.scheme != Scheme::Http || request.method() != http::Method::GET {
        return None;
    }
    let path = request.uri().path();
    let key_authorization = match tls.challenges.http01_answer(path) {
        Some(answer) => answer,
        None => {
            let shared = tls.challenges.shared_http01_file(path)?;
            // Boxed: the read's state would otherwise weigh on the future
            // of every request, for the rare one that needs it.
            Box::pin(tokio::fs::read_to_string(shared)).await.ok()?
        }
    };
    let mut response = Response::new(ProxyBody::message(Bytes::from(key_authorization)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(scheme: Scheme) -> PeerInfo {
        PeerInfo::new("192.0.2.1:5000".parse().unwrap(), scheme, None, &[])
    }

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    #[tokio::test]
    async fn only_a_pending_token_over_plain_http_is_answered() {
        let tls = TlsState::default();
        tls.challenges.set_http01("tok", "tok.print");
        let path = "/.well-known/acme-challenge/tok";
        let answer = acme_challenge(&tls, &peer(Scheme::Http), &get(path))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert!(acme_challenge(&tls, &peer(Scheme::Https), &get(path))
            .await
            .is_none());
        let other = "/.well-known/acme-challenge/other";
        assert!(acme_challenge(&tls, &peer(Scheme::Http), &get(other))
            .await
            .is_none());
        let post = Request::post(path).body(()).unwrap();
        assert!(acme_challenge(&tls, &peer(Scheme::Http), &post)
            .await
            .is_none());
    }

    #[tokio::test]
    async fn a_token_another_replica_wrote_to_the_shared_storage_is_answered() {
        let shared = tempfile::tempdir().unwrap();
        std::fs::write(shared.path().join("theirs"), "theirs.print").unwrap();
        let tls = TlsState::default();
        let path = "/.well-known/acme-challenge/theirs";
        assert!(acme_challenge(&tls, &peer(Scheme::Http), &get(path))
            .await
            .is_none());
        tls.challenges
            .share_http01_through(shared.path().to_owned());
        let answer = acme_challenge(&tls, &peer(Scheme::Http), &get(path))
            .await
            .unwrap();
        let body = http_body_util::BodyExt::collect(answer.into_body())
            .await
            .unwrap();
        assert_eq!(body.to_bytes(), "theirs.print");
        let unknown = "/.well-known/acme-challenge/nobody";
        assert!(acme_challenge(&tls, &peer(Scheme::Http), &get(unknown))
            .await
            .is_none());
    }
}
