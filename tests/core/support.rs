//! Test harness: dockhand run in-process on 127.0.0.1:0 (or as the real binary
//! when a test needs signals or its memory), real loopback backends, and small
//! HTTP clients that open their own connections.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use dockhand::connect::{Http1Engine, UpstreamClient};
use dockhand::proxy::{serve, ProxyState, ServerSettings, Transport};
use dockhand::resolve::Unconfigured;
use dockhand::routes::Router;
use dockhand::settings::Settings;
use dockhand::tls::TlsState;
use dockhand::upstream::EndpointRegistry;
use dockhand::{Error, Listeners};

// `super::`, not `crate::`: the Docker suite compiles this file and
// tls_support.rs too, under a module of its own (integration/main.rs).
use super::tls_support::ServerIdentity;

pub type TestBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

pub fn full(text: impl Into<Bytes>) -> TestBody {
    Full::new(text.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> TestBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A real HTTP server on loopback (HTTP/1.1, h2c and upgrades) that counts the
/// TCP connections it accepted and the requests that reached its handler.
pub struct Backend {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Backend {
    pub async fn start<F, Fut>(handler: F) -> Backend
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Backend::serve(listener, handler)
    }

    pub fn serve<F, Fut>(listener: TcpListener, handler: F) -> Backend
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (counter, request_counter) = (connections.clone(), requests.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let handler = handler.clone();
                let request_counter = request_counter.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        request_counter.fetch_add(1, Ordering::SeqCst);
                        let response = handler(request);
                        async move { Ok::<_, Infallible>(response.await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Backend {
            addr,
            connections,
            requests,
            task,
        }
    }

    /// Answers every request with what it received: `x-backend: <name>` and a
    /// JSON body of method, URI, version and headers.
    pub async fn echo(name: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Backend::echo_on(listener, name)
    }

    /// As [`Backend::echo`], on `address` (another loopback address, a port
    /// another backend uses elsewhere: where a name may point).
    pub async fn echo_at(address: SocketAddr, name: &'static str) -> Backend {
        let listener = TcpListener::bind(address).await.unwrap();
        Backend::echo_on(listener, name)
    }

    fn echo_on(listener: TcpListener, name: &'static str) -> Backend {
        Backend::serve(listener, move |request: Request<Incoming>| async move {
            let headers: serde_json::Map<String, serde_json::Value> = request
                .headers()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").into()))
                .collect();
            let body = serde_json::json!({
                "method": request.method().as_str(),
                "uri": request.uri().to_string(),
                "version": format!("{:?}", request.version()),
                "headers": headers,
            });
            Response::builder()
                .header("x-backend", name)
                .header("content-type", "application/json")
                .body(full(body.to_string()))
                .unwrap()
        })
    }

    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn request_count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An upstream below HTTP: it reads each request, then does `respond` with
/// the connection (answer bytes that are not HTTP, close, reset...).
pub async fn raw_upstream<F, Fut>(respond: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    use tokio::io::AsyncReadExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buffer = [0; 1024];
            let _ = stream.read(&mut buffer).await;
            respond(stream).await;
        }
    });
    addr
}

/// An upstream below HTTP that records every byte that reaches it: each
/// whole request (head and body, as framed by `message_len`) is answered with
/// `answer(request)`, and what comes after a switch (a tunnel's bytes) is
/// recorded too, until the peer closes.
pub struct RecordingUpstream {
    pub addr: SocketAddr,
    recording: Recording,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

/// What every connection of a `RecordingUpstream` records to, and how it answers.
#[derive(Clone)]
struct Recording {
    received: Arc<Mutex<Vec<u8>>>,
    requests: Arc<Mutex<Vec<String>>>,
    answer: Arc<Answer>,
}

/// What a `RecordingUpstream` answers a whole request with.
type Answer = dyn Fn(&[u8]) -> Vec<u8> + Send + Sync;

impl RecordingUpstream {
    /// Answers every request with `answer` as it is.
    pub async fn start(answer: &'static [u8]) -> RecordingUpstream {
        RecordingUpstream::answering(move |_| answer.to_vec()).await
    }

    /// Answers every request with what `answer` makes of it.
    pub async fn answering(
        answer: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> RecordingUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let recording = Recording {
            received: Arc::default(),
            requests: Arc::default(),
            answer: Arc::new(answer),
        };
        let connections = Arc::new(AtomicUsize::new(0));
        let (shared, counter) = (recording.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(shared.clone().connection(stream));
            }
        });
        RecordingUpstream {
            addr,
            recording,
            connections,
            task,
        }
    }

    /// Everything received so far, on every connection, as text.
    pub fn received(&self) -> String {
        String::from_utf8_lossy(&self.recording.received.lock().unwrap()).into_owned()
    }

    /// Each whole request received so far, in the order they arrived.
    pub fn requests(&self) -> Vec<String> {
        self.recording.requests.lock().unwrap().clone()
    }

    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Asserts that nothing at all reached this upstream.
    pub fn assert_untouched(&self, case: &str) {
        assert_eq!(self.connection_count(), 0, "{case}: {:?}", self.received());
    }
}

impl Recording {
    async fn connection(self, mut stream: TcpStream) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut pending = Vec::new();
        let mut buffer = [0; 16 * 1024];
        loop {
            let Ok(read @ 1..) = stream.read(&mut buffer).await else {
                return;
            };
            self.received
                .lock()
                .unwrap()
                .extend_from_slice(&buffer[..read]);
            pending.extend_from_slice(&buffer[..read]);
            while let Some(length) = message_len(&pending) {
                let request: Vec<u8> = pending.drain(..length).collect();
                self.requests
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&request).into_owned());
                let answer = (self.answer)(&request);
                let _ = stream.write_all(&answer).await;
                if closes(&answer) {
                    // The end of the connection ends the answer's body; what
                    // the peer sends after it is still recorded.
                    let _ = stream.shutdown().await;
                }
            }
        }
    }
}

/// Whether a message's head says `Connection: close`.
fn closes(message: &[u8]) -> bool {
    let head_end = message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(message.len());
    String::from_utf8_lossy(&message[..head_end])
        .to_ascii_lowercase()
        .contains("\r\nconnection: close")
}

impl Drop for RecordingUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The length of the first whole HTTP/1.1 message in `bytes`: its head and
/// the body its `Content-Length` or chunked `Transfer-Encoding` frames; with
/// neither, the head alone (so not for a response to HEAD with a length,
/// nor one read until the connection closes). `None` until all of it is
/// there. Meant for what dockhand sends, which is well-formed: the head is
/// read loosely, and a length that is not a number counts as none.
pub fn message_len(bytes: &[u8]) -> Option<usize> {
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let field = |name: &str| {
        head.split("\r\n")
            .filter_map(|line| line.split_once(':'))
            .find(|(field, _)| field.trim() == name)
            .map(|(_, value)| value.trim().to_owned())
    };
    if field("transfer-encoding").is_some_and(|codings| codings.ends_with("chunked")) {
        return chunked_len(&bytes[head_end..]).map(|body| head_end + body);
    }
    let length: usize = field("content-length").map_or(0, |length| length.parse().unwrap_or(0));
    (bytes.len() >= head_end + length).then_some(head_end + length)
}

/// The length of a chunked body (its chunks, last chunk and trailers) at the
/// start of `bytes`, once it is all there.
fn chunked_len(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line_end = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&bytes[at..line_end]);
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailer lines, then the empty line that ends the body.
            loop {
                let end = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some(at);
                }
            }
        }
        at += size + 2;
        if bytes.len() < at {
            return None;
        }
    }
}

/// Sends raw bytes on a new connection and reads until the server closes
/// (at most 10 s).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends raw bytes on a new connection and reads `count` whole responses
/// (fewer if the server closes first, or 10 s pass), each as text.
pub async fn raw_responses(addr: SocketAddr, request: &[u8], count: usize) -> Vec<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut responses = Vec::new();
    let mut pending = Vec::new();
    let mut buffer = [0; 16 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        while let Some(length) = message_len(&pending) {
            let response: Vec<u8> = pending.drain(..length).collect();
            responses.push(String::from_utf8_lossy(&response).into_owned());
        }
        if responses.len() >= count {
            return responses;
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(read @ 1..)) => pending.extend_from_slice(&buffer[..read]),
            _ => return responses,
        }
    }
}

/// An address connections to hang at: a listener whose accept queue is
/// full drops new SYNs, so connecting waits for the connect timeout.
pub struct HangingAddress {
    pub addr: SocketAddr,
    _full: TcpListener,
    _fillers: Vec<TcpStream>,
}

impl HangingAddress {
    pub async fn new() -> HangingAddress {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let full = socket.listen(0).unwrap();
        let addr = full.local_addr().unwrap();
        let mut fillers = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(stream)) =
                tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
            {
                fillers.push(stream);
            }
        }
        HangingAddress {
            addr,
            _full: full,
            _fillers: fillers,
        }
    }

    /// Whether a connection to it is being attempted (a socket of this
    /// machine in `SYN_SENT` towards it, in `/proc/net/tcp`).
    pub fn is_being_connected_to(&self) -> bool {
        let SocketAddr::V4(addr) = self.addr else {
            return false;
        };
        // `/proc/net/tcp` writes the address as the u32 in host order, in hex.
        let remote = format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(addr.ip().octets()),
            addr.port()
        );
        std::fs::read_to_string("/proc/net/tcp")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                Some((*fields.get(2)?, *fields.get(3)?))
            })
            .any(|(to, state)| to == remote && state == "02")
    }
}

/// `{"host": {HOST: {"location": {"/": {"upstream": {ADDR: {}}}}}}}`
pub fn one_route(host: &str, upstream: SocketAddr) -> String {
    serde_json::json!({"host": {host: {"location": {"/": {"upstream": {upstream.to_string(): {}}}}}}})
        .to_string()
}

/// Replaces `path` at once with `contents` (write then rename, as editors do).
pub fn replace_file(path: &std::path::Path, contents: &str) {
    let staging = path.with_extension("tmp");
    std::fs::write(&staging, contents).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

/// The certificates directory's name in a proxy's temporary folder.
const CERTS_DIR: &str = "certs";

/// dockhand's `run` in this process, with its routes file in a temporary folder.
pub struct Proxy {
    pub addr: SocketAddr,
    /// The HTTPS listener, when started with [`Proxy::start_https`].
    pub https: Option<SocketAddr>,
    /// The admin listener, on loopback.
    pub admin: SocketAddr,
    pub routes_path: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), Error>>>,
    _dir: tempfile::TempDir,
}

/// Served from the routes file alone: no Docker. One worker, so what a
/// test counts (upstream connections of a pool, say) does not depend on the
/// machine's CPUs; tests/core/workers.rs asks for more.
pub fn test_settings() -> Settings {
    Settings {
        routes_poll_interval: Duration::from_millis(50),
        docker: None,
        workers: std::num::NonZeroUsize::MIN,
        ..Settings::default()
    }
}

impl Proxy {
    pub async fn start(routes: &str) -> Proxy {
        Proxy::start_with(routes, test_settings()).await
    }

    pub async fn start_with(routes: &str, settings: Settings) -> Proxy {
        Proxy::try_start(routes, settings)
            .await
            .expect("proxy starts")
    }

    /// Starts, or returns the start error (a bad routes file).
    pub async fn try_start(routes: &str, settings: Settings) -> Result<Proxy, Error> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Proxy::try_start_on(listener, routes, settings).await
    }

    /// As `try_start`, serving on `listener`.
    pub async fn try_start_on(
        listener: TcpListener,
        routes: &str,
        settings: Settings,
    ) -> Result<Proxy, Error> {
        Proxy::launch(
            listener,
            None,
            routes,
            settings,
            tempfile::tempdir().unwrap(),
        )
        .await
    }

    /// Serves plain HTTP on `http` and HTTPS on `https`, bound by the
    /// caller (so a test CA can be told the ports first); the certificates
    /// are whatever `settings` gets (ACME, a certificates directory).
    pub async fn start_on(
        http: TcpListener,
        https: TcpListener,
        routes: &str,
        settings: Settings,
    ) -> Proxy {
        Proxy::launch(
            http,
            Some(https),
            routes,
            settings,
            tempfile::tempdir().unwrap(),
        )
        .await
        .expect("proxy starts")
    }

    /// Starts with an HTTPS listener as well (`proxy.https`), serving
    /// `certificates` from a certificates directory (`certs` in the proxy's
    /// temporary folder, given as `--certs-dir`; pair `n` is `<n>.crt` +
    /// `<n>.key`).
    pub async fn start_https(
        routes: &str,
        certificates: &[&ServerIdentity],
        mut settings: Settings,
    ) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let certs_dir = dir.path().join(CERTS_DIR);
        std::fs::create_dir(&certs_dir).unwrap();
        for (n, certificate) in certificates.iter().enumerate() {
            certificate.write_pair(&certs_dir, &n.to_string());
        }
        settings.tls.certs_dir = Some(certs_dir);
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Proxy::launch(http, Some(https), routes, settings, dir)
            .await
            .expect("proxy starts")
    }

    /// The certificates directory of [`Proxy::start_https`], to change its files.
    pub fn certs_dir(&self) -> PathBuf {
        self._dir.path().join(CERTS_DIR)
    }

    async fn launch(
        listener: TcpListener,
        https: Option<TcpListener>,
        routes: &str,
        mut settings: Settings,
        dir: tempfile::TempDir,
    ) -> Result<Proxy, Error> {
        let routes_path = dir.path().join("routes.json");
        std::fs::write(&routes_path, routes).unwrap();
        settings.routes_file = Some(routes_path.clone());
        let addr = listener.local_addr().unwrap();
        let https_addr = https.as_ref().map(|https| https.local_addr().unwrap());
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = admin_listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let mut task = tokio::spawn(dockhand::run(
            Listeners {
                http: listener,
                https,
                admin: Some(admin_listener),
            },
            settings,
            async move {
                let _ = stopped.await;
            },
        ));
        // A bad routes file ends `run` at once; a good one keeps it serving.
        // The admin listener answers only once `run` has read what it reads
        // before serving (the routes file, the certificates directory), so
        // a test that changes those files next changes them after.
        tokio::select! {
            result = &mut task => {
                result.unwrap()?;
                panic!("run returned before shutdown");
            }
            reply = get(admin, "localhost", "/healthz") => {
                assert_eq!(reply.status, StatusCode::OK, "/healthz: {}", reply.text());
            }
        }
        Ok(Proxy {
            addr,
            https: https_addr,
            admin,
            routes_path,
            shutdown: Some(stop),
            task: Some(task),
            _dir: dir,
        })
    }

    /// Replaces the routes file at once (write then rename, as editors do).
    pub fn write_routes(&self, routes: &str) {
        replace_file(&self.routes_path, routes);
    }

    /// Sends this process SIGHUP, as an operator would the binary: every
    /// proxy of the process reads its routes file again.
    pub fn reload(&self) {
        // Installs the process's SIGHUP handler if no watcher did yet
        // (tokio keeps it installed), so the signal can't end the process.
        drop(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).unwrap());
        let status = Command::new("kill")
            .args(["-HUP", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Signals shutdown and waits for `run` to return.
    pub async fn stop(mut self) {
        self.shutdown.take().unwrap().send(()).unwrap();
        self.task.take().unwrap().await.unwrap().unwrap();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// dockhand's plain-HTTP server alone on loopback, serving what `router`
/// holds (for a test that feeds the router, or the TLS state, directly),
/// without DNS; plain HTTP is redirected to `https_port` when given.
pub async fn serve_router(
    router: Arc<Router>,
    registry: Arc<EndpointRegistry>,
    tls: Arc<TlsState>,
    https_port: Option<u16>,
) -> (SocketAddr, JoinHandle<bool>) {
    let state = Arc::new(ProxyState {
        router,
        client: UpstreamClient::new(
            Http1Engine::default(),
            Duration::from_secs(1),
            registry,
            Arc::new(Unconfigured("no DNS in this test".into())),
            Arc::default(),
        ),
        resolve_hints: Arc::new(()),
        upstream_timeout: Duration::from_secs(5),
        upstream_wait: Duration::from_millis(100),
        client_body_timeout: Duration::from_secs(5),
        metrics: Arc::default(),
        tls,
        https_port,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let settings = ServerSettings {
        header_read_timeout: Duration::from_secs(5),
        client_send_timeout: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(1),
        trusted_proxies: Vec::new(),
        http1_engine: Default::default(),
    };
    let server = tokio::spawn(serve(
        listener,
        Transport::Http,
        state,
        settings,
        std::future::pending(),
    ));
    (addr, server)
}

/// A response read whole.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }

    /// The header as the echo backend says it received it.
    pub fn echoed_header(&self, name: &str) -> Option<String> {
        self.json()["headers"][name].as_str().map(str::to_owned)
    }
}

pub async fn read_reply(response: Response<Incoming>) -> Reply {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// An HTTP/1.1 connection of its own to `addr`.
pub async fn http1_connection(
    addr: SocketAddr,
) -> hyper::client::conn::http1::SendRequest<TestBody> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection.with_upgrades());
    sender
}

/// An HTTP/2 prior-knowledge connection of its own to `addr`.
pub async fn h2_connection(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<TestBody> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// `GET path` for `host` over HTTP/2 (the host as the URI's authority).
pub fn h2_get(host: &str, path: &str) -> Request<TestBody> {
    Request::builder()
        .uri(format!("http://{host}{path}"))
        .version(http::Version::HTTP_2)
        .body(empty())
        .unwrap()
}

/// `GET path` with `Host: host` on a new HTTP/1.1 connection.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> Reply {
    send(addr, request("GET", host, path).body(empty()).unwrap()).await
}

pub async fn send(addr: SocketAddr, request: Request<TestBody>) -> Reply {
    let mut sender = http1_connection(addr).await;
    read_reply(sender.send_request(request).await.unwrap()).await
}

pub fn request(method: &str, host: &str, path: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
}

/// The admin listener's `/metrics` text, checked to be served as Prometheus' text format.
pub async fn scrape(admin: SocketAddr) -> String {
    let reply = get(admin, "localhost", "/metrics").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    reply.text()
}

/// The value of the series `series` (name and labels as written), if present.
pub fn value_of(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().expect("a number"))
}

/// Waits until the series has `expected` (a request is counted when its
/// response body ends, just after the client has read it).
pub async fn wait_for_series(admin: SocketAddr, series: &str, expected: f64) {
    eventually(&format!("{series} = {expected}"), || async {
        value_of(&scrape(admin).await, series) == Some(expected)
    })
    .await;
}

/// Polls `check` until it holds, for at most 10 s; it waits for a state, it times nothing.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_within(Duration::from_secs(10), what, check).await;
}

/// As [`eventually`], for at most `limit` (for states that follow a timer of
/// dockhand's own, such as a name's refresh).
pub async fn eventually_within<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never happened within {limit:?}: {what}");
}

/// What a [`RequestLoop`] saw: answers counted by the `x-backend` that gave
/// them, and every failure (no answer, or a status other than 2xx).
#[derive(Debug, Default, Clone)]
pub struct LoadCounts {
    pub sent: usize,
    pub answered_by: std::collections::BTreeMap<String, usize>,
    pub failures: Vec<String>,
}

impl LoadCounts {
    pub fn answered_by(&self, backend: &str) -> usize {
        self.answered_by.get(backend).copied().unwrap_or(0)
    }
}

/// A steady bounded load: `GET /` for one host, one request after another,
/// each on a new connection, from a task of its own until stopped, and at
/// most 20,000 requests or 60 s.
pub struct RequestLoop {
    stop: Arc<std::sync::atomic::AtomicBool>,
    counts: Arc<Mutex<LoadCounts>>,
    task: JoinHandle<()>,
}

impl RequestLoop {
    pub fn start(addr: SocketAddr, host: &str) -> RequestLoop {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let counts = Arc::new(Mutex::new(LoadCounts::default()));
        let (stopped, counted, host) = (stop.clone(), counts.clone(), host.to_owned());
        let task = tokio::spawn(async move {
            let started = std::time::Instant::now();
            while !stopped.load(Ordering::SeqCst)
                && counted.lock().unwrap().sent < 20_000
                && started.elapsed() < Duration::from_secs(60)
            {
                let outcome = try_get(addr, &host).await;
                let mut counts = counted.lock().unwrap();
                counts.sent += 1;
                match outcome {
                    Ok(reply) if reply.status.is_success() => {
                        let backend = reply.header("x-backend").to_owned();
                        *counts.answered_by.entry(backend).or_default() += 1;
                    }
                    Ok(reply) => counts
                        .failures
                        .push(format!("{} {}", reply.status, reply.text())),
                    Err(error) => counts.failures.push(error),
                }
            }
        });
        RequestLoop { stop, counts, task }
    }

    /// The counts so far.
    pub fn counts(&self) -> LoadCounts {
        self.counts.lock().unwrap().clone()
    }

    /// Waits until `count` more requests have been answered (or failed).
    pub async fn wait_for_more(&self, count: usize) {
        let target = self.counts().sent + count;
        eventually(&format!("{count} more requests"), || {
            std::future::ready(self.counts().sent >= target)
        })
        .await;
    }

    /// Stops and returns the counts.
    pub async fn stop(self) -> LoadCounts {
        self.stop.store(true, Ordering::SeqCst);
        let counts = self.counts.clone();
        self.task.await.unwrap();
        let counts = counts.lock().unwrap().clone();
        counts
    }
}

/// `GET /` for `host` on a new connection, any failure as text (10 s limit).
async fn try_get(addr: SocketAddr, host: &str) -> Result<Reply, String> {
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let request = request("GET", host, "/").body(empty()).unwrap();
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| Err("no answer within 10 s".to_owned()))
}

/// Prints a measured figure (`figure: ...`) and appends it to
/// `core-figures.txt` in the tests' temporary folder: figures are reported,
/// never asserted.
pub fn record_figure(line: &str) {
    use std::io::Write;
    eprintln!("figure: {line}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("core-figures.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

/// The dockhand binary, run as a user would, with its stdout captured.
pub struct ProxyProcess {
    pub child: Child,
    pub addr: SocketAddr,
    /// The admin listener, on a loopback port of its own.
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl ProxyProcess {
    pub fn routes_path(&self) -> PathBuf {
        self.dir.path().join("routes.json")
    }

    /// Starts the binary without Docker, with `routes` and `extra` flags, and
    /// waits until it answers.
    pub async fn start(routes: &str, extra: &[&str]) -> ProxyProcess {
        let mut flags = vec!["--no-docker"];
        flags.extend_from_slice(extra);
        ProxyProcess::start_with_flags(routes, &flags).await
    }

    /// As `start`, with exactly the flags given besides the routes, listen
    /// address and log format.
    pub async fn start_with_flags(routes: &str, extra: &[&str]) -> ProxyProcess {
        ProxyProcess::start_with_env(routes, extra, &[]).await
    }

    /// As `start_with_flags`, with environment variables set for the process.
    pub async fn start_with_env(
        routes: &str,
        extra: &[&str],
        env: &[(&str, &std::path::Path)],
    ) -> ProxyProcess {
        let binary = || Command::new(env!("CARGO_BIN_EXE_dockhand"));
        ProxyProcess::spawn(binary, routes, extra, env).await
    }

    /// As `start`, run by a shell that first runs `shell` (`ulimit -Sn
    /// 1024`) and then becomes the binary, keeping its process id.
    pub async fn start_after_shell(shell: &str, routes: &str, extra: &[&str]) -> ProxyProcess {
        let binary = || {
            let mut binary = Command::new("sh");
            binary
                .arg("-c")
                .arg(format!("{shell} && exec \"$0\" \"$@\""))
                .arg(env!("CARGO_BIN_EXE_dockhand"))
                .arg("--no-docker");
            binary
        };
        ProxyProcess::spawn(binary, routes, extra, &[]).await
    }

    /// Starts `binary()` with the routes and flags on two free ports, and
    /// again on two others if a port was taken meanwhile: `free_port` only
    /// says a port was free a moment ago, and the tests' other processes
    /// bind ports (and connect from them) all the time.
    async fn spawn(
        binary: impl Fn() -> Command,
        routes: &str,
        extra: &[&str],
        env: &[(&str, &std::path::Path)],
    ) -> ProxyProcess {
        for _ in 0..PORT_ATTEMPTS {
            let mut process = ProxyProcess::spawn_once(binary(), routes, extra, env);
            if process.listens().await {
                return process;
            }
        }
        panic!("dockhand found a port taken {PORT_ATTEMPTS} times");
    }

    fn spawn_once(
        mut binary: Command,
        routes: &str,
        extra: &[&str],
        env: &[(&str, &std::path::Path)],
    ) -> ProxyProcess {
        let dir = tempfile::tempdir().unwrap();
        let routes_path = dir.path().join("routes.json");
        std::fs::write(&routes_path, routes).unwrap();
        let addr = free_port();
        let admin = free_port();
        let log = std::fs::File::create(dir.path().join("stdout.log")).unwrap();
        let child = binary
            .arg("--routes")
            .arg(&routes_path)
            .arg("--http-listen")
            .arg(addr.to_string())
            .env("DOCKHAND_ADMIN_LISTEN", admin.to_string())
            .arg("--log-format")
            .arg("json")
            .args(extra)
            .envs(env.iter().copied())
            .stdout(log)
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        ProxyProcess {
            child,
            addr,
            admin,
            dir,
        }
    }

    /// Waits until it listens on its ports: its own log says so (a
    /// connection that succeeds may have reached another process that took
    /// the port), and a connection is accepted. `false` if it exited because
    /// it could not listen; any other exit fails the test, with its log.
    async fn listens(&mut self) -> bool {
        // The admin listener is bound last, after HTTP (and HTTPS).
        eventually("the binary listens or exits", || {
            let ended = !matches!(self.child.try_wait(), Ok(None));
            std::future::ready(ended || self.logged("listening for the admin API"))
        })
        .await;
        if let Ok(Some(status)) = self.child.try_wait() {
            assert!(
                self.logged("can't listen"),
                "dockhand exited ({status}):\n{}",
                self.stdout()
            );
            return false;
        }
        let addr = self.addr;
        eventually("the binary accepts", || async {
            TcpStream::connect(addr).await.is_ok()
        })
        .await;
        true
    }

    /// Whether it logged an event whose message starts with `message`.
    fn logged(&self, message: &str) -> bool {
        self.events().iter().any(|event| {
            event["message"]
                .as_str()
                .is_some_and(|text| text.starts_with(message))
        })
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Replaces its routes file at once.
    pub fn write_routes(&self, routes: &str) {
        replace_file(&self.routes_path(), routes);
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout.log")).unwrap()
    }

    /// The JSON events logged so far, in order.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.stdout()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Its events so far other than INFO's (access log, lifecycle), one per
    /// line: what a failed assertion shows of the process's side.
    pub fn unusual_events(&self) -> String {
        self.events()
            .iter()
            .filter(|event| event["level"] != "INFO")
            .map(|event| event.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The access-log event of the first request to `host`, once written.
    pub async fn access_event(&self, host: &str) -> serde_json::Value {
        let mut found = None;
        eventually(&format!("the access-log event for {host}"), || {
            found = self
                .events()
                .into_iter()
                .find(|event| event["target"] == "dockhand::access" && event["host"] == host);
            std::future::ready(found.is_some())
        })
        .await;
        found.unwrap()
    }

    /// The WARN events with `message` logged so far about requests to `host`.
    pub fn warnings(&self, message: &str, host: &str) -> Vec<serde_json::Value> {
        self.events()
            .into_iter()
            .filter(|event| {
                event["level"] == "WARN" && event["message"] == message && event["host"] == host
            })
            .collect()
    }

    /// The process's peak resident memory, from `/proc`.
    pub fn peak_rss_bytes(&self) -> u64 {
        self.proc_status_kib("VmHWM:") * 1024
    }

    /// The process's resident memory now, from `/proc`.
    pub fn rss_bytes(&self) -> u64 {
        self.proc_status_kib("VmRSS:") * 1024
    }

    fn proc_status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// How many file descriptors the process has open, from `/proc`.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    /// Waits for the process to exit, for at most `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the process did not exit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many pairs of free ports `ProxyProcess` tries before it gives up.
const PORT_ATTEMPTS: usize = 3;

/// A loopback port that was free a moment ago (for the binary, which binds itself).
pub fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A loopback address nothing listens on, and nothing will while the tests
/// run: its port stays bound (never listening) until they end, so that no
/// other test's listener takes it, and connecting to it is refused. A port
/// from `free_port` could be taken by a listener started meanwhile.
pub fn refused_address() -> SocketAddr {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let address = socket.local_addr().unwrap().as_socket().unwrap();
    // Held until the tests end.
    std::mem::forget(socket);
    address
}

static CHUNK: [u8; 64 * 1024] = [7; 64 * 1024];

/// What a metered response body has done: the bytes the backend's HTTP
/// server has taken from it (a count that stands still before the end is
/// backpressure), and how many such bodies were dropped before their end
/// (their connection was closed under them).
#[derive(Default)]
pub struct StreamMeter {
    taken: AtomicU64,
    cut: AtomicUsize,
    ended: AtomicUsize,
}

impl StreamMeter {
    /// Bodies whose last byte was taken.
    pub fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }

    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::SeqCst)
    }

    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }
}

/// A body of `total` bytes in 64 KiB chunks, made as it is taken and
/// counted in `meter`.
pub fn metered_body(total: u64, meter: Arc<StreamMeter>) -> TestBody {
    MeteredBody { left: total, meter }.boxed_unsync()
}

struct MeteredBody {
    left: u64,
    meter: Arc<StreamMeter>,
}

impl hyper::body::Body for MeteredBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let length = self.left.min(CHUNK.len() as u64);
        self.left -= length;
        self.meter.taken.fetch_add(length, Ordering::SeqCst);
        if self.left == 0 {
            self.meter.ended.fetch_add(1, Ordering::SeqCst);
        }
        let chunk = Bytes::from_static(&CHUNK[..length as usize]);
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        if self.left > 0 {
            self.meter.cut.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// An HTTP/1.1 client that sends `GET /` to `host` and, once the response head has
/// arrived, reads nothing more. Its receive buffer is kept small (16 KiB),
/// so what the kernel holds for it does not hide dockhand's share.
pub async fn stalled_reader(addr: SocketAddr, host: &str) -> TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        answer.push(stream.read_u8().await.unwrap());
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    stream
}

/// Waits until `count` has stood still for a second (sampled every 100 ms,
/// for at most 30 s), and returns it. It waits for a state; it times nothing.
pub async fn settled(count: impl Fn() -> u64) -> u64 {
    let mut last = count();
    let mut still = 0;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = count();
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if still == 10 {
            return now;
        }
    }
    panic!("the count never settled: {last}");
}
