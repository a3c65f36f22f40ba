//! Slow clients: a client that stops reading a large response holds a
//! bounded share of dockhand's memory while the upstream's writes block,
//! and is cut after `--client-send-timeout`, its upstream connection
//! released; clients that trickle their request heads are cut at
//! `--header-read-timeout`, and a thousand of them keep no one else from
//! being served.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use http::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::raw_h2::{
    frame, header_block, request_fields, settings, window_update, END_HEADERS, END_STREAM, HEADERS,
    INITIAL_WINDOW_SIZE, PREFACE,
};
use crate::support::*;

const MIB: u64 = 1024 * 1024;

/// The streamed responses the tests below leave unread.
const RESPONSE_BYTES: u64 = 100 * MIB;

/// What one response nobody reads may leave in dockhand's memory, every
/// buffer on its way included. Over HTTP/1.1 that is the upstream
/// connection's read buffer (64 KiB, and one more read: at most 128 KiB),
/// the frame in hand, and the client connection's queue (128 KiB), so at
/// most 384 KiB, with room for the allocator's slack (peak resident memory
/// is measured on a shared machine); HTTP/2's windows and send buffer are
/// smaller. It is about 0.35 MiB; with hyper's defaults it was about
/// 1.1 MiB over HTTP/1.1 and 1.4 MiB over HTTP/2, both over this bound.
const PER_RESPONSE_BOUND: u64 = 768 * 1024;

/// How many unread responses the memory is measured over.
const STALLED: u64 = 20;

/// A backend whose every answer is `RESPONSE_BYTES` streamed, metered.
async fn streaming_backend() -> (Backend, Arc<StreamMeter>) {
    let meter = Arc::new(StreamMeter::default());
    let backend = Backend::start({
        let meter = meter.clone();
        move |_request| {
            let meter = meter.clone();
            async move { Response::new(metered_body(RESPONSE_BYTES, meter)) }
        }
    })
    .await;
    (backend, meter)
}

/// Opens `STALLED` responses with `open_unread` through the binary, then
/// checks that the backend's writes stand still with most of each response
/// unsent, and that dockhand holds at most `PER_RESPONSE_BOUND` for each.
async fn assert_unread_responses_bounded<F, Fut, C>(open_unread: F)
where
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = C>,
{
    let (backend, meter) = streaming_backend().await;
    let process = ProxyProcess::start(&one_route("example.com", backend.addr), &[]).await;
    let before = process.rss_bytes();
    let mut clients = Vec::new();
    for _ in 0..STALLED {
        clients.push(open_unread(process.addr).await);
    }
    let taken = settled(|| meter.taken()).await;
    let grown = process.peak_rss_bytes().saturating_sub(before);
    println!(
        "{STALLED} unread responses: dockhand grew {} KiB ({} KiB each); the backend handed over {} KiB of each",
        grown / 1024,
        grown / STALLED / 1024,
        taken / STALLED / 1024
    );
    assert_eq!(meter.ended(), 0, "a response nobody reads was sent whole");
    // Most of what the backend handed over sits in the kernel's socket
    // buffers on both hops.
    assert!(
        taken < STALLED * RESPONSE_BYTES / 2,
        "the backend was not held back: {} MiB taken of {} MiB",
        taken / MIB,
        STALLED * RESPONSE_BYTES / MIB
    );
    assert!(
        grown <= STALLED * PER_RESPONSE_BOUND,
        "{} KiB per unread response, over the bound of {} KiB",
        grown / STALLED / 1024,
        PER_RESPONSE_BOUND / 1024
    );
    assert_eq!(meter.cut(), 0, "within the send timeout, nobody is cut");
}

#[tokio::test]
async fn http1_clients_that_stop_reading_hold_a_bounded_share_and_hold_the_upstream_back() {
    assert_unread_responses_bounded(|addr| stalled_reader(addr, "example.com")).await;
}

/// A response on an HTTP/2 connection of its own whose body is not polled:
/// a client of the `h2` crate reads its socket, but grants no window for
/// it, so the stall is the stream's.
async fn unread_h2_stream(addr: SocketAddr) -> impl Send {
    let mut sender = h2_connection(addr).await;
    let request = request("GET", "example.com", "/").body(empty()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    (sender, response)
}

#[tokio::test]
async fn http2_streams_nobody_reads_hold_a_bounded_share_and_hold_the_upstream_back() {
    assert_unread_responses_bounded(unread_h2_stream).await;
}

/// An HTTP/2 client (prior knowledge, raw frames) that sends `GET /` to
/// `host` with every window opened wide, then reads nothing at all: the
/// socket-level stall of an HTTP/2 connection. Its receive buffer is as
/// small as `stalled_reader`'s.
async fn stalled_h2_reader(addr: SocketAddr, host: &str) -> TcpStream {
    const MAX_WINDOW: u32 = (1 << 31) - 1;
    let mut bytes = PREFACE.to_vec();
    bytes.extend(settings(&[(INITIAL_WINDOW_SIZE, MAX_WINDOW)]));
    bytes.extend(window_update(0, MAX_WINDOW - 65_535));
    let block = header_block(&request_fields("GET", host));
    bytes.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &block));
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    stream
}

/// Waits until the peer has closed or reset `stream`, reading what it
/// still sends; at most 30 s.
async fn assert_closed_by_peer(stream: &mut TcpStream, what: &str) {
    let mut buffer = vec![0; 64 * 1024];
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(1..) = stream.read(&mut buffer).await {}
    })
    .await;
    assert!(closed.is_ok(), "{what}: the connection is still open");
}

#[tokio::test]
async fn a_client_that_accepts_nothing_is_cut_after_the_send_timeout_and_its_upstream_released() {
    let (backend, meter) = streaming_backend().await;
    let routes = serde_json::json!({"host": {
        "h1.test": {"location": {"/": {"upstream": {backend.addr.to_string(): {}}}}},
        "h2.test": {"location": {"/": {"upstream": {backend.addr.to_string(): {}}}}}
    }});
    let process = ProxyProcess::start(&routes.to_string(), &["--client-send-timeout", "1s"]).await;
    let mut h1 = stalled_reader(process.addr, "h1.test").await;
    let mut h2 = stalled_h2_reader(process.addr, "h2.test").await;

    for host in ["h1.test", "h2.test"] {
        // Written when the response ended: the client was cut.
        let event = process.access_event(host).await;
        assert_eq!(event["status"], 200, "{event}");
        assert_eq!(event["error"], "client_send_timeout", "{event}");
        assert!(
            event["cause"]
                .as_str()
                .unwrap()
                .contains("accepted no bytes for 1s (--client-send-timeout)"),
            "{event}"
        );
        assert!(event["bytes_out"].as_u64().unwrap() < RESPONSE_BYTES);
    }
    assert_closed_by_peer(&mut h1, "HTTP/1.1").await;
    assert_closed_by_peer(&mut h2, "HTTP/2").await;
    // The upstream connections were closed under the backend's bodies.
    eventually("both upstream connections are released", || {
        std::future::ready(meter.cut() == 2)
    })
    .await;
    assert_eq!(meter.ended(), 0);
}

/// Sends `bytes` one every 200 ms, then waits, until the server closes the
/// connection; returns how long it was open and what the server sent.
/// `open` counts the connections open now. At most 60 s.
async fn trickle(addr: SocketAddr, bytes: &[u8], open: &AtomicUsize) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    open.fetch_add(1, Ordering::SeqCst);
    let mut unsent = bytes.iter();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let limit = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(limit);
    let (mut answer, mut buffer) = (Vec::new(), [0; 1024]);
    loop {
        tokio::select! {
            read = stream.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
            },
            _ = tick.tick() => {
                if let Some(byte) = unsent.next() {
                    if stream.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                }
            }
            () = &mut limit => panic!("still open after 60 s"),
        }
    }
    open.fetch_sub(1, Ordering::SeqCst);
    (started.elapsed(), answer)
}

/// A request head that takes a trickler a minute to send.
fn endless_head() -> Vec<u8> {
    let mut head = b"GET / HTTP/1.1\r\nHost: example.com\r\nX-Slow: ".to_vec();
    head.resize(head.len() + 300, b'a');
    head
}

/// hyper times each HTTP/1.1 request head, but nothing before the first
/// one: neither the bytes that tell HTTP/1.1 from HTTP/2 nor an HTTP/2
/// connection's first request. Each of these clients is cut at the header
/// timeout too.
#[tokio::test]
async fn clients_that_send_nothing_or_only_a_preface_are_cut_at_the_header_timeout() {
    let backend = Backend::echo("a").await;
    let process = ProxyProcess::start(
        &one_route("example.com", backend.addr),
        &["--header-read-timeout", "1s"],
    )
    .await;
    let open = AtomicUsize::new(0);
    // The preface whole, then an empty SETTINGS frame (RFC 9113 §3.4), and no request.
    let mut idle_h2 = PREFACE.to_vec();
    idle_h2.extend(settings(&[]));
    let clients = [
        ("sends nothing", Vec::new()),
        ("trickles the HTTP/2 preface", PREFACE.to_vec()),
        ("opens HTTP/2 and asks nothing", idle_h2),
        ("trickles an HTTP/1.1 head", endless_head()),
    ];
    for (what, bytes) in clients {
        let (open_for, answer) = trickle(process.addr, &bytes, &open).await;
        assert!(open_for >= Duration::from_secs(1), "{what}: cut early");
        let answer = String::from_utf8_lossy(&answer);
        assert!(!answer.contains("HTTP/1.1 200"), "{what}: {answer}");
    }
    assert_eq!(backend.connection_count(), 0);
}

/// 1,000 clients trickle request heads (a byte every 200 ms) while 100
/// ordinary requests are sent: every ordinary one is answered `200` (each
/// within a generous 30 s) while all the tricklers are still connected, and
/// every trickler is cut at the header timeout (8 s), never before.
#[tokio::test]
async fn a_thousand_trickling_clients_keep_no_one_else_from_being_served() {
    const TRICKLERS: usize = 1000;
    const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(8);
    dockhand::limits::raise_open_file_limit().unwrap();
    let backend = Backend::echo("a").await;
    let process = ProxyProcess::start(
        &one_route("example.com", backend.addr),
        &["--header-read-timeout", "8s"],
    )
    .await;
    let open = Arc::new(AtomicUsize::new(0));
    let head: &'static [u8] = endless_head().leak();
    let tricklers: Vec<_> = (0..TRICKLERS)
        .map(|_| {
            let open = open.clone();
            let addr = process.addr;
            tokio::spawn(async move { trickle(addr, head, &open).await })
        })
        .collect();
    eventually("every trickler is connected", || {
        std::future::ready(open.load(Ordering::SeqCst) == TRICKLERS)
    })
    .await;

    let statuses: Vec<u16> = futures_util::stream::iter(0..100)
        .map(|_| async {
            let reply = tokio::time::timeout(
                Duration::from_secs(30),
                get(process.addr, "example.com", "/"),
            )
            .await
            .expect("an ordinary request waited over 30 s");
            reply.status.as_u16()
        })
        .buffer_unordered(10)
        .collect()
        .await;
    assert_eq!(statuses, [200; 100]);
    assert_eq!(
        open.load(Ordering::SeqCst),
        TRICKLERS,
        "the ordinary requests were served while every trickler was connected"
    );
    for trickler in tricklers {
        let (open_for, answer) = trickler.await.unwrap();
        assert!(open_for >= HEADER_READ_TIMEOUT, "cut after {open_for:?}");
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    }
}

/// A backend whose body comes in two halves `pause` apart.
async fn pausing_backend(pause: Duration) -> Backend {
    Backend::start(move |_request| async move {
        let halves = futures_util::stream::iter([0, 1]).then(move |half| async move {
            if half == 1 {
                tokio::time::sleep(pause).await;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::body::Frame::data(
                bytes::Bytes::from_static(b"half;"),
            ))
        });
        Response::new(http_body_util::BodyExt::boxed_unsync(
            http_body_util::StreamBody::new(halves),
        ))
    })
    .await
}

/// `--header-read-timeout` is also how long a client connection may sit
/// idle between requests. hyper ends an idle HTTP/1.1 connection itself; an
/// HTTP/2 connection with no stream is closed (GOAWAY) by dockhand, or a
/// client could hold any number of them for ever. A response still being
/// sent keeps its connection open, however long it takes.
#[tokio::test]
async fn idle_connections_are_closed_after_the_header_timeout_but_not_while_answering() {
    let backend = pausing_backend(Duration::from_secs(3)).await;
    let settings = dockhand::settings::Settings {
        header_read_timeout: Duration::from_secs(1),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", backend.addr), settings).await;
    let h2_request = || {
        http::Request::builder()
            .uri("http://example.com/")
            .version(http::Version::HTTP_2)
            .body(empty())
            .unwrap()
    };

    // A response that takes three timeouts to send arrives whole on both protocols.
    let mut h2 = h2_connection(proxy.addr).await;
    let reply = read_reply(h2.send_request(h2_request()).await.unwrap()).await;
    assert_eq!(reply.text(), "half;half;");
    let mut http1 = http1_connection(proxy.addr).await;
    let request = request("GET", "example.com", "/").body(empty()).unwrap();
    let reply = read_reply(http1.send_request(request).await.unwrap()).await;
    assert_eq!(reply.text(), "half;half;");

    // Then both connections sit idle, and are closed.
    eventually("the idle HTTP/2 connection is closed", || {
        std::future::ready(h2.is_closed())
    })
    .await;
    eventually("the idle HTTP/1.1 connection is closed", || {
        std::future::ready(http1.is_closed())
    })
    .await;
}

/// Each request head has the whole `--header-read-timeout` from the moment
/// its wait began: a keep-alive connection that asks again well within it,
/// request after request, is served for several timeouts in all (the
/// timer set for an earlier request's wait fires meanwhile, and must not
/// end a later one), and is closed once it has asked nothing for one.
#[tokio::test]
async fn a_connection_asking_within_the_header_timeout_is_served_past_many() {
    let backend = pausing_backend(Duration::ZERO).await;
    let timeout = Duration::from_secs(1);
    let settings = dockhand::settings::Settings {
        header_read_timeout: timeout,
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", backend.addr), settings).await;
    let mut http1 = http1_connection(proxy.addr).await;
    let started = Instant::now();
    // Half a timeout apart: well within it however slow the machine is.
    for asked in 0..6 {
        if asked > 0 {
            tokio::time::sleep(timeout / 2).await;
        }
        let request = request("GET", "example.com", "/").body(empty()).unwrap();
        let reply = read_reply(http1.send_request(request).await.unwrap()).await;
        assert_eq!(reply.text(), "half;half;", "request {asked}");
    }
    assert!(started.elapsed() > timeout * 2, "served past two timeouts");
    let idle = Instant::now();
    eventually("the idle connection is closed", || {
        std::future::ready(http1.is_closed())
    })
    .await;
    assert!(
        idle.elapsed() >= timeout * 9 / 10,
        "closed after {:?}",
        idle.elapsed()
    );
}
