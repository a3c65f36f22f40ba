//! What failed underneath dockhand's own statuses: the cause in the access
//! log next to the reason, one WARN per failed try (with its host, location,
//! upstream and attempt), and a body cut after its head went out.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::support::*;

const FAILED_TRY: &str = "upstream try failed";
const BODY_CUT: &str = "upstream body cut after the response head";

/// Two distinct addresses nothing listens on.
fn two_refusing() -> (SocketAddr, SocketAddr) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (a.local_addr().unwrap(), b.local_addr().unwrap())
}

fn text(event: &Value, field: &str) -> String {
    event[field].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn each_failed_try_warns_once_and_the_last_cause_reaches_the_access_log() {
    let (first, second) = two_refusing();
    let not_http = raw_upstream(|mut stream| async move {
        let _ = stream.write_all(b"SMTP ready\r\n\r\n").await;
    })
    .await;
    let closing = raw_upstream(|stream| async move { drop(stream) }).await;
    let resetting = raw_upstream(|stream| async move {
        // Linger 0 turns the close into a reset.
        let _ = stream.set_zero_linger();
        drop(stream);
    })
    .await;
    let routes = json!({"host": {
        "refused.test": {"location": {"/api": {
            "retry": {"attempts": 1, "on": ["connect"]},
            "upstream": {first.to_string(): {}, second.to_string(): {}}
        }}},
        "not-http.test": {"location": {"/": {"upstream": {not_http.to_string(): {}}}}},
        "closing.test": {"location": {"/": {"upstream": {closing.to_string(): {}}}}},
        "resetting.test": {"location": {"/": {"upstream": {resetting.to_string(): {}}}}}
    }})
    .to_string();
    let process = ProxyProcess::start(&routes, &[]).await;

    let reply = get(process.addr, "refused.test", "/api/orders").await;
    assert_eq!(reply.header("x-dockhand-error"), "connect_refused");
    let access = process.access_event("refused.test").await;
    assert_eq!(access["error"], "connect_refused");
    assert_eq!(access["cause"], "connection refused");
    let tries = process.warnings(FAILED_TRY, "refused.test");
    assert_eq!(tries.len(), 2, "{tries:?}");
    for (index, event) in tries.iter().enumerate() {
        assert_eq!(event["attempt"], index + 1);
        assert_eq!(event["location"], "/api");
        assert_eq!(event["error"], "connect_refused");
        assert_eq!(event["cause"], "connection refused");
    }
    let tried: BTreeSet<String> = tries.iter().map(|event| text(event, "upstream")).collect();
    let expected: BTreeSet<String> = [first, second].iter().map(|a| a.to_string()).collect();
    assert_eq!(tried, expected, "one try to each upstream");

    for (host, reason, cause) in [
        ("not-http.test", "not_http", "invalid HTTP"),
        ("closing.test", "reset_before_response", "closed"),
        ("resetting.test", "reset_before_response", "reset"),
    ] {
        let reply = get(process.addr, host, "/").await;
        assert_eq!(reply.header("x-dockhand-error"), reason);
        let access = process.access_event(host).await;
        assert_eq!(access["error"], reason);
        assert!(text(&access, "cause").contains(cause), "{access}");
        let tries = process.warnings(FAILED_TRY, host);
        assert_eq!(tries.len(), 1, "{tries:?}");
        assert_eq!(tries[0]["attempt"], 1);
        assert_eq!(tries[0]["cause"], access["cause"]);
    }
}

#[tokio::test]
async fn a_body_cut_after_the_head_ends_the_client_connection_and_is_logged() {
    let cutting = raw_upstream(|mut stream| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhalf")
            .await;
    })
    .await;
    let process = ProxyProcess::start(&one_route("cut.test", cutting), &[]).await;
    let response = http1_connection(process.addr)
        .await
        .send_request(request("GET", "cut.test", "/").body(empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.into_body().collect().await.is_err(),
        "the client's body ends abnormally"
    );
    let access = process.access_event("cut.test").await;
    assert_eq!(access["status"], 200);
    assert_eq!(access["error"], "reset_mid_response");
    assert!(!text(&access, "cause").is_empty(), "{access}");
    let cut = process.warnings(BODY_CUT, "cut.test");
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["upstream"], cutting.to_string());
    assert_eq!(cut[0]["location"], "/");
    assert_eq!(cut[0]["attempt"], 1);
    assert_eq!(cut[0]["cause"], access["cause"]);
    assert!(process.warnings(FAILED_TRY, "cut.test").is_empty());
}

#[tokio::test]
async fn a_bad_host_names_itself_as_the_cause() {
    let backend = Backend::echo("a").await;
    let process = ProxyProcess::start(&one_route("*", backend.addr), &[]).await;
    let reply = get(process.addr, "a:b:c", "/").await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.header("x-dockhand-error"), "bad_host");
    let access = process.access_event("a:b:c").await;
    assert_eq!(access["error"], "bad_host");
    assert_eq!(access["cause"], "\"a:b:c\" is not a host name");
}

#[tokio::test]
async fn a_client_body_fault_is_logged_as_the_clients_not_as_a_failed_try() {
    let reading = Backend::start(|request: http::Request<hyper::body::Incoming>| async move {
        let _ = request.into_body().collect().await;
        http::Response::new(empty())
    })
    .await;
    let routes = json!({"host": {
        "malformed.test": {"location": {"/": {"upstream": {reading.addr.to_string(): {}}}}},
        "stalled.test": {"location": {"/": {"upstream": {reading.addr.to_string(): {}}}}}
    }})
    .to_string();
    let process = ProxyProcess::start(&routes, &["--client-body-timeout", "300ms"]).await;
    for (host, body, reason, cause) in [
        (
            // Malformed past its first chunk, so found while an upstream
            // is tried (malformed from its start, it reaches none).
            "malformed.test",
            "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
            "bad_request_body",
            "could not be read",
        ),
        (
            "stalled.test",
            "Content-Length: 10\r\n\r\nhalf",
            "request_body_timeout",
            "--client-body-timeout",
        ),
    ] {
        let mut stream = tokio::net::TcpStream::connect(process.addr).await.unwrap();
        let request = format!("POST / HTTP/1.1\r\nHost: {host}\r\n{body}");
        stream.write_all(request.as_bytes()).await.unwrap();
        let access = process.access_event(host).await;
        assert_eq!(access["error"], reason, "{access}");
        assert!(text(&access, "cause").contains(cause), "{access}");
        assert!(process.warnings(FAILED_TRY, host).is_empty());
        let client_faults: Vec<Value> = process
            .events()
            .into_iter()
            .filter(|event| {
                event["message"] == "client request body failed" && event["host"] == host
            })
            .collect();
        assert_eq!(client_faults.len(), 1, "{client_faults:?}");
        assert_eq!(client_faults[0]["level"], "INFO");
        assert_eq!(client_faults[0]["error"], reason);
        assert_eq!(client_faults[0]["upstream"], reading.addr.to_string());
    }
}
