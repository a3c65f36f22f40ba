//! Host and location matching through the real server (MODEL.md's rules),
//! round robin over a location's addresses, and what a location with nothing
//! to send to answers.

use std::sync::Arc;
use std::time::Duration;

use dockhand::config::{
    Desired, DesiredHosts, HostConfig, HostPattern, LocationConfig, ProviderId,
};
use dockhand::routes::Router;
use dockhand::upstream::EndpointRegistry;

use crate::support::*;

#[tokio::test]
async fn hosts_match_exact_then_longest_wildcard_then_catch_all() {
    let exact = Backend::echo("exact").await;
    let wildcard = Backend::echo("wildcard").await;
    let deeper = Backend::echo("deeper").await;
    let any = Backend::echo("any").await;
    let routes = serde_json::json!({"host": {
        "example.com": {"location": {"/": {"upstream": {exact.addr.to_string(): {}}}}},
        "*.example.com": {"location": {"/": {"upstream": {wildcard.addr.to_string(): {}}}}},
        "*.api.example.com": {"location": {"/": {"upstream": {deeper.addr.to_string(): {}}}}},
        "*": {"location": {"/": {"upstream": {any.addr.to_string(): {}}}}}
    }});
    let proxy = Proxy::start(&routes.to_string()).await;
    let cases = [
        ("example.com", "exact"),
        ("EXAMPLE.com:8080", "exact"),
        ("example.com.", "exact"),
        ("www.example.com", "wildcard"),
        ("a.b.example.com", "wildcard"),
        ("v1.api.example.com", "deeper"),
        ("api.example.com", "wildcard"),
        ("elsewhere.org", "any"),
    ];
    for (host, backend) in cases {
        let reply = get(proxy.addr, host, "/").await;
        assert_eq!(reply.status, 200, "{host}");
        assert_eq!(reply.header("x-backend"), backend, "{host}");
    }
}

#[tokio::test]
async fn unknown_host_is_404_no_host() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let reply = get(proxy.addr, "other.com", "/").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.header("x-dockhand-error"), "no_host");
    assert_eq!(reply.text(), "no route for this host\n");
}

#[tokio::test]
async fn longest_prefix_wins_at_a_segment_boundary() {
    let root_api = Backend::echo("api").await;
    let v2 = Backend::echo("v2").await;
    let routes = serde_json::json!({"host": {"example.com": {"location": {
        "/api": {"upstream": {root_api.addr.to_string(): {}}},
        "/api/v2": {"upstream": {v2.addr.to_string(): {}}}
    }}}});
    let proxy = Proxy::start(&routes.to_string()).await;
    for (path, backend) in [
        ("/api", "api"),
        ("/api/users?page=2", "api"),
        ("/api/v2", "v2"),
        ("/api/v2/orders", "v2"),
        ("/api/v20", "api"),
    ] {
        let reply = get(proxy.addr, "example.com", path).await;
        assert_eq!(reply.header("x-backend"), backend, "{path}");
        // The path and query reach the upstream unchanged.
        assert_eq!(reply.json()["uri"], path, "{path}");
    }
    for path in ["/apis", "/", "/other"] {
        let reply = get(proxy.addr, "example.com", path).await;
        assert_eq!(reply.status, 404, "{path}");
        assert_eq!(reply.header("x-dockhand-error"), "no_location", "{path}");
    }
}

#[tokio::test]
async fn round_robin_over_the_addresses_of_a_location() {
    let a = Backend::echo("a").await;
    let b = Backend::echo("b").await;
    let c = Backend::echo("c").await;
    let routes = serde_json::json!({"host": {"example.com": {"location": {"/": {"upstream": {
        a.addr.to_string(): {}, b.addr.to_string(): {}, c.addr.to_string(): {}
    }}}}}});
    let proxy = Proxy::start(&routes.to_string()).await;
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(
            get(proxy.addr, "example.com", "/")
                .await
                .header("x-backend")
                .to_owned(),
        );
    }
    assert_eq!(seen, ["a", "b", "c", "a", "b", "c"]);
}

#[tokio::test]
async fn an_upstream_written_as_a_name_has_no_address_yet_so_503() {
    let a = Backend::echo("a").await;
    let routes = serde_json::json!({"host": {"example.com": {"location": {
        "/": {"upstream": {a.addr.to_string(): {}}},
        "/named": {"upstream": {"app.internal:8080": {}}}
    }}}});
    let settings = dockhand::settings::Settings {
        upstream_wait: Duration::from_millis(100),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&routes.to_string(), settings).await;
    let reply = get(proxy.addr, "example.com", "/named").await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.header("x-dockhand-error"), "no_upstream");
    assert_eq!(reply.header("retry-after"), "5");
    assert_eq!(get(proxy.addr, "example.com", "/").await.status, 200);
}

#[tokio::test]
async fn a_request_waits_for_an_upstream_to_appear() {
    let a = Backend::echo("a").await;
    let routes = |upstream: &str| {
        serde_json::json!({"host": {"example.com": {"location": {"/": {"upstream": {upstream: {}}}}}}})
            .to_string()
    };
    let proxy = Proxy::start(&routes("app.internal:8080")).await;
    // The request finds no address; while it waits, the location gets one.
    let waiting = tokio::spawn(get(proxy.addr, "example.com", "/"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.write_routes(&routes(&a.addr.to_string()));
    let reply = waiting.await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-backend"), "a");
}

/// Issue 11, defect 11: a connect in flight to an address that leaves the
/// routes is abandoned at once, and the request goes to the location's
/// upstream now; it neither waits for `--connect-timeout` (30 s here) nor
/// reaches whoever holds the old address by then.
#[tokio::test]
async fn a_connect_to_an_address_the_routes_drop_is_abandoned_for_the_new_upstream() {
    let hanging = HangingAddress::new().await;
    let new = Backend::echo("new").await;
    let settings = dockhand::settings::Settings {
        connect_timeout: Duration::from_secs(30),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&one_route("example.com", hanging.addr), settings).await;
    let waiting = tokio::spawn(get(proxy.addr, "example.com", "/"));
    eventually("the request connecting to the hanging address", || async {
        hanging.is_being_connected_to()
    })
    .await;
    proxy.write_routes(&one_route("example.com", new.addr));
    // A limit for "it happened", far below the connect timeout.
    let reply = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the request left the departed address")
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-backend"), "new");
}

/// A location as the Docker provider publishes one whose containers can't
/// serve (stopped, paused, starting, unhealthy, on no shared network): no
/// upstream at all. A routes file can't write one, so the router is fed
/// directly and served by the real server.
#[tokio::test]
async fn a_location_without_upstreams_answers_503_no_healthy_upstream() {
    let registry = Arc::new(EndpointRegistry::new());
    let router = Arc::new(Router::new(registry.clone(), Duration::from_secs(5)));
    let stopped = LocationConfig {
        prefix: "/".into(),
        load_balancing: Default::default(),
        retry: None,
        rewrite: None,
        health_check: Default::default(),
        upgrades: Default::default(),
        middlewares: Default::default(),
        upstreams: Vec::new(),
        upstreams_move: true,
        containers: Vec::new(),
    };
    let hosts = vec![HostConfig {
        pattern: HostPattern::Exact("app.test".into()),
        health_check: Default::default(),
        https_redirect: true,
        hsts: None,
        locations: vec![stopped],
    }];
    router.publish(
        ProviderId::Docker,
        Desired {
            hosts: DesiredHosts { hosts },
            diagnostics: Vec::new(),
            container_addresses: Default::default(),
        },
    );
    let (addr, server) = serve_router(router, registry, Arc::default(), None).await;

    let reply = get(addr, "app.test", "/").await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.header("x-dockhand-error"), "no_healthy_upstream");
    assert_eq!(reply.header("retry-after"), "5");
    assert_eq!(get(addr, "other.test", "/").await.status, 404);
    server.abort();
}
