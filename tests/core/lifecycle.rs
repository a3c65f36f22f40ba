//! Changes and endings: a route-table swap drops nothing, shutdown drains, and
//! every request leaves one access-log event.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::net::TcpStream;

use crate::protocols::{echo_round_trip, websocket_echo, websocket_through};
use crate::support::*;
use dockhand::settings::Settings;

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

/// The held backend's answer: its head and a first chunk of 1 KiB at once,
/// then, once the test lets it go on, 19 more.
const CHUNKS: usize = 20;
const CHUNK: &[u8] = &[b'x'; 1024];

/// SIGTERM under load: 20 requests in flight (mid-body, held by their
/// backend) and new ones arriving on new connections all the while. After
/// the signal new connections are refused; then the backend goes on, and
/// every request in flight completes with its whole body, and the process
/// exits 0 well before `--shutdown-timeout` (20 s) ran out. A request that
/// arrives as the server stops is answered whole or its connection closed
/// unanswered: none gets an error status or a cut body.
#[tokio::test]
async fn sigterm_under_load_lets_requests_in_flight_finish_refuses_new_ones_and_exits_zero() {
    const IN_FLIGHT: usize = 20;
    const ARRIVING: usize = 5;
    let started = Arc::new(AtomicUsize::new(0));
    let (go_on, held) = tokio::sync::watch::channel(false);
    let backend = Backend::start({
        let started = started.clone();
        move |_request| {
            started.fetch_add(1, Ordering::SeqCst);
            let held = held.clone();
            async move {
                let rest = futures_util::stream::iter(1..CHUNKS).then(move |n| {
                    let mut held = held.clone();
                    async move {
                        if n == 1 {
                            let _ = held.wait_for(|go_on| *go_on).await;
                        }
                        Ok(Frame::data(Bytes::from_static(CHUNK)))
                    }
                });
                let first = futures_util::stream::once(async {
                    Ok(Frame::data(Bytes::from_static(CHUNK)))
                });
                Response::new(StreamBody::new(first.chain(rest)).boxed_unsync())
            }
        }
    })
    .await;
    let mut process = ProxyProcess::start(
        &one_route("example.com", backend.addr),
        &["--shutdown-timeout", "20s"],
    )
    .await;
    let addr = process.addr;
    let in_flight: Vec<_> = (0..IN_FLIGHT)
        .map(|_| tokio::spawn(get(addr, "example.com", "/")))
        .collect();
    // New requests keep coming, on new connections, until connections
    // are refused.
    let arriving: Vec<_> = (0..ARRIVING)
        .map(|_| {
            tokio::spawn(async move {
                let mut answered = 0;
                loop {
                    match TcpStream::connect(addr).await {
                        Err(error) => return (answered, error.kind()),
                        Ok(stream) => answered += usize::from(try_get(stream).await.is_some()),
                    }
                }
            })
        })
        .collect();
    eventually("every request is in flight", || {
        std::future::ready(started.load(Ordering::SeqCst) == IN_FLIGHT + ARRIVING)
    })
    .await;
    let signalled = std::time::Instant::now();
    process.signal("TERM");
    eventually("new connections are refused", || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert!(in_flight.iter().all(|request| !request.is_finished()));

    go_on.send(true).unwrap();
    for request in in_flight {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body.len(), CHUNKS * CHUNK.len());
    }
    let mut answered_around = 0;
    for arrivals in arriving {
        let (answered, refusal) = arrivals.await.unwrap();
        assert_eq!(refusal, std::io::ErrorKind::ConnectionRefused);
        answered_around += answered;
    }
    let status = process.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "exited only when --shutdown-timeout ran out"
    );
    let gave_up = process
        .events()
        .into_iter()
        .any(|event| event["message"] == "shutdown timeout reached with requests still in flight");
    assert!(!gave_up, "requests were still in flight at the exit");
    println!(
        "SIGTERM with {} requests in flight: all completed whole; {answered_around} of them were arriving ones",
        IN_FLIGHT + ARRIVING
    );
}

/// `GET /` on `stream`: the reply if it came, `None` if the connection was
/// closed unanswered (a request that came as the server stopped). An error
/// status or a cut body fails the test.
async fn try_get(stream: TcpStream) -> Option<Reply> {
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(connection);
    let response = sender
        .send_request(request("GET", "example.com", "/").body(empty()).unwrap())
        .await
        .ok()?;
    let reply = read_reply(response).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body.len(), CHUNKS * CHUNK.len());
    Some(reply)
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

/// An idle keep-alive connection is closed as soon as the server drains,
/// not when the shutdown timeout or its header-read timeout runs out
/// (both set far longer than the test waits).
#[tokio::test]
async fn a_drain_closes_an_idle_keep_alive_connection_at_once() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = Backend::echo("a").await;
    let settings = Settings {
        shutdown_timeout: Duration::from_secs(60),
        header_read_timeout: Duration::from_secs(60),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", backend.addr), settings).await;
    let mut idle = TcpStream::connect(proxy.addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await
        .unwrap();
    let mut read = Vec::new();
    while message_len(&read).is_none() {
        let mut chunk = [0; 4096];
        let count = idle.read(&mut chunk).await.unwrap();
        assert_ne!(count, 0, "closed before its answer");
        read.extend_from_slice(&chunk[..count]);
    }
    assert!(read.starts_with(b"HTTP/1.1 200"));

    let stopped = tokio::time::timeout(Duration::from_secs(20), proxy.stop()).await;
    assert!(stopped.is_ok(), "the drain waited for the idle connection");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0))), "not closed: {closed:?}");
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
    // A request is logged when its response ends, which the client may
    // read first: the two events can come in either order.
    let by_host = |host: &str| {
        (events.iter())
            .find(|event| event["host"] == host)
            .unwrap_or_else(|| panic!("no event for {host}: {events:?}"))
    };
    let ok = by_host("example.com");
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
    let missed = by_host("nowhere.test");
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
        .env("DOCKHAND_ADMIN_LISTEN", free_port().to_string())
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
        .env("DOCKHAND_ADMIN_LISTEN", free_port().to_string())
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
