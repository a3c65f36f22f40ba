//! The access log's fields and `--access-log`: each request's host,
//! location (the matched prefix), upstream, tries, the last try's time to
//! its response head, and dockhand's error reason with its cause; written
//! to stdout with the other logs, to a file of its own, or nowhere.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::support::*;

/// Answers its first request 503 and every later one 200.
async fn unavailable_once() -> Backend {
    let answered = Arc::new(AtomicUsize::new(0));
    Backend::start(move |_| {
        let first = answered.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let status = if first { 503 } else { 200 };
            http::Response::builder()
                .status(status)
                .body(full("answer"))
                .unwrap()
        }
    })
    .await
}

/// A retried request that succeeds, and one dockhand answers 502 itself.
async fn two_requests_routes() -> (Backend, String) {
    let flaky = unavailable_once().await;
    let refusing = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let routes = json!({"host": {
        "retried.test": {"location": {"/api": {
            "retry": {"attempts": 1, "on": ["503"]},
            "upstream": {flaky.addr.to_string(): {}}
        }}},
        "refused.test": {"location": {"/": {"upstream": {refusing.to_string(): {}}}}}
    }})
    .to_string();
    (flaky, routes)
}

fn access_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is one JSON event"))
        .collect()
}

#[tokio::test]
async fn an_access_log_file_gets_every_field_and_stdout_keeps_the_other_logs() {
    let (flaky, routes) = two_requests_routes().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("access.log");
    // Appended to, never truncated.
    std::fs::write(&file, "").unwrap();
    let process = ProxyProcess::start(&routes, &["--access-log", file.to_str().unwrap()]).await;

    let reply = get(process.addr, "retried.test", "/api/orders").await;
    assert_eq!(reply.status, 200);
    let reply = get(process.addr, "refused.test", "/").await;
    assert_eq!(reply.header("x-dockhand-error"), "connect_refused");
    let mut lines = Vec::new();
    eventually("both requests are in the access-log file", || {
        lines = access_lines(&file);
        std::future::ready(lines.len() == 2)
    })
    .await;

    // A request is logged when its response ends, which the client can
    // read before: the two lines may come in either order.
    let line_of = |host: &str| {
        lines
            .iter()
            .find(|line| line["host"] == host)
            .unwrap_or_else(|| panic!("no line for {host}: {lines:?}"))
    };
    let retried = line_of("retried.test");
    assert_eq!(retried["target"], "dockhand::access", "{retried}");
    assert_eq!(retried["host"], "retried.test");
    assert_eq!(retried["path"], "/api/orders");
    assert_eq!(retried["location"], "/api");
    assert_eq!(retried["upstream"], flaky.addr.to_string());
    assert_eq!(retried["status"], 200);
    assert_eq!(retried["attempt"], 2, "a 503, then the answer: {retried}");
    assert!(
        retried["upstream_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
        "{retried}"
    );
    assert_eq!(retried["error"], "");
    assert_eq!(flaky.request_count(), 2);

    let refused = line_of("refused.test");
    assert_eq!(refused["host"], "refused.test");
    assert_eq!(refused["location"], "/");
    assert_eq!(refused["status"], 502);
    assert_eq!(refused["attempt"], 1);
    assert_eq!(refused["error"], "connect_refused");
    assert_eq!(refused["cause"], "connection refused");
    assert!(
        refused.get("upstream_ms").is_none(),
        "no response head, no upstream time: {refused}"
    );

    let stdout = process.events();
    assert!(
        stdout
            .iter()
            .all(|event| event["target"] != "dockhand::access"),
        "access events leave stdout"
    );
    assert!(
        stdout
            .iter()
            .any(|event| event["message"] == "listening for HTTP"),
        "the other logs stay on stdout"
    );
    assert!(
        !process
            .warnings("upstream try failed", "refused.test")
            .is_empty(),
        "the failed try's WARN is not an access event"
    );
}

#[tokio::test]
async fn access_log_off_drops_only_access_events() {
    let (_flaky, routes) = two_requests_routes().await;
    let mut process = ProxyProcess::start(&routes, &["--access-log", "off"]).await;
    let reply = get(process.addr, "refused.test", "/").await;
    assert_eq!(reply.status, 502);
    // Once it has exited, everything it was to log is written.
    process.signal("TERM");
    assert!(process.child.wait().unwrap().success());
    let events = process.events();
    assert!(
        events
            .iter()
            .all(|event| event["target"] != "dockhand::access"),
        "{events:?}"
    );
    assert!(
        !process
            .warnings("upstream try failed", "refused.test")
            .is_empty(),
        "other events are still logged"
    );
}

#[tokio::test]
async fn stdout_is_the_default_place_with_the_same_fields() {
    let (_flaky, routes) = two_requests_routes().await;
    let process = ProxyProcess::start(&routes, &[]).await;
    assert_eq!(get(process.addr, "retried.test", "/api").await.status, 200);
    let access = process.access_event("retried.test").await;
    assert_eq!(access["location"], "/api");
    assert_eq!(access["attempt"], 2);
    assert!(access["upstream_ms"].is_number(), "{access}");
}

#[test]
fn an_access_log_file_that_cannot_be_opened_stops_the_start() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dockhand"))
        .args(["--no-docker", "--http-listen", &free_port().to_string()])
        .args(["--access-log", "/nonexistent-directory/access.log"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("can't open --access-log /nonexistent-directory/access.log"),
        "{stderr}"
    );
}
