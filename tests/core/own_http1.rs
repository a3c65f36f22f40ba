//! What dockhand's own HTTP/1.1 server does that the other suites do not
//! reach: HTTP/1.0 keep-alive, responses read until close for clients that
//! can't take chunked, heads (`HEAD`, a reason phrase, `Date`), a protocol
//! switch on a connection that already carried requests (the connection
//! goes on in hyper's server with the bytes already read), and
//! `--http1-engine hyper`, which keeps hyper's server for comparison.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::protocols::{echo_round_trip, websocket_echo};
use crate::support::*;

/// Reads from `stream` until `want` whole responses came or it closed;
/// returns them and whether the connection was closed.
async fn read_responses(stream: &mut TcpStream, want: usize) -> (Vec<String>, bool) {
    let mut responses = Vec::new();
    let mut pending = Vec::new();
    let mut buffer = [0; 16 * 1024];
    loop {
        while let Some(length) = message_len(&pending) {
            let response: Vec<u8> = pending.drain(..length).collect();
            responses.push(String::from_utf8_lossy(&response).into_owned());
        }
        if responses.len() >= want {
            return (responses, false);
        }
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await {
            Ok(Ok(read @ 1..)) => pending.extend_from_slice(&buffer[..read]),
            _ => {
                if !pending.is_empty() {
                    responses.push(String::from_utf8_lossy(&pending).into_owned());
                }
                return (responses, true);
            }
        }
    }
}

/// RFC 9112 §9.3: an HTTP/1.0 client keeps its connection only when it asks
/// for it with `Connection: keep-alive`, and is told so in the answer.
#[tokio::test]
async fn http_1_0_keeps_its_connection_only_when_it_asks() {
    let backend = Backend::echo("b").await;
    let proxy = Proxy::start(&one_route("a.test", backend.addr)).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let kept = b"GET /1 HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n";
    for _ in 0..2 {
        stream.write_all(kept).await.unwrap();
        let (responses, closed) = read_responses(&mut stream, 1).await;
        assert!(!closed, "{responses:?}");
        assert!(
            responses[0].starts_with("HTTP/1.0 200 OK\r\n"),
            "{responses:?}"
        );
        assert!(
            responses[0].contains("\r\nconnection: keep-alive\r\n"),
            "{responses:?}"
        );
    }
    stream
        .write_all(b"GET /2 HTTP/1.0\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let (responses, closed) = read_responses(&mut stream, 2).await;
    assert_eq!(responses.len(), 1, "{responses:?}");
    assert!(
        responses[0].starts_with("HTTP/1.0 200 OK\r\n"),
        "{responses:?}"
    );
    assert!(
        closed,
        "an HTTP/1.0 request without keep-alive ends its connection"
    );
}

/// RFC 9112 §6.3 item 8: an HTTP/1.0 client can't read chunked, so a body
/// of unknown length reaches it unframed and ends with the connection.
#[tokio::test]
async fn a_body_of_unknown_length_reaches_an_http_1_0_client_until_close() {
    let upstream = RecordingUpstream::start(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    )
    .await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let answer = raw_exchange(
        proxy.addr,
        b"GET / HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n",
    )
    .await;
    let (head, body) = answer.split_once("\r\n\r\n").expect("a whole head");
    assert!(head.starts_with("HTTP/1.0 200 OK"), "{answer:?}");
    assert!(!head.contains("transfer-encoding"), "{answer:?}");
    assert!(!head.contains("content-length"), "{answer:?}");
    assert!(head.contains("connection: close"), "{answer:?}");
    assert_eq!(body, "hello world");

    // The same answer to an HTTP/1.1 client is chunked, and the connection stays.
    let answers = raw_responses(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        2,
    )
    .await;
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(
        answers[0].contains("transfer-encoding: chunked"),
        "{answers:?}"
    );
    assert!(
        answers[0].ends_with("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
        "{answers:?}"
    );
}

/// The head a client gets: the upstream's reason phrase as it was sent, a
/// `Date` (RFC 9110 §6.6.1), and for `HEAD` the length the body would have
/// with no body (RFC 9110 §9.3.2), the connection kept for the next request.
#[tokio::test]
async fn heads_keep_the_reason_phrase_and_head_answers_have_no_body() {
    let upstream = RecordingUpstream::answering(|request| {
        let text = String::from_utf8_lossy(request);
        match text.starts_with("HEAD") {
            true => b"HTTP/1.1 200 Fine Indeed\r\ncontent-length: 11\r\n\r\n".to_vec(),
            false => b"HTTP/1.1 200 Fine Indeed\r\ncontent-length: 11\r\n\r\nhello world".to_vec(),
        }
    })
    .await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"HEAD / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut buffer = [0; 4096];
    while !String::from_utf8_lossy(&answer).ends_with("hello world") {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(read @ 1..)) => answer.extend_from_slice(&buffer[..read]),
            _ => break,
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    let (head, rest) = answer.split_once("\r\n\r\n").expect("a head");
    assert!(
        head.starts_with("HTTP/1.1 200 Fine Indeed\r\n"),
        "{answer:?}"
    );
    assert!(head.contains("\r\ncontent-length: 11"), "{answer:?}");
    let date = head
        .lines()
        .find_map(|line| line.strip_prefix("date: "))
        .expect("a Date field");
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
    // The HEAD answer's head is followed at once by the GET's.
    assert!(
        rest.starts_with("HTTP/1.1 200 Fine Indeed\r\n"),
        "{answer:?}"
    );
    assert!(rest.ends_with("\r\n\r\nhello world"), "{answer:?}");
}

/// A WebSocket upgrade on a connection that already carried a request: the
/// own server answered the first, then hands the connection, with the
/// upgrade request it has read, to hyper's server, and the socket works.
#[tokio::test]
async fn a_websocket_upgrade_after_a_plain_request_on_one_connection() {
    let (echo, _server) = websocket_echo().await;
    let backend = Backend::echo("plain").await;
    let routes = serde_json::json!({"host": {"a.test": {"location": {
        "/": {"upstream": {backend.addr.to_string(): {}}},
        "/socket": {"upstream": {echo.to_string(): {}}},
    }}}})
    .to_string();
    let proxy = Proxy::start(&routes).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /first HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let (responses, closed) = read_responses(&mut stream, 1).await;
    assert!(
        !closed && responses[0].starts_with("HTTP/1.1 200 "),
        "{responses:?}"
    );
    assert!(responses[0].contains("x-backend: plain"), "{responses:?}");
    let (mut socket, response) = tokio_tungstenite::client_async("ws://a.test/socket", stream)
        .await
        .expect("the upgrade goes through on the same connection");
    assert_eq!(response.status(), 101);
    for n in 0..3 {
        echo_round_trip(&mut socket, &format!("message {n}")).await;
    }
}

/// `--http1-engine hyper` serves HTTP/1.1 clients with hyper's server, as
/// before the own server, for the benchmark's comparison: a request with
/// both lengths is then forwarded (hyper's reading) where the own server
/// refuses it.
#[tokio::test]
async fn the_hyper_engine_keeps_hyper_s_server() {
    let upstream = RecordingUpstream::start(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
    let routes = one_route("a.test", upstream.addr);
    let request = b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let own = Proxy::start(&routes).await;
    assert!(raw_exchange(own.addr, request)
        .await
        .starts_with("HTTP/1.1 400 "));
    upstream.assert_untouched("the own server refuses both lengths");
    let mut settings = test_settings();
    settings.http1_engine = dockhand::connect::Http1Engine::Hyper;
    let hyper = Proxy::start_with(&routes, settings).await;
    assert!(raw_exchange(hyper.addr, request)
        .await
        .starts_with("HTTP/1.1 200 "));
    assert_eq!(upstream.requests().len(), 1, "{:?}", upstream.requests());
}
