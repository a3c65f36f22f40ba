//! One request, client to upstream and back: route it, choose an endpoint,
//! rewrite the headers, send it through the pool, and hand back the response
//! (or dockhand's own status). Protocol switches (WebSocket) are spliced here.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::uri::{PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::access_log::AccessRecord;
use super::body::ProxyBody;
use super::client::{connect_error, ConnectError, UpstreamClient, UpstreamResponse};
use super::error::ProxyError;
use super::headers::{self, PeerInfo};
use super::request_body::UpstreamBody;
use crate::config::Protocol;
use crate::routes::{normalize_host, RouteMiss, Router};
use crate::upstream::Endpoint;

/// Request heads larger than this are refused with `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The first pause before sending a request again to an address that just
/// failed, doubling up to the most; all within `--upstream-wait`.
const FIRST_REPLAY_PAUSE: Duration = Duration::from_millis(10);
const MAX_REPLAY_PAUSE: Duration = Duration::from_millis(200);

/// What every request handler shares.
pub struct ProxyState {
    pub router: Arc<Router>,
    pub client: UpstreamClient,
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
        Ok(response) => response.map(ProxyBody::upstream),
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
) -> Result<UpstreamResponse, ProxyError> {
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
        path: client_uri.path(),
        deadline: tokio::time::Instant::now() + state.upstream_wait,
    };
    let (endpoint, follows_containers) = choose_endpoint(&state.router, &wanted)
        .await?
        .ok_or(ProxyError::NoUpstream)?;
    record.upstream = Some(endpoint.address);

    let upgrade = headers::requested_upgrade(request.headers());
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut request));
    // Containers move: a request that can be sent again unchanged (no body,
    // idempotent) is kept, in case its upstream vanished under it.
    let replay = (follows_containers && is_replayable(&request)).then(|| Replay::of(&request));
    let mut upstream_request = request.map(UpstreamBody::Streamed);
    prepare_request(
        &mut upstream_request,
        &endpoint,
        peer,
        host.clone(),
        upgrade.clone(),
    )?;
    let mut result = send(state, &endpoint, upstream_request).await;

    if let Some(replay) = replay {
        let mut failed = endpoint.address;
        let mut pause = FIRST_REPLAY_PAUSE;
        while matches!(&result, Err(error) if error.is_connection_failure()) {
            let Some(next) = choose_after_failure(&state.router, &wanted, failed, pause).await?
            else {
                break;
            };
            tracing::debug!(%failed, next = %next.address, "upstream lost; request sent again");
            record.upstream = Some(next.address);
            let mut again = replay.to_request();
            prepare_request(&mut again, &next, peer, host.clone(), upgrade.clone())?;
            result = send(state, &next, again).await;
            failed = next.address;
            pause = (pause * 2).min(MAX_REPLAY_PAUSE);
        }
    }
    let mut response = result?;

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
        tokio::spawn(splice(client_upgrade, upstream_upgrade));
    }
    Ok(response)
}

/// What a request is routed by, and until when it may wait for an upstream.
struct Wanted<'a> {
    host: &'a str,
    path: &'a str,
    deadline: tokio::time::Instant,
}

/// Picks an endpoint for the request's location. When there is none, waits
/// for the route table to change, until the deadline (`Ok(None)`). No host or
/// location fails at once.
async fn choose_endpoint(
    router: &Router,
    wanted: &Wanted<'_>,
) -> Result<Option<(Arc<Endpoint>, bool)>, ProxyError> {
    let mut changes = None;
    loop {
        if let Some(found) = pick_now(router, wanted, None)? {
            return Ok(Some(found));
        }
        match &mut changes {
            // Subscribe, then look once more, so a swap in between is not missed.
            None => changes = Some(router.subscribe()),
            Some(changes) => {
                let changed = tokio::time::timeout_at(wanted.deadline, changes.changed()).await;
                if !matches!(changed, Ok(Ok(()))) {
                    return Ok(None);
                }
            }
        }
    }
}

/// After `failed` could not be reached: another endpoint at once if the
/// location has one; else, once the table changes or `pause` passes (a
/// container that has just started may not listen yet), any endpoint, waiting
/// for one until the deadline.
async fn choose_after_failure(
    router: &Router,
    wanted: &Wanted<'_>,
    failed: SocketAddr,
    pause: Duration,
) -> Result<Option<Arc<Endpoint>>, ProxyError> {
    if let Some((other, _)) = pick_now(router, wanted, Some(failed))? {
        return Ok(Some(other));
    }
    let now = tokio::time::Instant::now();
    if now >= wanted.deadline {
        return Ok(None);
    }
    let mut changes = router.subscribe();
    let _ = tokio::time::timeout_at((now + pause).min(wanted.deadline), changes.changed()).await;
    Ok(choose_endpoint(router, wanted)
        .await?
        .map(|(endpoint, _)| endpoint))
}

/// The location's next endpoint other than `avoid`, and whether it follows
/// containers; `Ok(None)` when it has none.
fn pick_now(
    router: &Router,
    wanted: &Wanted<'_>,
    avoid: Option<SocketAddr>,
) -> Result<Option<(Arc<Endpoint>, bool)>, ProxyError> {
    let table = router.current();
    let location = table
        .find(wanted.host, wanted.path)
        .map_err(|miss| match miss {
            RouteMiss::NoHost => ProxyError::NoHost,
            RouteMiss::NoLocation => ProxyError::NoLocation,
        })?;
    let upstreams = &location.upstreams;
    // Round robin may offer the avoided address first; a full turn finds any other.
    let picked = (0..upstreams.len())
        .filter_map(|_| upstreams.pick())
        .find(|endpoint| Some(endpoint.address) != avoid);
    Ok(picked.map(|endpoint| (endpoint, location.follows_containers)))
}

async fn send(
    state: &ProxyState,
    endpoint: &Endpoint,
    request: Request<UpstreamBody>,
) -> Result<UpstreamResponse, ProxyError> {
    let sent = state.client.send(endpoint.protocol(), request);
    match tokio::time::timeout(state.upstream_timeout, sent).await {
        Err(_) => Err(ProxyError::UpstreamTimeout),
        Ok(Err(error)) => Err(classify(&error)),
        Ok(Ok(response)) => Ok(response),
    }
}

fn is_replayable(request: &Request<Incoming>) -> bool {
    let idempotent = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    );
    idempotent && http_body::Body::is_end_stream(request.body())
}

/// A bodyless request's head, kept to send it again.
struct Replay {
    method: Method,
    uri: Uri,
    version: Version,
    headers: http::HeaderMap,
}

impl Replay {
    fn of(request: &Request<Incoming>) -> Replay {
        Replay {
            method: request.method().clone(),
            uri: request.uri().clone(),
            version: request.version(),
            headers: request.headers().clone(),
        }
    }

    fn to_request(&self) -> Request<UpstreamBody> {
        let mut request = Request::new(UpstreamBody::Empty);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers.clone();
        request
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

/// Points the request at `endpoint` and sets the headers the upstream sees.
fn prepare_request(
    request: &mut Request<UpstreamBody>,
    endpoint: &Endpoint,
    peer: &PeerInfo,
    host: HeaderValue,
    upgrade: Option<HeaderValue>,
) -> Result<(), ProxyError> {
    let path_and_query = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(Scheme::HTTP);
    parts.authority = Some(endpoint.authority.clone());
    parts.path_and_query = Some(path_and_query);
    *request.uri_mut() = Uri::from_parts(parts).map_err(|_| ProxyError::BadResponse)?;
    *request.version_mut() = match endpoint.protocol() {
        Protocol::Http1 => Version::HTTP_11,
        Protocol::H2c => Version::HTTP_2,
    };

    let headers = request.headers_mut();
    let wants_trailers = headers::accepts_trailers(headers);
    headers::remove_hop_by_hop(headers);
    if wants_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(protocol) = upgrade {
        headers::set_upgrade(headers, protocol);
    }
    headers::set_forwarded(headers, peer, Some(&host), "http");
    // The upstream sees the client's Host, never the address it was sent to.
    headers.insert(header::HOST, host);
    Ok(())
}

fn classify(error: &hyper_util::client::legacy::Error) -> ProxyError {
    match connect_error(error) {
        Some(ConnectError::Refused) => ProxyError::ConnectRefused,
        Some(ConnectError::TimedOut) => ProxyError::ConnectTimeout,
        Some(ConnectError::Failed(_) | ConnectError::NoAddress) => ProxyError::ConnectFailed,
        None if error.is_connect() => ProxyError::ConnectFailed,
        None => ProxyError::BadResponse,
    }
}

/// Copies bytes both ways between the client and the upstream once both sides
/// have switched protocols; ends when either side closes.
async fn splice(client: hyper::upgrade::OnUpgrade, upstream: hyper::upgrade::OnUpgrade) {
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
