//! The admin listener: plain HTTP on its own address (never a proxy port),
//! for people and monitoring rather than traffic. It shows what is served
//! and why (`hosts`, `diagnostics`, `certificates`), answers the health probes (`probes`),
//! and keeps all of it behind a bearer token when it is reachable from
//! other machines (`auth`).

mod auth;
mod certificates;
mod dashboard;
mod diagnostics;
mod hosts;
mod probes;

pub use auth::{check_exposure, AdminToken, ExposedWithoutToken};
pub use probes::healthcheck;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::config::ProviderId;
use crate::metrics;
use crate::proxy::ProxyState;
use crate::resolve::NameResolver;
use crate::routes::Router;

/// What the admin paths read.
pub struct AdminState {
    /// The router, the upstream client (SRV answers) and their state.
    pub proxy: Arc<ProxyState>,
    /// When each upstream name last resolved.
    pub names: NameResolver,
    pub token: Option<AdminToken>,
    /// The sources of routes that must have delivered before `/readyz` says ready.
    pub awaited: Vec<ProviderId>,
}

impl AdminState {
    pub fn router(&self) -> &Router {
        &self.proxy.router
    }
}

/// How long a client of the admin listener may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

type AdminResponse = Response<Full<Bytes>>;

/// Serves admin requests until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<AdminState>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let response = respond(&state, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "admin connection ended");
            }
        });
    }
}

/// Paths anyone who reaches the listener may read. The dashboard page holds
/// no data (it asks for the token when the API it reads answers 401).
fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/")
}

fn respond<B>(state: &AdminState, request: &Request<B>) -> AdminResponse {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = error(StatusCode::METHOD_NOT_ALLOWED, "only GET is served here");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let path = request.uri().path();
    let admitted = state
        .token
        .as_ref()
        .is_none_or(|token| token.admits(request.headers()));
    if !admitted && !is_public(path) {
        let mut response = error(StatusCode::UNAUTHORIZED, "a bearer token is needed");
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"dockhand\""),
        );
        return response;
    }
    route(state, path)
}

fn route(state: &AdminState, path: &str) -> AdminResponse {
    match path {
        "/" => dashboard::page(),
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => match probes::readiness(state) {
            Ok(()) => text(StatusCode::OK, "ready\n"),
            Err(awaited) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("{awaited}\n")),
        },
        "/api/v1/hosts" => json_response(StatusCode::OK, &hosts::all_hosts(state)),
        "/api/v1/diagnostics" => json_response(StatusCode::OK, &diagnostics::current(state)),
        "/api/v1/certificates" => json_response(StatusCode::OK, &certificates::all(state)),
        "/metrics" => {
            let metrics = state.proxy.metrics.render(state.router());
            respond_with(StatusCode::OK, metrics::CONTENT_TYPE, metrics)
        }
        _ => match path.strip_prefix("/api/v1/hosts/") {
            Some(name) => match hosts::one_host(state, name) {
                Some(host) => json_response(StatusCode::OK, &host),
                None => error(
                    StatusCode::NOT_FOUND,
                    &format!("no host {name:?} is served"),
                ),
            },
            None => error(StatusCode::NOT_FOUND, "no such path"),
        },
    }
}

fn json_response(status: StatusCode, body: &Value) -> AdminResponse {
    let mut text = body.to_string();
    text.push('\n');
    respond_with(status, "application/json", text)
}

fn text(status: StatusCode, body: &str) -> AdminResponse {
    respond_with(status, "text/plain; charset=utf-8", body.to_owned())
}

fn error(status: StatusCode, reason: &str) -> AdminResponse {
    json_response(status, &json!({ "error": reason }))
}

fn respond_with(status: StatusCode, content_type: &'static str, body: String) -> AdminResponse {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // What is served changes from one second to the next.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
