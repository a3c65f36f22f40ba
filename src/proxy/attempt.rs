//! One request's tries: what its location decided for it (`RequestPlan`: the
//! rewritten path, the retry policy, the protocol switch forwarded), the head every try sends (`Head`), the
//! body of each try and whether it can be sent again (`Sending`), and whether
//! another try is made after an answer or a failure (`Tries`). Sending and
//! choosing endpoints is `forward`'s.

use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, StatusCode, Uri, Version};
use prometheus_client::metrics::counter::Counter;

use super::client_body::{ClientIncoming, ClientStream};
use super::error::{ErrorKind, ProxyError};
use super::framing;
use super::request_body::{keep_small, BodyClaim, KeptBody, SmallBody, UpstreamBody};
use super::rewrite::rewrite_path;
use super::upgrade;
use crate::config::Retry;
use crate::connect::SetFields;
use crate::connect::{authority_is_address, Outgoing, TryHead};
use crate::http1::header_maps;
use crate::routes::Location;
use crate::upstream::{Endpoint, Transport};

/// The first pause before sending a request again to an upstream that moved,
/// doubling up to the most; all within `--upstream-wait`.
const FIRST_REPLAY_PAUSE: Duration = Duration::from_millis(10);
const MAX_REPLAY_PAUSE: Duration = Duration::from_millis(200);

/// What the matched location decided for the whole request.
pub(super) struct RequestPlan {
    pub(super) follows_moves: bool,
    pub(super) retry: Option<Arc<Retry>>,
    /// The path and query the upstream receives.
    pub(super) path: PathAndQuery,
    /// The `Upgrade` sent upstream: the protocols asked for that the
    /// location allows. `None`: the request goes as a plain one.
    pub(super) upgrade: Option<HeaderValue>,
    /// Its host's `Strict-Transport-Security`, for TLS clients.
    pub(super) hsts: Option<HeaderValue>,
    /// The most body bytes a request may send (`max_body_size`).
    pub(super) max_body_size: Option<u64>,
}

impl RequestPlan {
    /// `asked_upgrade`: the protocols the client asks to switch to, if any.
    pub(super) fn of(
        location: &Location,
        client_uri: &Uri,
        asked_upgrade: Option<&HeaderValue>,
    ) -> Result<RequestPlan, ProxyError> {
        let original = match client_uri.path_and_query() {
            // An absolute-form target with a query and no path
            // (`http://a?q`): the origin form starts with `/` (RFC 9112 §3.2.1).
            Some(path) if !path.as_str().starts_with('/') => {
                PathAndQuery::try_from(format!("/{}", path.as_str()))
                    .unwrap_or_else(|_| PathAndQuery::from_static("/"))
            }
            Some(path) => path.clone(),
            None => PathAndQuery::from_static("/"),
        };
        let path = match &location.rewrite {
            Some(rewrite) => rewrite_path(rewrite, &original)
                .map_err(|error| ProxyError::new(ErrorKind::RewrittenPathTooLong, error))?,
            None => original,
        };
        Ok(RequestPlan {
            follows_moves: location.follows_moves(),
            retry: location.retry.clone(),
            path,
            upgrade: asked_upgrade.and_then(|asked| upgrade::forwarded(asked, &location.upgrades)),
            hsts: location.hsts.clone(),
            max_body_size: location
                .middlewares
                .as_ref()
                .and_then(|middlewares| middlewares.settings.max_body_size),
        })
    }
}

/// The request head as every try sends it, kept for all of them: the own
/// HTTP/1.1 exchange writes it from here with the endpoint's fields, and
/// `request_to` makes a request of it for hyper's client.
pub(super) struct Head<'a> {
    pub(super) method: Method,
    pub(super) path: PathAndQuery,
    pub(super) headers: HeaderMap,
    /// Set in place of the client's fields of their names.
    pub(super) set: SetFields<'a>,
}

/// The client's header map is kept for the thread's next request.
impl Drop for Head<'_> {
    fn drop(&mut self) {
        header_maps::give_back(std::mem::take(&mut self.headers));
    }
}

impl TryHead for Head<'_> {
    fn outgoing<'a>(&'a self, added: &'a [(HeaderName, HeaderValue)]) -> Outgoing<'a> {
        Outgoing {
            method: &self.method,
            target: self.path.as_str(),
            headers: &self.headers,
            set: self.set.as_ref(),
            added,
        }
    }

    fn request_to<B: http_body::Body>(&self, endpoint: &Endpoint, body: B) -> Request<B> {
        let more = self.set.len() + endpoint.config.headers_add.len();
        let mut headers = header_maps::copy_of(&self.headers, more);
        self.set.apply(&mut headers);
        for (name, value) in &endpoint.config.headers_add {
            headers.insert(name.clone(), value.clone());
        }
        // HTTP/2 sends the URI's authority as `:authority`, which upstreams
        // read as the host: it must be the Host sent, not the address.
        let authority = if authority_is_address(endpoint) {
            endpoint.authority.clone()
        } else {
            headers
                .get(header::HOST)
                .and_then(|host| Authority::try_from(host.as_bytes()).ok())
                .unwrap_or_else(|| endpoint.authority.clone())
        };
        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(match endpoint.transport {
            Transport::Tls(_) => Scheme::HTTPS,
            Transport::Http1 | Transport::H2c => Scheme::HTTP,
        });
        uri.authority = Some(authority);
        uri.path_and_query = Some(self.path.clone());
        let mut request = Request::new(body);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = Uri::from_parts(uri).expect("scheme, authority and path make a URI");
        *request.version_mut() = match endpoint.transport {
            Transport::H2c => Version::HTTP_2,
            // Over TLS the client speaks what ALPN chose.
            Transport::Http1 | Transport::Tls(_) => Version::HTTP_11,
        };
        *request.headers_mut() = headers;
        framing::frame_request(&mut request);
        request
    }
}

/// The body of each try, and whether another try can still have one.
pub(super) enum Sending {
    /// No body: any try can be made.
    Bodyless,
    /// Kept whole: any try can be made, also after an answer.
    Kept(KeptBody),
    /// Streamed from the client: another try only if no upstream read it.
    Streamed {
        /// The body the next try sends: the first, or one taken back.
        next: Option<UpstreamBody>,
        claim: BodyClaim,
    },
}

impl Sending {
    /// Fails when a body that is read whole first can't be read (the
    /// client's fault; no upstream was tried).
    pub(super) async fn new(
        body: ClientIncoming,
        bodyless: bool,
        method: &Method,
        route: &RequestPlan,
        bytes_in: &Counter,
        client_body_timeout: Duration,
    ) -> Result<Sending, ProxyError> {
        if bodyless {
            return Ok(Sending::Bodyless);
        }
        let body = ClientStream::new(body, client_body_timeout)
            .counting_into(bytes_in.clone())
            .limited_to(route.max_body_size);
        let retries_statuses = route
            .retry
            .as_ref()
            .is_some_and(|retry| !retry.on_statuses.is_empty() && retry.attempts > 0);
        let (next, claim) = if retries_statuses && resent_after_answer(method) {
            match keep_small(body).await? {
                SmallBody::Whole(kept) => return Ok(Sending::Kept(kept)),
                SmallBody::TooLarge(rest) => UpstreamBody::from_stream(rest),
            }
        } else {
            UpstreamBody::streamed(body)?
        };
        Ok(Sending::Streamed {
            next: Some(next),
            claim,
        })
    }

    pub(super) fn body_for_try(&mut self) -> UpstreamBody {
        match self {
            Sending::Bodyless => UpstreamBody::Empty,
            Sending::Kept(body) => UpstreamBody::kept(body),
            Sending::Streamed { next, .. } => next.take().unwrap_or(UpstreamBody::Empty),
        }
    }

    /// Whether the next try can send the whole body again; takes it back
    /// from the last try when that is still possible.
    pub(super) fn can_resend(&mut self) -> bool {
        match self {
            Sending::Bodyless | Sending::Kept(_) => true,
            Sending::Streamed { next, claim } => {
                if next.is_none() {
                    *next = claim.reclaim();
                }
                next.is_some()
            }
        }
    }

    /// Why reading the client's body failed during a try, if it did: a
    /// kept body was read whole before any.
    pub(super) fn client_failure(&self) -> Option<ProxyError> {
        match self {
            Sending::Streamed { claim, .. } => claim.failure().map(ProxyError::from),
            Sending::Bodyless | Sending::Kept(_) => None,
        }
    }

    /// Whether the try under way waits for the client's next body bytes.
    pub(super) fn waits_on_client(&self) -> bool {
        match self {
            Sending::Streamed { claim, .. } => claim.waits_on_client(),
            Sending::Bodyless | Sending::Kept(_) => false,
        }
    }

    /// Whether the request may be sent again after an upstream answered it.
    fn resendable_after_answer(&self, method: &Method) -> bool {
        matches!(self, Sending::Bodyless | Sending::Kept(_)) && resent_after_answer(method)
    }
}

/// Methods sent again after an answer with a status in `retry.on`.
fn resent_after_answer(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS
    )
}

/// Methods sent again when an upstream that moved may have lost the request
/// after receiving it.
fn idempotent(method: &Method) -> bool {
    resent_after_answer(method) || *method == Method::TRACE
}

pub(super) enum Again {
    No,
    /// The location's `retry`: another endpoint now.
    Retry,
    /// The upstream moved (container recreated, name re-pointed): wait for
    /// where it went.
    Follow,
}

pub(super) struct Tries {
    /// Tries the location's `retry` still allows.
    left: u8,
    follow_pause: Duration,
    /// Where the request was sent, in order.
    pub(super) tried: Vec<Arc<Endpoint>>,
}

impl Tries {
    pub(super) fn new(route: &RequestPlan) -> Tries {
        Tries {
            left: route.retry.as_ref().map_or(0, |retry| retry.attempts),
            follow_pause: FIRST_REPLAY_PAUSE,
            tried: Vec::new(),
        }
    }

    pub(super) fn after_answer(
        &mut self,
        route: &RequestPlan,
        sending: &Sending,
        method: &Method,
        status: StatusCode,
    ) -> Again {
        let Some(retry) = &route.retry else {
            return Again::No;
        };
        if self.left > 0
            && retry.on_statuses.contains(&status)
            && sending.resendable_after_answer(method)
        {
            self.left -= 1;
            return Again::Retry;
        }
        Again::No
    }

    /// Nothing was sent when connecting failed, so any request can be tried
    /// again (if its body is still there). A connection lost before an
    /// answer may have delivered the request: only a bodyless idempotent one
    /// is sent again, and only to an upstream that moves. An upstream that
    /// left while being connected to is followed whatever the location's
    /// settings: it is no longer one of its upstreams.
    pub(super) fn after_failure(
        &mut self,
        route: &RequestPlan,
        sending: &Sending,
        method: &Method,
        error: &ProxyError,
    ) -> Again {
        if error.is_upstream_left() {
            return Again::Follow;
        }
        if let Some(retry) = &route.retry {
            if self.left > 0 && retry.on_connect && error.is_connect_failure() {
                self.left -= 1;
                return Again::Retry;
            }
        }
        let lost_unanswered = error.is_lost_before_answer()
            && idempotent(method)
            && matches!(sending, Sending::Bodyless);
        if route.follows_moves && (error.is_connect_failure() || lost_unanswered) {
            return Again::Follow;
        }
        Again::No
    }

    pub(super) fn next_follow_pause(&mut self) -> Duration {
        let pause = self.follow_pause;
        self.follow_pause = (pause * 2).min(MAX_REPLAY_PAUSE);
        pause
    }
}
