//! The routes file: refused with its key path at start, reloaded on change and
//! on request (SIGHUP), and a bad reload keeps the routes being served.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn a_bad_file_stops_the_start_and_names_each_problem() {
    let routes = r#"{"host": {
        "a.com": {"location": {"/x": {"upstream": {"b:0": {}}}}},
        "b.com": {"location": {"/": {"upstraem": {}, "retry": {"attempts": 11}}}},
        "c.com": {"location": {"/": {"rewrite": {"match": "^/users/(\\d+", "replace": "/$1"},
                                      "upstream": {"10.0.0.1:80": {"weight": 0}}}}}
    }}"#;
    let error = Proxy::try_start(routes, test_settings())
        .await
        .err()
        .expect("refused")
        .to_string();
    for expected in [
        r#"host."a.com".location."/x".upstream."b:0": port must be 1-65535"#,
        r#"host."b.com".location."/": unknown key `upstraem` (did you mean `upstream`?)"#,
        r#"host."b.com".location."/".retry.attempts: must be a whole number from 0 to 10, found 11"#,
        r#"host."c.com".location."/".rewrite.match: unclosed group"#,
        r#"host."c.com".location."/".upstream."10.0.0.1:80".weight: must be a whole number from 1 to 127, found 0"#,
    ] {
        assert!(
            error.contains(expected),
            "missing {expected:?} in:\n{error}"
        );
    }
}

#[tokio::test]
async fn the_binary_exits_non_zero_on_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("routes.json");
    std::fs::write(
        &path,
        r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:99999": {}}}}}}}"#,
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dockhand"))
        .args([
            "--no-docker",
            "--log-format",
            "json",
            "--http-listen",
            &free_port().to_string(),
        ])
        .arg("--routes")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        printed.contains(
            r#"host.\"a.com\".location.\"/\".upstream.\"10.0.0.1:99999\": port must be 1-65535"#
        ),
        "{printed}"
    );
}

#[tokio::test]
async fn the_model_example_file_loads() {
    let example = include_str!("../../examples/routes.json");
    let proxy = Proxy::start(example).await;
    // Its upstreams are on private addresses and names; only routing is checked here.
    assert_eq!(get(proxy.addr, "unknown.test", "/").await.status, 404);
}

#[tokio::test]
async fn a_changed_file_is_applied_and_a_bad_change_keeps_the_last_good_routes() {
    let first = Backend::echo("first").await;
    let second = Backend::echo("second").await;
    let proxy = Proxy::start(&one_route("example.com", first.addr)).await;
    assert_eq!(
        get(proxy.addr, "example.com", "/")
            .await
            .header("x-backend"),
        "first"
    );

    proxy.write_routes(&one_route("example.com", second.addr));
    eventually("the changed file is applied", || async {
        get(proxy.addr, "example.com", "/")
            .await
            .header("x-backend")
            == "second"
    })
    .await;

    proxy.write_routes(
        r#"{"host": {"example.com": {"location": {"/": {"upstream": {"nope": {}}}}}}}"#,
    );
    proxy.reload();
    // Several poll rounds pass; the bad file must not have replaced anything.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = get(proxy.addr, "example.com", "/").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-backend"), "second");

    proxy.write_routes(&one_route("example.com", first.addr));
    eventually("a fixed file is applied again", || async {
        get(proxy.addr, "example.com", "/")
            .await
            .header("x-backend")
            == "first"
    })
    .await;
}

#[tokio::test]
async fn sighup_reloads_the_binary() {
    let first = Backend::echo("first").await;
    let second = Backend::echo("second").await;
    // A poll interval far beyond the test: only the signal can cause the reload.
    let process = ProxyProcess::start(
        &one_route("example.com", first.addr),
        &["--routes-poll-interval", "1h"],
    )
    .await;
    assert_eq!(
        get(process.addr, "example.com", "/")
            .await
            .header("x-backend"),
        "first"
    );
    std::fs::write(process.routes_path(), one_route("example.com", second.addr)).unwrap();
    process.signal("HUP");
    eventually("SIGHUP applied the new file", || async {
        get(process.addr, "example.com", "/")
            .await
            .header("x-backend")
            == "second"
    })
    .await;
    assert!(process.stdout().contains("routes file reloaded"));
}
