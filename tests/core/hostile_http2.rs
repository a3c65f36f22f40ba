//! Hostile HTTP/2 (RFC 9113) against the h2c (prior knowledge) listener,
//! from a raw client: malformed requests are refused without reaching the
//! upstream; floods and flow-control abuse end in the error the RFC names
//! (or are simply answered) with the real binary's memory flat; and
//! ordinary clients are served afterwards.

use std::time::Duration;

use crate::raw_h2::*;
use crate::support::*;

const HOST: &str = "example.com";

/// How much an attack may raise dockhand's peak resident memory above what
/// it used after warming up (seen: at most 200 KiB). Each flood below sends
/// 5,000 to 20,000 frames: keeping a few hundred bytes for each would pass it.
const MEMORY_BOUND: u64 = 4 << 20;

/// The real binary serving `HOST` from an echo backend, warmed up.
struct Target {
    process: ProxyProcess,
    backend: Backend,
    baseline_rss: u64,
}

async fn target() -> Target {
    target_with(Backend::echo("a").await).await
}

async fn target_with(backend: Backend) -> Target {
    let process = ProxyProcess::start(&one_route(HOST, backend.addr), &[]).await;
    // Warm up: the worker threads, the upstream pool and both protocols'
    // code paths have allocated what they keep.
    for _ in 0..10 {
        assert_eq!(ordinary_h2_get(&process).await, 200);
        assert_eq!(get(process.addr, HOST, "/").await.status, 200);
    }
    let baseline_rss = process.rss_bytes();
    Target {
        process,
        baseline_rss,
        backend,
    }
}

async fn ordinary_h2_get(process: &ProxyProcess) -> u16 {
    let mut sender = h2_connection(process.addr).await;
    read_reply(sender.send_request(h2_get(HOST, "/")).await.unwrap())
        .await
        .status
        .as_u16()
}

impl Target {
    async fn connect(&self) -> RawH2 {
        RawH2::connect(self.process.addr).await
    }

    /// After the attack: ordinary clients of both protocols are served, and
    /// the peak memory stayed within `MEMORY_BOUND` of the warmed-up level.
    async fn assert_unharmed(&self, attack: &str) {
        self.assert_serves(attack).await;
        let grown = self
            .process
            .peak_rss_bytes()
            .saturating_sub(self.baseline_rss);
        eprintln!(
            "{attack}: peak resident memory {} KiB over the warmed-up level",
            grown >> 10
        );
        assert!(
            grown <= MEMORY_BOUND,
            "{attack}: peak memory grew by {} KiB",
            grown >> 10
        );
    }

    async fn assert_serves(&self, attack: &str) {
        assert_eq!(ordinary_h2_get(&self.process).await, 200, "{attack}");
        assert_eq!(
            get(self.process.addr, HOST, "/").await.status,
            200,
            "{attack}"
        );
    }
}

/// RFC 9113 §8.2.2: a request with a connection-specific header field is
/// malformed (§8.1.1): a stream error of type PROTOCOL_ERROR, never
/// forwarded. `te: trailers` is the one `te` allowed, and is forwarded.
#[tokio::test]
async fn connection_specific_headers_are_refused_before_the_upstream() {
    let target = target().await;
    let before = target.backend.request_count();
    let mut connection = target.connect().await;
    let cases = [
        ("connection", "keep-alive"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "websocket"),
        ("te", "gzip"),
        ("te", "trailers, gzip"),
    ];
    let mut stream = 1;
    for (name, value) in cases {
        let mut fields = request_fields("GET", HOST);
        fields.push((name, value));
        connection.send_headers(stream, &fields, true).await;
        let answer = connection.answer_on(stream).await;
        assert_eq!(answer.kind, RST_STREAM, "{name}: {value}: {answer:?}");
        assert_eq!(answer.error_code(), Some(PROTOCOL_ERROR), "{name}: {value}");
        stream += 2;
    }
    // The connection is still good, and `te: trailers` goes through.
    let mut fields = request_fields("GET", HOST);
    fields.push(("te", "trailers"));
    connection.send_headers(stream, &fields, true).await;
    assert_eq!(
        connection.answer_on(stream).await.static_status(),
        Some(200)
    );
    assert_eq!(
        target.backend.request_count() - before,
        1,
        "only the last request"
    );
    target.assert_unharmed("connection-specific headers").await;
}

/// RFC 9113 §8.3: the pseudo-header rules, and §8.2.1 (no upper case in
/// field names): each malformed request is refused on its own connection,
/// and none reaches the upstream.
#[tokio::test]
async fn requests_breaking_the_pseudo_header_rules_are_refused() {
    let target = target().await;
    let before = target.backend.request_count();
    let method = (":method", "GET");
    let scheme = (":scheme", "http");
    let authority = (":authority", HOST);
    let path = (":path", "/");
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("no :method", vec![scheme, authority, path]),
        ("no :scheme", vec![method, authority, path]),
        ("no :path", vec![method, scheme, authority]),
        (
            "empty :path",
            vec![method, scheme, authority, (":path", "")],
        ),
        (
            "repeated :path",
            vec![method, scheme, authority, path, (":path", "/b")],
        ),
        (
            "repeated :method",
            vec![method, (":method", "POST"), scheme, authority, path],
        ),
        (
            "pseudo after a regular field",
            vec![method, scheme, ("accept", "*/*"), authority, path],
        ),
        (
            "an unknown pseudo-field",
            vec![method, scheme, authority, path, (":foo", "bar")],
        ),
        (
            "a response pseudo-field",
            vec![method, scheme, authority, path, (":status", "200")],
        ),
        (
            "an upper-case name",
            vec![method, scheme, authority, path, ("X-Upper", "1")],
        ),
        (
            "an upper-case pseudo-field",
            vec![(":METHOD", "GET"), scheme, authority, path],
        ),
    ];
    for (case, fields) in cases {
        let mut connection = target.connect().await;
        connection.send_headers(1, &fields, true).await;
        let answer = connection.answer_on(1).await;
        let refused = match answer.kind {
            RST_STREAM => answer.error_code() == Some(PROTOCOL_ERROR),
            GOAWAY => matches!(
                answer.error_code(),
                Some(PROTOCOL_ERROR | COMPRESSION_ERROR)
            ),
            _ => false,
        };
        assert!(refused, "{case}: {answer:?}");
    }
    // §8.3.1: a `host` naming another host than `:authority` is dockhand's
    // `400 bad_host`.
    let mut connection = target.connect().await;
    let fields = vec![method, scheme, authority, path, ("host", "other.test")];
    connection.send_headers(1, &fields, true).await;
    assert_eq!(connection.answer_on(1).await.static_status(), Some(400));
    assert_eq!(
        target.backend.request_count(),
        before,
        "none reached the upstream"
    );
    target.assert_unharmed("pseudo-header rules").await;
}

/// RFC 9113 §5.1.2: the server announces SETTINGS_MAX_CONCURRENT_STREAMS
/// (200) and refuses a stream beyond it, so one connection never has more
/// requests than that in flight upstream.
#[tokio::test]
async fn streams_beyond_the_announced_limit_are_refused() {
    let holding = Backend::start(|request: http::Request<hyper::body::Incoming>| async move {
        if request.uri().path() == "/hold" {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        http::Response::new(empty())
    })
    .await;
    let target = target_with(holding).await;
    let before = target.backend.request_count();
    let mut connection = target.connect().await;
    let announced = connection
        .wait_for(|f| f.kind == SETTINGS && f.flags & ACK == 0)
        .await
        .expect("the server's SETTINGS");
    let limit = setting(&announced, MAX_CONCURRENT_STREAMS).expect("a stream limit");
    assert_eq!(limit, 200);
    let mut fields = request_fields("GET", HOST);
    fields.retain(|(name, _)| *name != ":path");
    fields.push((":path", "/hold"));
    let block = header_block(&fields);
    let beyond = 2 * limit + 1;
    let streams = connection
        .flood(limit as usize + 1, |n| {
            frame(HEADERS, END_HEADERS | END_STREAM, 2 * n as u32 + 1, &block)
        })
        .await;
    assert_eq!(streams, limit as usize + 1);
    let answer = connection.answer_on(beyond).await;
    assert_eq!(answer.kind, RST_STREAM, "{answer:?}");
    assert!(
        matches!(answer.error_code(), Some(REFUSED_STREAM | PROTOCOL_ERROR)),
        "{answer:?}"
    );
    eventually(
        "the streams within the limit reach the upstream",
        || async { target.backend.request_count() - before == limit as usize },
    )
    .await;
    // Not a flood: 200 requests in flight upstream take their memory
    // (seen: about 5 MiB with their 200 upstream connections).
    target.assert_serves("streams beyond the limit").await;
    assert_eq!(target.backend.request_count() - before, limit as usize + 2);
}

/// CONTINUATION flood (CVE-2024-27316 and its kin): a header block that
/// never ends. The server gives up after a bounded number of frames with
/// ENHANCE_YOUR_CALM and closes, holding no more than the bounded block.
#[tokio::test]
async fn a_continuation_flood_is_cut() {
    let target = target().await;
    let before = target.backend.request_count();
    let mut connection = target.connect().await;
    let fields = request_fields("GET", HOST);
    let opening = frame(HEADERS, END_STREAM, 1, &header_block(&fields));
    connection.send(&opening).await.unwrap();
    let piece = header_block(&[("x-flood", &"a".repeat(100))]);
    let sent = connection
        .flood(10_000, |_| frame(CONTINUATION, 0, 1, &piece))
        .await;
    let goaway = connection.until_closed().await.expect("a GOAWAY");
    eprintln!("continuation flood: cut within {sent} frames");
    assert_eq!(goaway.error_code(), Some(ENHANCE_YOUR_CALM));
    assert_eq!(
        target.backend.request_count(),
        before,
        "none reached the upstream"
    );
    target.assert_unharmed("CONTINUATION flood").await;
}

/// Rapid reset (CVE-2023-44487): streams opened and cancelled at once,
/// thousands of them, to make the server start work it cannot finish. The
/// server ends the connection with ENHANCE_YOUR_CALM once more than a few
/// reset streams wait to be served; none reaches the upstream after that.
#[tokio::test]
async fn a_rapid_reset_flood_is_cut() {
    let target = target().await;
    let before = target.backend.request_count();
    let mut connection = target.connect().await;
    let block = header_block(&request_fields("GET", HOST));
    const STREAMS: u32 = 5_000;
    connection
        .flood(STREAMS as usize, |n| {
            opened_and_cancelled(2 * n as u32 + 1, &block)
        })
        .await;
    let goaway = connection.until_closed().await.expect("a GOAWAY");
    assert_eq!(goaway.error_code(), Some(ENHANCE_YOUR_CALM));
    let last_stream = u32::from_be_bytes(goaway.payload[..4].try_into().unwrap());
    assert!(
        last_stream < 2 * STREAMS,
        "cut before the end: {last_stream}"
    );
    let reached = target.backend.request_count() - before;
    eprintln!("rapid reset: cut at stream {last_stream}; {reached} requests reached the upstream");
    assert!(reached as u32 <= last_stream / 2 + 1, "{reached}");
    target.assert_unharmed("rapid reset").await;
}

/// Rapid reset paced so that each stream is accepted (and its request
/// started) before its reset arrives: every request is abandoned, at most
/// one upstream connection is opened per stream, and none is left open.
#[tokio::test]
async fn paced_resets_leave_nothing_behind() {
    let target = target().await;
    let fds = target.process.open_fds();
    let before = (
        target.backend.request_count(),
        target.backend.connection_count(),
    );
    let mut connection = target.connect().await;
    let block = header_block(&request_fields("GET", HOST));
    const STREAMS: u32 = 300;
    for n in 0..STREAMS {
        connection
            .send(&opened_and_cancelled(2 * n + 1, &block))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // A PING's ACK says every frame before it was read.
    connection.send(&frame(PING, 0, 0, &[7; 8])).await.unwrap();
    let pong = connection
        .wait_for(|f| f.kind == PING && f.flags & ACK != 0)
        .await;
    assert!(pong.is_some(), "{:?}", connection.received);
    let requests = target.backend.request_count() - before.0;
    let connections = target.backend.connection_count() - before.1;
    eprintln!(
        "paced resets: {requests} requests and {connections} connections reached the upstream"
    );
    assert!(requests as u32 <= STREAMS && connections as u32 <= STREAMS);
    drop(connection);
    eventually("dockhand's descriptors are back", || async {
        target.process.open_fds() <= fds
    })
    .await;
    target.assert_unharmed("paced resets").await;
}

/// A request's HEADERS, then its RST_STREAM (CANCEL).
fn opened_and_cancelled(stream: u32, block: &[u8]) -> Vec<u8> {
    let mut pair = frame(HEADERS, END_HEADERS | END_STREAM, stream, block);
    pair.extend(rst_stream(stream, CANCEL));
    pair
}

/// SETTINGS flood: each one must be acknowledged (RFC 9113 §6.5.3); the
/// server reads the next only once it has, so nothing piles up.
#[tokio::test]
async fn a_settings_flood_is_answered_without_growing() {
    let target = target().await;
    let mut connection = target.connect().await;
    const FLOOD: usize = 20_000;
    let one = settings(&[(INITIAL_WINDOW_SIZE, 65_535)]);
    assert_eq!(connection.flood(FLOOD, |_| one.clone()).await, FLOOD);
    // The server's own SETTINGS is not an ACK; each of ours gets one.
    assert!(connection.wait_for_count(SETTINGS, ACK, FLOOD).await);
    target.assert_unharmed("SETTINGS flood").await;
}

/// PING flood: every PING is answered (RFC 9113 §6.7).
#[tokio::test]
async fn a_ping_flood_is_answered_without_growing() {
    let target = target().await;
    let mut connection = target.connect().await;
    const FLOOD: usize = 20_000;
    let ping = frame(PING, 0, 0, &[1; 8]);
    assert_eq!(connection.flood(FLOOD, |_| ping.clone()).await, FLOOD);
    assert!(connection.wait_for_count(PING, ACK, FLOOD).await);
    target.assert_unharmed("PING flood").await;
}

/// PING flood from a client that never reads the answers (CVE-2019-9512):
/// the server queues no answers, it stops reading the client instead, so
/// the client's writes stall long before 64 MiB of PINGs went out.
#[tokio::test]
async fn an_unread_ping_flood_stops_being_read() {
    use tokio::io::AsyncWriteExt;
    let target = target().await;
    let mut stream = tokio::net::TcpStream::connect(target.process.addr)
        .await
        .unwrap();
    stream.write_all(PREFACE).await.unwrap();
    stream.write_all(&settings(&[])).await.unwrap();
    let megabyte: Vec<u8> = frame(PING, 0, 0, &[2; 8]).repeat((1 << 20) / 17);
    let mut sent = 0;
    let stalled = loop {
        assert!(
            sent < 64,
            "the server read 64 MiB of PINGs from a client that reads nothing"
        );
        let write = stream.write_all(&megabyte);
        if tokio::time::timeout(Duration::from_secs(2), write)
            .await
            .is_err()
        {
            break sent;
        }
        sent += 1;
    };
    eprintln!("unread PING flood: writes stalled after {stalled} MiB");
    target.assert_unharmed("unread PING flood").await;
}

/// Empty DATA frames (CVE-2019-9518): no bytes, all framing, cut with
/// ENHANCE_YOUR_CALM. The request's head may have been forwarded (bodies
/// are streamed) but nothing more.
#[tokio::test]
async fn an_empty_data_flood_is_cut() {
    let target = target().await;
    let before = target.backend.request_count();
    let mut connection = target.connect().await;
    let fields = request_fields("POST", HOST);
    connection.send_headers(1, &fields, false).await;
    let empty = frame(DATA, 0, 1, &[]);
    let sent = connection.flood(100_000, |_| empty.clone()).await;
    let goaway = connection.until_closed().await.expect("a GOAWAY");
    assert_eq!(goaway.error_code(), Some(ENHANCE_YOUR_CALM));
    let reached = target.backend.request_count() - before;
    eprintln!(
        "empty DATA flood: cut within {sent} frames; {reached} requests reached the upstream"
    );
    assert!(reached <= 1, "{reached}");
    target.assert_unharmed("empty DATA flood").await;
}

/// RFC 9113 §6.9: a zero increment is a PROTOCOL_ERROR, and §6.9.1: a
/// window pushed past 2^31-1 is a FLOW_CONTROL_ERROR; on the connection
/// both end it, on a stream they reset that stream or (§5.4: any stream
/// error may be treated as a connection error) end the connection.
#[tokio::test]
async fn window_abuse_is_refused() {
    let target = target().await;
    let before = target.backend.request_count();
    for (case, stream, increment, kind, code) in [
        ("connection, zero", 0, 0, GOAWAY, PROTOCOL_ERROR),
        (
            "connection, overflow",
            0,
            0x7fff_ffff,
            GOAWAY,
            FLOW_CONTROL_ERROR,
        ),
        ("stream, zero", 1, 0, RST_STREAM, PROTOCOL_ERROR),
        (
            "stream, overflow",
            1,
            0x7fff_ffff,
            RST_STREAM,
            FLOW_CONTROL_ERROR,
        ),
    ] {
        let either = kind == RST_STREAM;
        let mut connection = target.connect().await;
        if stream != 0 {
            connection
                .send_headers(stream, &request_fields("POST", HOST), false)
                .await;
        }
        connection
            .send(&window_update(stream, increment))
            .await
            .unwrap();
        let answer = connection
            .wait_for(|f| matches!(f.kind, GOAWAY | RST_STREAM))
            .await;
        let answer = answer.expect("an error frame");
        assert_eq!(answer.error_code(), Some(code), "{case}: {answer:?}");
        assert!(answer.kind == kind || either, "{case}: {answer:?}");
    }
    // SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 ends the connection. §6.5.2
    // names FLOW_CONTROL_ERROR; the h2 crate says PROTOCOL_ERROR (it refuses
    // the value while decoding the frame), either is an error that ends it.
    let mut connection = target.connect().await;
    connection
        .send(&settings(&[(INITIAL_WINDOW_SIZE, 0x8000_0000)]))
        .await
        .unwrap();
    let goaway = connection.until_closed().await.expect("a GOAWAY");
    assert!(
        matches!(
            goaway.error_code(),
            Some(FLOW_CONTROL_ERROR | PROTOCOL_ERROR)
        ),
        "{goaway:?}"
    );
    let reached = target.backend.request_count() - before;
    assert!(reached <= 2, "at most the two streams' heads: {reached}");
    target.assert_unharmed("window abuse").await;
}
