//! What a location does with its upstreams, end to end through real loopback
//! backends: weighted round robin, least connections, active and passive
//! health checks, retries, path rewrites and `headers.add`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;
use tokio::net::TcpListener;

use crate::support::*;

/// Routes with one location `/` on `a.test`, whose settings are `location`.
fn routes(location: serde_json::Value) -> String {
    json!({"host": {"a.test": {"location": {"/": location}}}}).to_string()
}

/// A backend answering `status` with `x-backend: name`, counting requests,
/// and echoing the request body.
async fn answering(name: &'static str, status: StatusCode) -> (Backend, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let backend = Backend::start(move |request: Request<Incoming>| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = request.into_body().collect().await.unwrap().to_bytes();
            Response::builder()
                .status(status)
                .header("x-backend", name)
                .body(full(body))
                .unwrap()
        }
    })
    .await;
    (backend, hits)
}

/// An upstream that reads one request per connection, writes `answer` as
/// it is, and closes the connection; counts the connections it accepted.
async fn counting_raw_upstream(
    answer: &'static [u8],
) -> (SocketAddr, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut buffer = [0; 4096];
            let _ = stream.read(&mut buffer).await;
            let _ = stream.write_all(answer).await;
        }
    });
    (addr, accepted, server)
}

/// An address nothing listens on.
fn refusing() -> SocketAddr {
    refused_address()
}

async fn backends_seen(proxy: &Proxy, count: usize) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..count {
        let reply = get(proxy.addr, "a.test", "/").await;
        seen.push(reply.header("x-backend").to_owned());
    }
    seen
}

#[tokio::test]
async fn weighted_round_robin_follows_the_smooth_sequence() {
    let (a, _) = answering("a", StatusCode::OK).await;
    let (b, _) = answering("b", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({"upstream": {
        a.addr.to_string(): {"weight": 3},
        b.addr.to_string(): {}
    }})))
    .await;
    let seen = backends_seen(&proxy, 8).await.join(" ");
    assert_eq!(seen, "a a b a a a b a");
}

#[tokio::test]
async fn least_connections_passes_over_a_slow_upstream() {
    let release = Arc::new(tokio::sync::Notify::new());
    let slow_hits = Arc::new(AtomicUsize::new(0));
    let slow = {
        let release = release.clone();
        let hits = slow_hits.clone();
        Backend::start(move |_| {
            let release = release.clone();
            let hits = hits.clone();
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                release.notified().await;
                Response::builder()
                    .header("x-backend", "slow")
                    .body(empty())
                    .unwrap()
            }
        })
        .await
    };
    let (fast, fast_hits) = answering("fast", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({
        "load_balancing": "least_connections",
        "upstream": {slow.addr.to_string(): {}, fast.addr.to_string(): {}}
    })))
    .await;

    // Requests in turn until one is held by the slow upstream; they stay open.
    let mut held = Vec::new();
    for _ in 0..4 {
        let addr = proxy.addr;
        held.push(tokio::spawn(async move { get(addr, "a.test", "/").await }));
        let reached = slow_hits.clone();
        let waited = tokio::time::timeout(Duration::from_secs(2), async move {
            while reached.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        if waited.await.is_ok() {
            break;
        }
    }
    assert_eq!(slow_hits.load(Ordering::SeqCst), 1);
    let before = fast_hits.load(Ordering::SeqCst);
    for _ in 0..10 {
        assert_eq!(
            get(proxy.addr, "a.test", "/").await.header("x-backend"),
            "fast"
        );
    }
    assert_eq!(fast_hits.load(Ordering::SeqCst), before + 10);
    assert_eq!(
        slow_hits.load(Ordering::SeqCst),
        1,
        "nothing more while it works"
    );
    release.notify_waiters();
    for request in held {
        assert_eq!(request.await.unwrap().status, StatusCode::OK);
    }
}

#[tokio::test]
async fn active_checks_take_a_gone_upstream_out_and_bring_it_back() {
    let (a, _) = answering("a", StatusCode::OK).await;
    let b_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b_addr = b_listener.local_addr().unwrap();
    drop(b_listener);
    let proxy = Proxy::start(&routes(json!({
        "health_check": {"interval_secs": 1},
        "upstream": {a.addr.to_string(): {}, b_addr.to_string(): {}}
    })))
    .await;

    // Two failed checks (about 2 s): from then on every request goes to a.
    eventually("b is found unhealthy", || async {
        backends_seen(&proxy, 4)
            .await
            .iter()
            .all(|seen| seen == "a")
    })
    .await;
    let replies = backends_seen(&proxy, 6).await;
    assert!(replies.iter().all(|seen| seen == "a"), "{replies:?}");

    // b comes back on its address: one good check and it has its turn again.
    let b = Backend::serve(TcpListener::bind(b_addr).await.unwrap(), |_| async {
        Response::builder()
            .header("x-backend", "b")
            .body(empty())
            .unwrap()
    });
    eventually("b is healthy again", || async {
        backends_seen(&proxy, 2).await.contains(&"b".to_owned())
    })
    .await;
    drop(b);
}

/// An address alone says little in a log: the health lines name the
/// location that uses it too.
#[tokio::test]
async fn health_log_lines_name_the_upstream_address_and_its_location() {
    let gone = refusing();
    let proxy = ProxyProcess::start(
        &routes(json!({
            "health_check": {"interval_secs": 1},
            "upstream": {gone.to_string(): {}}
        })),
        &[],
    )
    .await;
    let unhealthy = || {
        proxy
            .events()
            .into_iter()
            .find(|event| event["level"] == "WARN" && event["message"] == "upstream unhealthy")
    };
    eventually("two failed checks are logged", || async {
        unhealthy().is_some()
    })
    .await;
    let event = unhealthy().unwrap();
    assert_eq!(event["upstream"], gone.to_string(), "{event}");
    assert_eq!(event["location"], "a.test/", "{event}");
}

#[tokio::test]
async fn failed_connects_count_as_failed_checks() {
    let (a, a_hits) = answering("a", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({
        "health_check": {"interval_secs": 3600},
        "upstream": {a.addr.to_string(): {}, refusing().to_string(): {}}
    })))
    .await;
    let mut failures = 0;
    for _ in 0..20 {
        let reply = get(proxy.addr, "a.test", "/").await;
        if reply.status == StatusCode::BAD_GATEWAY {
            failures += 1;
        }
    }
    assert_eq!(failures, 2, "two refused connects, then it is left out");
    assert_eq!(a_hits.load(Ordering::SeqCst), 18);
}

#[tokio::test]
async fn disabled_checks_leave_every_upstream_in_turn() {
    let (a, _) = answering("a", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({
        "health_check": {"enabled": false},
        "upstream": {a.addr.to_string(): {}, refusing().to_string(): {}}
    })))
    .await;
    let mut failures = 0;
    for _ in 0..10 {
        if get(proxy.addr, "a.test", "/").await.status == StatusCode::BAD_GATEWAY {
            failures += 1;
        }
    }
    assert_eq!(failures, 5);
}

#[tokio::test]
async fn a_connect_failure_is_retried_for_any_method_with_its_body() {
    let (a, a_hits) = answering("a", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({
        "retry": {"attempts": 1, "on": ["connect"]},
        "health_check": {"enabled": false},
        "upstream": {refusing().to_string(): {}, a.addr.to_string(): {}}
    })))
    .await;
    for round in 0..4 {
        let body = format!("order {round}");
        let reply = send(
            proxy.addr,
            request("POST", "a.test", "/orders")
                .body(full(body.clone()))
                .unwrap(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.text(), body, "the body reaches the upstream whole");
    }
    assert_eq!(a_hits.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn statuses_are_retried_only_for_idempotent_requests_with_small_bodies() {
    let (failing, failing_hits) = answering("failing", StatusCode::SERVICE_UNAVAILABLE).await;
    let (good, _) = answering("good", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({
        "retry": {"attempts": 1, "on": ["503"]},
        "upstream": {failing.addr.to_string(): {}, good.addr.to_string(): {}}
    })))
    .await;

    // GET and a PUT with a small body: always answered by `good`.
    for _ in 0..4 {
        assert_eq!(get(proxy.addr, "a.test", "/").await.status, StatusCode::OK);
        let put = send(
            proxy.addr,
            request("PUT", "a.test", "/doc")
                .body(full("small"))
                .unwrap(),
        )
        .await;
        assert_eq!((put.status, put.text().as_str()), (StatusCode::OK, "small"));
    }

    // POST is never sent again: the failing upstream's answer comes back.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let post = send(
            proxy.addr,
            request("POST", "a.test", "/doc").body(full("x")).unwrap(),
        )
        .await;
        statuses.push(post.status);
    }
    assert!(
        statuses.contains(&StatusCode::SERVICE_UNAVAILABLE),
        "{statuses:?}"
    );

    // A PUT over 64 KiB streams and is not sent again either.
    let large = vec![b'x'; 100 * 1024];
    let before = failing_hits.load(Ordering::SeqCst);
    let mut large_statuses = Vec::new();
    for _ in 0..4 {
        let put = send(
            proxy.addr,
            request("PUT", "a.test", "/doc")
                .body(full(large.clone()))
                .unwrap(),
        )
        .await;
        if put.status == StatusCode::OK {
            assert_eq!(put.body.len(), large.len());
        }
        large_statuses.push(put.status);
    }
    assert!(large_statuses.contains(&StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(failing_hits.load(Ordering::SeqCst) - before, 2);
}

#[tokio::test]
async fn the_last_try_answer_goes_to_the_client() {
    let (first, first_hits) = answering("first", StatusCode::BAD_GATEWAY).await;
    let (second, second_hits) = answering("second", StatusCode::BAD_GATEWAY).await;
    let (third, third_hits) = answering("third", StatusCode::BAD_GATEWAY).await;
    let proxy = Proxy::start(&routes(json!({
        "retry": {"attempts": 2},
        "upstream": {
            first.addr.to_string(): {}, second.addr.to_string(): {}, third.addr.to_string(): {}
        }
    })))
    .await;
    let reply = get(proxy.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        reply.header("x-dockhand-error"),
        "",
        "the upstream's own answer, not dockhand's"
    );
    let hits = [&first_hits, &second_hits, &third_hits].map(|h| h.load(Ordering::SeqCst));
    assert_eq!(
        hits,
        [1, 1, 1],
        "each try went to an upstream not tried yet"
    );
}

#[tokio::test]
async fn without_retry_a_request_is_sent_once() {
    let (failing, hits) = answering("failing", StatusCode::SERVICE_UNAVAILABLE).await;
    let (good, _) = answering("good", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({"upstream": {
        failing.addr.to_string(): {}, good.addr.to_string(): {}
    }})))
    .await;
    let statuses: Vec<StatusCode> = {
        let mut statuses = Vec::new();
        for _ in 0..4 {
            statuses.push(get(proxy.addr, "a.test", "/").await.status);
        }
        statuses
    };
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::SERVICE_UNAVAILABLE)
            .count(),
        2
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    let refused = Proxy::start(&routes(json!({"upstream": {refusing().to_string(): {}}}))).await;
    assert_eq!(
        get(refused.addr, "a.test", "/").await.status,
        StatusCode::BAD_GATEWAY
    );
}

#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_is_replaced() {
    // The upstream closes each connection right after answering, without saying so.
    let (addr, accepted, server) =
        counting_raw_upstream(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let proxy = Proxy::start(&routes(json!({"upstream": {addr.to_string(): {}}}))).await;
    for _ in 0..5 {
        let reply = get(proxy.addr, "a.test", "/").await;
        assert_eq!(
            (reply.status, reply.text().as_str()),
            (StatusCode::OK, "ok")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 5);
    server.abort();
}

#[tokio::test]
async fn rewrites_change_the_path_the_upstream_receives() {
    let backend = Backend::echo("app").await;
    let upstream = json!({backend.addr.to_string(): {}});
    let proxy = Proxy::start(
        &json!({"host": {"a.test": {"location": {
            "/api": {"rewrite": {"strip_prefix": "/api"}, "upstream": upstream},
            "/legacy": {"rewrite": {"strip_prefix": "/legacy", "add_prefix": "/v2"}, "upstream": upstream},
            "/users": {"rewrite": {"match": "^/users/(\\d+)/profile$", "replace": "/profiles/$1"}, "upstream": upstream}
        }}}})
        .to_string(),
    )
    .await;
    let cases = [
        ("/api/users?page=2", "/users?page=2"),
        ("/api", "/"),
        ("/legacy/orders", "/v2/orders"),
        ("/users/42/profile?tab=posts", "/profiles/42?tab=posts"),
        ("/users/abc", "/users/abc"),
    ];
    for (path, expected) in cases {
        let reply = get(proxy.addr, "a.test", path).await;
        assert_eq!(reply.json()["uri"], expected, "{path}");
    }
}

#[tokio::test]
async fn headers_add_replaces_request_headers_host_included() {
    let backend = Backend::echo("app").await;
    let proxy = Proxy::start(&routes(json!({"upstream": {backend.addr.to_string(): {
        "headers": {"add": {"Host": "docs.example.org", "X-Team": "blue"}}
    }}})))
    .await;
    let reply = send(
        proxy.addr,
        request("GET", "a.test", "/")
            .header("x-team", "red")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        reply.echoed_header("host").as_deref(),
        Some("docs.example.org")
    );
    assert_eq!(reply.echoed_header("x-team").as_deref(), Some("blue"));
}

#[tokio::test]
async fn nothing_is_retried_once_the_response_has_started() {
    // Answers 200 with half its body, then drops the connection.
    let (addr, accepted, server) =
        counting_raw_upstream(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhalf").await;
    let (other, other_hits) = answering("other", StatusCode::OK).await;
    let proxy = Proxy::start(&routes(json!({
        "retry": {"attempts": 3, "on": ["connect", "502", "503", "504"]},
        "load_balancing": "least_connections",
        "upstream": {addr.to_string(): {}, other.addr.to_string(): {}}
    })))
    .await;
    // Nothing in flight: the two requests go one to each, in turn.
    let mut cut_bodies = 0;
    for _ in 0..2 {
        let response = http1_connection(proxy.addr)
            .await
            .send_request(request("GET", "a.test", "/").body(empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        if response.into_body().collect().await.is_err() {
            cut_bodies += 1;
        }
    }
    assert_eq!(cut_bodies, 1, "the cut body reaches the client cut");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "sent once");
    assert_eq!(
        other_hits.load(Ordering::SeqCst),
        1,
        "and never again elsewhere"
    );
    server.abort();
}

#[tokio::test]
async fn the_access_log_shows_the_path_the_client_asked_for() {
    let backend = Backend::echo("app").await;
    let routes = json!({"host": {"a.test": {"location": {"/api": {
        "rewrite": {"strip_prefix": "/api"},
        "upstream": {backend.addr.to_string(): {}}
    }}}}})
    .to_string();
    let process = ProxyProcess::start(&routes, &[]).await;
    let reply = get(process.addr, "a.test", "/api/users").await;
    assert_eq!(reply.json()["uri"], "/users");
    eventually("the access-log event", || {
        std::future::ready(process.stdout().lines().any(|line| {
            serde_json::from_str::<serde_json::Value>(line).is_ok_and(|event| {
                event["target"] == "dockhand::access" && event["path"] == "/api/users"
            })
        }))
    })
    .await;
}
