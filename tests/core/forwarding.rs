//! Forwarding: streamed bodies, pooled upstream connections, the Host the
//! client sent, the headers that say who the client is (`Forwarded`,
//! `X-Forwarded-*`, `x-dockhand-*`) and hop-by-hop header rules.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use dockhand::settings::Settings;

use crate::support::*;

const MIB: usize = 1024 * 1024;
static CHUNK: [u8; 64 * 1024] = [7; 64 * 1024];

/// A body of `total` bytes, generated chunk by chunk as it is sent.
fn generated_body(total: usize) -> TestBody {
    let chunks = total / CHUNK.len();
    let stream =
        futures_util::stream::iter(0..chunks).map(|_| Ok(Frame::data(Bytes::from_static(&CHUNK))));
    StreamBody::new(stream).boxed_unsync()
}

/// Counts a body's bytes as they arrive, keeping none.
async fn count_bytes<B>(mut body: B) -> usize
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut total = 0;
    while let Some(frame) = body.frame().await {
        total += frame.unwrap().data_ref().map_or(0, |data| data.len());
    }
    total
}

#[tokio::test]
async fn hundred_mib_each_way_stream_through_with_little_memory() {
    let backend = Backend::start(|request: http::Request<hyper::body::Incoming>| async move {
        if request.uri().path() == "/upload" {
            let received = count_bytes(request.into_body()).await;
            Response::new(full(received.to_string()))
        } else {
            Response::new(generated_body(100 * MIB))
        }
    })
    .await;
    let process = ProxyProcess::start(&one_route("example.com", backend.addr), &[]).await;

    let upload = request("POST", "example.com", "/upload")
        .body(generated_body(100 * MIB))
        .unwrap();
    let reply = send(process.addr, upload).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), (100 * MIB).to_string());

    let mut sender = http1_connection(process.addr).await;
    let download = request("GET", "example.com", "/download")
        .body(empty())
        .unwrap();
    let response = sender.send_request(download).await.unwrap();
    assert_eq!(count_bytes(response.into_body()).await, 100 * MIB);

    let peak = process.peak_rss_bytes();
    assert!(
        peak < 48 * MIB as u64,
        "peak RSS {} MiB for 200 MiB moved",
        peak / MIB as u64
    );
}

#[tokio::test]
async fn server_sent_events_arrive_one_by_one() {
    // The backend sends the next event only after the client has read the last.
    let (ack_tx, ack_rx) = mpsc::channel::<()>(1);
    let ack_rx = std::sync::Arc::new(tokio::sync::Mutex::new(Some(ack_rx)));
    let backend = Backend::start(move |_request| {
        let ack_rx = ack_rx.clone();
        async move {
            let mut ack_rx = ack_rx.lock().await.take().expect("one stream");
            let (tx, rx) =
                mpsc::channel::<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>(1);
            tokio::spawn(async move {
                for n in 0..3 {
                    let event = Bytes::from(format!("data: event {n}\n\n"));
                    if tx.send(Ok(Frame::data(event))).await.is_err()
                        || ack_rx.recv().await.is_none()
                    {
                        return;
                    }
                }
            });
            let stream = tokio_stream_from(rx);
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(StreamBody::new(stream).boxed_unsync())
                .unwrap()
        }
    })
    .await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let mut sender = http1_connection(proxy.addr).await;
    let response = sender
        .send_request(
            request("GET", "example.com", "/events")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let mut body = response.into_body();
    for n in 0..3 {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("an event arrives while the stream stays open")
            .unwrap()
            .unwrap();
        assert_eq!(frame.into_data().unwrap(), format!("data: event {n}\n\n"));
        ack_tx.send(()).await.unwrap();
    }
}

/// A request body and its response stream both ways at once: the upstream
/// (hyper's server, echoing the body as it reads it) answers the head at
/// once, and the client sends the rest of its body only after it has read
/// the echo of its start. The proxy goes on sending the body after the
/// answer's head (RFC 9112 §9.5: a client stops only for an answer that
/// refuses the body), as an HTTP/1.1 upstream that streams needs.
#[tokio::test]
async fn a_request_body_streams_on_after_the_answer_began() {
    let backend = Backend::start(|request: http::Request<hyper::body::Incoming>| async move {
        Response::new(request.into_body().map_err(Into::into).boxed_unsync())
    })
    .await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let (tx, rx) =
        mpsc::channel::<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>(1);
    let upload = request("POST", "example.com", "/echo")
        .body(StreamBody::new(tokio_stream_from(rx)).boxed_unsync())
        .unwrap();
    tx.send(Ok(Frame::data(Bytes::from_static(b"ping"))))
        .await
        .unwrap();
    let mut sender = http1_connection(proxy.addr).await;
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(upload))
        .await
        .expect("the head, before the body's end")
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let echo = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the echo of the body's start")
        .unwrap()
        .unwrap();
    assert_eq!(echo.into_data().unwrap(), "ping");
    tx.send(Ok(Frame::data(Bytes::from_static(b"pong"))))
        .await
        .unwrap();
    drop(tx);
    let rest = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .expect("the rest of the body reached the upstream, and its echo came back")
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "pong");
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn hundred_sequential_requests_share_one_upstream_connection() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    for _ in 0..100 {
        // A new client connection each time: only the upstream side is pooled.
        assert_eq!(get(proxy.addr, "example.com", "/").await.status, 200);
    }
    assert_eq!(backend.connection_count(), 1);
}

/// Each header as the echo backend received it, against what it should be
/// (`None`: not received).
fn assert_echoed(reply: &Reply, expected: &[(&str, Option<&str>)]) {
    for (name, value) in expected {
        assert_eq!(reply.echoed_header(name).as_deref(), *value, "{name}");
    }
}

#[tokio::test]
async fn every_claim_a_client_makes_about_itself_is_replaced_or_removed() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let spoofed = request("GET", "Example.com:8080", "/")
        .header("forwarded", "for=6.6.6.6;proto=https;host=evil.test")
        .header("x-forwarded-for", "6.6.6.6")
        .header("x-real-ip", "6.6.6.6")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "evil.test")
        .header("x-forwarded-port", "443")
        .header("x-forwarded-prefix", "/admin")
        .header("x-client-ip", "6.6.6.6")
        .header("x-dockhand-error", "no_host")
        .header("X-Dockhand-User", "admin")
        .body(empty())
        .unwrap();
    let reply = send(proxy.addr, spoofed).await;
    // The port connected to, not the one the Host header names.
    let listener_port = proxy.addr.port().to_string();
    assert_echoed(
        &reply,
        &[
            ("host", Some("Example.com:8080")),
            (
                "forwarded",
                Some(r#"for=127.0.0.1;proto=http;host="Example.com:8080""#),
            ),
            ("x-forwarded-for", Some("127.0.0.1")),
            ("x-real-ip", Some("127.0.0.1")),
            ("x-forwarded-proto", Some("http")),
            ("x-forwarded-host", Some("Example.com:8080")),
            ("x-forwarded-port", Some(&listener_port)),
            ("x-forwarded-prefix", None),
            ("x-client-ip", None),
            ("x-dockhand-error", None),
            ("x-dockhand-user", None),
        ],
    );
}

#[tokio::test]
async fn an_ipv6_client_is_quoted_in_forwarded() {
    let listener = match tokio::net::TcpListener::bind("[::1]:0").await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("skipped: no IPv6 loopback here ({error})");
            return;
        }
    };
    let backend = Backend::echo("a").await;
    let proxy = Proxy::try_start_on(
        listener,
        &one_route("example.com", backend.addr),
        test_settings(),
    )
    .await
    .expect("proxy starts");
    let reply = get(proxy.addr, "example.com", "/").await;
    assert_echoed(
        &reply,
        &[
            (
                "forwarded",
                Some(r#"for="[::1]";proto=http;host=example.com"#),
            ),
            ("x-forwarded-for", Some("::1")),
            ("x-real-ip", Some("::1")),
        ],
    );
}

#[tokio::test]
async fn a_trusted_proxy_has_its_chains_extended_and_its_claims_kept() {
    let backend = Backend::echo("a").await;
    let settings = Settings {
        trusted_proxies: vec!["127.0.0.0/8".parse().unwrap()],
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", backend.addr), settings).await;
    let forwarded = request("GET", "example.com", "/")
        .header("forwarded", "for=203.0.113.9;proto=https")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-real-ip", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-port", "443")
        .header("x-forwarded-prefix", "/app")
        .header("x-client-ip", "203.0.113.9")
        .header("x-dockhand-user", "admin")
        .body(empty())
        .unwrap();
    let reply = send(proxy.addr, forwarded).await;
    assert_echoed(
        &reply,
        &[
            (
                "forwarded",
                Some("for=203.0.113.9;proto=https, for=127.0.0.1;proto=http;host=example.com"),
            ),
            ("x-forwarded-for", Some("203.0.113.9, 127.0.0.1")),
            ("x-real-ip", Some("203.0.113.9")),
            ("x-forwarded-proto", Some("https")),
            // What the trusted proxy did not say, dockhand says.
            ("x-forwarded-host", Some("example.com")),
            ("x-forwarded-port", Some("443")),
            ("x-forwarded-prefix", Some("/app")),
            ("x-client-ip", Some("203.0.113.9")),
            // dockhand's namespace is not the trusted proxy's to fill.
            ("x-dockhand-user", None),
        ],
    );
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_both_ways() {
    let backend = Backend::start(|request: http::Request<hyper::body::Incoming>| async move {
        let received: Vec<String> = request.headers().keys().map(|k| k.to_string()).collect();
        Response::builder()
            .header("connection", "x-upstream-private")
            .header("x-upstream-private", "1")
            .header("keep-alive", "timeout=5")
            .header("x-upstream-public", "1")
            .body(full(received.join(",")))
            .unwrap()
    })
    .await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let hostile = request("GET", "example.com", "/")
        // A client naming dockhand's own headers in Connection must not strip them.
        .header("connection", "x-client-private, x-forwarded-for, x-real-ip")
        .header("x-client-private", "1")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("te", "gzip")
        .header("upgrade", "h2c")
        .header("x-client-public", "1")
        .body(empty())
        .unwrap();
    let reply = send(proxy.addr, hostile).await;
    let received: Vec<&str> = std::str::from_utf8(&reply.body)
        .unwrap()
        .split(',')
        .collect();
    for removed in [
        "x-client-private",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
        "connection",
    ] {
        assert!(
            !received.contains(&removed),
            "{removed} reached the upstream: {received:?}"
        );
    }
    for kept in [
        "x-client-public",
        "x-forwarded-for",
        "x-real-ip",
        "x-forwarded-proto",
        "host",
    ] {
        assert!(
            received.contains(&kept),
            "{kept} missing upstream: {received:?}"
        );
    }
    assert!(reply.headers.get("x-upstream-private").is_none());
    assert!(reply.headers.get("keep-alive").is_none());
    assert_eq!(reply.header("x-upstream-public"), "1");
}

#[tokio::test]
async fn a_content_length_beside_transfer_encoding_is_dropped() {
    let both = raw_upstream(|mut stream| async move {
        let _ = stream
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n\
                  b\r\nhello world\r\n6\r\n, all!\r\n0\r\n\r\n",
            )
            .await;
    })
    .await;
    let proxy = Proxy::start(&one_route("example.com", both)).await;
    let reply = get(proxy.addr, "example.com", "/").await;
    assert_eq!(reply.text(), "hello world, all!");
    assert!(reply
        .headers
        .get("content-length")
        .is_none_or(|length| length == "17"));
    let mut sender = h2_connection(proxy.addr).await;
    let request = http::Request::builder()
        .uri("http://example.com/")
        .body(empty())
        .unwrap();
    let reply = read_reply(sender.send_request(request).await.unwrap()).await;
    assert_eq!(reply.text(), "hello world, all!");
}
