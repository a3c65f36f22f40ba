//! `testbackend`: the HTTP service dockhand's integration suite runs in containers.
//!
//! It answers every request with what it received, so a test can tell which
//! container served it and what dockhand forwarded: a JSON body of `hostname`,
//! `method`, `path`, `query` and `headers`, and an `x-hostname` header. A few
//! paths change the answer:
//!
//! - `/status/NNN`: the same JSON with status NNN;
//! - `/delay/MS`: the same JSON after MS milliseconds;
//! - `/stream/N`: N server-sent events (`data: I`), one every 100 ms;
//! - `/ws`: a WebSocket that echoes text and binary messages;
//! - `/oauth2/auth`: oauth2-proxy's forward-auth answer, so the test backend
//!   can stand in for it (as in the compose example): `202` with
//!   `X-Auth-Request-User` set to the value of an `_oauth2_proxy` cookie, `401`
//!   without one (oauth2-proxy's cookie is sealed; here it is the user name);
//! - `/healthz`: `200` when healthy, else `503`; the process is unhealthy for
//!   `UNHEALTHY_FOR_MS` milliseconds after it starts (default 0).
//!
//! It listens on `--listen ADDR` (env `LISTEN`, default `0.0.0.0:8080`) for
//! HTTP/1.1 and h2c. On SIGTERM or SIGINT it stops listening, closes idle
//! connections and exits once the requests in flight are answered. `testbackend probe URL` exits 0 when a GET to the plain-HTTP
//! URL answers `200`, which is what a `HEALTHCHECK` in a `FROM scratch` image
//! (no shell, no curl) needs. It owns nothing of dockhand's and knows nothing of
//! Docker: a container's name and health come from the engine around it.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, COOKIE, UPGRADE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

type Body = UnsyncBoxBody<Bytes, Infallible>;

const USAGE: &str = "usage: testbackend [--listen ADDR]   (env LISTEN, UNHEALTHY_FOR_MS)
       testbackend probe URL          (exit 0 iff GET URL answers 200)";

/// What every request may read: who we are and when we started.
struct State {
    hostname: String,
    started: Instant,
    unhealthy_for: Duration,
}

impl State {
    fn from_env() -> Result<State, String> {
        let unhealthy_for =
            match std::env::var("UNHEALTHY_FOR_MS") {
                Ok(ms) => Duration::from_millis(ms.trim().parse().map_err(|_| {
                    format!("UNHEALTHY_FOR_MS: not a number of milliseconds: {ms:?}")
                })?),
                Err(_) => Duration::ZERO,
            };
        Ok(State {
            hostname: hostname(),
            started: Instant::now(),
            unhealthy_for,
        })
    }

    fn healthy(&self) -> bool {
        self.started.elapsed() >= self.unhealthy_for
    }
}

/// The UTS name the container was given (`--hostname`, or its short id).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("probe") => match args.get(1) {
            Some(url) if args.len() == 2 => match probe(url, Duration::from_secs(3)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(reason) => {
                    eprintln!("probe {url}: {reason}");
                    ExitCode::FAILURE
                }
            },
            _ => usage_error("probe takes one URL"),
        },
        Some("-h" | "--help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            let listen = match listen_addr(&args) {
                Ok(listen) => listen,
                Err(reason) => return usage_error(&reason),
            };
            let state = match State::from_env() {
                Ok(state) => Arc::new(state),
                Err(reason) => return usage_error(&reason),
            };
            serve_forever(listen, state)
        }
    }
}

fn usage_error(reason: &str) -> ExitCode {
    eprintln!("testbackend: {reason}\n{USAGE}");
    ExitCode::from(2)
}

fn listen_addr(args: &[String]) -> Result<SocketAddr, String> {
    let mut listen = std::env::var("LISTEN").unwrap_or_else(|_| "0.0.0.0:8080".to_string());
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if let Some(value) = arg.strip_prefix("--listen=") {
            listen = value.to_string();
        } else if arg == "--listen" {
            listen = rest.next().ok_or("--listen needs an address")?.clone();
        } else {
            return Err(format!("unknown argument {arg:?}"));
        }
    }
    listen
        .parse()
        .map_err(|_| format!("--listen: not an address: {listen:?}"))
}

#[tokio::main]
async fn serve_forever(listen: SocketAddr, state: Arc<State>) -> ExitCode {
    let listener = match TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("testbackend: cannot listen on {listen}: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "testbackend {} listening on {listen}",
        state.hostname.as_str()
    );
    // As PID 1 in a container, signals without a handler are ignored: handle
    // them so `docker stop` takes milliseconds, not its 10 s timeout.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::select! {
        () = serve(listener, state, stopping) => {}
        () = terminated() => {}
    }
    // As a service that stops gracefully: the listener is closed, idle
    // connections close at once, requests in flight are answered first.
    let _ = stop.send(true);
    stop.closed().await;
    ExitCode::SUCCESS
}

async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Serves until dropped; each connection ends gracefully once `stopping`
/// turns true, and holds a clone of it until it has ended.
async fn serve(listener: TcpListener, state: Arc<State>, stopping: watch::Receiver<bool>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                eprintln!("testbackend: accept: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(request, &state).await) }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = stopping.wait_for(|stopping| *stopping) => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
}

async fn handle(request: Request<Incoming>, state: &State) -> Response<Body> {
    let path = request.uri().path().to_string();
    let mut segments = path.trim_start_matches('/').splitn(2, '/');
    match (segments.next(), segments.next()) {
        (Some("healthz"), None) => {
            if state.healthy() {
                plain(StatusCode::OK, "healthy\n")
            } else {
                plain(StatusCode::SERVICE_UNAVAILABLE, "unhealthy\n")
            }
        }
        (Some("status"), Some(code)) => match code.parse().map(StatusCode::from_u16) {
            Ok(Ok(status)) => echo(&request, state, status),
            _ => plain(StatusCode::BAD_REQUEST, "status must be 100-999\n"),
        },
        (Some("delay"), Some(ms)) => match ms.parse() {
            Ok(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                echo(&request, state, StatusCode::OK)
            }
            Err(_) => plain(StatusCode::BAD_REQUEST, "delay is in milliseconds\n"),
        },
        (Some("stream"), Some(count)) => match count.parse::<u32>() {
            Ok(count) => stream(count, state),
            Err(_) => plain(StatusCode::BAD_REQUEST, "stream takes a count\n"),
        },
        (Some("ws"), None) => websocket(request, state),
        (Some("oauth2"), Some("auth")) => oauth2_proxy_auth(&request),
        _ => echo(&request, state, StatusCode::OK),
    }
}

fn with_hostname(mut response: Response<Body>, state: &State) -> Response<Body> {
    if let Ok(value) = HeaderValue::from_str(&state.hostname) {
        response.headers_mut().insert("x-hostname", value);
    }
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed_unsync());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// oauth2-proxy's `/oauth2/auth` with its session cookie's value as the user.
fn oauth2_proxy_auth(request: &Request<Incoming>) -> Response<Body> {
    let user = request
        .headers()
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .find_map(|cookie| cookie.trim().strip_prefix("_oauth2_proxy="))
        .and_then(|user| HeaderValue::from_str(user).ok());
    match user {
        Some(user) => {
            let mut response = plain(StatusCode::ACCEPTED, "");
            response.headers_mut().insert("x-auth-request-user", user);
            response
        }
        None => plain(StatusCode::UNAUTHORIZED, "Unauthorized\n"),
    }
}

/// The request as received, as JSON.
fn echo(request: &Request<Incoming>, state: &State, status: StatusCode) -> Response<Body> {
    let mut headers = serde_json::Map::new();
    for (name, value) in request.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(serde_json::Value::String(seen)) => {
                seen.push_str(", ");
                seen.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_string(), value.into());
            }
        }
    }
    let body = serde_json::json!({
        "hostname": state.hostname,
        "method": request.method().as_str(),
        "path": request.uri().path(),
        "query": request.uri().query().unwrap_or(""),
        "headers": headers,
    });
    let mut response =
        Response::new(Full::new(Bytes::from(body.to_string() + "\n")).boxed_unsync());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    with_hostname(response, state)
}

fn stream(count: u32, state: &State) -> Response<Body> {
    let events = futures_util::stream::unfold(0u32, move |sent| async move {
        if sent == count {
            return None;
        }
        if sent > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let event = Bytes::from(format!("data: {sent}\n\n"));
        Some((Ok::<_, Infallible>(Frame::data(event)), sent + 1))
    });
    let mut response = Response::new(StreamBody::new(events).boxed_unsync());
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response
        .headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    with_hostname(response, state)
}

fn websocket(request: Request<Incoming>, state: &State) -> Response<Body> {
    let header_has = |name, token: &str| {
        request.headers().get_all(name).iter().any(|value| {
            value
                .to_str()
                .unwrap_or("")
                .split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    };
    let key = request.headers().get("sec-websocket-key").cloned();
    let (true, true, Some(key)) = (
        header_has(CONNECTION, "upgrade"),
        header_has(UPGRADE, "websocket"),
        key,
    ) else {
        return plain(StatusCode::BAD_REQUEST, "expected a websocket upgrade\n");
    };
    let accept = derive_accept_key(key.as_bytes());
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(request).await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                eprintln!("testbackend: websocket upgrade: {error}");
                return;
            }
        };
        let mut socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        // Pings are answered and closes completed by the stream itself.
        while let Some(Ok(message)) = socket.next().await {
            if (message.is_text() || message.is_binary()) && socket.send(message).await.is_err() {
                break;
            }
        }
    });
    let mut response = Response::new(Full::new(Bytes::new()).boxed_unsync());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(
        "sec-websocket-accept",
        HeaderValue::from_str(&accept).expect("base64 is a valid header value"),
    );
    with_hostname(response, state)
}

/// `http://HOST[:PORT][/PATH]` split into its parts.
fn parse_http_url(url: &str) -> Result<(String, u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs can be probed")?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (
            host,
            port.parse()
                .map_err(|_| format!("bad port in {authority:?}"))?,
        ),
        _ => (authority, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("the URL has no host".to_string());
    }
    Ok((host.to_string(), port, path.to_string()))
}

/// One GET with `Connection: close`; Ok when the status line says 200.
fn probe(url: &str, timeout: Duration) -> Result<(), String> {
    let (host, port, path) = parse_http_url(url)?;
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|error| format!("cannot resolve {host}: {error}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|error| format!("connect to {addr}: {error}"))?;
    stream.set_read_timeout(Some(timeout)).ok();
    stream.set_write_timeout(Some(timeout)).ok();
    let authority = if addr.is_ipv6() {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nUser-Agent: testbackend-probe\r\n\r\n"
    )
    .map_err(|error| format!("send: {error}"))?;
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < 12 {
        match stream.read(&mut head[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(error) => return Err(format!("read: {error}")),
        }
    }
    let status_line = String::from_utf8_lossy(&head[..read]);
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .ok_or_else(|| format!("not an HTTP response: {status_line:?}"))?;
    if status == "200" {
        Ok(())
    } else {
        Err(format!("answered {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_into_host_port_and_path() {
        let parse = |url| parse_http_url(url).unwrap();
        assert_eq!(
            parse("http://127.0.0.1:8080/healthz"),
            ("127.0.0.1".into(), 8080, "/healthz".into())
        );
        assert_eq!(
            parse("http://localhost"),
            ("localhost".into(), 80, "/".into())
        );
        assert_eq!(
            parse("http://[::1]:81/a?b=c"),
            ("::1".into(), 81, "/a?b=c".into())
        );
        assert!(parse_http_url("https://127.0.0.1/").is_err());
        assert!(parse_http_url("http://127.0.0.1:x/").is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn probe_passes_on_200_only_and_health_follows_the_clock() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            hostname: "test".into(),
            started: Instant::now(),
            unhealthy_for: Duration::from_millis(300),
        });
        let (_stop, stopping) = watch::channel(false);
        let server = tokio::spawn(serve(listener, state, stopping));
        let probe_path = |path: &'static str| {
            tokio::task::spawn_blocking(move || {
                probe(&format!("http://{addr}{path}"), Duration::from_secs(2))
            })
        };
        assert_eq!(
            probe_path("/healthz").await.unwrap(),
            Err("answered 503".into())
        );
        assert_eq!(probe_path("/anything").await.unwrap(), Ok(()));
        assert_eq!(
            probe_path("/status/500").await.unwrap(),
            Err("answered 500".into())
        );
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(probe_path("/healthz").await.unwrap(), Ok(()));
        server.abort();
    }
}
