//! Per-request costs of the work the proxy does for every request, one
//! criterion group per piece: `rewrite` (the path an upstream receives),
//! `pick` (choosing an upstream), `count_request` (its metrics: through
//! the location's handles, against label strings made per request) and
//! `middlewares` (each middleware's checks on a request that passes them;
//! a location with none never runs any). Inputs are built once, outside the measured
//! loop, as the route table builds them once at load.
//!
//! `cargo bench --bench hot_path` (add `-- rewrite` for one group).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use futures_util::FutureExt;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method, Uri};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use dockhand::config::{parse_routes_file, LoadBalancing, LocationConfig, Rewrite};
use dockhand::metrics::Metrics;
use dockhand::middleware::{
    before_upstream, on_response, redirect, LocationMiddlewares, RateLimiter, RequestFacts, Verdict,
};
use dockhand::proxy::rewrite::rewrite_path;
use dockhand::upstream::{CheckSettings, EndpointInputs, EndpointRegistry, UpstreamSet};

/// One location of a routes file with `json` as its settings, as loaded.
fn location(json: &str) -> LocationConfig {
    let desired = parse_routes_file(&format!(
        r#"{{"host": {{"a.test": {{"location": {{"/": {json}}}}}}}}}"#
    ))
    .expect("valid benchmark routes");
    desired.hosts[0].locations[0].clone()
}

/// A location's `rewrite`, compiled as routes are loaded.
fn rewrite_of(json: &str) -> Rewrite {
    location(&format!(
        r#"{{"rewrite": {json}, "upstream": {{"10.0.0.1:80": {{}}}}}}"#
    ))
    .rewrite
    .expect("the location has its rewrite")
}

fn rewrite(c: &mut Criterion) {
    let cases = [
        (
            "prefix_strip",
            r#"{"strip_prefix": "/api"}"#,
            "/api/users?page=2",
        ),
        (
            "prefix_strip_add",
            r#"{"strip_prefix": "/legacy", "add_prefix": "/v2"}"#,
            "/legacy/orders?page=2",
        ),
        (
            "regex_group",
            r#"{"match": "^/users/(\\d+)/profile$", "replace": "/profiles/$1"}"#,
            "/users/42/profile?tab=posts",
        ),
        (
            "regex_named_group",
            r#"{"match": "^/users/(?P<id>\\d+)/profile$", "replace": "/profiles/${id}"}"#,
            "/users/42/profile?tab=posts",
        ),
        (
            "regex_no_match",
            r#"{"match": "^/users/(\\d+)/profile$", "replace": "/profiles/$1"}"#,
            "/orders/42/items?tab=posts",
        ),
    ];
    let mut group = c.benchmark_group("rewrite");
    for (name, rewrite, path) in &cases {
        let rewrite = rewrite_of(rewrite);
        let rewrite = &rewrite;
        let path = PathAndQuery::from_static(path);
        group.bench_function(*name, |b| {
            b.iter(|| rewrite_path(black_box(rewrite), black_box(&path)))
        });
    }
    group.finish();
}

/// A location's upstreams as a route table holds them.
fn upstreams(json: &str, load_balancing: LoadBalancing) -> UpstreamSet {
    let location = location(&format!(r#"{{"upstream": {json}}}"#));
    let registry = EndpointRegistry::new();
    let checks = CheckSettings {
        enabled: false,
        interval: Duration::from_secs(15),
    };
    let context = EndpointInputs {
        resolved: &HashMap::new(),
        registry: &registry,
    };
    let name = "bench.test/".into();
    UpstreamSet::build(&location.upstreams, load_balancing, checks, &context, &name)
}

fn pick(c: &mut Criterion) {
    let four = r#"{"10.0.0.1:80": {}, "10.0.0.2:80": {}, "10.0.0.3:80": {}, "10.0.0.4:80": {}}"#;
    let cases = [
        (
            "one_upstream",
            upstreams(r#"{"10.0.0.1:80": {}}"#, LoadBalancing::RoundRobin),
        ),
        ("round_robin_4", upstreams(four, LoadBalancing::RoundRobin)),
        (
            "weighted_round_robin_3_1",
            upstreams(
                r#"{"10.0.0.1:80": {"weight": 3}, "10.0.0.2:80": {}}"#,
                LoadBalancing::RoundRobin,
            ),
        ),
        (
            "least_connections_4",
            upstreams(four, LoadBalancing::LeastConnections),
        ),
    ];
    let mut group = c.benchmark_group("pick");
    for (name, set) in &cases {
        group.bench_function(*name, |b| b.iter(|| black_box(set).pick(&[])));
    }
    group.finish();
}

/// A request's metrics: by status through its location's handles (what
/// dockhand does), and, for comparison, through families keyed by label
/// strings made for each request.
fn count_request(c: &mut Criterion) {
    let metrics = Metrics::default();
    let location = metrics.location("a.test".into(), "/api".into());
    let duration = Duration::from_millis(3);
    let mut group = c.benchmark_group("count_request");
    group.bench_function("location_handles", |b| {
        b.iter(|| black_box(&location).count(black_box(200), duration, 1234))
    });
    type Labels = Vec<(String, String)>;
    let requests = Family::<Labels, Counter>::default();
    let durations = Family::<Labels, Histogram>::new_with_constructor(|| {
        Histogram::new(exponential_buckets(0.001, 2.0, 16))
    });
    let bytes_out = Family::<Labels, Counter>::default();
    group.bench_function("string_labels", |b| {
        b.iter(|| {
            let host = ("host".to_owned(), black_box("a.test").to_owned());
            let by_status = vec![
                host.clone(),
                ("location".to_owned(), black_box("/api").to_owned()),
                ("code".to_owned(), black_box(200).to_string()),
            ];
            requests.get_or_create(&by_status).inc();
            let by_host = vec![host];
            durations
                .get_or_create(&by_host)
                .observe(duration.as_secs_f64());
            bytes_out.get_or_create(&by_host).inc_by(1234);
        })
    });
    group.finish();
}

/// The location's middlewares as served, from its routes-file settings.
fn middlewares_of(json: &str) -> LocationMiddlewares {
    let settings = location(&format!(
        r#"{{{json}, "upstream": {{"10.0.0.1:80": {{}}}}}}"#
    ))
    .middlewares;
    LocationMiddlewares::new(settings, |_, limit| {
        Arc::new(RateLimiter::new(limit.clone()))
    })
}

/// Each middleware's cost on a request it lets through: its checks before
/// the upstream and its rules on the answer. None waits (the basic-auth
/// row's credentials were checked once before: remembered).
fn middlewares(c: &mut Criterion) {
    let alice = format!("alice:{}", bcrypt::hash("secret", 4).expect("a hash"));
    let cases = [
        ("ip_allow", r#""ip_allow": ["10.0.0.0/8", "172.16.0.0/12", "192.0.2.0/24"]"#.to_owned()),
        ("rate_limit", r#""rate_limit": {"average": 1000000, "period": "1ms"}"#.to_owned()),
        ("max_body_size", r#""max_body_size": "10m""#.to_owned()),
        ("cors", r#""cors": {"allow_origins": ["https://app.example.com", "*.example.org"]}"#.to_owned()),
        ("basic_auth_remembered", format!(r#""basic_auth": {{"users": ["{alice}"]}}"#)),
        ("redirect_no_match", r#""redirect": {"regex": "^http://www\\.(.*)", "replacement": "http://$1"}"#.to_owned()),
        (
            "response_headers",
            r#""headers": {"response": {"set": {"X-Frame-Options": "DENY"}, "remove": ["Server"]}, "security": true}"#.to_owned(),
        ),
    ];
    let method = Method::GET;
    let uri = Uri::from_static("/api/users?page=2");
    let host = HeaderValue::from_static("a.test");
    let mut headers = HeaderMap::new();
    headers.insert(
        "origin",
        HeaderValue::from_static("https://app.example.com"),
    );
    headers.insert("content-length", HeaderValue::from_static("512"));
    // alice:secret
    headers.insert(
        "authorization",
        HeaderValue::from_static("Basic YWxpY2U6c2VjcmV0"),
    );
    let request = RequestFacts {
        client: "192.0.2.7".parse().expect("an address"),
        method: &method,
        scheme: "http",
        host: &host,
        uri: &uri,
        headers: &headers,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut group = c.benchmark_group("middlewares");
    // What every row does besides the middleware: its floor.
    let mut answer = HeaderMap::with_capacity(8);
    group.bench_function("floor", |b| {
        b.iter(|| {
            answer.clear();
            answer.insert("server", HeaderValue::from_static("app"));
            black_box(&answer);
        })
    });
    for (name, json) in &cases {
        let location = middlewares_of(json);
        // The first check of a password hashes it; the rest remember it.
        let first = runtime.block_on(before_upstream(&location, &request));
        assert!(matches!(first, Verdict::Forward(_)), "{name}: {first:?}");
        // Made once: clearing it keeps its room, so no row pays for memory.
        let mut answer = HeaderMap::with_capacity(8);
        group.bench_function(*name, |b| {
            b.iter(|| {
                let verdict = before_upstream(black_box(&location), black_box(&request))
                    .now_or_never()
                    .expect("no wait");
                let Verdict::Forward(asked) = verdict else {
                    panic!("{name}: refused")
                };
                assert!(redirect(&location, &request).is_none());
                answer.clear();
                answer.insert("server", HeaderValue::from_static("app"));
                on_response(&location, &asked, &mut answer);
            })
        });
    }
    group.finish();
}

criterion_group!(hot_path, rewrite, pick, count_request, middlewares);
criterion_main!(hot_path);
