//! Middleware labels against a real engine: one test backend whose labels
//! use every middleware key, behind `dockhand:test` in a container, is
//! refused (403, 413), redirected, given CORS and response headers as its
//! labels say, at a client on the published port, and the admin API shows
//! each location's `middlewares`; a second container's misspelt key and bad
//! value are diagnosed in the admin API, its route is left out, and the first
//! container's routes carry on. Forward auth (a test backend as the auth
//! service, by container name) and basic auth guard a third.

use std::net::SocketAddr;

use serde_json::json;

use crate::browser::Browser;
use crate::support::*;

const ADMIN_TOKEN: &str = "middleware-labels-test-token";
/// An origin the backend's CORS labels allow.
const FRONT: &str = "https://front.example";

/// The hosts of the labelled backend's three routes.
struct Hosts {
    /// `dockhand.*`: open to all, body limit, response headers, CORS.
    app: String,
    /// `dockhand.routes.private.*`: only TEST-NET-1 may call it.
    private: String,
    /// `dockhand.routes.www.*`: redirected to `app`.
    www: String,
    /// `dockhand.routes.zip.*`: answers compressed with gzip.
    zip: String,
    /// `dockhand.routes.limited.*`: two requests a minute per API key.
    limited: String,
}

impl Hosts {
    fn of(run: &TestRun) -> Hosts {
        let app = run.host("app");
        Hosts {
            private: run.host("private"),
            www: format!("www.{app}"),
            zip: run.host("zip"),
            limited: run.host("limited"),
            app,
        }
    }
}

/// A test backend whose labels use every middleware key there is.
fn labelled_backend(run: &TestRun, network: &Network, hosts: &Hosts) -> Container {
    routed_backend(run, "app", &hosts.app, network)
        // Every IPv4 and IPv6 client: whichever address the engine's port
        // publishing hands dockhand (docker-proxy's or the client's), it is in.
        .label("dockhand.ip_allow", "0.0.0.0/0,::/0")
        .label("dockhand.max_body_size", "1k")
        .label(
            "dockhand.headers.response.set.Content-Security-Policy",
            "default-src 'self'",
        )
        // The backend's own header, so its absence shows the rule ran.
        .label("dockhand.headers.response.remove", "x-hostname")
        .label("dockhand.headers.security", "true")
        .label("dockhand.cors.allow_origins", FRONT)
        .label("dockhand.cors.allow_methods", "GET,PUT")
        .label("dockhand.cors.allow_credentials", "true")
        .label("dockhand.cors.max_age", "600")
        .label("dockhand.routes.private.host", &hosts.private)
        // TEST-NET-1 (RFC 5737) is never routed, so no client of this test
        // can be in it, whatever the port publishing does.
        .label("dockhand.routes.private.ip_allow", "192.0.2.0/24")
        .label("dockhand.routes.www.host", &hosts.www)
        // `docker run --label` takes `$1` as written (compose would need `$$1`).
        .label("dockhand.routes.www.redirect.regex", r"^http://www\.(.*)")
        .label("dockhand.routes.www.redirect.replacement", "http://$1")
        .label("dockhand.routes.www.redirect.permanent", "true")
        .label("dockhand.routes.zip.host", &hosts.zip)
        .label("dockhand.routes.zip.compress", "gzip")
        .label("dockhand.routes.limited.host", &hosts.limited)
        .label("dockhand.routes.limited.rate_limit.average", "1")
        .label("dockhand.routes.limited.rate_limit.burst", "2")
        .label("dockhand.routes.limited.rate_limit.period", "1m")
        .label("dockhand.routes.limited.rate_limit.by", "header:X-Api-Key")
        .run()
}

/// The labelled backend behind `dockhand:test` in a container, whose admin
/// API is published on loopback too (off loopback inside the container, so
/// behind a token); ready once the backend's main route answers.
struct Setup {
    // Fields drop in order: the containers before their network, the
    // run's sweep last.
    dockhand: DockhandInContainer,
    admin: SocketAddr,
    app: Container,
    hosts: Hosts,
    network: Network,
    run: TestRun,
}

impl Setup {
    fn start(test: &str) -> Setup {
        let run = TestRun::new(test);
        let network = run.network("net");
        let hosts = Hosts::of(&run);
        let app = labelled_backend(&run, &network, &hosts);
        let args = [
            "--admin-listen",
            "0.0.0.0:8081",
            "--admin-token",
            ADMIN_TOKEN,
        ];
        let dockhand =
            run.dockhand_in_container_with("dockhand", &network, &args, |spec| spec.publish(8081));
        let admin = wait_until_ok("the admin API's published port", || {
            dockhand.container.published(8081)
        });
        wait_for_200(dockhand.addr, &hosts.app, "/");
        Setup {
            dockhand,
            admin,
            app,
            hosts,
            network,
            run,
        }
    }

    /// `GET path` on the admin API.
    fn admin(&self, path: &str) -> Result<serde_json::Value, String> {
        admin_json(self.admin, ADMIN_TOKEN, path)
    }
}

/// One request to dockhand with `headers` and `body`; panics without an answer.
#[track_caller]
fn send(
    addr: SocketAddr,
    method: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    http_request(addr, method, host, "/", headers, body)
        .unwrap_or_else(|e| panic!("{method} {host}: {e}"))
}

/// `response` is dockhand's own refusal `error`, the backend never asked
/// (every answer of the backend's carries `x-hostname`).
#[track_caller]
fn assert_refused(response: &HttpResponse, status: u16, error: &str) {
    assert_eq!(response.status, status, "{response:?}");
    assert_eq!(response.header("x-dockhand-error"), Some(error));
    assert_eq!(response.header("x-hostname"), None, "{response:?}");
}

#[test]
fn middleware_labels_act_on_requests_and_show_in_the_admin_api() {
    let setup = Setup::start("mw-labels");
    let (dockhand, hosts) = (&setup.dockhand, &setup.hosts);

    // Allowed by ip_allow; the response rules ran on the backend's answer.
    let response = send(dockhand.addr, "GET", &hosts.app, &[], b"");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(answered_by(&response), setup.app.name);
    assert_eq!(
        response.header("content-security-policy"),
        Some("default-src 'self'")
    );
    assert_eq!(response.header("x-hostname"), None, "removed");
    assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        response.header("referrer-policy"),
        Some("strict-origin-when-cross-origin")
    );
    assert_eq!(response.header("x-frame-options"), Some("SAMEORIGIN"));

    // The routes of one container come in one table swap: all are here now.
    let response = send(dockhand.addr, "GET", &hosts.private, &[], b"");
    assert_refused(&response, 403, "not_allowed");

    // Refused from the declared length alone: no body is sent at all.
    let over = [("content-length", "1025")];
    let response = send(dockhand.addr, "POST", &hosts.app, &over, b"");
    assert_refused(&response, 413, "body_too_large");
    let at_the_limit = vec![b'x'; 1024];
    let response = send(dockhand.addr, "POST", &hosts.app, &[], &at_the_limit);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json()["method"], "POST");

    let response =
        http_request(dockhand.addr, "GET", &hosts.www, "/a/b?c=d", &[], b"").expect("the redirect");
    assert_eq!(response.status, 301, "{response:?}");
    let moved_to = format!("http://{}/a/b?c=d", hosts.app);
    assert_eq!(response.header("location"), Some(moved_to.as_str()));

    // A preflight is dockhand's to answer (the backend would echo a 200).
    let preflight = [
        ("origin", FRONT),
        ("access-control-request-method", "PUT"),
        ("access-control-request-headers", "x-trace"),
    ];
    let response = send(dockhand.addr, "OPTIONS", &hosts.app, &preflight, b"");
    assert_eq!(response.status, 204, "{response:?}");
    assert!(response.body.is_empty(), "{response:?}");
    assert_eq!(response.header("access-control-allow-origin"), Some(FRONT));
    assert_eq!(
        response.header("access-control-allow-methods"),
        Some("GET, PUT")
    );
    assert_eq!(
        response.header("access-control-allow-headers"),
        Some("x-trace")
    );
    assert_eq!(
        response.header("access-control-allow-credentials"),
        Some("true")
    );
    assert_eq!(response.header("access-control-max-age"), Some("600"));

    let response = send(dockhand.addr, "GET", &hosts.app, &[("origin", FRONT)], b"");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("access-control-allow-origin"), Some(FRONT));
    // The answer names the origin, so caches must key on it.
    assert_eq!(response.header("vary"), Some("Origin"));
    assert_eq!(
        response.header("access-control-allow-credentials"),
        Some("true")
    );
    let stranger = [("origin", "https://stranger.example")];
    let response = send(dockhand.addr, "GET", &hosts.app, &stranger, b"");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("access-control-allow-origin"), None);

    // Two requests a minute per API key: the third is refused, another
    // key has its own bucket.
    let key = [("x-api-key", "one")];
    for _ in 0..2 {
        let response = send(dockhand.addr, "GET", &hosts.limited, &key, b"");
        assert_eq!(response.status, 200, "{response:?}");
    }
    let response = send(dockhand.addr, "GET", &hosts.limited, &key, b"");
    assert_refused(&response, 429, "rate_limited");
    assert_eq!(response.header("retry-after"), Some("60"));
    let other_key = [("x-api-key", "two")];
    let response = send(dockhand.addr, "GET", &hosts.limited, &other_key, b"");
    assert_eq!(response.status, 200, "{response:?}");

    // A browser's Accept-Encoding; the label allows gzip only. The padding
    // makes the backend's echo of the request larger than the 1 KiB floor.
    let padding = "a".repeat(2048);
    let browser = [
        ("accept-encoding", "gzip, deflate, br, zstd"),
        ("x-padding", padding.as_str()),
    ];
    let response = send(dockhand.addr, "GET", &hosts.zip, &browser, b"");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("content-encoding"), Some("gzip"));
    assert_eq!(response.header("vary"), Some("Accept-Encoding"));
    let mut echo = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&response.body[..]),
        &mut echo,
    )
    .expect("a gzip body");
    let echo: serde_json::Value = serde_json::from_slice(&echo).expect("the echo, as JSON");
    assert_eq!(echo["hostname"], setup.app.name.as_str());
    assert_eq!(echo["headers"]["x-padding"], padding.as_str());
    let identity = [("x-padding", padding.as_str())];
    let response = send(dockhand.addr, "GET", &hosts.zip, &identity, b"");
    assert_eq!(response.header("content-encoding"), None, "{response:?}");
    assert_eq!(response.json()["headers"]["x-padding"], padding.as_str());

    // The admin API: each location's middlewares as the routes file writes them.
    let view = setup.admin("/api/v1/hosts").expect("the admin API answers");
    let middlewares = |host: &str| view["host"][host]["location"]["/"]["middlewares"].clone();
    assert_eq!(
        middlewares(&hosts.app),
        json!({
            "ip_allow": ["0.0.0.0/0", "::/0"],
            "max_body_size": 1024,
            "headers": {
                "response": {
                    "set": {"content-security-policy": "default-src 'self'"},
                    "remove": ["x-hostname"]
                },
                "security": true
            },
            "cors": {
                "allow_origins": [FRONT],
                "allow_methods": ["GET", "PUT"],
                "allow_credentials": true,
                "max_age": 600
            }
        }),
        "{view}"
    );
    assert_eq!(
        middlewares(&hosts.private),
        json!({"ip_allow": ["192.0.2.0/24"]})
    );
    assert_eq!(middlewares(&hosts.zip), json!({"compress": ["gzip"]}));
    assert_eq!(
        middlewares(&hosts.limited),
        json!({"rate_limit": {"average": 1, "burst": 2, "period": "60000ms",
                              "by": "header:x-api-key"}})
    );
    assert_eq!(
        middlewares(&hosts.www),
        json!({"redirect": {"regex": r"^http://www\.(.*)", "replacement": "http://$1",
                            "permanent": true}})
    );
}

/// A real browser (headless chromium) asks with its own `Accept-Encoding`,
/// is answered with the encoding the `compress` label allows, and decodes
/// it: the page's `fetch` reads the backend's echo as JSON.
#[test]
fn a_real_browser_decodes_what_the_compress_label_compresses() {
    let Some(mut browser) = Browser::launch() else {
        return;
    };
    let setup = Setup::start("mw-browser");
    let port = setup.dockhand.addr.port();
    browser.navigate(&format!("http://{}:{port}/", setup.hosts.zip));
    // The padding makes the echo larger than the 1 KiB floor.
    let fetched = browser.wait_for(
        "the page's fetch of a compressed answer",
        "fetch('/', {headers: {'x-padding': 'a'.repeat(2048)}})
            .then(async r => ({encoding: r.headers.get('content-encoding'), echo: await r.json()}))",
    );
    assert_eq!(fetched["encoding"], "gzip", "{fetched}");
    let echo = &fetched["echo"];
    assert_eq!(echo["hostname"], setup.app.name.as_str());
    assert_eq!(
        echo["headers"]["x-padding"].as_str().map(str::len),
        Some(2048)
    );
    // The browser's own preferences (over plain HTTP, chromium names
    // gzip and deflate; br and zstd only over HTTPS).
    let asked = echo["headers"]["accept-encoding"]
        .as_str()
        .unwrap_or_default();
    assert!(asked.contains("gzip"), "{asked}");
}

#[test]
fn bad_middleware_labels_are_diagnosed_and_leave_other_routes_alone() {
    let setup = Setup::start("mw-bad-labels");
    let Setup {
        dockhand,
        app,
        hosts,
        network,
        run,
        ..
    } = &setup;

    let broken_host = run.host("broken");
    let broken = routed_backend(run, "broken", &broken_host, network)
        .label("dockhand.ip_alow", "10.0.0.0/8")
        .label("dockhand.max_body_size", "ten")
        .run();
    let diagnosed = wait_until_ok("both problems in GET /api/v1/diagnostics", || {
        let document = setup.admin("/api/v1/diagnostics")?;
        let of_broken: Vec<serde_json::Value> = document["diagnostics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|diagnostic| diagnostic["container"]["name"] == broken.name.as_str())
            .cloned()
            .collect();
        let found = |key: &str| of_broken.iter().find(|d| d["key"] == key).cloned();
        match (found("dockhand.ip_alow"), found("dockhand.max_body_size")) {
            (Some(typo), Some(bad_value)) => Ok((typo, bad_value)),
            _ => Err(format!("{of_broken:?}")),
        }
    });
    let (typo, bad_value) = diagnosed;
    assert_eq!(typo["severity"], "warning", "{typo}");
    assert_eq!(typo["value"], "10.0.0.0/8");
    assert_eq!(typo["reason"], "unknown key, ignored", "{typo}");
    assert_eq!(typo["suggestion"], "dockhand.ip_allow");
    let message = typo["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("did you mean `dockhand.ip_allow`?"),
        "{typo}"
    );
    assert_eq!(bad_value["severity"], "error", "{bad_value}");
    assert_eq!(bad_value["value"], "ten");
    assert_eq!(
        bad_value["reason"], "`ten` is not a size: bytes, or a number with k, m or g (such as 10m)",
        "{bad_value}"
    );

    // A route with a value not understood is never served half-way.
    let response = send(dockhand.addr, "GET", &broken_host, &[], b"");
    assert_refused(&response, 404, "no_host");
    // The other container's routes, middlewares and all, are as they were.
    let response = send(dockhand.addr, "GET", &hosts.app, &[], b"");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(answered_by(&response), app.name);
    assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
    let response = send(dockhand.addr, "GET", &hosts.private, &[], b"");
    assert_refused(&response, 403, "not_allowed");
}

/// Forward auth and basic auth from labels, with a test backend as the
/// auth service, reached by its container name through Docker's DNS: its
/// `200` lets the request through with the header it names copied (its
/// `x-hostname`), its `401` goes back to the client as it sent it; basic
/// auth challenges, then lets the right password in.
#[test]
fn auth_labels_ask_an_auth_service_by_name_and_check_passwords() {
    let run = TestRun::new("mw-auth");
    let network = run.network("net");
    let auth = run.backend("auth").network(&network).run();
    let (app_host, denied_host, login_host) =
        (run.host("app"), run.host("denied"), run.host("login"));
    let verify = format!("http://{}:{BACKEND_PORT}/", auth.name);
    let refuse = format!("http://{}:{BACKEND_PORT}/status/401", auth.name);
    let alice = format!("alice:{}", bcrypt::hash("secret", 4).unwrap());
    let app = routed_backend(&run, "app", &app_host, &network)
        .label("dockhand.forward_auth.address", &verify)
        .label("dockhand.forward_auth.response_headers", "x-hostname")
        .label("dockhand.routes.denied.host", &denied_host)
        .label("dockhand.routes.denied.forward_auth.address", &refuse)
        .label("dockhand.routes.login.host", &login_host)
        .label("dockhand.routes.login.basic_auth.users", &alice)
        .label("dockhand.routes.login.basic_auth.realm", "Staff")
        .run();
    let dockhand = run.dockhand_in_container("dockhand", &network, &[]);

    let through = wait_for_200(dockhand.addr, &app_host, "/");
    assert_eq!(answered_by(&through), app.name);
    assert_eq!(
        through.json()["headers"]["x-hostname"],
        auth.name.as_str(),
        "the auth service's header reached the app"
    );

    let denied = wait_until_ok("the denied route", || {
        let response = http_get(dockhand.addr, &denied_host, "/").map_err(|e| e.to_string())?;
        match response.status {
            404 => Err("not routed yet".to_owned()),
            _ => Ok(response),
        }
    });
    assert_eq!(denied.status, 401, "{denied:?}");
    assert_eq!(
        answered_by(&denied),
        auth.name,
        "the auth service's own answer"
    );

    let challenged = http_get(dockhand.addr, &login_host, "/").expect("an answer");
    assert_eq!(challenged.status, 401, "{challenged:?}");
    assert_eq!(challenged.header("x-dockhand-error"), Some("unauthorized"));
    assert_eq!(
        challenged.header("www-authenticate"),
        Some("Basic realm=\"Staff\", charset=\"UTF-8\"")
    );
    // alice:secret
    let credentials = [("authorization", "Basic YWxpY2U6c2VjcmV0")];
    let logged_in =
        http_request(dockhand.addr, "GET", &login_host, "/", &credentials, b"").expect("an answer");
    assert_eq!(logged_in.status, 200, "{logged_in:?}");
    assert_eq!(answered_by(&logged_in), app.name);
    assert!(
        logged_in.json()["headers"].get("authorization").is_none(),
        "the password stays with dockhand"
    );
}
