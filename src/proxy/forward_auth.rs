//! `forward_auth`: before its upstream, a request is asked about at the
//! location's auth service (Authelia, Authentik, oauth2-proxy), with the
//! client's headers (its session cookie) and what the request was, as
//! `X-Forwarded-Method`, `-Proto`, `-Host`, `-Uri` and `-For`, and never
//! its body. A `2xx` lets it through, with the auth answer's
//! `response_headers` (`Remote-User`) set on it; any other answer (the
//! login redirect with its cookies, a `401`) goes back to the client as
//! the auth service sent it. If the service can't be asked, the request
//! never goes through: `502 forward_auth_failed` or `504
//! forward_auth_timeout`.

use std::time::Duration;

use http::header::{self, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{HeaderMap, Method, Response};

use super::answer::plain_answer;
use super::attempt::Head;
use super::body::ProxyBody;
use super::client_identity::{set_client_identity, PeerInfo};
use super::error::{ErrorKind, ProxyError};
use super::headers;
use super::request_body::UpstreamBody;
use crate::config::middleware::ForwardAuth;
use crate::connect::SetFields;
use crate::connect::UpstreamClient;
use crate::middleware::RequestFacts;
use crate::routes::ForwardAuthRoute;

const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");

/// The auth service's verdict. Held only until it is matched.
#[allow(clippy::large_enum_variant)]
pub enum AuthAnswer {
    /// Through, with these headers set on the request to the upstream.
    Allowed(Vec<(HeaderName, HeaderValue)>),
    /// The client gets the auth service's answer.
    Denied(Response<ProxyBody>),
}

/// Asks the auth service about the request through `client`'s pools,
/// waiting at most `timeout` for its answer's head (`--upstream-timeout`).
pub async fn ask(
    client: &UpstreamClient<UpstreamBody>,
    timeout: Duration,
    peer: &PeerInfo,
    auth: &ForwardAuthRoute,
    asking: &RequestFacts<'_>,
) -> Result<AuthAnswer, ProxyError> {
    let Some(endpoint) = auth.upstreams.pick(&[]) else {
        let cause = format!("no address for {}", auth.settings.target);
        return Err(ProxyError::new(ErrorKind::ForwardAuthFailed, cause));
    };
    let head = Head {
        method: Method::GET,
        path: auth.path.clone(),
        headers: auth_request_headers(auth, peer, asking),
        set: SetFields::default(),
    };
    let in_flight = endpoint.state.start_request();
    let sent = client.send(&endpoint, &head, UpstreamBody::Empty);
    let sent = tokio::time::timeout(timeout, sent);
    let response = match sent.await {
        Err(_) => {
            let cause = format!("no answer within {:?} (--upstream-timeout)", timeout);
            return Err(ProxyError::new(ErrorKind::ForwardAuthTimeout, cause));
        }
        Ok(Err(error)) => return Err(ProxyError::new(ErrorKind::ForwardAuthFailed, error)),
        Ok(Ok(response)) => response,
    };
    if response.status().is_success() {
        let copied = auth
            .settings
            .response_headers
            .iter()
            .flat_map(|name| {
                let values = response.headers().get_all(name).iter();
                values.map(move |value| (name.clone(), value.clone()))
            })
            .collect();
        return Ok(AuthAnswer::Allowed(copied));
    }
    let mut answer = plain_answer(response, timeout)
        .map_err(|error| ProxyError::new(ErrorKind::ForwardAuthFailed, error))?;
    headers::remove_hop_by_hop(answer.headers_mut());
    Ok(AuthAnswer::Denied(
        answer.map(|body| ProxyBody::upstream(body, in_flight)),
    ))
}

/// The client's headers (but those of this hop and of a body), the auth
/// service's `Host`, who the client is as for any upstream (`X-Forwarded-For`,
/// `-Proto`, `-Host`, `Forwarded`, `X-Real-IP`: a peer's claims kept only
/// from `--trusted-proxies`), and what the request was (`X-Forwarded-Method`
/// and `-Uri`: a trusted peer's own kept only with `trust_forward_header`).
fn auth_request_headers(
    auth: &ForwardAuthRoute,
    peer: &PeerInfo,
    asking: &RequestFacts<'_>,
) -> HeaderMap {
    let mut sent = asking.headers.clone();
    headers::remove_hop_by_hop(&mut sent);
    for name in [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::EXPECT,
    ] {
        sent.remove(name);
    }
    let mut identity = SetFields::default();
    set_client_identity(&mut sent, &mut identity, peer, Some(asking.host));
    identity.apply(&mut sent);
    let keep_claims = auth.settings.trust_forward_header && peer.is_trusted();
    let uri = asking
        .uri
        .path_and_query()
        .map_or("/", PathAndQuery::as_str);
    let told = [
        (
            X_FORWARDED_METHOD,
            HeaderValue::from_str(asking.method.as_str()),
        ),
        (X_FORWARDED_URI, HeaderValue::from_str(uri)),
    ];
    for (name, value) in told {
        let Ok(value) = value else { continue };
        if keep_claims {
            sent.entry(name).or_insert(value);
        } else {
            sent.insert(name, value);
        }
    }
    if let Some(host) = &auth.host {
        sent.insert(header::HOST, host.clone());
    }
    sent
}

/// Sets what the auth service allowed on the request to the upstream,
/// after removing the client's own copies of those headers: a client
/// must never claim to be `Remote-User` itself.
pub fn set_allowed(
    auth: &ForwardAuth,
    allowed: Vec<(HeaderName, HeaderValue)>,
    headers: &mut HeaderMap,
) {
    for name in &auth.response_headers {
        headers.remove(name);
    }
    for (name, value) in allowed {
        headers.append(name, value);
    }
}
