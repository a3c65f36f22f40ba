//! One request, client to upstream and back: route it, choose an endpoint,
//! rewrite the path and headers, send it through the pool (again, to another
//! endpoint, when the location's `retry` or a moved upstream allows), and hand
//! back the response (or dockhand's own status). Protocol switches
//! (WebSocket) are spliced here.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::access_log::AccessRecord;
use super::body::ProxyBody;
use super::client::{
    authority_is_address, connect_error, ConnectError, UpstreamClient, UpstreamResponse,
};
use super::error::ProxyError;
use super::headers::{self, PeerInfo};
use super::request_body::{keep_small, BodyClaim, KeptBody, UpstreamBody};
use super::rewrite::rewrite_path;
use crate::config::Retry;
use crate::resolve::ResolveHints;
use crate::routes::{normalize_host, Location, RouteMiss, RouteTable, Router};
use crate::upstream::{Endpoint, InFlight, Transport};

/// Request heads larger than this are refused with `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The first pause before sending a request again to an upstream that moved,
/// doubling up to the most; all within `--upstream-wait`.
const FIRST_REPLAY_PAUSE: Duration = Duration::from_millis(10);
const MAX_REPLAY_PAUSE: Duration = Duration::from_millis(200);

/// How often a request waiting for a name's address asks for it again (the
/// resolver limits each name to one lookup per this interval anyway).
const NAME_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// What every request handler shares.
pub struct ProxyState {
    pub router: Arc<Router>,
    pub client: UpstreamClient,
    pub resolve_hints: Arc<dyn ResolveHints>,
    pub upstream_timeout: Duration,
    pub upstream_wait: Duration,
}

/// Answers one request; never fails: errors become dockhand's own statuses.
pub async fn handle(
    state: Arc<ProxyState>,
    peer: PeerInfo,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let mut record = Box::new(AccessRecord {
        started: Instant::now(),
        client: peer.address,
        method: request.method().clone(),
        host: client_host(&request),
        uri: request.uri().clone(),
        status: StatusCode::OK,
        upstream: None,
        error: None,
    });
    let response = match handle_inner(&state, &peer, request, &mut record).await {
        Ok((response, in_flight)) => response.map(|body| ProxyBody::upstream(body, in_flight)),
        Err(error) => {
            record.error = Some(error.reason());
            error.into_response()
        }
    };
    record.status = response.status();
    Ok(response.map(|body| body.with_record(record)))
}

async fn handle_inner(
    state: &ProxyState,
    peer: &PeerInfo,
    mut request: Request<Incoming>,
    record: &mut AccessRecord,
) -> Result<(UpstreamResponse, InFlight), ProxyError> {
    let host = record.host.clone().ok_or(ProxyError::MissingHost)?;
    if header_bytes(&request) > MAX_HEADER_BYTES {
        return Err(ProxyError::HeadersTooLarge);
    }
    let mut buffer = [0; crate::routes::MAX_HOST_LEN];
    let host_key = host
        .to_str()
        .ok()
        .and_then(|raw| normalize_host(raw, &mut buffer))
        .ok_or(ProxyError::MissingHost)?;
    let client_uri = record.uri.clone();
    let wanted = Wanted {
        host: host_key,
        uri: &client_uri,
        deadline: tokio::time::Instant::now() + state.upstream_wait,
    };
    let (first, route) = choose_endpoint(state, &wanted)
        .await?
        .ok_or(ProxyError::NoUpstream)?;

    let upgrade = headers::requested_upgrade(request.headers());
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    prepare_head(&mut parts.headers, peer, host.clone(), upgrade);
    let bodyless = http_body::Body::is_end_stream(&body);
    let head = Head {
        method: parts.method,
        path: route.path.clone(),
        headers: parts.headers,
    };
    let mut sending = Sending::new(body, bodyless, &head.method, &route).await;
    let mut tries = Tries {
        left: route.retry.as_ref().map_or(0, |retry| retry.attempts),
        follow_pause: FIRST_REPLAY_PAUSE,
        tried: Vec::new(),
    };

    let mut endpoint = first;
    let (mut response, in_flight) = loop {
        record.upstream = Some(endpoint.clone());
        let in_flight = endpoint.state.start_request();
        let request = head.request_to(&endpoint, sending.body_for_try());
        let result = send(state, &endpoint, request).await;
        tries.tried.push(endpoint.clone());
        let again = match &result {
            Ok(response) => tries.after_answer(&route, &sending, &head.method, response.status()),
            Err(error) => {
                note_failure(state, &endpoint, *error);
                tries.after_failure(&route, &sending, &head.method, *error)
            }
        };
        let next = match again {
            Again::No => None,
            // A body an upstream may have read can't be sent again (and
            // one it has not started reading is taken back from it).
            _ if !sending.can_resend() => None,
            Again::Retry => pick_now(&state.router, &wanted, &tries.tried)?,
            Again::Follow => {
                let pause = tries.next_follow_pause();
                follow_after_failure(state, &wanted, &tries.tried, pause).await?
            }
        };
        match next {
            Some(next) => {
                tracing::debug!(failed = %endpoint, next = %next, "request sent again");
                endpoint = next;
            }
            None => break (result?, in_flight),
        }
    };

    // The client's connection has its own version; the upstream's is not passed on.
    *response.version_mut() = Version::HTTP_11;
    let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    let upstream_upgrade = switched
        .then(|| response.headers().get(header::UPGRADE).cloned())
        .flatten();
    headers::remove_hop_by_hop(response.headers_mut());
    if let (Some(client_upgrade), Some(protocol)) = (client_upgrade, upstream_upgrade) {
        headers::set_upgrade(response.headers_mut(), protocol);
        let upstream_upgrade = hyper::upgrade::on(&mut response);
        tokio::spawn(splice(
            client_upgrade,
            upstream_upgrade,
            endpoint.state.start_request(),
        ));
    }
    Ok((response, in_flight))
}

/// What a request is routed by, and until when it may wait for an upstream.
struct Wanted<'a> {
    host: &'a str,
    /// The client's URI: its path chooses the location.
    uri: &'a Uri,
    deadline: tokio::time::Instant,
}

/// What the matched location decided for the whole request.
struct Route {
    follows_moves: bool,
    retry: Option<Retry>,
    /// The path and query the upstream receives.
    path: PathAndQuery,
}

impl Route {
    fn of(location: &Location, client_uri: &Uri) -> Result<Route, ProxyError> {
        let original = client_uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let path = match &location.rewrite {
            Some(rewrite) => {
                rewrite_path(rewrite, &original).map_err(|_| ProxyError::RewrittenPathTooLong)?
            }
            None => original,
        };
        Ok(Route {
            follows_moves: location.follows_moves(),
            retry: location.retry.clone(),
            path,
        })
    }
}

/// The request head as every try sends it; what differs per endpoint is
/// added by `request_to`.
struct Head {
    method: Method,
    path: PathAndQuery,
    headers: HeaderMap,
}

impl Head {
    fn request_to(&self, endpoint: &Endpoint, body: UpstreamBody) -> Request<UpstreamBody> {
        let mut headers = self.headers.clone();
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
        request
    }
}

/// The body of each try, and whether another try can still have one.
enum Sending {
    /// No body: any try can be made.
    Bodyless,
    /// Kept whole: any try can be made, also after an answer.
    Kept(KeptBody),
    /// Streamed from the client: another try only if no upstream read it.
    Streamed {
        first: Option<UpstreamBody>,
        claim: BodyClaim,
        reclaimed: Option<UpstreamBody>,
    },
}

impl Sending {
    async fn new(body: Incoming, bodyless: bool, method: &Method, route: &Route) -> Sending {
        if bodyless {
            return Sending::Bodyless;
        }
        let retries_statuses = route
            .retry
            .as_ref()
            .is_some_and(|retry| !retry.on_statuses.is_empty() && retry.attempts > 0);
        let streamed = if retries_statuses && resent_after_answer(method) {
            match keep_small(body).await {
                Ok(kept) => return Sending::Kept(kept),
                Err(rest) => UpstreamBody::from_stream(rest),
            }
        } else {
            UpstreamBody::streamed(body)
        };
        Sending::Streamed {
            first: Some(streamed.0),
            claim: streamed.1,
            reclaimed: None,
        }
    }

    fn body_for_try(&mut self) -> UpstreamBody {
        match self {
            Sending::Bodyless => UpstreamBody::Empty,
            Sending::Kept(body) => UpstreamBody::kept(body),
            Sending::Streamed {
                first, reclaimed, ..
            } => first
                .take()
                .or_else(|| reclaimed.take())
                .unwrap_or(UpstreamBody::Empty),
        }
    }

    /// Whether the next try can send the whole body again; takes it back
    /// from the last try when that is still possible.
    fn can_resend(&mut self) -> bool {
        match self {
            Sending::Bodyless | Sending::Kept(_) => true,
            Sending::Streamed {
                claim, reclaimed, ..
            } => {
                if reclaimed.is_none() {
                    *reclaimed = claim.reclaim();
                }
                reclaimed.is_some()
            }
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

enum Again {
    No,
    /// The location's `retry`: another endpoint now.
    Retry,
    /// The upstream moved (container recreated, name re-pointed): wait for
    /// where it went.
    Follow,
}

struct Tries {
    /// Tries the location's `retry` still allows.
    left: u8,
    follow_pause: Duration,
    tried: Vec<Arc<Endpoint>>,
}

impl Tries {
    fn after_answer(
        &mut self,
        route: &Route,
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
    /// is sent again, and only to an upstream that moves.
    fn after_failure(
        &mut self,
        route: &Route,
        sending: &Sending,
        method: &Method,
        error: ProxyError,
    ) -> Again {
        if let Some(retry) = &route.retry {
            if self.left > 0 && retry.on_connect && error.is_connect_failure() {
                self.left -= 1;
                return Again::Retry;
            }
        }
        let lost_unanswered = error == ProxyError::BadResponse
            && idempotent(method)
            && matches!(sending, Sending::Bodyless);
        if route.follows_moves && (error.is_connect_failure() || lost_unanswered) {
            return Again::Follow;
        }
        Again::No
    }

    fn next_follow_pause(&mut self) -> Duration {
        let pause = self.follow_pause;
        self.follow_pause = (pause * 2).min(MAX_REPLAY_PAUSE);
        pause
    }
}

/// A failed connect counts against the endpoint's health, and makes the
/// name it came from be resolved again.
fn note_failure(state: &ProxyState, endpoint: &Endpoint, error: ProxyError) {
    if !error.is_connect_failure() {
        return;
    }
    endpoint.state.record(false);
    if let Some(name) = endpoint.resolved_from() {
        state.resolve_hints.failed_connect(name);
    }
}

/// Picks an endpoint for the request's location. When there is none, has
/// its names resolved again (every `NAME_RETRY_INTERVAL` while it waits) and
/// waits for the route table to change, until the deadline (`Ok(None)`). No
/// host or location fails at once.
async fn choose_endpoint(
    state: &ProxyState,
    wanted: &Wanted<'_>,
) -> Result<Option<(Arc<Endpoint>, Route)>, ProxyError> {
    let mut changes = None;
    loop {
        let has_names = {
            let table = state.router.current();
            let location = find(&table, wanted)?;
            if let Some(endpoint) = location.upstreams.pick(&[]) {
                return Ok(Some((endpoint, Route::of(location, wanted.uri)?)));
            }
            for name in location.upstreams.names() {
                state.resolve_hints.no_upstream(name);
            }
            !location.upstreams.names().is_empty()
        };
        let changes = match &mut changes {
            // Subscribe, then look once more, so a swap in between is not missed.
            None => {
                changes = Some(state.router.subscribe());
                continue;
            }
            Some(changes) => changes,
        };
        let now = tokio::time::Instant::now();
        let wake = match has_names {
            true => (now + NAME_RETRY_INTERVAL).min(wanted.deadline),
            false => wanted.deadline,
        };
        match tokio::time::timeout_at(wake, changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Ok(None),
            Err(_) if wake >= wanted.deadline => return Ok(None),
            // Ask again: the name's new address may just have appeared.
            Err(_) => {}
        }
    }
}

/// After an upstream that moves could not be reached: another endpoint at
/// once if the location has one not tried; else, once the table changes or
/// `pause` passes (a container that has just started may not listen yet),
/// any endpoint, waiting for one until the deadline.
async fn follow_after_failure(
    state: &ProxyState,
    wanted: &Wanted<'_>,
    tried: &[Arc<Endpoint>],
    pause: Duration,
) -> Result<Option<Arc<Endpoint>>, ProxyError> {
    let untried = pick_now(&state.router, wanted, tried)?
        .filter(|endpoint| !tried.iter().any(|t| t.same_place(endpoint)));
    if untried.is_some() {
        return Ok(untried);
    }
    let now = tokio::time::Instant::now();
    if now >= wanted.deadline {
        return Ok(None);
    }
    let mut changes = state.router.subscribe();
    let _ = tokio::time::timeout_at((now + pause).min(wanted.deadline), changes.changed()).await;
    Ok(choose_endpoint(state, wanted)
        .await?
        .map(|(endpoint, _)| endpoint))
}

/// The location's next endpoint, preferring those not `tried`; `Ok(None)`
/// when it has none.
fn pick_now(
    router: &Router,
    wanted: &Wanted<'_>,
    tried: &[Arc<Endpoint>],
) -> Result<Option<Arc<Endpoint>>, ProxyError> {
    let table = router.current();
    Ok(find(&table, wanted)?.upstreams.pick(tried))
}

fn find<'t>(table: &'t RouteTable, wanted: &Wanted<'_>) -> Result<&'t Location, ProxyError> {
    table
        .find(wanted.host, wanted.uri.path())
        .map_err(|miss| match miss {
            RouteMiss::NoHost => ProxyError::NoHost,
            RouteMiss::NoLocation => ProxyError::NoLocation,
        })
}

async fn send(
    state: &ProxyState,
    endpoint: &Endpoint,
    request: Request<UpstreamBody>,
) -> Result<UpstreamResponse, ProxyError> {
    let sent = state.client.send(endpoint, request);
    match tokio::time::timeout(state.upstream_timeout, sent).await {
        Err(_) => Err(ProxyError::UpstreamTimeout),
        Ok(Err(error)) => Err(classify(&error)),
        Ok(Ok(response)) => Ok(response),
    }
}

/// The host the client asked for: the URI's authority (HTTP/2, absolute-form) or `Host`.
fn client_host(request: &Request<Incoming>) -> Option<HeaderValue> {
    match request.uri().authority() {
        Some(authority) => HeaderValue::from_str(authority.as_str()).ok(),
        None => request.headers().get(header::HOST).cloned(),
    }
}

/// Size of the request head as sent: each header line with its `: ` and CRLF.
fn header_bytes<B>(request: &Request<B>) -> usize {
    request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// Sets the headers every upstream sees, whichever endpoint is chosen.
fn prepare_head(
    headers: &mut HeaderMap,
    peer: &PeerInfo,
    host: HeaderValue,
    upgrade: Option<HeaderValue>,
) {
    let wants_trailers = headers::accepts_trailers(headers);
    headers::remove_hop_by_hop(headers);
    if wants_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(protocol) = upgrade {
        headers::set_upgrade(headers, protocol);
    }
    headers::set_forwarded(headers, peer, Some(&host), "http");
    // The upstream sees the client's Host, never the address it was sent to
    // (unless the upstream's `headers.add` sets one).
    headers.insert(header::HOST, host);
}

fn classify(error: &hyper_util::client::legacy::Error) -> ProxyError {
    match connect_error(error) {
        Some(ConnectError::Refused) => ProxyError::ConnectRefused,
        Some(ConnectError::TimedOut) => ProxyError::ConnectTimeout,
        Some(ConnectError::Unavailable) => ProxyError::NoUpstream,
        Some(_) => ProxyError::ConnectFailed,
        None if error.is_connect() => ProxyError::ConnectFailed,
        None => ProxyError::BadResponse,
    }
}

/// Copies bytes both ways between the client and the upstream once both sides
/// have switched protocols; ends when either side closes. The connection
/// counts as in flight to its upstream until then.
async fn splice(
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    _in_flight: InFlight,
) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(pair) => pair,
        Err(error) => {
            tracing::debug!(%error, "protocol switch failed");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let mut upstream = TokioIo::new(upstream);
    if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(%error, "upgraded connection ended");
    }
}
