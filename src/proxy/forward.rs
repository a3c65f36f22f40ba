//! One request, client to upstream and back: route it, choose an endpoint,
//! rewrite the headers, send it through the pool, and hand back the response
//! (or dockhand's own status). Protocol switches (WebSocket) are spliced here.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderValue};
use http::uri::{PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::access_log::AccessRecord;
use super::body::ProxyBody;
use super::client::{connect_error, ConnectError, UpstreamClient, UpstreamResponse};
use super::error::ProxyError;
use super::headers::{self, PeerInfo};
use crate::config::Protocol;
use crate::routes::{normalize_host, RouteMiss, Router};
use crate::upstream::Endpoint;

/// Request heads larger than this are refused with `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What every request handler shares.
pub struct ProxyState {
    pub router: Arc<Router>,
    pub client: UpstreamClient,
    pub upstream_timeout: std::time::Duration,
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
    let table = state.router.current();
    let mut buffer = [0; crate::routes::MAX_HOST_LEN];
    let host_key = host
        .to_str()
        .ok()
        .and_then(|raw| normalize_host(raw, &mut buffer))
        .ok_or(ProxyError::MissingHost)?;
    let location = table
        .find(host_key, request.uri().path())
        .map_err(|miss| match miss {
            RouteMiss::NoHost => ProxyError::NoHost,
            RouteMiss::NoLocation => ProxyError::NoLocation,
        })?;
    let endpoint = location.upstreams.pick().ok_or(ProxyError::NoUpstream)?;
    record.upstream = Some(endpoint.address);

    let upgrade = headers::requested_upgrade(request.headers());
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut request));
    prepare_request(&mut request, endpoint, peer, host, upgrade)?;

    let sent = state.client.send(endpoint.protocol(), request);
    let mut response = match tokio::time::timeout(state.upstream_timeout, sent).await {
        Err(_) => return Err(ProxyError::UpstreamTimeout),
        Ok(Err(error)) => return Err(classify(&error)),
        Ok(Ok(response)) => response,
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
        tokio::spawn(splice(client_upgrade, upstream_upgrade));
    }
    Ok(response)
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
    request: &mut Request<Incoming>,
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
