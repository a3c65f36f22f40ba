//! Changes and endings: a route-table swap drops nothing, shutdown drains, and
//! every request leaves one access-log event.

use std::time::Duration;

use http::Response;

use crate::protocols::{echo_round_trip, websocket_echo, websocket_through};
use crate::support::*;

#[tokio::test]
async fn a_reload_keeps_websockets_idle_connections_and_requests_in_flight() {
    let (echo, _server) = websocket_echo().await;
    let slow = Backend::start(|_request| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        Response::new(full("slow done"))
    })
    .await;
    let plain = Backend::echo("plain").await;
    let other = Backend::echo("other").await;
    let routes = |plain_addr: std::net::SocketAddr| {
        serde_json::json!({"host": {
            "ws.test": {"location": {"/": {"upstream": {echo.to_string(): {}}}}},
            "slow.test": {"location": {"/": {"upstream": {slow.addr.to_string(): {}}}}},
            "plain.test": {"location": {"/": {"upstream": {plain_addr.to_string(): {}}}}}
        }})
        .to_string()
    };
    let proxy = Proxy::start(&routes(plain.addr)).await;

    let mut socket = websocket_through(proxy.addr, "ws.test").await;
    echo_round_trip(&mut socket, "before").await;
    let mut idle = http1_connection(proxy.addr).await;
    let reply = read_reply(
        idle.send_request(request("GET", "plain.test", "/").body(empty()).unwrap())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(reply.header("x-backend"), "plain");
    let in_flight = tokio::spawn(get(proxy.addr, "slow.test", "/"));

    proxy.write_routes(&routes(other.addr));
    proxy.reload();
    eventually("the new table is current", || async {
        get(proxy.addr, "plain.test", "/").await.header("x-backend") == "other"
    })
    .await;

    let finished = in_flight.await.unwrap();
    assert_eq!(finished.status, 200);
    assert_eq!(finished.text(), "slow done");
    echo_round_trip(&mut socket, "after").await;
    // The same client connection, idle across the swap, serves with the new table.
    idle.ready()
        .await
        .expect("the idle connection is still open");
    let reply = read_reply(
        idle.send_request(request("GET", "plain.test", "/").body(empty()).unwrap())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(reply.header("x-backend"), "other");
}

#[tokio::test]
async fn sigterm_lets_requests_in_flight_finish_then_exits_zero() {
    let slow = Backend::start(|_request| async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        Response::new(full("finished"))
    })
    .await;
    let mut process = ProxyProcess::start(&one_route("example.com", slow.addr), &[]).await;
    let in_flight = tokio::spawn(get(process.addr, "example.com", "/"));
    eventually("the request reached the backend", || async {
        slow.connection_count() == 1
    })
    .await;
    process.signal("TERM");
    let reply = in_flight.await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "finished");
    let status = process.wait_exit(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0));
    assert!(
        tokio::net::TcpStream::connect(process.addr).await.is_err(),
        "still accepting"
    );
}

#[tokio::test]
async fn shutdown_stops_accepting_and_run_returns() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let addr = proxy.addr;
    assert_eq!(get(addr, "example.com", "/").await.status, 200);
    proxy.stop().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn each_request_writes_one_json_access_log_event() {
    let backend = Backend::echo("a").await;
    let process = ProxyProcess::start(&one_route("example.com", backend.addr), &[]).await;
    let reply = get(process.addr, "example.com", "/hello?secret=1").await;
    assert_eq!(reply.status, 200);
    let missing = get(process.addr, "nowhere.test", "/x").await;
    assert_eq!(missing.status, 404);

    let mut events = Vec::new();
    eventually("two access-log events", || {
        events = process
            .stdout()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["target"] == "dockhand::access")
            .collect();
        std::future::ready(events.len() == 2)
    })
    .await;
    let ok = &events[0];
    assert!(ok["timestamp"]
        .as_str()
        .is_some_and(|t| t.starts_with("20")));
    assert!(ok["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["host"], "example.com");
    assert_eq!(ok["path"], "/hello");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["upstream"], backend.addr.to_string());
    assert_eq!(ok["bytes_out"].as_u64(), Some(reply.body.len() as u64));
    assert!(ok["duration_ms"].as_f64().is_some());
    assert_eq!(ok["error"], "");
    let missed = &events[1];
    assert_eq!(missed["status"], 404);
    assert_eq!(missed["error"], "no_host");
    assert_eq!(missed["path"], "/x");
}

#[tokio::test]
async fn without_docker_the_routes_file_is_served_and_docker_is_retried() {
    let backend = Backend::echo("a").await;
    let missing = tempfile::tempdir().unwrap();
    let socket = format!("unix://{}/docker.sock", missing.path().display());
    let process = ProxyProcess::start_with_flags(
        &one_route("example.com", backend.addr),
        &["--docker-host", &socket],
    )
    .await;
    assert_eq!(
        get(process.addr, "example.com", "/")
            .await
            .header("x-backend"),
        "a"
    );
    let mut warnings = Vec::new();
    eventually("Docker retried with a warning", || {
        warnings = process
            .events()
            .into_iter()
            .filter(|event| {
                event["level"] == "WARN"
                    && event["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Docker unreachable"))
            })
            .collect();
        std::future::ready(warnings.len() >= 2)
    })
    .await;
    // Where Docker was looked for, and why it was not there.
    assert_eq!(
        warnings[0]["error"],
        format!("can't reach Docker at {socket}: no such file (is the socket mounted?)")
    );
}

#[tokio::test]
async fn the_binary_takes_its_settings_from_the_environment() {
    let backend = Backend::echo("a").await;
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.json");
    std::fs::write(&routes, one_route("example.com", backend.addr)).unwrap();
    let addr = free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dockhand"))
        .env("DOCKHAND_HTTP_LISTEN", addr.to_string())
        .env("DOCKHAND_ROUTES", &routes)
        .env("DOCKHAND_NO_DOCKER", "true")
        .env("DOCKHAND_LOG_FORMAT", "json")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually("it listens where the environment said", || async {
        tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await;
    assert_eq!(get(addr, "example.com", "/").await.header("x-backend"), "a");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Runs the binary to its end with `args` and a port held by this test, and
/// returns its exit status and everything it wrote.
fn run_to_exit(args: &[&str]) -> (std::process::ExitStatus, String) {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dockhand"))
        .args(["--http-listen", &held.local_addr().unwrap().to_string()])
        .args(["--log-format", "json"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status, text)
}

#[test]
fn a_bad_configuration_stops_the_binary_before_any_port_is_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bad_routes = dir.path().join("routes.json");
    std::fs::write(
        &bad_routes,
        r#"{"host": {"a.com": {"location": {"/": {"upstraem": {}}}}}}"#,
    )
    .unwrap();
    let bad_routes = bad_routes.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--no-docker", "--routes", bad_routes], "upstraem"),
        (&["--no-docker"], "nothing would be served"),
        (&["--workers", "0", "--routes", bad_routes], "--workers"),
        (
            &["--docker-host", "unix:/var/run/docker.sock"],
            "--docker-host",
        ),
    ];
    for (args, expected) in cases {
        // The port is held, so a binary that tried to bind it would say so.
        let (status, output) = run_to_exit(args);
        assert!(!status.success(), "{args:?}: {output}");
        assert!(
            output.contains(expected),
            "{args:?} names the problem: {output}"
        );
        assert!(
            !output.contains("listen"),
            "{args:?} stops before binding: {output}"
        );
    }
}
