//! Protocol switches only where a location allows them (`upgrades`, default
//! `["websocket"]`, never `h2c`): any other `Upgrade` reaches the upstream as
//! a plain request, and a `101` the request could not have asked for is a
//! `502`, never a tunnel past routing.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::protocols::{echo_round_trip, websocket_echo, websocket_through};
use crate::support::*;

const OK_AND_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

/// An upstream that switches every connection to HTTP/2, asked or not.
const SWITCH_TO_H2C: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n";

/// `close` lets `raw_exchange` read the whole answer.
const H2C_UPGRADE: &str = "GET / HTTP/1.1\r\nHost: example.com\r\n\
    Connection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\n\
    HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";

/// The HTTP/2 connection preface and an empty SETTINGS frame: what a client
/// sends once it believes the connection switched to h2c.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The status line and headers of an answer, lower-cased.
fn head_of(answer: &str) -> String {
    answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

fn assert_no_switch_reached(upstream: &RecordingUpstream) {
    let received = upstream.received().to_ascii_lowercase();
    assert!(received.starts_with("get / http/1.1"), "{received}");
    for forbidden in ["upgrade", "http2-settings"] {
        assert!(!received.contains(forbidden), "{forbidden}: {received}");
    }
}

#[tokio::test]
async fn an_h2c_upgrade_is_forwarded_as_a_plain_request() {
    let upstream = RecordingUpstream::start(OK_AND_CLOSE).await;
    let proxy = Proxy::start(&one_route("example.com", upstream.addr)).await;
    let answer = raw_exchange(proxy.addr, H2C_UPGRADE.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_no_switch_reached(&upstream);

    // `HTTP2-Settings` is dropped even when `Connection` does not name it.
    let upstream = RecordingUpstream::start(OK_AND_CLOSE).await;
    let proxy = Proxy::start(&one_route("example.com", upstream.addr)).await;
    let unnamed = "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, close\r\n\
                   Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
    let answer = raw_exchange(proxy.addr, unnamed.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_no_switch_reached(&upstream);
}

#[tokio::test]
async fn a_101_to_an_h2c_upgrade_is_502_and_nothing_is_tunnelled() {
    let upstream = RecordingUpstream::start(SWITCH_TO_H2C).await;
    let proxy = Proxy::start(&one_route("example.com", upstream.addr)).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client.write_all(H2C_UPGRADE.as_bytes()).await.unwrap();
    let mut answer = vec![0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    let head = head_of(&answer);
    assert!(head.starts_with("http/1.1 502"), "{answer}");
    assert!(
        head.contains("x-dockhand-error: unexpected_upgrade"),
        "{answer}"
    );
    // Whatever the client sends next is not carried to the upstream.
    let _ = client.write_all(H2_PREFACE).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!upstream.received().contains("PRI * HTTP/2.0"));
    assert_no_switch_reached(&upstream);
}

#[tokio::test]
async fn a_101_to_a_request_that_asked_for_no_switch_is_502() {
    let upstream = RecordingUpstream::start(
        b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    )
    .await;
    let proxy = Proxy::start(&one_route("example.com", upstream.addr)).await;
    for sent in 1..=2 {
        let reply = get(proxy.addr, "example.com", "/").await;
        assert_eq!(reply.status, 502, "{}", reply.text());
        assert_eq!(reply.header("x-dockhand-error"), "unexpected_upgrade");
        // RFC 9110 §15.2.2: the switched connection speaks the other
        // protocol now; no later request is written into it.
        assert_eq!(
            upstream.connection_count(),
            sent,
            "a new connection each time"
        );
    }
}

#[tokio::test]
async fn a_location_allowing_no_upgrades_forwards_websocket_as_plain() {
    let upstream = RecordingUpstream::start(OK_AND_CLOSE).await;
    let routes = serde_json::json!({"host": {"example.com": {"location": {"/": {
        "upgrades": [],
        "upstream": {upstream.addr.to_string(): {}}
    }}}}});
    let proxy = Proxy::start(&routes.to_string()).await;
    let websocket = "GET /socket HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, close\r\n\
                     Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                     Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let answer = raw_exchange(proxy.addr, websocket.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let received = upstream.received().to_ascii_lowercase();
    assert!(received.starts_with("get /socket http/1.1"), "{received}");
    assert!(!received.contains("upgrade"), "{received}");
}

#[tokio::test]
async fn websockets_pass_where_upgrades_list_them() {
    let (echo, _server) = websocket_echo().await;
    let routes = serde_json::json!({"host": {"example.com": {"location": {"/": {
        "upgrades": ["websocket"],
        "upstream": {echo.to_string(): {}}
    }}}}});
    let proxy = Proxy::start(&routes.to_string()).await;
    let mut socket = websocket_through(proxy.addr, "example.com").await;
    echo_round_trip(&mut socket, "through an allowed upgrade").await;
}

#[tokio::test]
async fn a_routes_file_allowing_h2c_is_refused_with_the_key_path() {
    let routes = r#"{"host": {"a.com": {"location": {"/": {
        "upgrades": ["websocket", "h2c"], "upstream": {"127.0.0.1:9": {}}}}}}}"#;
    let error = Proxy::try_start(routes, test_settings())
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(
        error.contains(r#"host."a.com".location."/".upgrades: h2c is never forwarded"#),
        "{error}"
    );
}
