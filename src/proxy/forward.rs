//! One request, client to upstream and back: route it, choose an endpoint,
//! set the headers, send it through the pool (again, to another endpoint,
//! when the location's `retry` or a moved upstream allows: `attempt` decides),
//! and hand back the response (or dockhand's own status). Protocol switches
//! (WebSocket) the location allows are spliced here (`upgrade` decides).

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::client_body::ClientIncoming;
use futures_util::FutureExt;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri};

use super::access_log::AccessRecord;
use super::answer::checked_answer;
use super::attempt::{Again, Head, RequestPlan, Sending, Tries};
use super::body::ProxyBody;
use super::client_identity::{set_client_identity, PeerInfo, Scheme};
use super::error::{find_source, ErrorKind, ProxyError};
use super::forward_auth::{self, AuthAnswer};
use super::framing;
use super::head_wait::{HeadWait, Waited};
use super::headers;
use super::host;
use super::kept_timer::KeptTimer;
use super::local_answer;
use super::request_body::UpstreamBody;
use super::send_timeout::ClientCut;
use super::to_https;
use super::upgrade;
use crate::connect::SetFields;
use crate::connect::{ConnectError, ExchangeError, SendError, UpstreamClient, UpstreamResponse};
use crate::kept_box::KeptBox;
use crate::metrics::{LocationCounters, Metrics};
use crate::middleware::{self, Asked, LocationMiddlewares, Refusal, RequestFacts, Verdict};
use crate::resolve::ResolveHints;
use crate::routes::{ForwardAuthRoute, Location, RouteMiss, RouteTable, Router};
use crate::tls::TlsState;
use crate::upstream::Endpoint;

/// Request heads larger than this are refused with `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How often a request waiting for a name's address asks for it again (the
/// resolver limits each name to one lookup per this interval anyway).
const NAME_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// What every request handler shares.
pub struct ProxyState {
    pub router: Arc<Router>,
    pub client: UpstreamClient<UpstreamBody>,
    pub resolve_hints: Arc<dyn ResolveHints>,
    pub upstream_timeout: Duration,
    pub upstream_wait: Duration,
    pub client_body_timeout: Duration,
    pub metrics: Arc<Metrics>,
    /// The certificates served and ACME's challenge answers (empty when
    /// HTTPS is off): plain HTTP asks it whether to redirect.
    pub tls: Arc<TlsState>,
    /// The HTTPS listener's port, where plain HTTP is redirected; `None`
    /// (no HTTPS listener): nothing is redirected.
    pub https_port: Option<u16>,
}

/// Answers one request; never fails: errors become dockhand's own statuses.
/// For a server whose answers must own what they use (hyper's).
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would hold the request twice (see `answer`)"
)]
pub fn handle(
    state: Arc<ProxyState>,
    peer: Arc<PeerInfo>,
    client_cut: Arc<ClientCut>,
    request: Request<ClientIncoming>,
) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'static {
    async move {
        let head_timer = pin!(KeptTimer::new(state.upstream_timeout));
        answer(&state, &peer, client_cut, request, head_timer).await
    }
}

/// `handle` for a server that keeps the connection's shares itself (the
/// own HTTP/1.1 server): borrowing them costs no count of each per request.
/// `head_timer` times the wait for each try's response head; a connection
/// lends the same one to each of its requests (see `head_wait`).
///
/// Not an `async fn`, nor is `handle_inner`: an `async fn` keeps its
/// argument and the copy it makes of it side by side, and the request is
/// the largest of them; the block holds it once.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would hold the request twice"
)]
pub fn answer<'a>(
    state: &'a ProxyState,
    peer: &'a PeerInfo,
    client_cut: Arc<ClientCut>,
    request: Request<ClientIncoming>,
    head_timer: Pin<&'a mut KeptTimer>,
) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'a {
    async move {
        let mut record = KeptBox::new(AccessRecord {
            started: Instant::now(),
            client: peer.address,
            client_cut,
            method: request.method().clone(),
            host: host::claimed(&request),
            uri: request.uri().clone(),
            status: StatusCode::OK,
            location: None,
            upstream: None,
            attempt: 0,
            upstream_ms: None,
            error: None,
            cause: None,
            counters: None,
        });
        let response = match local_answer::acme_challenge(&state.tls, peer, &request).await {
            Some(answer) => answer,
            None => match handle_inner(state, peer, request, &mut record, head_timer).await {
                Ok(response) => response,
                Err(error) => {
                    state.metrics.error(error.reason());
                    if let Some(feature) = error.refused_by() {
                        let counters = record.counters_or(state.metrics.unmatched());
                        state.metrics.refused(counters.host().clone(), feature);
                    }
                    record.error = Some(error.reason());
                    record.cause = error.cause_text();
                    error.into_response(ProxyBody::message)
                }
            },
        };
        record.status = response.status();
        if record.counters.is_none() {
            record.counters = Some(state.metrics.unmatched().clone());
        }
        Ok(response.map(|body| body.with_record(record)))
    }
}

#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would hold the request twice (see `handle`)"
)]
fn handle_inner<'a>(
    state: &'a ProxyState,
    peer: &'a PeerInfo,
    mut request: Request<ClientIncoming>,
    record: &'a mut AccessRecord,
    mut head_timer: Pin<&'a mut KeptTimer>,
) -> impl Future<Output = Result<Response<ProxyBody>, ProxyError>> + Send + 'a {
    async move {
        framing::check_request_codings(request.headers())?;
        let host = host::requested(&request)?;
        if header_bytes(&request) > MAX_HEADER_BYTES {
            return Err(ErrorKind::HeadersTooLarge.into());
        }
        let client_uri = record.uri.clone();
        let asked_upgrade = upgrade::asked(request.headers());
        let wanted = Wanted {
            host: &host::match_key(&host)?,
            uri: &client_uri,
            upgrade: asked_upgrade.as_ref(),
            // From the request's start, read once for the record.
            deadline: record.started + state.upstream_wait,
        };
        if let Some(redirect) = redirect_to_https(state, peer, &host, &wanted, record) {
            return Ok(redirect);
        }
        let looked = look(state, &wanted)?;
        let mut answer_rules = match looked.middlewares {
            Some(guarded) => {
                record.location = Some(guarded.location.clone());
                record.counters = Some(guarded.counters.clone());
                let facts = RequestFacts {
                    client: peer.client_ip(request.headers()),
                    method: request.method(),
                    scheme: peer.scheme.as_str(),
                    host: &host,
                    uri: &client_uri,
                    headers: request.headers(),
                };
                // Boxed: only locations with middlewares carry its state.
                let asked = match Box::pin(before_upstream(&guarded, peer, &facts, state)).await? {
                    Ahead::Forward(asked) => asked,
                    Ahead::Answer(answer) => return Ok(answer),
                };
                Some((guarded, asked))
            }
            None => None,
        };
        // Taken straight into what it is kept as, with no value between
        // (each one more place the request's state is written to); the
        // location's names go into the record, not copied (a count on
        // memory every worker writes).
        let Chosen {
            endpoint: first,
            plan: route,
            location,
            counters,
        } = match looked.chosen {
            Some(chosen) => chosen,
            None => match choose_endpoint(state, &wanted).await? {
                Some(chosen) => chosen,
                None => return Err(nothing_to_serve(state, &wanted, record)),
            },
        };
        record.location = Some(location);

        let client_upgrade = route
            .upgrade
            .is_some()
            .then(|| hyper::upgrade::on(&mut request));
        // The head is built where it is kept for the tries, its set fields
        // written in place: moving it there whole would copy what the
        // other connections' requests have pushed out of the cache since.
        // The client's parts end with the block, before any wait, so that
        // the handler's state keeps no room for them.
        let mut head;
        let body;
        {
            let (mut parts, client_body) = request.into_parts();
            if let Some((guarded, asked)) = &mut answer_rules {
                if asked.rules.strip_authorization {
                    parts.headers.remove(header::AUTHORIZATION);
                }
                if let Some((auth, allowed)) =
                    guarded.forward_auth.as_ref().zip(asked.allowed.take())
                {
                    forward_auth::set_allowed(&auth.settings, allowed, &mut parts.headers);
                }
            }
            head = Head {
                method: parts.method,
                path: route.path.clone(),
                headers: parts.headers,
                set: SetFields::default(),
            };
            body = client_body;
        }
        prepare_head(&mut head, peer, &host, route.upgrade.clone());
        let bodyless = http_body::Body::is_end_stream(&body);
        let mut sending = Sending::new(
            body,
            bodyless,
            &head.method,
            &route,
            record.counters.insert(counters).bytes_in(),
            state.client_body_timeout,
        )
        .await
        .inspect_err(|error| record.log_failed_try(error))?;
        let mut tries = Tries::new(&route);

        let mut endpoint = first;
        let (response, in_flight) = loop {
            record.upstream = Some(endpoint.clone());
            record.attempt += 1;
            let in_flight = endpoint.state.start_request();
            let sent_at = Instant::now();
            let body = sending.body_for_try();
            let timer = head_timer.as_mut();
            let result = send(state, &endpoint, &head, body, &sending, timer, sent_at).await;
            record.upstream_ms = result
                .is_ok()
                .then(|| sent_at.elapsed().as_secs_f64() * 1000.0);
            if let Err(error) = &result {
                record.log_failed_try(error);
            }
            let again = match &result {
                Ok(response) => {
                    tries.after_answer(&route, &sending, &head.method, response.status())
                }
                // The client's fault: not the upstream's, nor worth another try.
                Err(error) if error.is_client_fault() => Again::No,
                Err(error) => {
                    note_failure(state, &endpoint, error);
                    tries.after_failure(&route, &sending, &head.method, error)
                }
            };
            if !matches!(again, Again::No) {
                tries.tried.push(endpoint.clone());
            }
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
                    state.metrics.retry(match &result {
                        Ok(_) => "status",
                        Err(error) => error.reason(),
                    });
                    tracing::debug!(failed = %endpoint, next = %next, "request sent again");
                    endpoint = next;
                }
                None => break (result?, in_flight),
            }
        };

        // Refused answers are logged as the upstream's fault.
        let (mut response, switched_to) = checked_answer(&route, response, state.upstream_timeout)
            .inspect_err(|error| record.log_failed_try(error))?;
        headers::remove_hop_by_hop(response.headers_mut());
        to_https::set_hsts(peer, route.hsts.as_ref(), response.headers_mut());
        if let Some((guarded, asked)) = &answer_rules {
            middleware::on_response(&guarded.middlewares, &asked.rules, response.headers_mut());
        }
        if let (Some(client_upgrade), Some(protocol)) = (client_upgrade, switched_to) {
            upgrade::set_upgrade(response.headers_mut(), protocol);
            let upstream_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(upgrade::splice(
                client_upgrade,
                upstream_upgrade,
                endpoint.state.start_request(),
            ));
        }
        let encoder = answer_rules.as_ref().and_then(|(_, asked)| {
            middleware::compression(&asked.rules, response.status(), response.headers_mut())
        });
        Ok(response.map(|body| match encoder {
            Some(encoder) => ProxyBody::compressed(body, encoder, in_flight),
            None => ProxyBody::upstream(body, in_flight),
        }))
    }
}

/// The `308` to HTTPS for a plain-HTTP request whose host has a
/// certificate and keeps `https_redirect` on, counted under its location.
/// `None`, and the request is forwarded as before, for any other: a host
/// with no certificate (not ordered yet, or its order failed) is still
/// served over HTTP, and an unknown host or path still gets its `404`.
/// Most requests stop at the first test or the certificate index's hash
/// lookup; only a host with a certificate costs a route lookup more.
fn redirect_to_https(
    state: &ProxyState,
    peer: &PeerInfo,
    host: &HeaderValue,
    wanted: &Wanted<'_>,
    record: &mut AccessRecord,
) -> Option<Response<ProxyBody>> {
    let https_port = state.https_port.filter(|_| peer.scheme == Scheme::Http)?;
    if !state.tls.certificates.covers(wanted.host) {
        return None;
    }
    let table = state.router.current();
    let location = find(&table, wanted)
        .ok()
        .filter(|location| location.https_redirect)?;
    let redirect = to_https::redirect(host, https_port, wanted.uri)?;
    record.location = Some(location.prefix.clone());
    record.counters = Some(location.counters(&state.metrics).clone());
    Some(redirect)
}

/// What a request is routed by, what its location is asked for, and until
/// when it may wait for an upstream.
struct Wanted<'a> {
    host: &'a str,
    /// The client's URI: its path chooses the location.
    uri: &'a Uri,
    /// The protocols the client asks to switch to: the location says which
    /// are forwarded.
    upgrade: Option<&'a HeaderValue>,
    deadline: Instant,
}

/// A failed connect counts against the endpoint's health, and makes the
/// name it came from be resolved again.
fn note_failure(state: &ProxyState, endpoint: &Endpoint, error: &ProxyError) {
    if !error.is_connect_failure() {
        return;
    }
    endpoint.state.record(false);
    if let Some(name) = endpoint.resolved_from() {
        state.resolve_hints.failed_connect(name);
    }
}

/// Why the wait for an upstream ended without one: the location's names
/// have no address (yet), or it has no upstream at all (its containers are
/// stopped, paused, starting, unhealthy, unreachable, or in their grace
/// period). The request counts under the location, if there still is one.
fn nothing_to_serve(
    state: &ProxyState,
    wanted: &Wanted<'_>,
    record: &mut AccessRecord,
) -> ProxyError {
    let table = state.router.current();
    let location = match find(&table, wanted) {
        Ok(location) => location,
        Err(error) => return error,
    };
    record.counters = Some(location.counters(&state.metrics).clone());
    let names = location.upstreams.names();
    if names.is_empty() {
        return ErrorKind::NoHealthyUpstream.into();
    }
    ProxyError::new(
        ErrorKind::NoUpstream,
        format!("no address for {}", names.join(", ")),
    )
}

/// One look at the request's location: an endpoint, if it has one now,
/// and its middlewares, if it has any.
struct Looked {
    chosen: Option<Chosen>,
    middlewares: Option<Guarded>,
    /// It has upstream names, which may get an address soon.
    has_names: bool,
}

/// An endpoint for the request, what its location decided for it, and the
/// location as the access record names it and the metrics count it.
struct Chosen {
    endpoint: Arc<Endpoint>,
    plan: RequestPlan,
    location: Arc<str>,
    counters: Arc<LocationCounters>,
}

/// A location's middlewares, with what its refusals count under.
struct Guarded {
    middlewares: Arc<LocationMiddlewares>,
    forward_auth: Option<Arc<ForwardAuthRoute>>,
    location: Arc<str>,
    counters: Arc<LocationCounters>,
}

/// What the middlewares made of a request before its upstream. Held only
/// until it is matched.
#[allow(clippy::large_enum_variant)]
enum Ahead {
    Forward(Admitted),
    /// Answered by dockhand or by the auth service.
    Answer(Response<ProxyBody>),
}

/// A request the middlewares let through, and what its answer needs.
struct Admitted {
    rules: Asked,
    /// What its auth service set for the upstream (`Remote-User`).
    allowed: Option<Vec<(header::HeaderName, HeaderValue)>>,
}

/// Runs a location's middlewares in their order: the checks (IP allow
/// list, rate limit, body size, CORS preflight, basic auth), then the
/// auth service, then the redirect.
async fn before_upstream(
    guarded: &Guarded,
    peer: &PeerInfo,
    facts: &RequestFacts<'_>,
    state: &ProxyState,
) -> Result<Ahead, ProxyError> {
    let rules = match middleware::before_upstream(&guarded.middlewares, facts).await {
        Verdict::Forward(rules) => rules,
        Verdict::Refuse(refusal) => return Err(refused(refusal)),
        Verdict::Answer(answer) => return Ok(Ahead::Answer(answer.map(ProxyBody::message))),
    };
    let mut allowed = None;
    if let Some(auth) = &guarded.forward_auth {
        let asked = forward_auth::ask(&state.client, state.upstream_timeout, peer, auth, facts);
        match asked.await? {
            AuthAnswer::Allowed(headers) => allowed = Some(headers),
            AuthAnswer::Denied(answer) => {
                state
                    .metrics
                    .refused(guarded.counters.host().clone(), "forward_auth");
                return Ok(Ahead::Answer(answer));
            }
        }
    }
    if let Some(answer) = middleware::redirect(&guarded.middlewares, facts) {
        return Ok(Ahead::Answer(answer.map(ProxyBody::message)));
    }
    Ok(Ahead::Forward(Admitted { rules, allowed }))
}

/// Looks the request's location up once. When it has no endpoint, its
/// names are resolved again. No host or location fails at once.
fn look(state: &ProxyState, wanted: &Wanted<'_>) -> Result<Looked, ProxyError> {
    let table = state.router.current();
    let location = find(&table, wanted)?;
    let counters = location.counters(&state.metrics);
    let middlewares = location.middlewares.as_ref().map(|middlewares| Guarded {
        middlewares: middlewares.clone(),
        forward_auth: location.forward_auth.clone(),
        location: location.prefix.clone(),
        counters: counters.clone(),
    });
    let chosen = match location.upstreams.pick(&[]) {
        Some(endpoint) => Some(Chosen {
            endpoint,
            plan: RequestPlan::of(location, wanted.uri, wanted.upgrade)?,
            location: location.prefix.clone(),
            counters: counters.clone(),
        }),
        None => {
            for name in location.upstreams.names() {
                state.resolve_hints.no_upstream(name);
            }
            None
        }
    };
    Ok(Looked {
        chosen,
        middlewares,
        has_names: !location.upstreams.names().is_empty(),
    })
}

/// Picks an endpoint for the request's location. When there is none, has
/// its names resolved again (every `NAME_RETRY_INTERVAL` while it waits) and
/// waits for the route table to change, until the deadline (`Ok(None)`).
async fn choose_endpoint(
    state: &ProxyState,
    wanted: &Wanted<'_>,
) -> Result<Option<Chosen>, ProxyError> {
    let mut changes = None;
    loop {
        let looked = look(state, wanted)?;
        if let Some(chosen) = looked.chosen {
            return Ok(Some(chosen));
        }
        let changes = match &mut changes {
            // Subscribe, then look once more, so a swap in between is not missed.
            None => {
                changes = Some(state.router.subscribe());
                continue;
            }
            Some(changes) => changes,
        };
        let now = Instant::now();
        let wake = match looked.has_names {
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

/// The error a middleware's refusal is answered with.
fn refused(refusal: Refusal) -> ProxyError {
    match refusal {
        Refusal::NotAllowed => ErrorKind::NotAllowed.into(),
        Refusal::BodyTooLarge => ErrorKind::BodyTooLarge.into(),
        Refusal::RateLimited(wait) => {
            // Whole seconds, rounded up: asking sooner meets an empty bucket.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            ProxyError::from(ErrorKind::RateLimited)
                .with_header(header::RETRY_AFTER, HeaderValue::from(secs))
        }
        Refusal::Unauthorized(challenge) => ProxyError::from(ErrorKind::Unauthorized)
            .with_header(header::WWW_AUTHENTICATE, challenge),
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
    let now = Instant::now();
    if now >= wanted.deadline {
        return Ok(None);
    }
    let mut changes = state.router.subscribe();
    let _ = tokio::time::timeout_at((now + pause).min(wanted.deadline), changes.changed()).await;
    Ok(choose_endpoint(state, wanted)
        .await?
        .map(|chosen| chosen.endpoint))
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
            RouteMiss::NoHost => ErrorKind::NoHost.into(),
            RouteMiss::NoLocation => ErrorKind::NoLocation.into(),
        })
}

/// Sends one try. A failure while the client's body failed is the
/// client's; an upstream is not timed out while it may be waiting for the
/// client's body (`--client-body-timeout` ends that wait). Not an `async
/// fn`, so that the try's future is held once (`head_wait`).
fn send<'a, 'h: 'a>(
    state: &'a ProxyState,
    endpoint: &'a Endpoint,
    head: &'a Head<'h>,
    body: UpstreamBody,
    sending: &'a Sending,
    head_timer: Pin<&'a mut KeptTimer>,
    sent_at: Instant,
) -> impl Future<Output = Result<UpstreamResponse, ProxyError>> + use<'a, 'h> {
    let sent = state.client.send(endpoint, head, body);
    let limit = state.upstream_timeout;
    HeadWait::new(sent, head_timer, sent_at, limit, || {
        sending.waits_on_client()
    })
    .map(move |waited| match waited {
        Waited::Sent(Ok(response)) => Ok(response),
        Waited::Sent(Err(error)) => {
            Err(sending.client_failure().unwrap_or_else(|| classify(error)))
        }
        Waited::TimedOut => Err(ProxyError::new(
            ErrorKind::UpstreamTimeout,
            format!("no response head within {limit:?} (--upstream-timeout)"),
        )),
    })
}

/// Size of the request head as sent: each header line with its `: ` and CRLF.
fn header_bytes<B>(request: &Request<B>) -> usize {
    request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// Sets the headers every upstream sees, whichever endpoint is chosen: the
/// hop-by-hop ones in the head's map, the client's identity and Host beside
/// them (its set fields).
fn prepare_head<'a>(
    head: &mut Head<'a>,
    peer: &'a PeerInfo,
    host: &'a HeaderValue,
    forwarded_upgrade: Option<HeaderValue>,
) {
    let headers = &mut head.headers;
    let wants_trailers = headers::accepts_trailers(headers);
    headers::remove_hop_by_hop(headers);
    if wants_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(protocols) = forwarded_upgrade {
        upgrade::set_upgrade(headers, protocols);
    }
    let set = &mut head.set;
    set_client_identity(headers, set, peer, Some(host));
    // The upstream sees the client's Host, never the address it was sent to
    // (unless the upstream's `headers.add` sets one).
    set.set_borrowed(&header::HOST, Some(host));
}

/// The kind of a failed send, the client's error kept as its cause. A
/// connect error says what failed; past connecting, an answer that can't be
/// parsed is not HTTP (or a head too large for the connection's buffer),
/// and anything else ended the connection before the response head
/// (closed, reset, an HTTP/2 stream reset).
fn classify(error: SendError) -> ProxyError {
    let kind = match &error {
        SendError::Http1(ExchangeError::Connect(connect)) => connect_kind(connect),
        SendError::Http1(ExchangeError::HeadTooLarge) => ErrorKind::UpstreamHeadTooLarge,
        SendError::Http1(ExchangeError::NotHttp(_)) => ErrorKind::NotHttp,
        SendError::Http1(_) => ErrorKind::ResetBeforeResponse,
        SendError::Hyper(hyper_client) => match find_source::<ConnectError>(hyper_client) {
            Some(connect) => connect_kind(connect),
            None if hyper_client.is_connect() => ErrorKind::ConnectFailed,
            None => match find_source::<hyper::Error>(hyper_client) {
                Some(hyper_error) if hyper_error.is_parse_too_large() => {
                    ErrorKind::UpstreamHeadTooLarge
                }
                Some(hyper_error) if hyper_error.is_parse() => ErrorKind::NotHttp,
                _ => ErrorKind::ResetBeforeResponse,
            },
        },
    };
    ProxyError::new(kind, error)
}

fn connect_kind(error: &ConnectError) -> ErrorKind {
    match error {
        ConnectError::Refused => ErrorKind::ConnectRefused,
        ConnectError::TimedOut(_) => ErrorKind::ConnectTimeout,
        ConnectError::Handshake(_) => ErrorKind::TlsHandshake,
        ConnectError::NoTargets(_) => ErrorKind::DnsNoRecords,
        ConnectError::Lookup { .. } => ErrorKind::DnsFailure,
        ConnectError::Failed(_) | ConnectError::NoAddress => ErrorKind::ConnectFailed,
        ConnectError::Departed => ErrorKind::UpstreamLeft,
    }
}
