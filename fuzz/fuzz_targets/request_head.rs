//! Arbitrary bytes as what an HTTP/1.1 client sends to dockhand's real
//! server (`dockhand::run` serving a routes file on loopback), with an
//! upstream on loopback that answers every request. The clock is tokio's
//! paused one, so waiting out a quiet connection costs no real time.
//!
//! Checked, besides nothing panicking in any task: whatever comes back is a
//! well-formed HTTP/1.1 response, and dockhand's own errors carry their
//! reason; whatever reaches the upstream is one unambiguous request (RFC 9112
//! §3.2 one `Host`, §6.1 `Content-Length` never beside `Transfer-Encoding`,
//! which ends in `chunked`), with no client-claimed identity (RFC 7239 and
//! `X-Forwarded-*` are dockhand's own, naming the loopback peer), no
//! `x-dockhand-*` header from the client and no `h2c` upgrade (RFC 9113 §3.1).

#![no_main]

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::Duration;

use dockhand::settings::Settings;
use dockhand::Listeners;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

/// Longer than any of dockhand's timeouts, so a connection that stays quiet
/// this long (on the paused clock) has nothing more to say.
const QUIET: Duration = Duration::from_secs(300);
/// What the upstream reads of one request before it checks the head.
const MAX_UPSTREAM_HEAD: usize = 256 * 1024;
const UPSTREAM_RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
/// HTTP/2 with prior knowledge: answered in frames, not HTTP/1.1.
const H2_PREFACE_START: &[u8] = b"PRI ";

struct Harness {
    runtime: Runtime,
    proxy: SocketAddr,
}

static HARNESS: LazyLock<Harness> = LazyLock::new(start);

fn start() -> Harness {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let proxy = runtime.block_on(async {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_address = upstream.local_addr().unwrap();
        tokio::spawn(serve_upstream(upstream));
        // Closed at once: a location whose upstream refuses connections.
        let refusing = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refusing_address = refusing.local_addr().unwrap();
        drop(refusing);
        let routes = serde_json::json!({ "host": {
            "*": { "location": {
                "/": { "upstream": { upstream_address.to_string(): {} } },
                "/api": {
                    "rewrite": { "strip_prefix": "/api", "add_prefix": "/v2" },
                    "upstream": { upstream_address.to_string(): {} }
                },
                "/users": {
                    "rewrite": { "match": "^/users/([^/]+)", "replace": "/u/$1" },
                    "upstream": { upstream_address.to_string(): {} }
                },
                "/refused": {
                    "retry": { "attempts": 1, "on": ["connect"] },
                    "upstream": { refusing_address.to_string(): {} }
                }
            } },
            "only.example": { "location": {
                "/": { "upgrades": [], "upstream": { upstream_address.to_string(): {} } }
            } }
        } });
        let dir = std::env::temp_dir().join(format!("dockhand-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let routes_file = dir.join("routes.json");
        std::fs::write(&routes_file, routes.to_string()).unwrap();
        let settings = Settings {
            routes_file: Some(routes_file),
            // Nothing here is looked up by name; this keeps the system's
            // resolver configuration out of it.
            dns_resolver: Some("127.0.0.1:9".parse().unwrap()),
            docker: None,
            // One worker serves on this runtime, whose paused clock then
            // times dockhand's timeouts too.
            workers: std::num::NonZeroUsize::MIN,
            ..Settings::default()
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let listeners = Listeners {
                http: listener,
                https: None,
                admin: None,
            };
            dockhand::run(listeners, settings, std::future::pending())
                .await
                .expect("dockhand serves the routes file");
        });
        // Until the routes file is read and the first request routed.
        loop {
            let answer = exchange(proxy, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
            if answer.starts_with(b"HTTP/1.1 200") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        proxy
    });
    Harness { runtime, proxy }
}

/// Sends `request` and reads until dockhand closes or goes quiet.
async fn exchange(proxy: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let mut received = Vec::new();
    // dockhand may answer and close before reading it all.
    if stream.write_all(request).await.is_err() {
        return received;
    }
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match tokio::time::timeout(QUIET, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

async fn serve_upstream(listener: TcpListener) {
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        tokio::spawn(answer_one(stream));
    }
}

/// Reads one request head, checks it, answers and closes.
async fn answer_one(mut stream: TcpStream) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match tokio::time::timeout(QUIET, stream.read(&mut buffer)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) | Err(_) => return,
        };
        if n == 0 {
            // Health checks connect and close; a cut head is the proxy's to explain.
            assert!(
                head.is_empty(),
                "a partial head reached the upstream: {head:?}"
            );
            return;
        }
        head.extend_from_slice(&buffer[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 256];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {
                check_forwarded(&request);
                break;
            }
            Ok(httparse::Status::Partial) if head.len() < MAX_UPSTREAM_HEAD => {}
            other => panic!(
                "the upstream got no valid request head ({other:?}): {:?}",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    let _ = stream.write_all(UPSTREAM_RESPONSE).await;
}

fn check_forwarded(request: &httparse::Request<'_, '_>) {
    let values = |name: &str| -> Vec<String> {
        request
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
            .collect()
    };
    let shown = format!("{request:?}");
    // HTTP/1.0 requests go on as HTTP/1.0.
    assert!(request.version.is_some(), "{shown}");
    assert!(request.path.is_some_and(|p| p.starts_with('/')), "{shown}");
    assert_eq!(values("host").len(), 1, "one Host: {shown}");
    let lengths = values("content-length");
    let codings = values("transfer-encoding");
    assert!(lengths.len() <= 1, "{shown}");
    assert!(
        lengths.is_empty() || codings.is_empty(),
        "CL beside TE: {shown}"
    );
    if let Some(length) = lengths.first() {
        assert!(
            !length.is_empty() && length.bytes().all(|b| b.is_ascii_digit()),
            "{shown}"
        );
    }
    if !codings.is_empty() {
        let last = codings.join(",");
        let last = last.rsplit(',').next().unwrap_or_default().trim();
        assert!(last.eq_ignore_ascii_case("chunked"), "{shown}");
    }
    assert_eq!(values("x-forwarded-for"), ["127.0.0.1"], "{shown}");
    assert_eq!(values("x-real-ip"), ["127.0.0.1"], "{shown}");
    assert_eq!(values("forwarded").len(), 1, "{shown}");
    assert!(
        values("forwarded")[0].starts_with("for=127.0.0.1;"),
        "{shown}"
    );
    for claimed in ["x-client-ip", "x-forwarded-prefix"] {
        assert!(values(claimed).is_empty(), "{claimed}: {shown}");
    }
    assert!(values("x-forwarded-proto").len() <= 1, "{shown}");
    assert!(values("x-forwarded-host").len() <= 1, "{shown}");
    assert!(
        !request
            .headers
            .iter()
            .any(|h| h.name.len() >= 11 && h.name[..11].eq_ignore_ascii_case("x-dockhand-")),
        "{shown}"
    );
    assert!(values("http2-settings").is_empty(), "{shown}");
    for upgrade in values("upgrade") {
        assert!(!upgrade.to_ascii_lowercase().contains("h2c"), "{shown}");
    }
}

/// Every response in `received`, in turn, until one can't be framed.
fn check_responses(received: &[u8]) {
    let mut rest = received;
    let mut first = true;
    while !rest.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        let head_length = match response.parse(rest) {
            Ok(httparse::Status::Complete(length)) => length,
            other => {
                assert!(!first, "not an HTTP/1.1 response ({other:?}): {received:?}");
                return;
            }
        };
        // HTTP/1.0 clients are answered in HTTP/1.0.
        assert!(response.version.is_some(), "{response:?}");
        let status = response.code.expect("a complete head has a status");
        let header = |name: &str| {
            response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        if let Some(reason) = header("x-dockhand-error") {
            assert!((400..600).contains(&status), "{response:?}");
            assert!(
                !reason.is_empty() && reason.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{response:?}"
            );
        }
        // Only framing by length is followed; anything else ends the check.
        let Some(length) = header("content-length").and_then(|l| l.parse::<usize>().ok()) else {
            return;
        };
        rest = rest.get(head_length + length..).unwrap_or_default();
        first = false;
    }
}

fuzz_target!(|data: &[u8]| {
    let harness = &*HARNESS;
    let received = harness.runtime.block_on(exchange(harness.proxy, data));
    if !data.starts_with(H2_PREFACE_START) {
        check_responses(&received);
    }
});
