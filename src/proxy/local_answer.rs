//! Answers dockhand gives itself instead of forwarding: today the ACME
//! HTTP-01 challenge (RFC 8555 §8.3), asked by the CA on plain HTTP for any
//! host while an order waits for it. It comes before routing, so a host
//! that is not served yet, or that redirects to HTTPS, can still prove it.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response};

use super::body::ProxyBody;
use super::client_identity::{PeerInfo, Scheme};
use crate::tls::TlsState;

/// The key authorization for a pending HTTP-01 challenge's path, on plain
/// HTTP `GET`; `None` for every other request.
pub fn acme_challenge<B>(
    tls: &TlsState,
    peer: &PeerInfo,
    request: &Request<B>,
) -> Option<Response<ProxyBody>> {
    if peer.scheme != Scheme::Http || request.method() != http::Method::GET {
        return None;
    }
    let key_authorization = tls.challenges.http01_answer(request.uri().path())?;
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

    #[test]
    fn only_a_pending_token_over_plain_http_is_answered() {
        let tls = TlsState::default();
        tls.challenges.set_http01("tok", "tok.print");
        let path = "/.well-known/acme-challenge/tok";
        let answer = acme_challenge(&tls, &peer(Scheme::Http), &get(path)).unwrap();
        assert_eq!(answer.status(), 200);
        assert!(acme_challenge(&tls, &peer(Scheme::Https), &get(path)).is_none());
        let other = "/.well-known/acme-challenge/other";
        assert!(acme_challenge(&tls, &peer(Scheme::Http), &get(other)).is_none());
        let post = Request::post(path).body(()).unwrap();
        assert!(acme_challenge(&tls, &peer(Scheme::Http), &post).is_none());
    }
}
