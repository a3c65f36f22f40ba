//! Per-location request handling, in a fixed order: the IP allow list,
//! the rate limit, the declared body size, a CORS preflight answered by
//! dockhand (browsers send them without credentials), basic auth, (the
//! auth service, which `proxy` asks) and the redirect, before the
//! upstream; response header rules and CORS on the upstream's answer, then
//! its compression (the headers here, the body as `Compressed`). Decisions
//! only: what a refusal's status is, and how
//! the request reaches here, is `proxy`'s. A location without middlewares
//! never comes here (`Location::middlewares` is `None`).

mod basic_auth;
mod compress;
mod compressed_body;
mod cors;
mod rate_limit;
mod redirect;
mod response_headers;

pub use compressed_body::{Compressed, Encoder};
pub use rate_limit::{Counted, LimitersBuild, RateLimiter, RateLimiters};

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, ORIGIN};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};

use self::basic_auth::BasicAuthState;
use self::compress::Accepted;
use crate::config::middleware::RateLimit;
use crate::config::Middlewares;

/// A location's middlewares as served: its settings, and the state some
/// keep (a rate limit's buckets, basic auth's failed logins).
pub struct LocationMiddlewares {
    pub settings: Middlewares,
    limiter: Option<Arc<RateLimiter>>,
    basic_auth: Option<BasicAuthState>,
}

impl LocationMiddlewares {
    /// `limiter`: where the location's limiters keep their buckets.
    pub fn new(
        settings: Middlewares,
        limiter: impl Fn(Counted, &RateLimit) -> Arc<RateLimiter>,
    ) -> LocationMiddlewares {
        LocationMiddlewares {
            limiter: (settings.rate_limit.as_ref()).map(|limit| limiter(Counted::Requests, limit)),
            basic_auth: settings.basic_auth.clone().map(|auth| {
                BasicAuthState::new(auth, limiter(Counted::FailedLogins, &basic_auth::FAILURES))
            }),
            settings,
        }
    }
}

/// What the middlewares read of a request.
pub struct RequestFacts<'a> {
    /// The client's address as `--trusted-proxies` establish it.
    pub client: IpAddr,
    pub method: &'a Method,
    /// `http` or `https`, as the client reached dockhand.
    pub scheme: &'static str,
    /// The request's host, as sent (with its port, if any).
    pub host: &'a HeaderValue,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
}

/// Why a request is refused before its upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The client's address is not in `ip_allow`.
    NotAllowed,
    /// The client's bucket is empty; a token comes after the wait.
    RateLimited(Duration),
    /// No credentials, or wrong ones; the challenge to answer with.
    Unauthorized(HeaderValue),
    /// The declared body is over `max_body_size`.
    BodyTooLarge,
}

/// What happens to a request, before its upstream.
#[derive(Debug)]
pub enum Verdict {
    /// On to the upstream; what its answer will need.
    Forward(Asked),
    Refuse(Refusal),
    /// Answered by dockhand: a redirect, a CORS preflight.
    Answer(Response<Bytes>),
}

/// What the response rules need of the request, kept past it.
#[derive(Debug, Default)]
pub struct Asked {
    /// The request's `Origin`, when the location has CORS.
    origin: Option<HeaderValue>,
    /// The credentials basic auth checked stay with dockhand.
    pub strip_authorization: bool,
    /// Which of the location's encodings the client takes, if it compresses.
    accepted: Accepted,
}

/// Runs the request side, in the documented order.
pub async fn before_upstream(
    location: &LocationMiddlewares,
    request: &RequestFacts<'_>,
) -> Verdict {
    let middlewares = &location.settings;
    if let Some(networks) = &middlewares.ip_allow {
        if !networks.iter().any(|net| net.contains(&request.client)) {
            return Verdict::Refuse(Refusal::NotAllowed);
        }
    }
    if let Some(limiter) = &location.limiter {
        if let Err(wait) = limiter.take(request.client, request.headers, Instant::now()) {
            return Verdict::Refuse(Refusal::RateLimited(wait));
        }
    }
    if let Some(limit) = middlewares.max_body_size {
        if declared_size(request.headers).is_some_and(|size| size > limit) {
            return Verdict::Refuse(Refusal::BodyTooLarge);
        }
    }
    let mut asked = Asked::default();
    if let Some(cors) = &middlewares.cors {
        // Before any login: browsers send preflights without credentials.
        if let Some(preflight) = cors::preflight(cors, request) {
            return Verdict::Answer(preflight);
        }
        asked.origin = request.headers.get(ORIGIN).cloned();
    }
    if let Some(auth) = &location.basic_auth {
        if let Err(refusal) = auth.check(request.client, request.headers).await {
            return Verdict::Refuse(refusal);
        }
        asked.strip_authorization = !auth.forwards_credentials();
    }
    if let Some(offered) = &middlewares.compress {
        asked.accepted = compress::accepted(request.method, request.headers, offered);
    }
    Verdict::Forward(asked)
}

/// The redirect, when the location has one and it matches; it comes after
/// every check and the auth service.
pub fn redirect(
    location: &LocationMiddlewares,
    request: &RequestFacts<'_>,
) -> Option<Response<Bytes>> {
    redirect::answer(location.settings.redirect.as_ref()?, request)
}

/// Runs the response side on the upstream's answer.
pub fn on_response(location: &LocationMiddlewares, asked: &Asked, headers: &mut HeaderMap) {
    let middlewares = &location.settings;
    response_headers::apply(&middlewares.response_headers, headers);
    if let (Some(cors), Some(origin)) = (&middlewares.cors, &asked.origin) {
        cors::allow(cors, origin, headers);
    }
}

/// After `on_response`: the encoder of the answer's body when it is to be
/// compressed (its headers already say so).
pub fn compression(asked: &Asked, status: StatusCode, headers: &mut HeaderMap) -> Option<Encoder> {
    compress::apply(asked.accepted, status, headers)
}

/// The `Content-Length` a request, or an upstream's answer, declares, if
/// any (the framing was checked before: a bad one never gets here).
fn declared_size(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A response of dockhand's own with no body.
fn empty_answer(status: http::StatusCode) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests;
