//! The own HTTP/1.1 server against what hyper's server did before it (still
//! there with `--http1-engine hyper`): a connection kept after a refusal
//! whose body has arrived, a client that goes away while its request waits,
//! the trailer fields passed on, and the strict framing held whatever the
//! request asks after it.

use std::time::Duration;

use dockhand::connect::Http1Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::support::*;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A proxy for `a.test` on `upstream`, with `engine` on both sides.
async fn proxy_with(engine: Http1Engine, upstream: std::net::SocketAddr) -> Proxy {
    let settings = dockhand::settings::Settings {
        http1_engine: engine,
        ..test_settings()
    };
    Proxy::start_with(&one_route("a.test", upstream), settings).await
}

/// A request answered without its body being read (no route: 404), whose
/// small body came with its head: the body is skipped, as hyper's server
/// skips it, and the request pipelined after it is answered on the same
/// connection.
#[tokio::test]
async fn a_refused_request_whose_body_has_arrived_keeps_its_connection() {
    for engine in [Http1Engine::Own, Http1Engine::Hyper] {
        let upstream = RecordingUpstream::start(OK).await;
        let proxy = proxy_with(engine, upstream.addr).await;
        let pipelined = "POST / HTTP/1.1\r\nHost: nowhere.test\r\nContent-Length: 5\r\n\r\nhello\
                         GET /next HTTP/1.1\r\nHost: a.test\r\n\r\n";
        let answers = raw_responses(proxy.addr, pipelined.as_bytes(), 2).await;
        assert_eq!(answers.len(), 2, "{engine:?}: {answers:?}");
        assert!(
            answers[0].starts_with("HTTP/1.1 404 "),
            "{engine:?}: {answers:?}"
        );
        assert!(
            answers[1].starts_with("HTTP/1.1 200 "),
            "{engine:?}: {answers:?}"
        );
        let requests = upstream.requests();
        assert_eq!(requests.len(), 1, "{engine:?}: {requests:?}");
        assert!(
            requests[0].starts_with("GET /next "),
            "{engine:?}: {requests:?}"
        );
    }
}

/// A request whose body can't be read (malformed chunked) is answered 400
/// and its connection closed: the answer says so, so that the client does
/// not send another request on it.
#[tokio::test]
async fn a_request_whose_body_is_malformed_is_answered_connection_close() {
    let upstream = RecordingUpstream::start(OK).await;
    let proxy = proxy_with(Http1Engine::Own, upstream.addr).await;
    let request = "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n\
                   5\r\nhello\r\nzz\r\n";
    let answer = raw_exchange(proxy.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer:?}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer:?}");
}

/// A client that closes its connection while its request waits for the
/// upstream's answer: the request is abandoned, and with it the upstream
/// connection, rather than kept until the upstream answers or times out.
#[tokio::test]
async fn a_client_gone_while_its_request_waits_abandons_the_upstream_request() {
    for engine in [Http1Engine::Own, Http1Engine::Hyper] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = listener.local_addr().unwrap();
        let (got_request, request_seen) = oneshot::channel::<()>();
        let (abandoned, upstream_closed) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut received = Vec::new();
            let mut buffer = [0; 4096];
            while !received.windows(4).any(|w| w == b"\r\n\r\n") {
                let Ok(read @ 1..) = stream.read(&mut buffer).await else {
                    return;
                };
                received.extend_from_slice(&buffer[..read]);
            }
            let _ = got_request.send(());
            // Never answers; reads until dockhand gives up on the request.
            while let Ok(1..) = stream.read(&mut buffer).await {}
            let _ = abandoned.send(());
        });
        let proxy = proxy_with(engine, upstream).await;
        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        client
            .write_all(b"GET /long-poll HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), request_seen)
            .await
            .expect("the request reaches the upstream")
            .unwrap();
        drop(client);
        tokio::time::timeout(Duration::from_secs(5), upstream_closed)
            .await
            .unwrap_or_else(|_| panic!("{engine:?}: the upstream request is still waiting"))
            .unwrap();
    }
}

/// RFC 9110 §6.5.1: trailer fields are sent to an HTTP/1.1 client when it
/// takes them, only those the response's `Trailer` field announces, and
/// never one that frames, routes or authenticates (as hyper's server).
#[tokio::test]
async fn only_announced_trailer_fields_that_may_be_trailers_reach_the_client() {
    for engine in [Http1Engine::Own, Http1Engine::Hyper] {
        let upstream = RecordingUpstream::start(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\
              trailer: x-checksum, content-length\r\n\r\n\
              2\r\nok\r\n0\r\nx-checksum: abc\r\nx-unannounced: 1\r\ncontent-length: 99\r\n\r\n",
        )
        .await;
        let proxy = proxy_with(engine, upstream.addr).await;
        let request = "GET / HTTP/1.1\r\nHost: a.test\r\nTE: trailers\r\n\r\n";
        let answers = raw_responses(proxy.addr, request.as_bytes(), 1).await;
        assert_eq!(answers.len(), 1, "{engine:?}: {answers:?}");
        let answer = answers[0].to_ascii_lowercase();
        let (_, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(
            body.contains("\r\nx-checksum: abc\r\n"),
            "{engine:?}: {body:?}"
        );
        assert!(!body.contains("x-unannounced"), "{engine:?}: {body:?}");
        assert!(!body.contains("content-length"), "{engine:?}: {body:?}");
    }
}

/// RFC 9112 §6.1: a request with both `Transfer-Encoding` and
/// `Content-Length` is refused even when it also asks for an upgrade
/// (which hyper's server would have been handed).
#[tokio::test]
async fn a_request_with_both_lengths_is_refused_even_when_it_asks_for_an_upgrade() {
    let upstream = RecordingUpstream::start(OK).await;
    let proxy = proxy_with(Http1Engine::Own, upstream.addr).await;
    let request =
        "POST / HTTP/1.1\r\nHost: a.test\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\
                   Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG";
    let answer = raw_exchange(proxy.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer:?}");
    upstream.assert_untouched("CL.TE with Upgrade");
}
