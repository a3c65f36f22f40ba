//! The middlewares' decisions on requests and answers, from settings read
//! as the routes file writes them.

use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};

use super::*;
use crate::config::parse_routes_file;

fn middlewares(settings: &str) -> LocationMiddlewares {
    let file = format!(
        r#"{{"host": {{"a.com": {{"location": {{"/": {{{settings},
            "upstream": {{"127.0.0.1:9000": {{}}}}}}}}}}}}}}"#
    );
    let settings = parse_routes_file(&file).unwrap().hosts[0].locations[0]
        .middlewares
        .clone();
    LocationMiddlewares::new(settings, |_, limit| {
        Arc::new(RateLimiter::new(limit.clone()))
    })
}

/// A request as the middlewares see it.
struct Request {
    client: &'static str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

impl Request {
    fn get(uri: &'static str) -> Request {
        Request {
            client: "192.0.2.1",
            method: Method::GET,
            uri: Uri::from_static(uri),
            headers: HeaderMap::new(),
        }
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Request {
        self.headers.append(name, HeaderValue::from_static(value));
        self
    }

    /// What the middlewares see of it, for `use_facts`.
    fn with_facts<T>(&self, use_facts: impl FnOnce(&RequestFacts<'_>) -> T) -> T {
        let host = HeaderValue::from_static("www.a.com");
        use_facts(&RequestFacts {
            client: self.client.parse().unwrap(),
            method: &self.method,
            scheme: "http",
            host: &host,
            uri: &self.uri,
            headers: &self.headers,
        })
    }

    fn verdict(&self, middlewares: &LocationMiddlewares) -> Verdict {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        self.with_facts(|facts| runtime.block_on(before_upstream(middlewares, facts)))
    }

    fn redirected(
        &self,
        middlewares: &LocationMiddlewares,
    ) -> Option<http::Response<bytes::Bytes>> {
        self.with_facts(|facts| redirect(middlewares, facts))
    }
}

fn answer(verdict: Verdict) -> http::Response<bytes::Bytes> {
    match verdict {
        Verdict::Answer(answer) => answer,
        other => panic!("not answered: {other:?}"),
    }
}

#[test]
fn only_allowed_networks_pass() {
    let allow = middlewares(r#""ip_allow": ["10.0.0.0/8", "2001:db8::/32"]"#);
    let mut request = Request::get("/");
    assert!(matches!(
        request.verdict(&allow),
        Verdict::Refuse(Refusal::NotAllowed)
    ));
    request.client = "10.2.3.4";
    assert!(matches!(request.verdict(&allow), Verdict::Forward(_)));
    request.client = "2001:db8::5";
    assert!(matches!(request.verdict(&allow), Verdict::Forward(_)));
}

#[test]
fn a_rate_limit_refuses_past_the_burst_and_says_how_long_to_wait() {
    let limited = middlewares(r#""rate_limit": {"average": 1, "period": "1m", "burst": 2}"#);
    let request = Request::get("/");
    assert!(matches!(request.verdict(&limited), Verdict::Forward(_)));
    assert!(matches!(request.verdict(&limited), Verdict::Forward(_)));
    let Verdict::Refuse(Refusal::RateLimited(wait)) = request.verdict(&limited) else {
        panic!("not limited")
    };
    assert!(wait > Duration::from_secs(59) && wait <= Duration::from_secs(60));
    // The IP allow list comes first: a refused address takes no token.
    let both =
        middlewares(r#""ip_allow": ["10.0.0.0/8"], "rate_limit": {"average": 1, "period": "1m"}"#);
    for _ in 0..3 {
        assert!(matches!(
            request.verdict(&both),
            Verdict::Refuse(Refusal::NotAllowed)
        ));
    }
}

#[test]
fn a_declared_body_over_the_limit_is_refused() {
    let limit = middlewares(r#""max_body_size": 10"#);
    let at_limit = Request::get("/").header("content-length", "10");
    assert!(matches!(at_limit.verdict(&limit), Verdict::Forward(_)));
    let over = Request::get("/").header("content-length", "11");
    assert!(matches!(
        over.verdict(&limit),
        Verdict::Refuse(Refusal::BodyTooLarge)
    ));
}

#[test]
fn redirects_keep_the_method_where_they_must() {
    let redirect = middlewares(
        r#""redirect": {"regex": "^http://www\\.([^/]+)(.*)", "replacement": "https://$1$2"}"#,
    );
    let found = Request::get("/a?b=1").redirected(&redirect).unwrap();
    assert_eq!(found.status(), StatusCode::FOUND);
    assert_eq!(found.headers()["location"], "https://a.com/a?b=1");
    let mut post = Request::get("/form");
    post.method = Method::POST;
    assert_eq!(
        post.redirected(&redirect).unwrap().status(),
        StatusCode::TEMPORARY_REDIRECT
    );
    let permanent = middlewares(
        r#""redirect": {"regex": "^http://www\\.", "replacement": "http://", "permanent": true}"#,
    );
    let moved = Request::get("/x").redirected(&permanent).unwrap();
    assert_eq!(moved.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(moved.headers()["location"], "http://a.com/x");
    // Not matching: no redirect.
    let other = middlewares(r#""redirect": {"regex": "^https://", "replacement": "/"}"#);
    assert!(Request::get("/").redirected(&other).is_none());
}

#[test]
fn response_rules_remove_then_set_then_fill_the_security_preset() {
    let rules = middlewares(
        r#""headers": {"response": {"set": {"X-Frame-Options": "DENY", "X-Served-By": "edge"},
                                    "remove": ["Server", "X-Served-By"]},
                       "security": true}"#,
    );
    let mut headers = HeaderMap::new();
    headers.insert("server", HeaderValue::from_static("app/1.0"));
    headers.insert("x-served-by", HeaderValue::from_static("app"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    on_response(&rules, &Asked::default(), &mut headers);
    assert!(!headers.contains_key("server"));
    assert_eq!(headers["x-served-by"], "edge");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    // The upstream's own choice stands.
    assert_eq!(headers["referrer-policy"], "no-referrer");
}

#[test]
fn cors_answers_preflights_and_allows_origins_on_answers() {
    let cors = middlewares(
        r#""cors": {"allow_origins": ["https://app.example.com", "*.example.org"],
                    "allow_methods": ["GET", "PUT"], "allow_credentials": true, "max_age": 600}"#,
    );
    let mut preflight = Request::get("/api")
        .header("origin", "https://x.example.org")
        .header("access-control-request-method", "PUT")
        .header("access-control-request-headers", "x-token");
    preflight.method = Method::OPTIONS;
    let answered = answer(preflight.verdict(&cors));
    assert_eq!(answered.status(), StatusCode::NO_CONTENT);
    let headers = answered.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://x.example.org"
    );
    assert_eq!(headers["access-control-allow-methods"], "GET, PUT");
    assert_eq!(headers["access-control-allow-headers"], "x-token");
    assert_eq!(headers["access-control-allow-credentials"], "true");
    assert_eq!(headers["access-control-max-age"], "600");

    // An origin not allowed: answered, with nothing that allows it.
    let mut stranger = Request::get("/api")
        .header("origin", "https://evil.test")
        .header("access-control-request-method", "PUT");
    stranger.method = Method::OPTIONS;
    let refused = answer(stranger.verdict(&cors));
    assert!(!refused
        .headers()
        .contains_key("access-control-allow-origin"));

    // A plain request from an allowed origin: forwarded, then allowed.
    let request = Request::get("/api").header("origin", "https://app.example.com");
    let Verdict::Forward(asked) = request.verdict(&cors) else {
        panic!("not forwarded")
    };
    let mut headers = HeaderMap::new();
    headers.insert("vary", HeaderValue::from_static("Accept-Encoding"));
    on_response(&cors, &asked, &mut headers);
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://app.example.com"
    );
    let vary: Vec<_> = headers.get_all("vary").iter().collect();
    assert_eq!(vary, ["Accept-Encoding", "Origin"]);
}

#[test]
fn any_origin_without_credentials_is_answered_with_a_star() {
    let cors = middlewares(r#""cors": {"allow_origins": ["*"]}"#);
    let request = Request::get("/").header("origin", "https://any.test");
    let Verdict::Forward(asked) = request.verdict(&cors) else {
        panic!("not forwarded")
    };
    let mut headers = HeaderMap::new();
    on_response(&cors, &asked, &mut headers);
    assert_eq!(headers["access-control-allow-origin"], "*");
    assert!(!headers.contains_key("vary"));
}
