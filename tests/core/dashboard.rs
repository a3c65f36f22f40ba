//! The dashboard page on the admin listener: served to anyone who reaches it,
//! also when a token guards the API it reads (the page holds no data and asks
//! for the token itself). What the page shows, in a real browser, is the
//! Docker suite's `integration/dashboard.rs`.

use http::StatusCode;

use super::support::*;

#[tokio::test]
async fn the_dashboard_is_served_without_the_token_that_its_api_needs() {
    let backend = Backend::echo("a").await;
    let proxy = ProxyProcess::start(
        &one_route("a.test", backend.addr),
        &["--admin-token", "dashboard-secret"],
    )
    .await;
    let get = |path: &'static str| {
        send(
            proxy.admin,
            request("GET", "localhost", path).body(empty()).unwrap(),
        )
    };

    let page = get("/").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    assert_eq!(page.header("content-type"), "text/html; charset=utf-8");
    assert!(page.text().contains("<title>dockhand</title>"));
    assert!(!page.text().contains("dashboard-secret"));
    // The page may talk to this listener only.
    let policy = page.header("content-security-policy");
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");

    for api in [
        "/api/v1/hosts",
        "/api/v1/diagnostics",
        "/api/v1/certificates",
    ] {
        assert_eq!(get(api).await.status, StatusCode::UNAUTHORIZED, "{api}");
    }
}
