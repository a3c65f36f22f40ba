//! `GET /metrics` on the admin listener: counters move as requests go, by
//! the host pattern and location configured (never the `Host` sent), so
//! random hosts add no series; retries and dockhand's own errors by
//! reason; and a real Prometheus (Debian's `prometheus`) scrapes it and
//! reads a counter back, with `promtool check metrics` passing on the text.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::StatusCode;

use super::support::*;

/// Lines that are series (not `# HELP` or `# TYPE`).
fn series_count(text: &str) -> usize {
    text.lines().filter(|line| !line.starts_with('#')).count()
}

#[tokio::test]
async fn requests_count_by_host_pattern_location_and_status_and_unknown_hosts_as_unmatched() {
    let backend = Backend::echo("a").await;
    let routes = format!(
        r#"{{"host": {{
            "a.test": {{"location": {{"/": {{"upstream": {{"{0}": {{}}}}}},
                                      "/api": {{"upstream": {{"{0}": {{}}}}}}}}}},
            "*.wild.test": {{"location": {{"/": {{"upstream": {{"{0}": {{}}}}}}}}}}
        }}}}"#,
        backend.addr
    );
    let proxy = Proxy::start(&routes).await;
    for (host, path) in [
        ("a.test", "/"),
        ("a.test", "/x"),
        ("a.test", "/api/users"),
        ("one.wild.test", "/"),
        ("two.wild.test", "/"),
        ("nowhere.test", "/"),
    ] {
        get(proxy.addr, host, path).await;
    }
    let body = "seven b";
    let post = request("POST", "a.test", "/").body(full(body)).unwrap();
    assert_eq!(send(proxy.addr, post).await.status, StatusCode::OK);

    let a_root = r#"dockhand_requests_total{host="a.test",location="/",code="200"}"#;
    wait_for_series(proxy.admin, a_root, 3.0).await;
    let text = scrape(proxy.admin).await;
    for (series, expected) in [
        (
            r#"dockhand_requests_total{host="a.test",location="/api",code="200"}"#,
            1.0,
        ),
        (
            r#"dockhand_requests_total{host="*.wild.test",location="/",code="200"}"#,
            2.0,
        ),
        (
            r#"dockhand_requests_total{host="unmatched",location="unmatched",code="404"}"#,
            1.0,
        ),
        (r#"dockhand_errors_total{reason="no_host"}"#, 1.0),
        (r#"dockhand_errors_total{reason="connect_refused"}"#, 0.0),
        (
            r#"dockhand_request_duration_seconds_count{host="a.test"}"#,
            4.0,
        ),
        (
            r#"dockhand_request_body_bytes_total{host="a.test"}"#,
            body.len() as f64,
        ),
        (
            &format!(
                r#"dockhand_upstream_healthy{{host="a.test",location="/api",address="{}"}}"#,
                backend.addr
            ),
            1.0,
        ),
        (
            &format!(
                r#"dockhand_upstream_requests_in_flight{{host="a.test",location="/",address="{}"}}"#,
                backend.addr
            ),
            0.0,
        ),
    ] {
        assert_eq!(
            value_of(&text, series),
            Some(expected),
            "{series} in:\n{text}"
        );
    }
    let bytes_out = value_of(
        &text,
        r#"dockhand_response_body_bytes_total{host="a.test"}"#,
    );
    assert!(bytes_out.is_some_and(|bytes| bytes > 0.0), "{text}");
    assert!(
        !text.contains("one.wild.test") && !text.contains("nowhere.test"),
        "a Host sent is never a label value:\n{text}"
    );
}

/// The series are bounded by the configuration: 1,000 random hosts, half of
/// them under a wildcard, add none to those one unknown and one wildcard
/// request already made.
#[tokio::test]
async fn a_thousand_random_hosts_add_no_series() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("*.wild.test", backend.addr)).await;
    get(proxy.addr, "first.wild.test", "/").await;
    get(proxy.addr, "first.unknown.test", "/").await;
    let unmatched = r#"dockhand_requests_total{host="unmatched",location="unmatched",code="404"}"#;
    wait_for_series(proxy.admin, unmatched, 1.0).await;
    let before = series_count(&scrape(proxy.admin).await);

    for n in 0..1_000 {
        let label = format!("r{:016x}", rand::random::<u64>());
        let host = match n % 2 {
            0 => format!("{label}.wild.test"),
            _ => format!("{label}.example"),
        };
        get(proxy.addr, &host, "/").await;
    }
    wait_for_series(proxy.admin, unmatched, 501.0).await;
    let text = scrape(proxy.admin).await;
    let wild = r#"dockhand_requests_total{host="*.wild.test",location="/",code="200"}"#;
    assert_eq!(value_of(&text, wild), Some(501.0), "{text}");
    assert_eq!(
        series_count(&text),
        before,
        "the series did not grow:\n{text}"
    );
}

#[tokio::test]
async fn retries_and_errors_are_counted_by_reason() {
    let refused = refused_address();
    let unavailable =
        RecordingUpstream::start(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
            .await;
    let unavailable = unavailable.addr;
    let routes = format!(
        r#"{{"host": {{"a.test": {{"location": {{
            "/down": {{"retry": {{"attempts": 1, "on": ["connect"]}},
                       "upstream": {{"{refused}": {{}}}}}},
            "/busy": {{"retry": {{"attempts": 1, "on": ["503"]}},
                       "upstream": {{"{unavailable}": {{}}}}}}
        }}}}}}}}"#
    );
    let proxy = Proxy::start(&routes).await;
    let down = get(proxy.addr, "a.test", "/down").await;
    assert_eq!(down.header("x-dockhand-error"), "connect_refused");
    assert_eq!(get(proxy.addr, "a.test", "/busy").await.status, 503);

    let busy = r#"dockhand_requests_total{host="a.test",location="/busy",code="503"}"#;
    wait_for_series(proxy.admin, busy, 1.0).await;
    let text = scrape(proxy.admin).await;
    for (series, expected) in [
        (r#"dockhand_retries_total{reason="connect_refused"}"#, 1.0),
        (r#"dockhand_retries_total{reason="status"}"#, 1.0),
        (r#"dockhand_errors_total{reason="connect_refused"}"#, 1.0),
        (
            r#"dockhand_requests_total{host="a.test",location="/down",code="502"}"#,
            1.0,
        ),
        (
            &format!(
                r#"dockhand_upstream_healthy{{host="a.test",location="/down",address="{refused}"}}"#
            ),
            0.0,
        ),
    ] {
        assert_eq!(
            value_of(&text, series),
            Some(expected),
            "{series} in:\n{text}"
        );
    }
}

#[tokio::test]
async fn open_client_connections_are_counted_by_protocol() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("a.test", backend.addr)).await;
    let h2 = r#"dockhand_client_connections{protocol="h2"}"#;
    let mut connection = h2_connection(proxy.addr).await;
    let response = connection
        .send_request(h2_get("a.test", "/"))
        .await
        .unwrap();
    assert_eq!(read_reply(response).await.status, StatusCode::OK);
    wait_for_series(proxy.admin, h2, 1.0).await;
    drop(connection);
    wait_for_series(proxy.admin, h2, 0.0).await;
}

/// Whether Debian's `prometheus` and `promtool` are here; without them the
/// test is skipped, except under `CI=true`, where `.ci/run` installs them.
fn prometheus_installed() -> bool {
    let found = ["prometheus", "promtool"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success())
    });
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "prometheus/promtool are not installed (Debian package `prometheus`; .ci/run installs it)"
        );
        eprintln!("skipped: prometheus/promtool are not installed (Debian package `prometheus`)");
    }
    found
}

/// A `prometheus` server scraping `target` every second, killed when dropped.
struct PrometheusServer {
    child: Child,
    address: SocketAddr,
    _dir: tempfile::TempDir,
}

impl PrometheusServer {
    fn start(target: SocketAddr) -> PrometheusServer {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: dockhand\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let address = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file(dir.path())))
            .spawn()
            .expect("prometheus starts");
        PrometheusServer {
            child,
            address,
            _dir: dir,
        }
    }

    /// The value of the instant query `query`'s first series, if it has
    /// one; `None` too while Prometheus does not listen yet.
    async fn query(&self, query: &str) -> Option<String> {
        tokio::net::TcpStream::connect(self.address).await.ok()?;
        let path = format!("/api/v1/query?query={}", encode_query(query));
        let reply = get(self.address, "127.0.0.1", &path).await;
        if reply.status != StatusCode::OK {
            return None;
        }
        reply.json()["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_owned)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_file(dir: &Path) -> std::fs::File {
    std::fs::File::create(dir.join("prometheus.log")).unwrap()
}

/// Percent-encodes a PromQL query for a URL's query string.
fn encode_query(query: &str) -> String {
    query
        .bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A real Prometheus scrapes the admin listener and its query API gives
/// back the count of requests made; `promtool check metrics` (the
/// exposition on stdin) passes on the same text.
#[tokio::test]
async fn a_real_prometheus_scrapes_the_counters_and_promtool_passes_them() {
    if !prometheus_installed() {
        return;
    }
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("a.test", backend.addr)).await;
    for _ in 0..7 {
        assert_eq!(get(proxy.addr, "a.test", "/").await.status, StatusCode::OK);
    }
    get(proxy.addr, "nowhere.test", "/").await;
    let series = r#"dockhand_requests_total{host="a.test",location="/",code="200"}"#;
    wait_for_series(proxy.admin, series, 7.0).await;

    let text = scrape(proxy.admin).await;
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    let prometheus = PrometheusServer::start(proxy.admin);
    let query = r#"dockhand_requests_total{host="a.test",code="200"}"#;
    let mut last = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        last = prometheus.query(query).await;
        if last.as_deref() == Some("7") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "Prometheus never read 7 for {query} (last: {last:?}); its log:\n{}",
        prometheus.log()
    );
}
