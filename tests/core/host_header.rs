//! The host a request is for, over raw sockets: exactly one `Host` line
//! (RFC 9112 §3.2), needed even with an absolute-form target, whose
//! authority then wins (§3.2.2). Refused requests never reach an upstream.

use crate::support::*;

const OK_AND_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

fn assert_refused(answer: &str, reason: &str) {
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains(&format!("x-dockhand-error: {reason}")),
        "{answer}"
    );
}

#[tokio::test]
async fn a_repeated_host_is_400_and_reaches_no_upstream() {
    let upstream = RecordingUpstream::start(OK_AND_CLOSE).await;
    let proxy = Proxy::start(&one_route("*", upstream.addr)).await;
    for hosts in [
        "Host: a.test\r\nHost: b.test\r\n",
        "Host: a.test\r\nHost: a.test\r\n",
        "Host: a.test\r\nX-Between: 1\r\nhost: b.test\r\n",
    ] {
        let request = format!("GET / HTTP/1.1\r\n{hosts}Connection: close\r\n\r\n");
        let answer = raw_exchange(proxy.addr, request.as_bytes()).await;
        assert_refused(&answer, "repeated_host");
    }
    assert_eq!(upstream.connection_count(), 0, "{}", upstream.received());
}

#[tokio::test]
async fn an_absolute_form_target_without_host_is_400() {
    let upstream = RecordingUpstream::start(OK_AND_CLOSE).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let answer = raw_exchange(
        proxy.addr,
        b"GET http://a.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_refused(&answer, "missing_host");
    assert_eq!(upstream.connection_count(), 0, "{}", upstream.received());
}

/// RFC 9112 §3.2.2: a server receiving an absolute-form target "MUST ignore
/// the received Host header field (if any) and instead use the host
/// information of the request-target"; the Host sent upstream is that host.
#[tokio::test]
async fn an_absolute_form_authority_wins_over_host() {
    let a = RecordingUpstream::start(OK_AND_CLOSE).await;
    let b = RecordingUpstream::start(OK_AND_CLOSE).await;
    let routes = serde_json::json!({"host": {
        "a.test": {"location": {"/": {"upstream": {a.addr.to_string(): {}}}}},
        "b.test": {"location": {"/": {"upstream": {b.addr.to_string(): {}}}}},
    }});
    let proxy = Proxy::start(&routes.to_string()).await;
    let answer = raw_exchange(
        proxy.addr,
        b"GET http://a.test/x HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(b.connection_count(), 0, "{}", b.received());
    let received = a.received().to_ascii_lowercase();
    assert!(received.starts_with("get /x http/1.1\r\n"), "{received}");
    assert!(received.contains("\r\nhost: a.test\r\n"), "{received}");
    assert!(!received.contains("b.test"), "{received}");
}

#[tokio::test]
async fn an_absolute_form_target_with_a_bad_host_is_400() {
    let upstream = RecordingUpstream::start(OK_AND_CLOSE).await;
    let proxy = Proxy::start(&one_route("a.test", upstream.addr)).await;
    let answer = raw_exchange(
        proxy.addr,
        b"GET http://a.test/ HTTP/1.1\r\nHost: a:b:c\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_refused(&answer, "bad_host");
    assert_eq!(upstream.connection_count(), 0, "{}", upstream.received());
}
