//! Hostile HTTP/1.1 over raw sockets, both ways, against an upstream that
//! records every byte that reaches it. A request a smuggler (or a sloppy
//! client) would send is refused with a 4xx, or 501, before anything reaches
//! the upstream; or normalised, so that the upstream sees exactly one
//! unambiguous request, whose framing and body are asserted. An upstream's
//! answer with a framing that can't be passed on is refused with a 502 the
//! client still gets, and the next request on its connection is answered.
//! Each case names the section of RFC 9112 (or RFC 9110) that decides it.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::support::*;

/// An answer any request can get, HEAD's too.
const EMPTY_OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A request for `a.test` with `lines` after its Host, and `body`.
fn post(lines: &str, body: &str) -> Vec<u8> {
    format!("POST / HTTP/1.1\r\nHost: a.test\r\n{lines}\r\n{body}").into_bytes()
}

/// The one response read on a new connection that sent `request`.
async fn answer_to(proxy: &Proxy, request: &[u8]) -> String {
    let mut answers = raw_responses(proxy.addr, request, 1).await;
    answers.pop().unwrap_or_default()
}

/// What framed a request as the upstream received it: its request line,
/// its framing header lines (lower-cased), and its body.
#[derive(Debug, PartialEq)]
struct Framing {
    request_line: String,
    framing: Vec<String>,
    body: String,
}

impl Framing {
    fn of(request: &str) -> Framing {
        let (head, body) = request.split_once("\r\n\r\n").expect("a whole head");
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default().to_owned();
        let framing = lines
            .map(str::to_ascii_lowercase)
            .filter(|line| {
                line.starts_with("content-length:") || line.starts_with("transfer-encoding:")
            })
            .collect();
        Framing {
            request_line,
            framing,
            body: body.to_owned(),
        }
    }

    fn expected(request_line: &str, framing: &[&str], body: &str) -> Framing {
        Framing {
            request_line: request_line.to_owned(),
            framing: framing.iter().map(|line| (*line).to_owned()).collect(),
            body: body.to_owned(),
        }
    }
}

/// Requests the RFC says to refuse: a 4xx (the status line's start is
/// given), or 501, and not a byte to the upstream.
#[tokio::test]
async fn malformed_requests_are_refused_before_the_upstream() {
    let upstream = RecordingUpstream::start(EMPTY_OK).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let long_target = format!(
        "GET /{} HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "a".repeat(70_000)
    );
    let many_fields = format!(
        "GET / HTTP/1.1\r\nHost: a.test\r\n{}\r\n",
        "x-h: v\r\n".repeat(100)
    );
    let large_head = format!(
        "GET / HTTP/1.1\r\nHost: a.test\r\n{}\r\n",
        format!("x-h: {}\r\n", "v".repeat(8_000)).repeat(17)
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        // §5.1: no whitespace between a field name and its colon.
        (
            "§5.1 TE.TE: space before the colon",
            post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"),
            "400",
        ),
        // §6.1 and §11.2: a request with both Transfer-Encoding and
        // Content-Length is how requests are smuggled past a proxy whose
        // reading of it differs from its upstream's; §6.1 lets a server
        // refuse it, and dockhand does, whichever comes first.
        (
            "§6.1 CL.TE",
            post(
                "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\nG",
            ),
            "400",
        ),
        (
            "§6.1 TE.CL",
            post(
                "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                "8\r\nSMUGGLED\r\n0\r\n\r\n",
            ),
            "400",
        ),
        // §6.3: a Transfer-Encoding whose final coding is not chunked
        // leaves the length unknown: 400 and close.
        (
            "§6.3 TE.TE: xchunked",
            post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"),
            "400",
        ),
        (
            "§6.3 TE.TE: chunked, identity",
            post("Transfer-Encoding: chunked, identity\r\n", "0\r\n\r\n"),
            "400",
        ),
        (
            "§6.3 TE.TE: chunked then identity lines",
            post(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
                "0\r\n\r\n",
            ),
            "400",
        ),
        (
            "§6.3 TE.TE: quoted chunked",
            post("Transfer-Encoding: \"chunked\"\r\n", "0\r\n\r\n"),
            "400",
        ),
        // RFC 9110 §5.5: a vertical tab is not whitespace a value may start with.
        (
            "RFC 9110 §5.5 TE.TE: vertical tab",
            post("Transfer-Encoding: \x0bchunked\r\n", "0\r\n\r\n"),
            "400",
        ),
        // §6.1: chunked is the final coding, and nothing else is implemented.
        (
            "§6.1 gzip, chunked",
            post(
                "Transfer-Encoding: gzip, chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            "501",
        ),
        (
            "§6.1 identity then chunked lines",
            post(
                "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\n",
            ),
            "501",
        ),
        (
            "§6.1 chunked twice",
            post(
                "Transfer-Encoding: chunked, chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            "501",
        ),
        // §6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing.
        (
            "§6.1 HTTP/1.0 with Transfer-Encoding",
            b"POST / HTTP/1.0\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_vec(),
            "400",
        ),
        // §6.3 rule 5 and RFC 9110 §8.6: Content-Length is 1*DIGIT, one value.
        (
            "§6.3 Content-Length +5",
            post("Content-Length: +5\r\n", "hello"),
            "400",
        ),
        (
            "§6.3 Content-Length -1",
            post("Content-Length: -1\r\n", "hello"),
            "400",
        ),
        (
            "§6.3 Content-Length 5, 6",
            post("Content-Length: 5, 6\r\n", "hello!"),
            "400",
        ),
        (
            "§6.3 Content-Length 0x5",
            post("Content-Length: 0x5\r\n", "hello"),
            "400",
        ),
        (
            "§6.3 two Content-Length lines",
            post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"),
            "400",
        ),
        (
            "§6.3 Content-Length overflow",
            post("Content-Length: 99999999999999999999\r\n", "hello"),
            "400",
        ),
        // §7.1: chunk-size is 1*HEXDIG, its data exactly that long, lines end in CRLF.
        (
            "§7.1 chunk size zz",
            post("Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n"),
            "400",
        ),
        (
            "§7.1 chunk size -5",
            post("Transfer-Encoding: chunked\r\n", "-5\r\nhello\r\n0\r\n\r\n"),
            "400",
        ),
        (
            "§7.1 chunk size 0x5",
            post(
                "Transfer-Encoding: chunked\r\n",
                "0x5\r\nhello\r\n0\r\n\r\n",
            ),
            "400",
        ),
        (
            "§7.1 chunk size overflow",
            post(
                "Transfer-Encoding: chunked\r\n",
                "fffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
            ),
            "400",
        ),
        (
            "§7.1 chunk lines ending in bare LF",
            post("Transfer-Encoding: chunked\r\n", "5\nhello\n0\n\n"),
            "400",
        ),
        // §2.2: a bare CR is invalid.
        (
            "§2.2 bare CR line ends",
            b"GET / HTTP/1.1\rHost: a.test\r\r".to_vec(),
            "400",
        ),
        (
            "§2.2 bare CR in a value",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX-A: a\rb\r\n\r\n".to_vec(),
            "400",
        ),
        // §2.2: whitespace before the first field could hide a header.
        (
            "§2.2 whitespace before the first field",
            b"GET / HTTP/1.1\r\n Host: b.test\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        // §5.2: obs-fold in a request is refused (or replaced; hyper refuses).
        (
            "§5.2 obs-fold",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX-A: a\r\n b\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§5.2 obs-fold hiding Transfer-Encoding",
            post("X-A: a\r\n Transfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            "400",
        ),
        // §5.1 and RFC 9110 §5.5: names are tokens; values have no NUL or controls.
        (
            "§5.1 NUL in a name",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX\x00A: a\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§5.1 space in a name",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX A: a\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§5.1 empty name",
            b"GET / HTTP/1.1\r\nHost: a.test\r\n: a\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "RFC 9110 §5.5 NUL in a value",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX-A: a\x00b\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "RFC 9110 §5.5 ESC in a value",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX-A: a\x1bb\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "RFC 9110 §5.5 DEL in a value",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX-A: a\x7fb\r\n\r\n".to_vec(),
            "400",
        ),
        // §3 and §3.2: the request line is method SP target SP version.
        (
            "§3.2 NUL in the target",
            b"GET /a\x00b HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§3.2 DEL in the target",
            b"GET /a\x7fb HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§3.2 space in the target",
            b"GET /a b HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§3.2 tab in the target",
            b"GET /a\tb HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§3.1 control byte in the method",
            b"G\x01T / HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "§3 two spaces after the method",
            b"GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        // §2.3: HTTP-name is case-sensitive; §2.3 and §3: no HTTP/0.9.
        (
            "§2.3 lower-case version",
            b"GET / http/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            "400",
        ),
        ("§2.3 HTTP/0.9", b"GET /\r\n".to_vec(), "400"),
        // §3.2: without Host (optional in HTTP/1.0) there is nothing to route by.
        (
            "§3.2 HTTP/1.0 without Host",
            b"GET / HTTP/1.0\r\n\r\n".to_vec(),
            "HTTP/1.0 400",
        ),
        // §3: a target longer than the server parses is 414; RFC 6585 §5:
        // too many or too large header fields are 431.
        ("§3 a 70,000-byte target", long_target.into_bytes(), "414"),
        (
            "RFC 6585 §5: 101 header fields",
            many_fields.into_bytes(),
            "431",
        ),
        ("RFC 6585 §5: a 136 KB head", large_head.into_bytes(), "431"),
    ];
    for (case, request, status) in cases {
        let answer = answer_to(&proxy, &request).await;
        let expected = match status.len() {
            3 => format!("HTTP/1.1 {status} "),
            _ => format!("{status} "),
        };
        assert!(answer.starts_with(&expected), "{case}: {answer:?}");
        upstream.assert_untouched(case);
    }
}

/// §7.1: a chunked body found malformed past its first chunk, when part of
/// it may have gone on already: the client gets 400 `bad_request_body`,
/// and the upstream never a whole request (its connection is ended
/// mid-body). Malformed from its first chunk, it reaches nothing (above).
#[tokio::test]
async fn a_body_malformed_past_its_first_chunk_is_400_and_never_a_whole_request() {
    let upstream = RecordingUpstream::start(EMPTY_OK).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    for (case, body) in [
        (
            "§7.1 chunk data longer than its size",
            "5\r\nhelloXX\r\n0\r\n\r\n",
        ),
        ("§7.1 a second chunk size zz", "5\r\nhello\r\nzz\r\n"),
    ] {
        let answer = answer_to(&proxy, &post("Transfer-Encoding: chunked\r\n", body)).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{case}: {answer:?}");
        assert!(
            answer.contains("x-dockhand-error: bad_request_body\r\n"),
            "{case}: {answer:?}"
        );
    }
    assert!(upstream.requests().is_empty(), "{:?}", upstream.received());
}

/// RFC 9112 §6.1: the codings a request's `Transfer-Encoding` lists besides
/// the final chunked are not implemented: 501 with its reason, and the body
/// (here holding a request of its own) never reaches the upstream, as a
/// body or as a request.
#[tokio::test]
async fn a_request_coding_besides_chunked_is_501_and_its_body_goes_nowhere() {
    let upstream = RecordingUpstream::start(EMPTY_OK).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: a.test\r\n\r\n";
    let body = format!("{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len());
    let request = post("Transfer-Encoding: gzip, chunked\r\n", &body);
    let answers = raw_responses(
        proxy.addr,
        &[request, smuggled.as_bytes().to_vec()].concat(),
        2,
    )
    .await;
    assert!(!answers.is_empty(), "no answer");
    assert!(answers[0].starts_with("HTTP/1.1 501 "), "{answers:?}");
    assert!(
        answers[0].contains("x-dockhand-error: unsupported_transfer_coding\r\n"),
        "{answers:?}"
    );
    // What follows is either answered as the next request, or the
    // connection closed; the body is never a request.
    let reached: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| Framing::of(r).request_line)
        .collect();
    assert!(
        reached.is_empty() || reached == ["GET /smuggled HTTP/1.1"] && answers.len() == 2,
        "{reached:?} {answers:?}"
    );
}

/// Requests that are well-formed but framed in ways a smuggler uses: each
/// reaches the upstream as exactly one request, framed one way only.
#[tokio::test]
async fn ambiguous_framings_reach_the_upstream_as_one_request() {
    let upstream = RecordingUpstream::start(EMPTY_OK).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let chunked = ["transfer-encoding: chunked"];
    let cases: Vec<(&str, Vec<u8>, Framing)> = vec![
        // §5.1: whitespace around a value is not part of it.
        (
            "§5.1 TE.TE: tabs around chunked",
            post(
                "Transfer-Encoding:\tchunked\t\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            Framing::expected("POST / HTTP/1.1", &chunked, "5\r\nhello\r\n0\r\n\r\n"),
        ),
        // §7: coding names are case-insensitive.
        (
            "§7 TE.TE: CHUNKED",
            post("Transfer-Encoding: CHUNKED\r\n", "5\r\nhello\r\n0\r\n\r\n"),
            Framing::expected("POST / HTTP/1.1", &chunked, "5\r\nhello\r\n0\r\n\r\n"),
        ),
        // §7.1.1: unrecognised chunk extensions are ignored: none is sent on.
        (
            "§7.1.1 chunk extensions",
            post(
                "Transfer-Encoding: chunked\r\n",
                "5;name=value\r\nhello\r\n3;a\x00b\r\n!!!\r\n0\r\n\r\n",
            ),
            Framing::expected(
                "POST / HTTP/1.1",
                &chunked,
                "5\r\nhello\r\n3\r\n!!!\r\n0\r\n\r\n",
            ),
        ),
        (
            "§7.1 whitespace after a chunk size",
            post("Transfer-Encoding: chunked\r\n", "5 \r\nhello\r\n0\r\n\r\n"),
            Framing::expected("POST / HTTP/1.1", &chunked, "5\r\nhello\r\n0\r\n\r\n"),
        ),
        // RFC 9110 §8.6: identical lengths may be taken as one.
        (
            "RFC 9110 §8.6 the same Content-Length twice",
            post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"),
            Framing::expected("POST / HTTP/1.1", &["content-length: 5"], "hello"),
        ),
        // RFC 9110 §8.6: 1*DIGIT, sent on in plain decimal (some servers
        // read a leading zero as octal: 010 would be 8).
        (
            "RFC 9110 §8.6 a length with leading zeros",
            post("Content-Length: 010\r\n", "0123456789"),
            Framing::expected("POST / HTTP/1.1", &["content-length: 10"], "0123456789"),
        ),
        // §2.2: a bare LF may end a line; §2.2: an empty line before the
        // request line is ignored.
        (
            "§2.2 bare LF line ends",
            b"GET / HTTP/1.1\nHost: a.test\n\n".to_vec(),
            Framing::expected("GET / HTTP/1.1", &[], ""),
        ),
        (
            "§2.2 an empty line before the request line",
            b"\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            Framing::expected("GET / HTTP/1.1", &[], ""),
        ),
    ];
    for (case, request, expected) in cases {
        let before = upstream.requests().len();
        let answer = answer_to(&proxy, &request).await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{case}: {answer:?}");
        let requests = upstream.requests();
        assert_eq!(requests.len(), before + 1, "{case}: {requests:?}");
        assert_eq!(Framing::of(&requests[before]), expected, "{case}");
    }
}

/// §6.1: a request with both Transfer-Encoding and Content-Length is
/// refused, then its connection closed, so neither it nor what either
/// length would have framed is ever read as a request.
#[tokio::test]
async fn a_request_with_both_lengths_is_refused_and_closes_its_connection() {
    let upstream = RecordingUpstream::start(EMPTY_OK).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let request = post(
        "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
        "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a.test\r\n\r\n",
    );
    let answer = raw_exchange(proxy.addr, &request).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer:?}");
    assert!(answer.contains("connection: close"), "{answer:?}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer:?}");
    upstream.assert_untouched("CL.TE");
}

/// RFC 9112 §6: a body is framed the same whatever the method (RFC 9110
/// §9.3.1: a GET's content has no defined meaning, but it is not dropped):
/// a chunked body of a GET, HEAD, DELETE or OPTIONS reaches the upstream
/// whole, still chunked, and so does an HTTP/2 client's GET body.
#[tokio::test]
async fn a_chunked_body_is_forwarded_whatever_the_method() {
    let upstream = RecordingUpstream::start(EMPTY_OK).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    for method in ["GET", "HEAD", "DELETE", "OPTIONS", "POST"] {
        let request = format!(
            "{method} / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n0\r\n\r\n"
        );
        let before = upstream.requests().len();
        let answer = answer_to(&proxy, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{method}: {answer:?}");
        let requests = upstream.requests();
        assert_eq!(requests.len(), before + 1, "{method}: {requests:?}");
        assert_eq!(
            Framing::of(&requests[before]),
            Framing::expected(
                &format!("{method} / HTTP/1.1"),
                &["transfer-encoding: chunked"],
                "5\r\nhello\r\n0\r\n\r\n"
            ),
            "{method}"
        );
    }
    // DATA without a content-length: a body of unknown length.
    let data = futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(b"hello")))]);
    let mut sender = h2_connection(proxy.addr).await;
    let request = http::Request::builder()
        .uri("http://a.test/")
        .body(StreamBody::new(data).boxed_unsync())
        .unwrap();
    let before = upstream.requests().len();
    let reply = read_reply(sender.send_request(request).await.unwrap()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        Framing::of(&upstream.requests()[before]),
        Framing::expected(
            "GET / HTTP/1.1",
            &["transfer-encoding: chunked"],
            "5\r\nhello\r\n0\r\n\r\n"
        )
    );
}

/// Two requests in one write (§9.3.2): both answered, in order, each
/// reaching the upstream as one request with its own body.
#[tokio::test]
async fn pipelined_requests_are_answered_in_order_one_by_one() {
    let upstream = RecordingUpstream::answering(|request| {
        let line = Framing::of(&String::from_utf8_lossy(request)).request_line;
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{line}",
            line.len()
        )
        .into_bytes()
    })
    .await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let pipelined = "POST /first HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello\
                     GET /second HTTP/1.1\r\nHost: a.test\r\n\r\n\
                     PUT /third HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n\
                     3\r\nabc\r\n0\r\n\r\n";
    let answers = raw_responses(proxy.addr, pipelined.as_bytes(), 3).await;
    let bodies: Vec<&str> = answers
        .iter()
        .map(|a| a.split("\r\n\r\n").nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        bodies,
        [
            "POST /first HTTP/1.1",
            "GET /second HTTP/1.1",
            "PUT /third HTTP/1.1"
        ],
        "{answers:?}"
    );
    let received: Vec<Framing> = upstream.requests().iter().map(|r| Framing::of(r)).collect();
    assert_eq!(
        received,
        [
            Framing::expected("POST /first HTTP/1.1", &["content-length: 5"], "hello"),
            Framing::expected("GET /second HTTP/1.1", &[], ""),
            Framing::expected(
                "PUT /third HTTP/1.1",
                &["transfer-encoding: chunked"],
                "3\r\nabc\r\n0\r\n\r\n"
            ),
        ]
    );
}

/// An upstream that answers requests for `/broken` with `broken` and the
/// rest with `OK`.
async fn broken_on_request(broken: &'static [u8]) -> RecordingUpstream {
    RecordingUpstream::answering(move |request| match request.starts_with(b"GET /broken ") {
        true => broken.to_vec(),
        false => OK.to_vec(),
    })
    .await
}

/// `GET /broken` then `GET /next`, pipelined: the answers read.
async fn broken_then_next(proxy: &Proxy) -> Vec<String> {
    let pipelined =
        "GET /broken HTTP/1.1\r\nHost: a.test\r\n\r\nGET /next HTTP/1.1\r\nHost: a.test\r\n\r\n";
    raw_responses(proxy.addr, pipelined.as_bytes(), 2).await
}

fn assert_refused_then_answered(answers: &[String], reason: &str) {
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers[0].starts_with("HTTP/1.1 502 "), "{answers:?}");
    assert!(
        answers[0].contains(&format!("x-dockhand-error: {reason}\r\n")),
        "{answers:?}"
    );
    assert!(
        answers[1].starts_with("HTTP/1.1 200 ") && answers[1].ends_with("ok"),
        "{answers:?}"
    );
}

/// `GET /broken` on a new HTTP/2 connection.
async fn h2_get_broken(proxy: &Proxy) -> http::Response<Incoming> {
    let mut sender = h2_connection(proxy.addr).await;
    let request = http::Request::builder()
        .uri("http://a.test/broken")
        .body(empty())
        .unwrap();
    sender.send_request(request).await.unwrap()
}

/// A GET of `/broken` over HTTP/2: its status and `x-dockhand-error`.
async fn h2_status(proxy: &Proxy) -> (u16, String) {
    let reply = read_reply(h2_get_broken(proxy).await).await;
    (
        reply.status.as_u16(),
        reply.header("x-dockhand-error").to_owned(),
    )
}

/// §7.1: an upstream's first chunk size that is not hex, arriving with the
/// head, is found before the head is passed on: the client gets a 502
/// rather than a connection ended after a 200 head, and the request it
/// pipelined after is answered.
#[tokio::test]
async fn a_malformed_first_chunk_from_the_upstream_is_502_and_the_next_request_answered() {
    let upstream = broken_on_request(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    assert_refused_then_answered(&broken_then_next(&proxy).await, "bad_response_body");
    assert_eq!(
        h2_status(&proxy).await,
        (502, "bad_response_body".to_owned())
    );
}

/// §6.1: a response's transfer codings besides chunked are not passed on
/// (dockhand never offers any in `TE`, and HTTP/2 clients can't get them),
/// nor are they dropped with the body passed on as if it were plain: 502.
#[tokio::test]
async fn a_response_coding_besides_chunked_is_502() {
    for coded in [
        &b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\nconnection: close\r\n\r\nhello",
    ] {
        let upstream = broken_on_request(coded).await;
        let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
        assert_refused_then_answered(&broken_then_next(&proxy).await, "upstream_transfer_coding");
        assert_eq!(
            h2_status(&proxy).await,
            (502, "upstream_transfer_coding".to_owned())
        );
    }
}

/// RFC 9110 §15.2: interim responses before the final one. hyper 1 can't
/// send a 1xx on its server connections, so a `103 Early Hints` (or an
/// unasked `100 Continue`) is not passed on; the final response still
/// arrives whole, to HTTP/1.1 and HTTP/2 clients, and the connection goes on.
#[tokio::test]
async fn interim_responses_do_not_keep_the_final_one_from_the_client() {
    for interim in [
        &b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"[..],
        b"HTTP/1.1 100 Continue\r\n\r\n",
    ] {
        let answer: &'static [u8] = [interim, OK].concat().leak();
        let upstream = broken_on_request(answer).await;
        let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
        let answers = broken_then_next(&proxy).await;
        assert_eq!(answers.len(), 2, "{answers:?}");
        for answer in &answers {
            assert!(
                answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("ok"),
                "{answers:?}"
            );
        }
        let reply = read_reply(h2_get_broken(&proxy).await).await;
        assert_eq!((reply.status.as_u16(), reply.text().as_str()), (200, "ok"));
    }
}

/// RFC 9113 §8.6 and RFC 9110 §15.2.2: an HTTP/2 client can't switch
/// protocols, so a `101` (which would reach it as `:status 101`) is a 502.
#[tokio::test]
async fn an_unasked_101_is_502_to_http2_clients() {
    let upstream = broken_on_request(
        b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    )
    .await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    assert_eq!(
        h2_status(&proxy).await,
        (502, "unexpected_upgrade".to_owned())
    );
}

/// RFC 9110 §8.6 and §15.3.5, §15.4.5: a 204 has no Content-Length and no
/// content, and a 304 none either (hyper drops its length for HTTP/1.1
/// clients): HTTP/2 clients get them without `content-length`, and with
/// no DATA.
#[tokio::test]
async fn bodiless_statuses_reach_http2_clients_without_a_length() {
    for (status, answer) in [
        (
            204,
            &b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"[..],
        ),
        (204, b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n"),
        (
            304,
            b"HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n",
        ),
    ] {
        let upstream = broken_on_request(answer).await;
        let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
        let response = h2_get_broken(&proxy).await;
        assert_eq!(response.status(), status);
        assert!(
            response.headers().get("content-length").is_none(),
            "{status}: {:?}",
            response.headers()
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(body.is_empty(), "{status}: {body:?}");
        let answers = broken_then_next(&proxy).await;
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert!(
            answers[0].starts_with(&format!("HTTP/1.1 {status} ")),
            "{answers:?}"
        );
        assert!(!answers[0].contains("content-length"), "{answers:?}");
    }
}

/// Reading an upstream's first body frame ahead never holds a response
/// whose body starts late: its head reaches the client before the upstream
/// sends a byte of body (here, only once the client has the head).
#[tokio::test]
async fn a_response_whose_body_starts_late_gets_its_head_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let (head_seen, body_may_start) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buffer = [0; 4096];
        let _ = stream.read(&mut buffer).await;
        let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n";
        stream.write_all(head).await.unwrap();
        let _ = body_may_start.await;
        stream.write_all(b"6\r\nevent!\r\n0\r\n\r\n").await.unwrap();
        let _ = stream.read(&mut buffer).await;
    });
    let proxy = Proxy::start(&one_route("a.test", upstream)).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET /events HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buffer))
            .await
            .expect("the head arrives before the body starts")
            .unwrap();
        assert!(read > 0, "closed: {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..read]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 "));
    head_seen.send(()).unwrap();
    while message_len(&answer).is_none() {
        let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buffer))
            .await
            .expect("the body follows")
            .unwrap();
        assert!(read > 0, "closed");
        answer.extend_from_slice(&buffer[..read]);
    }
    assert!(String::from_utf8_lossy(&answer).contains("event!"));
}

/// RFC 9110 §10.1.1: a client that waits for `100 Continue` before sending
/// its body gets it (reading a body's first frame ahead asks for it), and
/// its body then reaches the upstream whole.
#[tokio::test]
async fn a_client_expecting_100_continue_gets_it_and_its_body_goes_through() {
    let upstream = RecordingUpstream::start(EMPTY_OK).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    let head =
        "PUT / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    client.write_all(head.as_bytes()).await.unwrap();
    let mut buffer = [0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buffer))
        .await
        .expect("100 Continue arrives before the body is sent")
        .unwrap();
    let interim = String::from_utf8_lossy(&buffer[..read]).into_owned();
    assert!(
        interim.starts_with("HTTP/1.1 100 Continue\r\n"),
        "{interim:?}"
    );
    client.write_all(b"hello").await.unwrap();
    let mut answer = Vec::new();
    while message_len(&answer).is_none() {
        let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buffer))
            .await
            .expect("the final answer arrives")
            .unwrap();
        assert!(read > 0, "closed: {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..read]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 "));
    let received: Vec<Framing> = upstream.requests().iter().map(|r| Framing::of(r)).collect();
    assert_eq!(
        received,
        [Framing::expected(
            "PUT / HTTP/1.1",
            &["content-length: 5"],
            "hello"
        )]
    );
}
