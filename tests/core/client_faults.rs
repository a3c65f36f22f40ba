//! A client's own faults while sending its body: a malformed body is `400`,
//! one that stops arriving is `408` after `--client-body-timeout`, and
//! neither is blamed on, retried past, nor counted against an upstream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use dockhand::settings::Settings;

use crate::support::*;

/// A backend that reads each request's body before answering with its
/// name, and counts the requests it got.
async fn reading_backend(name: &'static str) -> (Backend, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let backend = Backend::start(move |request: http::Request<Incoming>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let read = request.into_body().collect().await.is_ok();
            let status = if read { 200 } else { 499 };
            Response::builder()
                .status(status)
                .header("x-backend", name)
                .body(empty())
                .unwrap()
        }
    })
    .await;
    (backend, requests)
}

/// Writes `request` on a new connection and reads the answer's head (and
/// whatever came with it) until the server closes or 10 s pass.
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

const MALFORMED_CHUNKS: &str =
    "Host: example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";

/// Two upstreams, retried on connect failures and on 502..504: PUT bodies
/// are kept whole to be sent again, POST bodies streamed.
fn two_upstreams_with_retries(a: SocketAddr, b: SocketAddr) -> String {
    json!({"host": {"example.com": {"location": {"/": {
        "retry": {"attempts": 1, "on": ["connect", "502", "503", "504"]},
        "upstream": {a.to_string(): {}, b.to_string(): {}}
    }}}}})
    .to_string()
}

#[tokio::test]
async fn a_malformed_body_is_400_and_never_blamed_on_an_upstream() {
    let (a, a_requests) = reading_backend("a").await;
    let (b, b_requests) = reading_backend("b").await;
    let proxy = Proxy::start(&two_upstreams_with_retries(a.addr, b.addr)).await;
    let tries = 3;
    for method in ["POST", "PUT"] {
        for _ in 0..tries {
            let request = format!("{method} / HTTP/1.1\r\n{MALFORMED_CHUNKS}");
            let answer = exchange(proxy.addr, request.as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{method}: {answer}");
            assert!(
                answer.contains("x-dockhand-error: bad_request_body"),
                "{method}: {answer}"
            );
        }
    }
    let reached = a_requests.load(Ordering::SeqCst) + b_requests.load(Ordering::SeqCst);
    assert!(reached <= tries, "never retried elsewhere: {reached}");
    // Two failures in a row would mark an upstream down: both still serve.
    let mut answered_by = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let reply = get(proxy.addr, "example.com", "/").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        answered_by.insert(reply.header("x-backend").to_owned());
    }
    assert_eq!(answered_by.len(), 2, "{answered_by:?}");
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_408_after_the_client_body_timeout() {
    // The upstream reads the head and waits for the rest of the body.
    let waiting = raw_upstream(|stream| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    })
    .await;
    let (kept_for_retries, _) = reading_backend("kept").await;
    let routes = json!({"host": {
        "example.com": {"location": {"/": {"upstream": {waiting.to_string(): {}}}}},
        "retried.test": {"location": {"/": {
            "retry": {"attempts": 1, "on": ["502"]},
            "upstream": {kept_for_retries.addr.to_string(): {}}
        }}}
    }})
    .to_string();
    let proxy = Proxy::start_with(&routes, upstream_timeout_below_body_timeout()).await;
    for (method, host) in [("POST", "example.com"), ("PUT", "retried.test")] {
        let request =
            format!("{method} / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 10\r\n\r\nhalf!");
        let answer = exchange(proxy.addr, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{host}: {answer}");
        assert!(
            answer.contains("x-dockhand-error: request_body_timeout"),
            "{host}: {answer}"
        );
    }
}

/// The upstream's timeout, shorter than the client body's, must not end a
/// wait on the client.
fn upstream_timeout_below_body_timeout() -> Settings {
    Settings {
        upstream_timeout: Duration::from_millis(200),
        client_body_timeout: Duration::from_millis(500),
        ..test_settings()
    }
}

#[tokio::test]
async fn an_h2c_upstream_waiting_for_a_stalled_body_is_not_blamed() {
    let (reading, _) = reading_backend("h2c").await;
    let routes = json!({"host": {"example.com": {"location": {"/": {
        "upstream": {reading.addr.to_string(): {"protocol": "h2c"}}
    }}}}})
    .to_string();
    let proxy = Proxy::start_with(&routes, upstream_timeout_below_body_timeout()).await;
    let request = b"POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 10\r\n\r\nhalf!";
    let answer = exchange(proxy.addr, request).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let request = format!("POST / HTTP/1.1\r\n{MALFORMED_CHUNKS}");
    let answer = exchange(proxy.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(get(proxy.addr, "example.com", "/").await.status, 200);
}
