//! Per-location middlewares end to end (issue 16), from the routes file:
//! an IP allow list on the client address `--trusted-proxies` establish, a
//! body limit on declared and streamed bodies, a redirect, response header
//! rules and CORS. What is refused or answered by dockhand never reaches
//! the upstream; a location without middlewares is served as before.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::Response;
use serde_json::json;

use dockhand::settings::Settings;

use crate::dns_server::DnsServer;
use crate::support::*;

/// A backend that reads each request's body before answering with its
/// length, so a body cut by dockhand is seen as such.
async fn body_reading_backend() -> Backend {
    Backend::start(|request: http::Request<Incoming>| async move {
        let answer = match request.into_body().collect().await {
            Ok(body) => body.to_bytes().len().to_string(),
            Err(_) => "cut".to_owned(),
        };
        Response::builder()
            .header("x-server", "app/1.0")
            .body(full(answer))
            .unwrap()
    })
    .await
}

fn routes(upstream: SocketAddr, location: serde_json::Value) -> String {
    let mut guarded = location;
    guarded["upstream"] = json!({upstream.to_string(): {}});
    json!({"host": {"example.com": {"location": {
        "/guarded": guarded,
        "/": {"upstream": {upstream.to_string(): {}}}
    }}}})
    .to_string()
}

#[tokio::test]
async fn ip_allow_refuses_other_clients_with_403_before_the_upstream() {
    let backend = Backend::echo("app").await;
    let routes = routes(backend.addr, json!({"ip_allow": ["10.0.0.0/8"]}));
    let proxy = Proxy::start(&routes).await;
    let refused = get(proxy.addr, "example.com", "/guarded/page").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.header("x-dockhand-error"), "not_allowed");
    assert_eq!(backend.request_count(), 0);
    // The host's other location is not guarded.
    assert_eq!(get(proxy.addr, "example.com", "/").await.status, 200);
    let refusals = r#"dockhand_middleware_refusals_total{host="example.com",feature="ip_allow"}"#;
    wait_for_series(proxy.admin, refusals, 1.0).await;

    // Behind a trusted proxy, the client it speaks for is checked.
    let settings = Settings {
        trusted_proxies: vec!["127.0.0.0/8".parse().unwrap()],
        ..test_settings()
    };
    let behind = Proxy::start_with(&routes, settings).await;
    let from = |client: &str| {
        request("GET", "example.com", "/guarded")
            .header("x-forwarded-for", client)
            .body(empty())
            .unwrap()
    };
    assert_eq!(send(behind.addr, from("10.1.2.3")).await.status, 200);
    assert_eq!(send(behind.addr, from("192.0.2.8")).await.status, 403);
    // A claim made up before an untrusted address does not count.
    let made_up = from("10.1.2.3, 192.0.2.8");
    assert_eq!(send(behind.addr, made_up).await.status, 403);
}

#[tokio::test]
async fn bodies_over_max_body_size_are_refused_declared_or_streamed() {
    let backend = body_reading_backend().await;
    let proxy = Proxy::start(&routes(backend.addr, json!({"max_body_size": "1k"}))).await;
    let post = |body: TestBody| {
        request("POST", "example.com", "/guarded")
            .body(body)
            .unwrap()
    };
    let declared = send(proxy.addr, post(full(vec![b'x'; 1025]))).await;
    assert_eq!(declared.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(declared.header("x-dockhand-error"), "body_too_large");
    assert_eq!(backend.request_count(), 0, "refused before the upstream");
    let within = send(proxy.addr, post(full(vec![b'x'; 1024]))).await;
    assert_eq!(
        (within.status, within.text()),
        (StatusCode::OK, "1024".into())
    );

    // Chunked, no length declared: cut once past the limit.
    let chunks = (0..4).map(|_| Ok(Frame::data(Bytes::from(vec![b'y'; 400]))));
    let streamed = StreamBody::new(futures_util::stream::iter(chunks));
    let streamed = send(proxy.addr, post(streamed.boxed_unsync())).await;
    assert_eq!(streamed.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(streamed.header("x-dockhand-error"), "body_too_large");
    let refusals =
        r#"dockhand_middleware_refusals_total{host="example.com",feature="max_body_size"}"#;
    wait_for_series(proxy.admin, refusals, 2.0).await;
}

#[tokio::test]
async fn a_redirect_answers_before_the_upstream() {
    let backend = Backend::echo("app").await;
    let routes = json!({"host": {"www.example.com": {"location": {"/": {
        "redirect": {"regex": "^http://www\\.([^/]+)/(.*)", "replacement": "https://$1/$2",
                     "permanent": true},
        "upstream": {backend.addr.to_string(): {}}
    }}}}})
    .to_string();
    let proxy = Proxy::start(&routes).await;
    let moved = get(proxy.addr, "www.example.com", "/docs?page=2").await;
    assert_eq!(moved.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(moved.header("location"), "https://example.com/docs?page=2");
    assert_eq!(backend.request_count(), 0);
}

#[tokio::test]
async fn response_rules_and_the_security_preset_apply_to_the_upstreams_answer() {
    let backend = body_reading_backend().await;
    let routes = routes(
        backend.addr,
        json!({"headers": {"response": {"remove": ["X-Server"],
                                        "set": {"Content-Security-Policy": "default-src 'self'"}},
                           "security": true}}),
    );
    let proxy = Proxy::start(&routes).await;
    let reply = get(proxy.addr, "example.com", "/guarded").await;
    assert_eq!(reply.status, 200);
    assert!(!reply.headers.contains_key("x-server"));
    assert_eq!(
        reply.header("content-security-policy"),
        "default-src 'self'"
    );
    assert_eq!(reply.header("x-content-type-options"), "nosniff");
    assert_eq!(reply.header("x-frame-options"), "SAMEORIGIN");
    assert_eq!(
        reply.header("referrer-policy"),
        "strict-origin-when-cross-origin"
    );
    // Not on the location without them.
    let plain = get(proxy.addr, "example.com", "/").await;
    assert_eq!(plain.header("x-server"), "app/1.0");
    assert!(!plain.headers.contains_key("x-content-type-options"));
}

#[tokio::test]
async fn cors_preflights_are_answered_by_dockhand_and_answers_allow_the_origin() {
    let backend = Backend::echo("app").await;
    let routes = routes(
        backend.addr,
        json!({"cors": {"allow_origins": ["https://app.example.org"],
                        "allow_methods": ["GET", "DELETE"], "max_age": 300}}),
    );
    let proxy = Proxy::start(&routes).await;
    let preflight = request("OPTIONS", "example.com", "/guarded/item")
        .header("origin", "https://app.example.org")
        .header("access-control-request-method", "DELETE")
        .body(empty())
        .unwrap();
    let answered = send(proxy.addr, preflight).await;
    assert_eq!(answered.status, StatusCode::NO_CONTENT);
    assert_eq!(
        answered.header("access-control-allow-origin"),
        "https://app.example.org"
    );
    assert_eq!(
        answered.header("access-control-allow-methods"),
        "GET, DELETE"
    );
    assert_eq!(answered.header("access-control-max-age"), "300");
    assert_eq!(
        backend.request_count(),
        0,
        "a preflight never reaches the upstream"
    );

    let from = |origin: &str| {
        request("GET", "example.com", "/guarded/item")
            .header("origin", origin)
            .body(empty())
            .unwrap()
    };
    let allowed = send(proxy.addr, from("https://app.example.org")).await;
    assert_eq!(allowed.status, 200);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        "https://app.example.org"
    );
    assert_eq!(allowed.header("vary"), "Origin");
    let stranger = send(proxy.addr, from("https://evil.test")).await;
    assert_eq!(
        stranger.status, 200,
        "served; the browser keeps it from the page"
    );
    assert!(!stranger.headers.contains_key("access-control-allow-origin"));
}

/// Reloads `routes` with one more host, `other.test`, and waits until it
/// is served: a route-table build that leaves the first host as it was.
async fn reload_with_another_host(proxy: &Proxy, routes: &str) {
    let other = Backend::echo("other").await;
    let mut reloaded: serde_json::Value = serde_json::from_str(routes).unwrap();
    reloaded["host"]["other.test"] =
        json!({"location": {"/": {"upstream": {other.addr.to_string(): {}}}}});
    proxy.write_routes(&reloaded.to_string());
    proxy.reload();
    eventually("the reload", || async {
        get(proxy.addr, "other.test", "/").await.status == 200
    })
    .await;
}

#[tokio::test]
async fn a_rate_limit_answers_429_with_retry_after_past_the_burst() {
    let backend = Backend::echo("app").await;
    let routes = routes(
        backend.addr,
        json!({"rate_limit": {"average": 1, "period": "1m", "burst": 2}}),
    );
    let proxy = Proxy::start(&routes).await;
    for _ in 0..2 {
        assert_eq!(get(proxy.addr, "example.com", "/guarded").await.status, 200);
    }
    let limited = get(proxy.addr, "example.com", "/guarded").await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.header("x-dockhand-error"), "rate_limited");
    assert_eq!(limited.header("retry-after"), "60");
    assert_eq!(backend.request_count(), 2);
    // Other locations are not limited.
    assert_eq!(get(proxy.addr, "example.com", "/").await.status, 200);
    let refusals = r#"dockhand_middleware_refusals_total{host="example.com",feature="rate_limit"}"#;
    wait_for_series(proxy.admin, refusals, 1.0).await;

    // A reload that changes another host keeps the buckets.
    reload_with_another_host(&proxy, &routes).await;
    let still = get(proxy.addr, "example.com", "/guarded").await;
    assert_eq!(still.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn basic_auth_challenges_checks_and_keeps_the_password_from_the_upstream() {
    let backend = Backend::echo("app").await;
    // `htpasswd -nbB alice secret`, at bcrypt's lowest cost to keep the test fast.
    let alice = format!("alice:{}", bcrypt::hash("secret", 4).unwrap());
    let routes = json!({"host": {"example.com": {"location": {
        "/admin": {"basic_auth": {"users": [alice.clone()], "realm": "Admin area"},
                   "upstream": {backend.addr.to_string(): {}}},
        "/kept": {"basic_auth": {"users": [alice], "forward": true},
                  "upstream": {backend.addr.to_string(): {}}}
    }}}})
    .to_string();
    let proxy = Proxy::start(&routes).await;
    let as_user = |path: &str, credentials: &str| {
        request("GET", "example.com", path)
            .header("authorization", format!("Basic {credentials}"))
            .body(empty())
            .unwrap()
    };
    let challenged = get(proxy.addr, "example.com", "/admin").await;
    assert_eq!(challenged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(challenged.header("x-dockhand-error"), "unauthorized");
    assert_eq!(
        challenged.header("www-authenticate"),
        "Basic realm=\"Admin area\", charset=\"UTF-8\""
    );
    // alice:wrong
    let wrong = send(proxy.addr, as_user("/admin", "YWxpY2U6d3Jvbmc=")).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(backend.request_count(), 0);
    // alice:secret
    let passed = send(proxy.addr, as_user("/admin", "YWxpY2U6c2VjcmV0")).await;
    assert_eq!(passed.status, 200);
    assert_eq!(
        passed.echoed_header("authorization"),
        None,
        "kept from the upstream"
    );
    let forwarded = send(proxy.addr, as_user("/kept", "YWxpY2U6c2VjcmV0")).await;
    assert_eq!(
        forwarded.echoed_header("authorization").as_deref(),
        Some("Basic YWxpY2U6c2VjcmV0")
    );
    let refusals = r#"dockhand_middleware_refusals_total{host="example.com",feature="basic_auth"}"#;
    wait_for_series(proxy.admin, refusals, 2.0).await;
}

#[tokio::test]
async fn failed_logins_are_limited_and_a_reload_does_not_forgive_them() {
    let backend = Backend::echo("app").await;
    let alice = format!("alice:{}", bcrypt::hash("secret", 4).unwrap());
    let routes = json!({"host": {"example.com": {"location": {"/": {
        "basic_auth": {"users": [alice]}, "upstream": {backend.addr.to_string(): {}}
    }}}}});
    let proxy = Proxy::start(&routes.to_string()).await;
    let login = |credentials: &str| {
        request("GET", "example.com", "/")
            .header("authorization", format!("Basic {credentials}"))
            .body(empty())
            .unwrap()
    };
    // alice:wrong, ten times: each is hashed and refused.
    for _ in 0..10 {
        let wrong = send(proxy.addr, login("YWxpY2U6d3Jvbmc=")).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    }
    // Past them, not even the right password is tried.
    let limited = send(proxy.addr, login("YWxpY2U6c2VjcmV0")).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.header("x-dockhand-error"), "rate_limited");

    // A reload for another host's change keeps the count.
    reload_with_another_host(&proxy, &routes.to_string()).await;
    let still = send(proxy.addr, login("YWxpY2U6c2VjcmV0")).await;
    assert_eq!(still.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(backend.request_count(), 0);
}

/// An auth service with the contract Authelia and oauth2-proxy document:
/// a request with the `session=good` cookie gets `200` with `Remote-User`
/// and `Remote-Groups` (and a header not to be copied); any other gets a
/// `302` to its login page, built from the `X-Forwarded-*` it was told,
/// with a cookie. Each request's headers (and body length) are kept.
async fn auth_service() -> (Backend, Arc<Mutex<Vec<http::HeaderMap>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let backend = Backend::start(move |request: http::Request<Incoming>| {
        let kept = kept.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body_len = body.collect().await.map_or(0, |body| body.to_bytes().len());
            assert_eq!(body_len, 0, "the auth service never gets the body");
            kept.lock().unwrap().push(parts.headers.clone());
            let header = |name: &str| {
                parts
                    .headers
                    .get(name)
                    .map_or("", |value| value.to_str().unwrap())
                    .to_owned()
            };
            if header("cookie").contains("session=good") {
                return Response::builder()
                    .header("remote-user", "alice")
                    .header("remote-groups", "admins")
                    .header("x-internal", "not copied")
                    .body(empty())
                    .unwrap();
            }
            let back_to = format!(
                "{}://{}{}",
                header("x-forwarded-proto"),
                header("x-forwarded-host"),
                header("x-forwarded-uri")
            );
            Response::builder()
                .status(302)
                .header("location", format!("https://login.test/?rd={back_to}"))
                .header("set-cookie", "login_state=1; Path=/")
                .body(full("log in first"))
                .unwrap()
        }
    })
    .await;
    (backend, seen)
}

fn forward_auth_routes(upstream: SocketAddr, auth_address: &str) -> String {
    routes(
        upstream,
        json!({"forward_auth": {"address": auth_address,
                                "response_headers": ["Remote-User", "Remote-Groups"]}}),
    )
}

#[tokio::test]
async fn forward_auth_sends_the_login_answer_back_and_lets_sessions_through() {
    let backend = Backend::echo("app").await;
    let (auth, seen) = auth_service().await;
    // The auth service by name, resolved like any upstream's.
    let dns = DnsServer::start().await;
    dns.set_a("auth.test", ["127.0.0.1"], 60);
    let settings = Settings {
        dns_resolver: Some(dns.address()),
        ..test_settings()
    };
    let address = format!("http://auth.test:{}/api/verify?rd=x", auth.addr.port());
    let proxy = Proxy::start_with(&forward_auth_routes(backend.addr, &address), settings).await;

    let anonymous = request("POST", "example.com", "/guarded/page?a=1")
        .header("cookie", "theme=dark")
        // Claims of a client that is no trusted proxy: replaced.
        .header("x-real-ip", "198.51.100.66")
        .header("x-forwarded-uri", "/somewhere/else")
        .body(full("form data"))
        .unwrap();
    let login = send(proxy.addr, anonymous).await;
    assert_eq!(login.status, StatusCode::FOUND);
    assert_eq!(
        login.header("location"),
        "https://login.test/?rd=http://example.com/guarded/page?a=1"
    );
    assert_eq!(login.header("set-cookie"), "login_state=1; Path=/");
    assert_eq!(login.text(), "log in first");
    assert_eq!(backend.request_count(), 0);
    {
        let seen = seen.lock().unwrap();
        let asked = &seen[0];
        assert_eq!(asked["x-forwarded-method"], "POST");
        assert_eq!(asked["x-forwarded-proto"], "http");
        assert_eq!(asked["x-forwarded-host"], "example.com");
        assert_eq!(asked["x-forwarded-uri"], "/guarded/page?a=1");
        assert_eq!(asked["x-forwarded-for"], "127.0.0.1");
        assert_eq!(asked["x-real-ip"], "127.0.0.1");
        assert_eq!(
            asked["cookie"], "theme=dark",
            "the client's cookies go along"
        );
        assert_eq!(asked["host"], format!("auth.test:{}", auth.addr.port()));
    }

    // A session: through, with who it is; a client's own claim is dropped.
    let logged_in = request("GET", "example.com", "/guarded/page")
        .header("cookie", "session=good")
        .header("remote-user", "mallory")
        .body(empty())
        .unwrap();
    let reply = send(proxy.addr, logged_in).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.echoed_header("remote-user").as_deref(), Some("alice"));
    assert_eq!(
        reply.echoed_header("remote-groups").as_deref(),
        Some("admins")
    );
    assert_eq!(reply.echoed_header("x-internal"), None);
    // The location without forward auth never asks.
    let asked_before = seen.lock().unwrap().len();
    assert_eq!(get(proxy.addr, "example.com", "/").await.status, 200);
    assert_eq!(seen.lock().unwrap().len(), asked_before);
    let refusals =
        r#"dockhand_middleware_refusals_total{host="example.com",feature="forward_auth"}"#;
    wait_for_series(proxy.admin, refusals, 1.0).await;
}

#[tokio::test]
async fn an_auth_service_that_fails_never_lets_the_request_through() {
    let backend = Backend::echo("app").await;
    // Nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = Proxy::start(&forward_auth_routes(
        backend.addr,
        &format!("http://{closed}/"),
    ))
    .await;
    let failed = get(proxy.addr, "example.com", "/guarded").await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY);
    assert_eq!(failed.header("x-dockhand-error"), "forward_auth_failed");

    // One that never answers: 504 after --upstream-timeout.
    let hanging = Backend::start(|_| async {
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        Response::new(empty())
    })
    .await;
    let settings = Settings {
        upstream_timeout: std::time::Duration::from_millis(300),
        ..test_settings()
    };
    let routes = forward_auth_routes(backend.addr, &format!("http://{}/", hanging.addr));
    let slow = Proxy::start_with(&routes, settings).await;
    let timed_out = get(slow.addr, "example.com", "/guarded").await;
    assert_eq!(timed_out.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(timed_out.header("x-dockhand-error"), "forward_auth_timeout");
    assert_eq!(backend.request_count(), 0);
}

#[tokio::test]
async fn basic_auth_users_come_from_an_htpasswd_file_and_a_missing_one_lets_no_one_in() {
    let backend = Backend::echo("app").await;
    let folder = tempfile::tempdir().unwrap();
    let htpasswd = folder.path().join("htpasswd");
    let hash = bcrypt::hash("secret", 4).unwrap();
    std::fs::write(&htpasswd, format!("# who may\nalice:{hash}\n")).unwrap();
    let missing = folder.path().join("absent");
    let routes = json!({"host": {"example.com": {"location": {
        "/filed": {"basic_auth": {"users_file": htpasswd},
                   "upstream": {backend.addr.to_string(): {}}},
        "/broken": {"basic_auth": {"users_file": missing},
                    "upstream": {backend.addr.to_string(): {}}}
    }}}})
    .to_string();
    let proxy = Proxy::start(&routes).await;
    // alice:secret
    let as_alice = |path: &str| {
        request("GET", "example.com", path)
            .header("authorization", "Basic YWxpY2U6c2VjcmV0")
            .body(empty())
            .unwrap()
    };
    assert_eq!(send(proxy.addr, as_alice("/filed")).await.status, 200);
    let refused = send(proxy.addr, as_alice("/broken")).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let diagnostics = get(proxy.admin, "localhost", "/api/v1/diagnostics")
        .await
        .text();
    assert!(
        diagnostics.contains("location.\\\"/broken\\\".basic_auth.users_file")
            && diagnostics.contains("can't be read"),
        "{diagnostics}"
    );
}

#[tokio::test]
async fn trust_forward_header_keeps_a_trusted_proxys_claims_of_the_request() {
    let backend = Backend::echo("app").await;
    let (auth, seen) = auth_service().await;
    let routes = routes(
        backend.addr,
        json!({"forward_auth": {"address": format!("http://{}/verify", auth.addr),
                                "trust_forward_header": true}}),
    );
    let claimed = || {
        request("GET", "example.com", "/guarded")
            .header("x-forwarded-uri", "/as/the/edge/saw/it")
            .header("x-forwarded-method", "PUT")
            .body(empty())
            .unwrap()
    };
    // From a trusted proxy: its claims stand.
    let settings = Settings {
        trusted_proxies: vec!["127.0.0.0/8".parse().unwrap()],
        ..test_settings()
    };
    let behind = Proxy::start_with(&routes, settings).await;
    send(behind.addr, claimed()).await;
    // From any other client: replaced by what the request was.
    let open = Proxy::start(&routes).await;
    send(open.addr, claimed()).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0]["x-forwarded-uri"], "/as/the/edge/saw/it");
    assert_eq!(seen[0]["x-forwarded-method"], "PUT");
    assert_eq!(seen[1]["x-forwarded-uri"], "/guarded");
    assert_eq!(seen[1]["x-forwarded-method"], "GET");
}
