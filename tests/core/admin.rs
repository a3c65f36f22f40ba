//! The admin listener end to end: what `/api/v1/hosts` and
//! `/api/v1/diagnostics` say of real routes and upstreams, the health
//! probes, `dockhand healthcheck` (the real binary), and the token rules.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use dockhand::admin::AdminToken;
use dockhand::settings::{DockerHost, DockerSettings, Settings};
use dockhand::Listeners;

use super::dns_server::{srv, DnsServer};
use super::support::*;

/// `GET path` on the admin listener, with `authorization` if given.
async fn admin_get(admin: SocketAddr, path: &str, authorization: Option<&str>) -> Reply {
    let mut builder = request("GET", "localhost", path);
    if let Some(value) = authorization {
        builder = builder.header("authorization", value);
    }
    send(admin, builder.body(empty()).unwrap()).await
}

async fn hosts(proxy: &Proxy) -> serde_json::Value {
    let reply = admin_get(proxy.admin, "/api/v1/hosts", None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("content-type"), "application/json");
    reply.json()
}

#[tokio::test]
async fn hosts_show_the_routes_file_shape_with_each_address_and_its_state() {
    let backend = Backend::echo("a").await;
    // Holds each `/hold` request until released, so one is seen in flight.
    let release = Arc::new(Notify::new());
    let held = Backend::start({
        let release = release.clone();
        move |_| {
            let release = release.clone();
            async move {
                release.notified().await;
                http::Response::new(full("done"))
            }
        }
    })
    .await;
    let dns = DnsServer::start().await;
    dns.set_a("app.test", ["127.0.0.7"], 60);
    let routes = format!(
        r#"{{"host": {{"a.test": {{"location": {{
            "/": {{"retry": {{"attempts": 2}}, "health_check": {{"interval_secs": 1}},
                   "upstream": {{"{}": {{"weight": 3}}}}}},
            "/hold": {{"health_check": {{"enabled": false}}, "upstream": {{"{}": {{}}}}}},
            "/named": {{"ip_allow": ["10.0.0.0/8"], "max_body_size": "1m",
                        "headers": {{"security": true}}, "compress": ["gzip", "zstd"],
                        "upstream": {{"app.test:8080": {{}}}}}}
        }}}}}}}}"#,
        backend.addr, held.addr
    );
    let settings = Settings {
        dns_resolver: Some(dns.address()),
        ..test_settings()
    };
    let proxy = Proxy::start_with(&routes, settings).await;
    let held_request = tokio::spawn(get(proxy.addr, "a.test", "/hold"));

    let view = hosts(&proxy).await;
    let host = &view["host"]["a.test"];
    assert_eq!(host["provider"], "routes file");
    let root = &host["location"]["/"];
    assert_eq!(root["retry"]["attempts"], 2);
    assert_eq!(
        root["retry"]["on"],
        serde_json::json!(["connect", "502", "503", "504"])
    );
    assert_eq!(root["load_balancing"], "round_robin");
    assert_eq!(root["health_check"]["interval_secs"], 1);
    assert_eq!(root["middlewares"], serde_json::json!({}));
    // Middlewares in the routes file's shape, only those set.
    assert_eq!(
        host["location"]["/named"]["middlewares"],
        serde_json::json!({"ip_allow": ["10.0.0.0/8"], "max_body_size": 1048576,
            "headers": {"security": true},
            "compress": ["zstd", "gzip"]})
    );
    let upstream = &root["upstream"][backend.addr.to_string()];
    assert_eq!(upstream["weight"], 3);
    assert_eq!(upstream["protocol"], "http1");
    let address = &upstream["addresses"][0];
    assert_eq!(address["address"], backend.addr.to_string());
    assert_eq!(address["source"]["kind"], "address");
    assert_eq!(address["weight"], 3);
    assert!(view["table"]["number"].as_u64().unwrap() >= 1, "{view}");
    assert!(view["table"]["swapped_at"].as_str().unwrap().ends_with('Z'));

    // The first check (after one interval) marks it healthy and stamps it.
    eventually("the check ran", || async {
        let view = hosts(&proxy).await;
        let address = &view["host"]["a.test"]["location"]["/"]["upstream"]
            [backend.addr.to_string()]["addresses"][0];
        address["health"] == "healthy" && address["last_check"].is_string()
    })
    .await;

    let hold = |view: &serde_json::Value| {
        view["host"]["a.test"]["location"]["/hold"]["upstream"][held.addr.to_string()]["addresses"]
            [0]
        .clone()
    };
    eventually("the held request is in flight", || async {
        hold(&hosts(&proxy).await)["in_flight"] == 1
    })
    .await;
    let held_address = hold(&hosts(&proxy).await);
    assert_eq!(held_address["health"], "unchecked");
    assert_eq!(held_address["last_check"], serde_json::Value::Null);
    release.notify_one();
    assert_eq!(held_request.await.unwrap().status, StatusCode::OK);

    eventually("the name resolved", || async {
        let view = hosts(&proxy).await;
        let named = &view["host"]["a.test"]["location"]["/named"]["upstream"]["app.test:8080"];
        let address = &named["addresses"][0];
        address["address"] == "127.0.0.7:8080"
            && address["source"]["kind"] == "dns"
            && address["source"]["name"] == "app.test"
            && address["source"]["resolved_at"].is_string()
    })
    .await;

    let one = admin_get(proxy.admin, "/api/v1/hosts/a.test", None).await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.json()["provider"], "routes file");
    let unknown = admin_get(proxy.admin, "/api/v1/hosts/b.test", None).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.json()["error"].as_str().unwrap().contains("b.test"));
}

#[tokio::test]
async fn a_routes_file_problem_is_listed_until_it_is_fixed() {
    let backend = Backend::echo("a").await;
    let good = one_route("a.test", backend.addr);
    let proxy = Proxy::start(&good).await;
    let diagnostics = || async {
        let reply = admin_get(proxy.admin, "/api/v1/diagnostics", None).await;
        assert_eq!(reply.status, StatusCode::OK);
        reply.json()
    };
    assert_eq!(diagnostics().await["counts"]["error"], 0);
    proxy.write_routes(&good.replace("\"location\"", "\"locaton\""));
    eventually("the bad version is listed", || async {
        let now = diagnostics().await;
        let listed = now["diagnostics"].as_array().unwrap();
        let typo = listed
            .iter()
            .find(|d| d["message"].as_str().unwrap().contains("`locaton`"));
        now["counts"]["error"] == listed.len()
            && typo.is_some_and(|typo| {
                typo["source"] == "routes_file"
                    && typo["severity"] == "error"
                    && typo["path"] == proxy.routes_path.display().to_string()
            })
    })
    .await;
    assert_eq!(
        get(proxy.addr, "a.test", "/").await.status,
        StatusCode::OK,
        "the last good routes are still served"
    );
    proxy.write_routes(&good);
    eventually("the fixed file clears it", || async {
        diagnostics().await["diagnostics"] == serde_json::json!([])
    })
    .await;
}

#[tokio::test]
async fn probes_answer_and_other_methods_and_paths_do_not() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("a.test", backend.addr)).await;
    let healthz = admin_get(proxy.admin, "/healthz", None).await;
    assert_eq!(
        (healthz.status, healthz.text().as_str()),
        (StatusCode::OK, "ok\n")
    );
    let readyz = admin_get(proxy.admin, "/readyz", None).await;
    assert_eq!(readyz.status, StatusCode::OK, "the routes file is loaded");
    let missing = admin_get(proxy.admin, "/api/v2/hosts", None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let post = send(
        proxy.admin,
        request("POST", "localhost", "/api/v1/hosts")
            .body(full("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post.header("allow"), "GET, HEAD");
    assert_eq!(
        get(proxy.addr, "localhost", "/api/v1/hosts").await.status,
        StatusCode::NOT_FOUND,
        "the proxy port serves no admin path"
    );
}

/// Settings whose Docker engine never answers: the first sync never ends.
fn waiting_for_docker() -> Settings {
    Settings {
        docker: Some(DockerSettings {
            host: DockerHost::Unix("/nonexistent/docker.sock".into()),
            ..DockerSettings::default()
        }),
        ..test_settings()
    }
}

#[tokio::test]
async fn not_ready_until_the_first_docker_sync_and_healthcheck_says_so() {
    let backend = Backend::echo("a").await;
    let routes = one_route("a.test", backend.addr);
    let waiting = Proxy::start_with(&routes, waiting_for_docker()).await;
    let readyz = admin_get(waiting.admin, "/readyz", None).await;
    assert_eq!(readyz.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(readyz.text().contains("Docker sync"), "{}", readyz.text());
    assert_eq!(
        get(waiting.addr, "a.test", "/").await.status,
        StatusCode::OK,
        "not ready is not down: the routes file is served meanwhile"
    );
    let ready = Proxy::start(&routes).await;

    let healthcheck = |admin: SocketAddr| {
        let output = Command::new(env!("CARGO_BIN_EXE_dockhand"))
            .args(["--admin-listen", &admin.to_string(), "healthcheck"])
            .env_clear()
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ready_admin, waiting_admin) = (ready.admin, waiting.admin);
    let (ok, not_ready, nothing) = tokio::task::spawn_blocking(move || {
        (
            healthcheck(ready_admin),
            healthcheck(waiting_admin),
            healthcheck(free_port()),
        )
    })
    .await
    .unwrap();
    assert_eq!(ok.0, Some(0), "{}", ok.1);
    assert_eq!(not_ready.0, Some(1));
    assert!(
        not_ready.1.contains("503") && not_ready.1.contains("Docker sync"),
        "{}",
        not_ready.1
    );
    assert_eq!(nothing.0, Some(1));
    assert!(nothing.1.contains("can't reach"), "{}", nothing.1);
}

/// Runs dockhand with a token on an admin listener of its own.
async fn start_with_token(admin: TcpListener, token: &str) -> Result<(), dockhand::Error> {
    let backend_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.json");
    std::fs::write(&routes, r#"{"host": {}}"#).unwrap();
    let settings = Settings {
        routes_file: Some(routes),
        admin_token: AdminToken::new(token),
        ..test_settings()
    };
    let listeners = Listeners {
        http: backend_listener,
        https: None,
        admin: Some(admin),
    };
    dockhand::run(listeners, settings, std::future::pending()).await
}

#[tokio::test]
async fn with_a_token_everything_but_healthz_needs_it() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let server = tokio::spawn(start_with_token(listener, "s3cret"));
    eventually("the admin listener answers", || async {
        tokio::net::TcpStream::connect(admin).await.is_ok()
    })
    .await;
    assert_eq!(
        admin_get(admin, "/healthz", None).await.status,
        StatusCode::OK
    );
    for path in [
        "/readyz",
        "/api/v1/hosts",
        "/api/v1/diagnostics",
        "/api/v1/hosts/a.test",
    ] {
        for wrong in [
            None,
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Basic s3cret"),
        ] {
            let reply = admin_get(admin, path, wrong).await;
            assert_eq!(
                reply.status,
                StatusCode::UNAUTHORIZED,
                "{path} with {wrong:?}"
            );
            assert_eq!(
                reply.header("www-authenticate"),
                "Bearer realm=\"dockhand\""
            );
        }
    }
    let admitted = admin_get(admin, "/api/v1/hosts", Some("Bearer s3cret")).await;
    assert_eq!(admitted.status, StatusCode::OK);
    assert!(admitted.json()["host"].is_object());
    server.abort();
}

#[tokio::test]
async fn an_admin_listener_off_loopback_without_a_token_is_refused() {
    let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
    let proxy = Proxy::try_start_on(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        r#"{"host": {}}"#,
        test_settings(),
    )
    .await
    .unwrap();
    drop(proxy);
    let listeners = Listeners {
        http: TcpListener::bind("127.0.0.1:0").await.unwrap(),
        https: None,
        admin: Some(listener),
    };
    let mut settings = test_settings();
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.json");
    std::fs::write(&routes, r#"{"host": {}}"#).unwrap();
    settings.routes_file = Some(routes);
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        dockhand::run(listeners, settings, std::future::pending()),
    )
    .await
    .expect("refused at once")
    .unwrap_err()
    .to_string();
    assert!(refused.contains("--admin-token"), "{refused}");
    let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
    let with_token = tokio::spawn(start_with_token(listener, "t"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!with_token.is_finished(), "a token makes it acceptable");
    with_token.abort();
}

/// The binary reads its token from a file (a Docker secret), and
/// `dockhand healthcheck` sends it from the same setting.
#[tokio::test]
async fn the_binary_takes_its_token_from_a_file_and_healthcheck_sends_it() {
    let backend = Backend::echo("a").await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "from-a-secret\n").unwrap();
    let token_flag = ["--admin-token-file", secret.path().to_str().unwrap()];
    let proxy = ProxyProcess::start(&one_route("a.test", backend.addr), &token_flag).await;
    eventually("the admin listener answers", || async {
        tokio::net::TcpStream::connect(proxy.admin).await.is_ok()
    })
    .await;
    let hosts = "/api/v1/hosts";
    assert_eq!(
        admin_get(proxy.admin, hosts, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let admitted = admin_get(proxy.admin, hosts, Some("Bearer from-a-secret")).await;
    assert_eq!(admitted.status, StatusCode::OK);
    let admin = proxy.admin.to_string();
    let secret_path = secret.path().to_owned();
    let (with, without) = tokio::task::spawn_blocking(move || {
        let healthcheck = |with_token: bool| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_dockhand"));
            command.env_clear().args(["--admin-listen", &admin]);
            if with_token {
                command.arg("--admin-token-file").arg(&secret_path);
            }
            command.arg("healthcheck").output().unwrap()
        };
        (healthcheck(true), healthcheck(false))
    })
    .await
    .unwrap();
    assert!(
        with.status.success(),
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    assert_eq!(without.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&without.stderr).contains("401"));
}

/// An SRV upstream's address is its owner; the targets shown are those of
/// the answer its connections were dialed from.
#[tokio::test]
async fn an_srv_upstream_shows_the_targets_it_dials() {
    let backend = Backend::echo("a").await;
    let dns = DnsServer::start().await;
    let owner = "_app._tcp.example.test";
    dns.set_srv(
        owner,
        [
            srv(10, 5, backend.addr.port(), "node-1.example.test"),
            srv(20, 1, backend.addr.port(), "node-2.example.test"),
        ],
        30,
    );
    dns.set_a("node-1.example.test", ["127.0.0.1"], 30);
    let routes = serde_json::json!({"host": {"a.test": {"location": {"/": {"upstream": {
        owner: {"resolution": {"mode": "srv", "resolver": dns.address().to_string()}}
    }}}}}})
    .to_string();
    let proxy = Proxy::start(&routes).await;
    let source = || async {
        let view = hosts(&proxy).await;
        let upstream = &view["host"]["a.test"]["location"]["/"]["upstream"][owner];
        assert_eq!(upstream["resolution"]["mode"], "srv");
        upstream["addresses"][0]["source"].clone()
    };
    let before = source().await;
    assert_eq!(before["kind"], "srv");
    assert_eq!(
        before["targets"],
        serde_json::json!([]),
        "nothing dialed yet"
    );
    assert_eq!(get(proxy.addr, "a.test", "/").await.status, StatusCode::OK);
    let after = source().await;
    assert_eq!(after["owner"], owner);
    assert_eq!(
        after["targets"],
        serde_json::json!([
            {"target": "node-1.example.test", "port": backend.addr.port(), "priority": 10, "weight": 5},
            {"target": "node-2.example.test", "port": backend.addr.port(), "priority": 20, "weight": 1},
        ])
    );
}
