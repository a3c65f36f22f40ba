//! dockhand's own statuses: each with a one-line body and `x-dockhand-error`,
//! and the timeouts that lead to them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use dockhand::settings::Settings;

use crate::support::*;

fn assert_own_status(reply: &Reply, status: u16, reason: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(reply.header("x-dockhand-error"), reason);
    let text = reply.text();
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "one line: {text:?}"
    );
}

#[tokio::test]
async fn refused_connection_is_502() {
    let closed_port = refused_address();
    assert_own_status(&through_proxy_to(closed_port).await, 502, "connect_refused");
}

/// `GET /` through a proxy whose one route goes to `upstream`.
async fn through_proxy_to(upstream: std::net::SocketAddr) -> Reply {
    let proxy = Proxy::start(&one_route("example.com", upstream)).await;
    get(proxy.addr, "example.com", "/").await
}

#[tokio::test]
async fn an_answer_that_is_not_http_is_502() {
    let addr = raw_upstream(|mut stream| async move {
        let _ = stream.write_all(b"SMTP ready\r\n\r\n").await;
    })
    .await;
    assert_own_status(&through_proxy_to(addr).await, 502, "not_http");
}

/// A response head is read into the upstream connection's 64 KiB buffer,
/// which hyper lets grow by at most one more read (so up to 128 KiB): a
/// head that does not fit gets a reason of its own, one that does passes.
#[tokio::test]
async fn a_response_head_too_large_for_the_buffer_is_502_with_its_own_reason() {
    let head_with = |cookie_bytes: usize| {
        let cookie = "c".repeat(cookie_bytes);
        format!("HTTP/1.1 200 OK\r\nset-cookie: {cookie}\r\ncontent-length: 2\r\n\r\nok")
    };
    let answering = |head: String| {
        raw_upstream(move |mut stream| {
            let head = head.clone();
            async move {
                let _ = stream.write_all(head.as_bytes()).await;
            }
        })
    };
    let too_large = answering(head_with(130 * 1024)).await;
    let reply = through_proxy_to(too_large).await;
    assert_own_status(&reply, 502, "upstream_head_too_large");
    let fits = answering(head_with(60 * 1024)).await;
    let reply = through_proxy_to(fits).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "ok");
}

#[tokio::test]
async fn a_connection_reset_before_the_answer_is_502() {
    let addr = raw_upstream(|stream| async move {
        // Linger 0 turns the close into a reset.
        let _ = stream.set_zero_linger();
        drop(stream);
    })
    .await;
    assert_own_status(&through_proxy_to(addr).await, 502, "reset_before_response");
}

#[tokio::test]
async fn a_connection_closed_before_the_answer_is_502() {
    let addr = raw_upstream(|stream| async move { drop(stream) }).await;
    assert_own_status(&through_proxy_to(addr).await, 502, "reset_before_response");
}

#[tokio::test]
async fn no_answer_within_the_upstream_timeout_is_504() {
    let backend = Backend::start(|_request| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Response::new(empty())
    })
    .await;
    let settings = Settings {
        upstream_timeout: Duration::from_millis(200),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", backend.addr), settings).await;
    assert_own_status(
        &get(proxy.addr, "example.com", "/").await,
        504,
        "upstream_timeout",
    );
}

#[tokio::test]
async fn a_connect_that_hangs_is_504_after_the_connect_timeout() {
    let hanging = HangingAddress::new().await;
    let settings = Settings {
        connect_timeout: Duration::from_millis(200),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", hanging.addr), settings).await;
    assert_own_status(
        &get(proxy.addr, "example.com", "/").await,
        504,
        "connect_timeout",
    );
}

#[tokio::test]
async fn a_request_without_host_is_400() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("*", backend.addr)).await;
    let answer = raw_exchange(proxy.addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert!(
        answer.starts_with("HTTP/1.0 400") || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    assert!(
        answer.contains("x-dockhand-error: missing_host"),
        "{answer}"
    );
    let answer = raw_exchange(proxy.addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

#[tokio::test]
async fn a_host_that_is_not_a_host_name_is_400_bad_host() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("*", backend.addr)).await;
    for host in ["a:b:c", "example.com:http", ""] {
        let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(proxy.addr, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{host:?}: {answer}");
        assert!(
            answer.contains("x-dockhand-error: bad_host"),
            "{host:?}: {answer}"
        );
    }
    assert_eq!(backend.connection_count(), 0);
}

#[tokio::test]
async fn headers_over_64_kib_are_431() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let big = "x".repeat(70 * 1024);
    let reply = send(
        proxy.addr,
        request("GET", "example.com", "/")
            .header("x-big", big)
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_own_status(&reply, 431, "headers_too_large");
    // Just under the limit is forwarded.
    let fits = "x".repeat(60 * 1024);
    let reply = send(
        proxy.addr,
        request("GET", "example.com", "/")
            .header("x-big", fits)
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn a_slow_request_head_is_cut_off() {
    let backend = Backend::echo("a").await;
    let settings = Settings {
        header_read_timeout: Duration::from_millis(300),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", backend.addr), settings).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: exa")
        .await
        .unwrap();
    // The rest of the head never comes; the server must close the connection.
    let mut answer = Vec::new();
    let closed =
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "the connection was left open");
    assert!(!String::from_utf8_lossy(&answer).contains("200"));
    assert_eq!(backend.connection_count(), 0);
}

/// A request head of `headers` fields (Host and Connection among them)
/// with a path of `path_bytes`.
fn head_of(headers: usize, path_bytes: usize) -> String {
    let mut head = format!(
        "GET /{} HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n",
        "a".repeat(path_bytes.saturating_sub(1))
    );
    for i in 2..headers {
        head.push_str(&format!("x-h{i}: v\r\n"));
    }
    head + "\r\n"
}

/// The limits the README states, met before a request is routed: at most
/// 100 header fields (RFC 9110 §15.5.20 `431`), a request target of at most
/// 65,534 bytes (RFC 9110 §15.5.15 `414`), a request head of at most 128 KiB
/// in all (`431`). None of these reaches the upstream.
#[tokio::test]
async fn the_stated_limits_of_a_request_head() {
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let upstream = raw_upstream(move |mut stream| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut buffer = [0; 16 * 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => head.extend_from_slice(&buffer[..read]),
                }
            }
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            let _ = stream.write_all(answer).await;
        }
    })
    .await;
    let proxy = Proxy::start(&one_route("example.com", upstream)).await;
    let cases = [
        (head_of(100, 1), "HTTP/1.1 200"),
        (head_of(101, 1), "HTTP/1.1 431"),
        (head_of(2, 65_534), "HTTP/1.1 200"),
        (head_of(2, 65_535), "HTTP/1.1 414"),
        (head_of(2, 130 * 1024), "HTTP/1.1 431"),
    ];
    for (head, expected) in cases {
        let answer = raw_exchange(proxy.addr, head.as_bytes()).await;
        let first = answer.lines().next().unwrap_or("");
        assert!(first.starts_with(expected), "{} bytes: {first}", head.len());
    }
    assert_eq!(
        reached.load(Ordering::SeqCst),
        2,
        "only the heads within the limits reach the upstream"
    );
}
