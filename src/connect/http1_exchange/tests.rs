//! The exchange against real loopback upstreams that answer with scripted
//! bytes, so what dockhand writes, and how it reads what comes back, are
//! seen exactly (RFC 9112).

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::connect::dial::{Dialing, PoolKey};
use crate::connect::srv::SrvResolvers;
use crate::connect::SetFields;
use crate::resolve::Unconfigured;
use crate::upstream::{EndpointRegistry, Transport};

fn connector() -> Connector {
    Connector {
        key: Arc::new(PoolKey {
            transport: Transport::Http1,
            destination: None,
        }),
        dialing: Arc::new(Dialing {
            connect_timeout: Duration::from_secs(5),
            registry: Arc::new(EndpointRegistry::new()),
            tls: OnceLock::new(),
            srv: SrvResolvers {
                system: Arc::new(Unconfigured("no DNS here".into())),
                resolvers: Mutex::new(HashMap::new()),
                metrics: Arc::default(),
            },
        }),
    }
}

/// An upstream that answers each connection's requests with the next of
/// `answers` (one per request, read as a head and what its length says),
/// and records what each connection received. An answer that ends with
/// `THEN_CLOSE` is sent without it, and the connection closed after it.
/// What an upstream answers: `script(connection index, request index)`
/// gives the answer, or `None` to close the connection instead.
type Script = fn(usize, usize) -> Option<&'static [u8]>;

struct Upstream {
    address: SocketAddr,
    /// Per connection accepted, the bytes it received, in order.
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Upstream {
    async fn start(script: Script) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let record = received.clone();
        tokio::spawn(async move {
            let mut connections = 0;
            while let Ok((stream, _)) = listener.accept().await {
                let index = connections;
                connections += 1;
                record.lock().unwrap().push(Vec::new());
                tokio::spawn(serve(stream, index, script, record.clone()));
            }
        });
        Upstream { address, received }
    }

    fn received(&self) -> Vec<String> {
        let received = self.received.lock().unwrap();
        received
            .iter()
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .collect()
    }
}

async fn serve(
    mut stream: TcpStream,
    connection: usize,
    script: Script,
    record: Arc<Mutex<Vec<Vec<u8>>>>,
) {
    let mut pending = Vec::new();
    for request in 0.. {
        // One request: its head, then its body as its length says.
        loop {
            if let Some(end) = find(&pending, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&pending[..end]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .and_then(|length| length.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let chunked = head.contains("transfer-encoding: chunked");
                let body_end = if chunked {
                    find(&pending[end + 4..], b"0\r\n").and_then(|zero| {
                        find(&pending[end + 4 + zero..], b"\r\n\r\n")
                            .map(|last| end + 4 + zero + last + 4)
                    })
                } else {
                    Some(end + 4 + length).filter(|&body_end| body_end <= pending.len())
                };
                if let Some(body_end) = body_end {
                    record.lock().unwrap()[connection].extend_from_slice(&pending[..body_end]);
                    pending.drain(..body_end);
                    break;
                }
            }
            let mut read = [0; 4096];
            match stream.read(&mut read).await {
                Ok(0) | Err(_) => return,
                Ok(count) => pending.extend_from_slice(&read[..count]),
            }
        }
        match script(connection, request) {
            Some(answer) => {
                let cut = answer.strip_suffix(THEN_CLOSE);
                if stream.write_all(cut.unwrap_or(answer)).await.is_err() || cut.is_some() {
                    return;
                }
            }
            None => return,
        }
    }
}

/// Ends a scripted answer: the upstream closes the connection once it has
/// sent what comes before (an upstream that crashed while answering).
const THEN_CLOSE: &[u8] = b"<then close>";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn get(upstream: &Upstream, path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .uri(format!("http://{}{path}", upstream.address))
        .header("host", "app.test")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// `exchange` of `request`'s head, kept as a handler keeps it, and body.
async fn exchange_request<B>(
    connector: Connector,
    address: SocketAddr,
    request: Request<B>,
) -> Result<Response<Http1Body>, ExchangeError>
where
    B: Body<Data = Bytes> + Unpin + Send + Sync + 'static,
    B::Error: Into<Cause> + Send,
{
    exchange_with(connector, address, request, &SetFields::default(), &[]).await
}

/// The same with fields `set` by dockhand and `added` by the endpoint.
async fn exchange_with<B>(
    connector: Connector,
    address: SocketAddr,
    request: Request<B>,
    set: &SetFields<'_>,
    added: &[(HeaderName, HeaderValue)],
) -> Result<Response<Http1Body>, ExchangeError>
where
    B: Body<Data = Bytes> + Unpin + Send + Sync + 'static,
    B::Error: Into<Cause> + Send,
{
    let (parts, body) = request.into_parts();
    let head = Outgoing {
        method: &parts.method,
        target: parts.uri.path_and_query().map_or("/", |path| path.as_str()),
        headers: &parts.headers,
        set: set.as_ref(),
        added,
    };
    exchange(&connector, address, head, body).await
}

async fn body_of(response: Response<Http1Body>) -> (Bytes, Option<HeaderMap>) {
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (collected.to_bytes(), trailers)
}

#[tokio::test]
async fn a_request_head_is_written_as_given_and_the_connection_is_reused() {
    let upstream =
        Upstream::start(|_, _| Some(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")).await;
    let connector = connector();
    for path in ["/a?x=1", "/b"] {
        let response = exchange_request(connector.clone(), upstream.address, get(&upstream, path))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-length"], "5");
        assert_eq!(body_of(response).await.0, "hello");
    }
    assert_eq!(
        upstream.received(),
        ["GET /a?x=1 HTTP/1.1\r\nhost: app.test\r\n\r\nGET /b HTTP/1.1\r\nhost: app.test\r\n\r\n"],
        "both requests on one connection, kept between them"
    );
}

static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

#[tokio::test]
async fn set_fields_and_then_the_endpoint_s_replace_the_request_s_and_the_framing_is_said_once() {
    let upstream = Upstream::start(|_, _| Some(b"HTTP/1.1 204 No Content\r\n\r\n")).await;
    let forwarded_for = HeaderValue::from_static("192.0.2.7");
    let mut set = SetFields::default();
    set.set(
        &header::HOST,
        Some(Cow::Owned(HeaderValue::from_static("set.test"))),
    );
    set.set(&X_REAL_IP, None);
    set.set_borrowed(&X_FORWARDED_FOR, Some(&forwarded_for));
    let added = [
        (header::HOST, HeaderValue::from_static("inside.test")),
        (
            HeaderName::from_static("x-env"),
            HeaderValue::from_static("prod"),
        ),
    ];
    let with_body = |length: &str, body: &'static [u8]| {
        Request::builder()
            .method("POST")
            .uri(format!("http://{}/form", upstream.address))
            .header("host", "app.test")
            .header("content-length", length)
            .header("x-kept", "yes")
            .header("x-real-ip", "6.6.6.6")
            .header("x-forwarded-for", "6.6.6.6")
            .body(Full::new(Bytes::from_static(body)))
            .unwrap()
    };
    // A length given in another form, a body that has ended (sent as none,
    // its length still said), and a known size not given.
    let address = upstream.address;
    exchange_with(connector(), address, with_body("003", b"abc"), &set, &added)
        .await
        .unwrap();
    exchange_with(connector(), address, with_body("0", b""), &set, &[])
        .await
        .unwrap();
    let mut unsaid = with_body("0", b"abcd");
    unsaid.headers_mut().remove("content-length");
    exchange_with(connector(), address, unsaid, &SetFields::default(), &[])
        .await
        .unwrap();
    assert_eq!(
        upstream.received(),
        ["POST /form HTTP/1.1\r\nx-kept: yes\r\nx-forwarded-for: 192.0.2.7\r\nhost: inside.test\r\nx-env: prod\r\ncontent-length: 3\r\n\r\nabc\
          POST /form HTTP/1.1\r\nx-kept: yes\r\nhost: set.test\r\nx-forwarded-for: 192.0.2.7\r\ncontent-length: 0\r\n\r\n\
          POST /form HTTP/1.1\r\nhost: app.test\r\nx-forwarded-for: 6.6.6.6\r\nx-kept: yes\r\nx-real-ip: 6.6.6.6\r\ncontent-length: 4\r\n\r\nabcd"],
    );
}

#[tokio::test]
async fn fields_about_the_upstream_connection_alone_are_not_passed_on() {
    let upstream = Upstream::start(|_, request| {
        Some(match request {
            0 => b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-Kept: 1\r\nContent-Length: 0\r\n\r\n",
            _ => b"HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nX-Secret: 1\r\nContent-Length: 0\r\n\r\n",
        })
    })
    .await;
    let connector = connector();
    let options = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    let names: Vec<&str> = options.headers().keys().map(|name| name.as_str()).collect();
    assert_eq!(names, ["x-kept", "content-length"]);
    // Left for the proxy's hop-by-hop removal, which reads what it names.
    let naming = exchange_request(connector, upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    let names: Vec<&str> = naming.headers().keys().map(|name| name.as_str()).collect();
    assert_eq!(names, ["connection", "x-secret", "content-length"]);
}

#[tokio::test]
async fn the_wait_for_an_answer_holds_no_read_buffer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let request = Request::builder()
        .uri(format!("http://{address}/"))
        .header("host", "app.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    // On this test's thread, whose free list of buffers starts empty.
    let exchange = tokio::spawn(exchange_request(connector(), address, request));
    let (mut stream, _) = listener.accept().await.unwrap();
    let mut head = Vec::new();
    while find(&head, b"\r\n\r\n").is_none() {
        let mut bytes = [0; 256];
        let count = stream.read(&mut bytes).await.unwrap();
        assert_ne!(count, 0);
        head.extend_from_slice(&bytes[..count]);
    }
    // The head was written and its answer read for, in one poll: the
    // buffer lent for that read is back in the free list.
    assert_eq!(crate::http1::buffers::kept(), 1);
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        .await
        .unwrap();
    let response = exchange.await.unwrap().unwrap();
    assert_eq!(body_of(response).await.0, "ok");
}

#[tokio::test]
async fn a_chunked_response_is_decoded_with_its_trailers_and_interim_answers_are_read_past() {
    let upstream = Upstream::start(|_, _| {
        Some(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: grpc-status\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\ngrpc-status: 0\r\n\r\n")
    })
    .await;
    let connector = connector();
    for _ in 0..2 {
        let response = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let (body, trailers) = body_of(response).await;
        assert_eq!(body, "hello world");
        assert_eq!(trailers.unwrap()["grpc-status"], "0");
    }
    assert_eq!(upstream.received().len(), 1, "the connection was kept");
}

/// The first connection answers once (`a`), then closes instead of
/// answering again; later connections answer `b`.
fn answers_then_closes_on_reuse(connection: usize, request: usize) -> Option<&'static [u8]> {
    match (connection, request) {
        (0, 0) => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"),
        (0, _) => None,
        _ => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"),
    }
}

#[tokio::test]
async fn a_kept_connection_the_upstream_closed_is_replaced_for_a_bodyless_request() {
    // The first connection answers once, then closes instead of answering
    // again (an upstream's keep-alive timeout, just as it is reused).
    let upstream = Upstream::start(answers_then_closes_on_reuse).await;
    let connector = connector();
    let first = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    assert_eq!(body_of(first).await.0, "a");
    let second = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    assert_eq!(body_of(second).await.0, "b");
    assert_eq!(
        upstream.received().len(),
        2,
        "sent again on a new connection"
    );
}

#[tokio::test]
async fn a_body_without_a_length_is_read_until_close_and_the_connection_not_kept() {
    let upstream = Upstream::start(|_, _| Some(b"HTTP/1.0 200 OK\r\n\r\nuntil close")).await;
    let connector = connector();
    // The upstream keeps its end open after answering: what it sent is the
    // body so far, and dockhand waits for more or the close.
    let response = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    assert_eq!(response.version(), http::Version::HTTP_10);
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "until close");
    assert!(!body.is_end_stream());
    drop(body);
    let again = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    drop(again);
    assert_eq!(upstream.received().len(), 2, "never reused");
}

#[tokio::test]
async fn a_streamed_body_of_unknown_length_is_sent_chunked_with_its_declared_trailers() {
    let upstream = Upstream::start(|_, _| Some(b"HTTP/1.1 204 No Content\r\n\r\n")).await;
    let mut trailers = HeaderMap::new();
    trailers.insert("checksum", "abc".parse().unwrap());
    trailers.insert("content-length", "3".parse().unwrap());
    let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
        Ok(Frame::data(Bytes::from_static(b"abc"))),
        Ok(Frame::data(Bytes::from(vec![b'x'; 20]))),
        Ok(Frame::trailers(trailers)),
    ];
    let request = Request::builder()
        .method("POST")
        .uri(format!("http://{}/upload", upstream.address))
        .header("host", "app.test")
        .header("trailer", "checksum")
        .body(StreamBody::new(futures_util::stream::iter(frames)))
        .unwrap();
    let response = exchange_request(connector(), upstream.address, request)
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert!(response.body().is_end_stream());
    assert_eq!(
        upstream.received(),
        ["POST /upload HTTP/1.1\r\nhost: app.test\r\ntrailer: checksum\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n14\r\nxxxxxxxxxxxxxxxxxxxx\r\n0\r\nchecksum: abc\r\n\r\n"],
        "RFC 9112 §7.1: sizes in hex; §7.1.2: no framing field as a trailer"
    );
}

#[tokio::test]
async fn an_answer_before_the_whole_body_is_read_is_the_answer() {
    // The upstream answers 413 as soon as it has the head, and reads nothing more.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = vec![0; 1024];
        let _ = stream.read(&mut head).await;
        let _ = stream
            .write_all(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n")
            .await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let body = Full::new(Bytes::from(vec![b'x'; 32 * 1024 * 1024]));
    let request = Request::builder()
        .method("PUT")
        .uri(format!("http://{address}/big"))
        .header("content-length", (32 * 1024 * 1024).to_string())
        .body(body)
        .unwrap();
    let response = tokio::time::timeout(
        Duration::from_secs(20),
        exchange_request(connector(), address, request),
    )
    .await
    .expect("the answer is not held behind the body")
    .unwrap();
    assert_eq!(response.status(), 413);
}

#[tokio::test]
async fn what_is_not_an_http_response_or_too_large_a_head_is_told_apart() {
    let garbage = Upstream::start(|_, _| Some(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")).await;
    let error = exchange_request(connector(), garbage.address, get(&garbage, "/"))
        .await
        .unwrap_err();
    assert!(matches!(error, ExchangeError::NotHttp(_)), "{error:?}");

    static HUGE: OnceLock<Vec<u8>> = OnceLock::new();
    let huge = Upstream::start(|_, _| {
        Some(HUGE.get_or_init(|| {
            let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
            for index in 0..2000 {
                head.extend_from_slice(
                    format!("x-filler-{index}: {}\r\n", "v".repeat(40)).as_bytes(),
                );
            }
            head.extend_from_slice(b"\r\n");
            head
        }))
    })
    .await;
    let error = exchange_request(connector(), huge.address, get(&huge, "/"))
        .await
        .unwrap_err();
    assert!(matches!(error, ExchangeError::HeadTooLarge), "{error:?}");
}

#[test]
fn chunk_size_lines_are_hex() {
    for (size, line) in [
        (0, "0\r\n"),
        (10, "A\r\n"),
        (4096, "1000\r\n"),
        (usize::MAX, "FFFFFFFFFFFFFFFF\r\n"),
    ] {
        assert_eq!(ChunkSizeLine::new(size).as_bytes(), line.as_bytes());
    }
}

#[tokio::test]
async fn a_connection_with_bytes_after_the_body_or_a_body_left_unread_is_not_kept() {
    // The first answer says 2 bytes and sends 3: the third answers nothing.
    let upstream = Upstream::start(|connection, _| match connection {
        0 => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokX"),
        _ => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789"),
    })
    .await;
    let connector = connector();
    let first = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    assert_eq!(body_of(first).await.0, "ok");
    // Dropped before its end, as when the client goes away.
    let unread = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    drop(unread);
    let last = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
        .await
        .unwrap();
    assert_eq!(body_of(last).await.0, "0123456789");
    assert_eq!(upstream.received().len(), 3, "a new connection each time");
}

/// What the upstream got on each connection, as a count of request lines.
fn requests_per_connection(upstream: &Upstream, method: &str) -> Vec<usize> {
    upstream
        .received()
        .iter()
        .map(|received| received.matches(&format!("{method} / HTTP/1.1")).count())
        .collect()
}

/// A request is sent again on a new connection only when the kept one
/// returned nothing at all: an answer cut part way (a head begun, or an
/// interim `1xx` and then the close) shows the upstream had the request,
/// and may have acted on it (RFC 9110 §9.2.2).
#[tokio::test]
async fn a_request_is_not_sent_again_once_part_of_an_answer_came_back() {
    // The first connection answers its first request, then part of an
    // answer to the second before it closes; later ones answer whole.
    let cuts: [Script; 2] = [
        |connection, request| match (connection, request) {
            (0, 0) => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"),
            (0, _) => Some(b"HTTP/1.1 200 OK\r\nContent-Le<then close>"),
            _ => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"),
        },
        |connection, request| match (connection, request) {
            (0, 0) => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"),
            (0, _) => Some(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n<then close>"),
            _ => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"),
        },
    ];
    for cut in cuts {
        let upstream = Upstream::start(cut).await;
        let connector = connector();
        let first = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
            .await
            .unwrap();
        assert_eq!(body_of(first).await.0, "a");
        let error = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
            .await
            .expect_err("the cut answer is the outcome");
        assert!(matches!(error, ExchangeError::CutAnswer(_)), "{error:?}");
        assert_eq!(requests_per_connection(&upstream, "GET"), [2], "sent once");
    }
}

/// RFC 9110 §9.2.2: a proxy must not retry a request whose method is not
/// idempotent by itself. A bodyless POST on a kept connection that the
/// upstream closed without a word may still have been acted on.
#[tokio::test]
async fn a_bodyless_post_is_not_sent_again_after_a_kept_connection_closed() {
    let upstream = Upstream::start(answers_then_closes_on_reuse).await;
    let connector = connector();
    let post = || {
        Request::builder()
            .method("POST")
            .uri(format!("http://{}/", upstream.address))
            .header("host", "app.test")
            .header("content-length", "0")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let first = exchange_request(connector.clone(), upstream.address, post())
        .await
        .unwrap();
    assert_eq!(body_of(first).await.0, "a");
    let error = exchange_request(connector.clone(), upstream.address, post())
        .await
        .expect_err("the close is the outcome");
    assert!(matches!(error, ExchangeError::Closed), "{error:?}");
    assert_eq!(requests_per_connection(&upstream, "POST"), [2], "sent once");
}

/// A connection kept by a thread that is not one of the runtime's workers
/// (here the thread of `block_on`; on a multi-thread runtime, as a caller
/// of the library may run, any worker whose sweeper is woken on another)
/// is still swept: the sweeper must sweep the pool it was started for, not
/// that of the thread it happens to run on, or a connection the upstream
/// closed stays open (a file descriptor in CLOSE_WAIT) until a request to
/// it comes again.
#[test]
fn a_kept_connection_is_swept_whichever_thread_the_sweeper_runs_on() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let upstream = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = vec![0; 1024];
            let _ = stream.read(&mut head).await.unwrap();
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            // The upstream's keep-alive timeout: it closes its side, and
            // waits to see dockhand close its own.
            tokio::time::sleep(Duration::from_millis(200)).await;
            stream.shutdown().await.unwrap();
            tokio::time::timeout(Duration::from_secs(10), stream.read(&mut head)).await
        });
        let request = Request::builder()
            .uri(format!("http://{address}/"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = exchange_request(connector(), address, request)
            .await
            .unwrap();
        assert_eq!(
            body_of(response).await.0,
            "ok",
            "and the connection is kept"
        );
        let closed = upstream.await.unwrap();
        assert!(
            matches!(closed, Ok(Ok(0))),
            "dockhand closes the connection the upstream closed: {closed:?}"
        );
    });
}

/// RFC 9110 §15.2.2 and §9.3.6: after a `101` the connection speaks another
/// protocol, and after a `2xx` to `CONNECT` it is a tunnel; either way it
/// carries no further HTTP/1.1 request, and the answer has no body (the
/// proxy refuses a switch nobody asked for). hyper's client never reuses
/// such a connection either.
#[tokio::test]
async fn a_connection_that_switched_protocols_or_became_a_tunnel_is_not_kept() {
    let switches: [(&str, Script); 2] = [
        ("GET", |connection, _| {
            match connection {
            0 => Some(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
            _ => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew"),
        }
        }),
        ("CONNECT", |connection, _| match connection {
            0 => Some(b"HTTP/1.1 200 Connection established\r\nContent-Length: 9\r\n\r\n"),
            _ => Some(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew"),
        }),
    ];
    for (method, switch) in switches {
        let upstream = Upstream::start(switch).await;
        let connector = connector();
        let request = Request::builder()
            .method(method)
            .uri(format!("http://{}/", upstream.address))
            .header("host", "app.test")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let switched = exchange_request(connector.clone(), upstream.address, request)
            .await
            .unwrap();
        assert!(switched.body().is_end_stream(), "{method}: no body");
        drop(switched);
        let next = exchange_request(connector.clone(), upstream.address, get(&upstream, "/"))
            .await
            .unwrap();
        assert_eq!(body_of(next).await.0, "new", "{method}");
        assert_eq!(upstream.received().len(), 2, "{method}: a new connection");
    }
}

/// RFC 9110 §6.5.1: fields that authenticate, control caching or describe
/// the content are evaluated before the content, so they are never sent
/// as trailers (hyper's client drops the same ones).
#[tokio::test]
async fn trailers_that_must_come_before_the_content_are_not_sent() {
    let upstream = Upstream::start(|_, _| Some(b"HTTP/1.1 204 No Content\r\n\r\n")).await;
    let mut trailers = HeaderMap::new();
    for (name, value) in [
        ("authorization", "Bearer late"),
        ("cache-control", "no-store"),
        ("content-range", "bytes 0-1/2"),
        ("max-forwards", "1"),
        ("set-cookie", "a=b"),
        ("checksum", "abc"),
    ] {
        trailers.insert(name, value.parse().unwrap());
    }
    let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
        Ok(Frame::data(Bytes::from_static(b"abc"))),
        Ok(Frame::trailers(trailers)),
    ];
    let request = Request::builder()
        .method("POST")
        .uri(format!("http://{}/upload", upstream.address))
        .body(StreamBody::new(futures_util::stream::iter(frames)))
        .unwrap();
    let response = exchange_request(connector(), upstream.address, request)
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let received = upstream.received().concat();
    assert!(
        received.ends_with("\r\n\r\n3\r\nabc\r\n0\r\nchecksum: abc\r\n\r\n"),
        "{received}"
    );
}

/// An upstream may answer before the request body is whole and go on
/// reading it (a streaming echo, Node's `req.pipe(res)`): the rest of the
/// body must still be sent, as hyper's client does (RFC 9112 §9.5 stops
/// only for an answer that refuses the body). The exchange stopped writing
/// at the answer's head, so such an upstream waits for the body's end, and the
/// response for the upstream: both stall.
#[tokio::test]
async fn a_request_body_is_still_sent_after_an_early_response_head() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut read = [0; 4096];
        let mut answered = false;
        // The head is answered at once; the answer ends once the body has.
        while let Ok(count @ 1..) = stream.read(&mut read).await {
            seen.extend_from_slice(&read[..count]);
            if !answered && find(&seen, b"\r\n\r\n").is_some() {
                answered = true;
                let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
                stream.write_all(head).await.unwrap();
            }
            if find(&seen, b"pong").is_some() {
                stream
                    .write_all(b"8\r\npingpong\r\n0\r\n\r\n")
                    .await
                    .unwrap();
                return;
            }
        }
    });
    let (send, mut receive) = tokio::sync::mpsc::channel(1);
    send.send(Ok::<_, std::convert::Infallible>(Frame::data(
        Bytes::from_static(b"ping"),
    )))
    .await
    .unwrap();
    tokio::spawn(async move {
        // The rest of the body comes once the upstream has answered.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = send
            .send(Ok(Frame::data(Bytes::from_static(b"pong"))))
            .await;
    });
    let request = Request::builder()
        .method("POST")
        .uri(format!("http://{address}/"))
        .body(StreamBody::new(futures_util::stream::poll_fn(move |cx| {
            receive.poll_recv(cx)
        })))
        .unwrap();
    let response = exchange_request(connector(), address, request)
        .await
        .unwrap();
    let body = tokio::time::timeout(Duration::from_secs(10), body_of(response))
        .await
        .expect("the body's end came and the answer ended");
    assert_eq!(body.0, "pingpong");
}
