//! The dashboard (`GET /` on the admin listener) in a real browser: headless
//! chromium loads it once from dockhand on the host and the test reads the
//! page's DOM over the DevTools protocol while containers come and go, so
//! every change it sees was made by the page's own polling, not by a reload.
//!
//! `DOCKHAND_SCREENSHOT=docs/dashboard.png` saves the README's screenshot
//! (1280 wide) from the first scenario.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::browser::Browser;
use crate::support::*;

/// A routes file serving `host` from `upstream`, checked every second, so a
/// stopped upstream turns unhealthy soon.
fn checked_route(host: &str, upstream: SocketAddr) -> String {
    json!({"host": {host: {"location": {"/": {
        "upstream": {upstream.to_string(): {}},
        "health_check": {"interval_secs": 1}
    }}}}})
    .to_string()
}

/// JavaScript: the text of the host card for `host` on the page, or null.
fn host_text(host: &str) -> String {
    format!(
        "(() => {{ const card = [...document.querySelectorAll('#hosts .host')].find(e => e.dataset.host === {}); return card ? card.innerText : null; }})()",
        json!(host)
    )
}

/// JavaScript: the health shown for `address` (the badge's text), or
/// `"absent"` when no row shows that address.
fn shown_health(address: SocketAddr) -> String {
    format!(
        "(() => {{ const row = [...document.querySelectorAll('#hosts tr.address')].find(e => e.dataset.address === {}); return row ? row.querySelector('.health').textContent : 'absent'; }})()",
        json!(address.to_string())
    )
}

/// JavaScript: the text of the diagnostic about label `key` of `container`, or null.
fn diagnostic_text(container: &str, key: &str) -> String {
    format!(
        "(() => {{ const card = [...document.querySelectorAll('#diagnostics .diagnostic')].find(e => e.dataset.key === {} && e.innerText.includes({})); return card ? card.innerText : null; }})()",
        json!(key),
        json!(container)
    )
}

/// JavaScript: the text of the certificates table's row for `names`
/// (space-separated), or null.
fn certificate_text(names: &str) -> String {
    format!(
        "(() => {{ const row = [...document.querySelectorAll('#certificates tr.certificate')].find(e => e.dataset.names === {}); return row ? row.innerText : null; }})()",
        json!(names)
    )
}

/// JavaScript: the text of the diagnostic about certificate file `path`, or null.
fn certificate_diagnostic_text(path: &Path) -> String {
    format!(
        "(() => {{ const card = [...document.querySelectorAll('#diagnostics .diagnostic')].find(e => e.innerText.includes({})); return card ? card.innerText : null; }})()",
        json!(format!("certificate {}", path.display()))
    )
}

/// Writes `<stem>.crt` and `<stem>.key` for `name` into `dir`, the key of
/// another certificate with `mismatched`; returns the chain's path.
fn certificate_pair(dir: &Path, stem: &str, name: &str, mismatched: bool) -> PathBuf {
    let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    let other = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    let key = if mismatched { &other } else { &made };
    let chain = dir.join(format!("{stem}.crt"));
    std::fs::write(&chain, made.cert.pem()).unwrap();
    std::fs::write(
        dir.join(format!("{stem}.key")),
        key.signing_key.serialize_pem(),
    )
    .unwrap();
    chain
}

fn dashboard_url(dockhand: &DockhandOnHost) -> String {
    format!("http://{}/", dockhand.admin_addr)
}

/// Marks the page's JavaScript world: a reload would start a new one without the mark.
const MARK: &str = "window.dockhandTestMark = 'loaded once'";
const STILL_MARKED: &str = "window.dockhandTestMark === 'loaded once'";

#[test]
fn the_dashboard_shows_hosts_and_label_typos_and_follows_stopped_containers_without_a_reload() {
    let Some(mut browser) = Browser::launch() else {
        return;
    };
    let run = TestRun::new("dashboard");
    let network = run.network("net");
    let web_host = run.host("web");
    let web = routed_backend(&run, "web", &web_host, &network).run();
    let typo = routed_backend(&run, "typo", &run.host("typo"), &network)
        .label("dockhand.prot", "80")
        .run();
    // An upstream written as an address in the routes file stays when its
    // container stops (the Docker provider drops a stopped container's own
    // address instead), so its health check sees it go.
    let checked = run.backend("checked").network(&network).run();
    let checked_addr = checked.addr(&network, BACKEND_PORT);
    let checked_host = run.host("checked");
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.json");
    std::fs::write(&routes, checked_route(&checked_host, checked_addr)).unwrap();
    // A certificate served, and a pair whose key is another certificate's.
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    certificate_pair(&certs, "secure", &checked_host, false);
    let broken = certificate_pair(&certs, "broken", "broken.example.com", true);
    let https = format!("127.0.0.1:{}", free_port());
    let mut dockhand = DockhandOnHost::start_in(
        dir,
        &[
            "--routes",
            routes.to_str().unwrap(),
            "--certs-dir",
            certs.to_str().unwrap(),
            "--https-listen",
            &https,
            // A check of a stopped container's address fails within a second.
            "--connect-timeout",
            "1s",
            // A stopped container's host leaves the table a second later.
            "--upstream-wait",
            "1s",
        ],
        &[],
    );

    browser.navigate(&dashboard_url(&dockhand));
    browser.wait_for("the hosts table", "document.querySelector('#hosts .host')");
    browser.evaluate(MARK).unwrap();

    // The labelled container's host, with its address and where it came from.
    let web_addr = web.addr(&network, BACKEND_PORT);
    let shown = browser.wait_for(&format!("{web_host} on the page"), &host_text(&web_host));
    let shown = shown.as_str().unwrap_or_default();
    assert!(shown.contains(&web_addr.to_string()), "{shown}");
    assert!(
        shown.contains(&format!("container {}", web.name)),
        "{shown}"
    );
    assert!(shown.contains("from docker"), "{shown}");

    // The typo, with what was probably meant, and every other field the
    // API gives of it.
    let typo_text = browser.wait_for(
        "the dockhand.prot diagnostic",
        &diagnostic_text(&typo.name, "dockhand.prot"),
    );
    let typo_text = typo_text.as_str().unwrap_or_default();
    assert!(
        typo_text.contains("dockhand.prot = 80"),
        "the label and its value: {typo_text}"
    );
    assert!(
        typo_text.contains("did you mean dockhand.port?"),
        "the suggestion: {typo_text}"
    );
    let diagnostics = http_get(dockhand.admin_addr, "localhost", "/api/v1/diagnostics")
        .unwrap()
        .json();
    let typo_diagnostic = diagnostics["diagnostics"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["container"]["name"] == typo.name.as_str() && d["key"] == "dockhand.prot")
        .unwrap_or_else(|| {
            panic!(
                "the API lists no dockhand.prot of {}: {diagnostics}",
                typo.name
            )
        })
        .clone();
    for field in ["severity", "key", "value", "reason", "suggestion"] {
        if let Some(shown) = typo_diagnostic[field].as_str() {
            assert!(
                typo_text.contains(shown),
                "{field} {shown:?} not in {typo_text}"
            );
        }
    }

    // The certificates directory: the good pair listed with its file and
    // validity, the mismatched one a problem named by its file.
    let certificate = browser.wait_for(
        "the certificate on the page",
        &certificate_text(&checked_host),
    );
    let certificate = certificate.as_str().unwrap_or_default();
    assert!(certificate.contains("secure.crt"), "{certificate}");
    assert!(certificate.contains("valid until"), "{certificate}");
    let problem = browser.wait_for(
        "the mismatched pair's diagnostic",
        &certificate_diagnostic_text(&broken),
    );
    let problem = problem.as_str().unwrap_or_default();
    assert!(
        problem.contains("the private key does not belong to the certificate; not served"),
        "{problem}"
    );
    assert!(!problem.contains("routes file"), "{problem}");

    // The routes file's host, checked and reachable.
    browser.wait_for_value(
        &format!("{checked_addr} healthy on the page"),
        &shown_health(checked_addr),
        |health| health == "healthy",
    );

    // Its container stops: the page turns the address unhealthy.
    checked.stop(1);
    browser.wait_for_value(
        &format!("{checked_addr} unhealthy on the page"),
        &shown_health(checked_addr),
        |health| health == "unhealthy",
    );
    let shown = browser.evaluate(&host_text(&checked_host)).unwrap();
    let shown = shown.as_str().unwrap_or_default();
    assert!(shown.contains("from routes file"), "{shown}");
    assert!(shown.contains("address in the routes"), "{shown}");
    if let Ok(path) = std::env::var("DOCKHAND_SCREENSHOT") {
        browser.screenshot(Path::new(&path));
    }

    // The labelled container stops: the Docker provider drops its address,
    // and the page drops the row.
    web.stop(1);
    browser.wait_for_value(
        &format!("{web_addr} gone from the page"),
        &shown_health(web_addr),
        |health| health == "absent",
    );

    // dockhand goes away: the page says so, and keeps what it showed.
    dockhand.stop();
    let status = browser.wait_for_value(
        "the connection-lost indicator",
        "document.querySelector('#status').dataset.state + ': ' + document.querySelector('#status').textContent",
        |status| status.as_str().is_some_and(|s| s.starts_with("lost: ")),
    );
    assert!(
        status
            .as_str()
            .unwrap_or_default()
            .contains("connection lost"),
        "{status}"
    );
    assert_eq!(
        browser.evaluate(&shown_health(checked_addr)).unwrap(),
        "unhealthy"
    );

    assert_eq!(
        browser.evaluate(STILL_MARKED).unwrap(),
        Value::Bool(true),
        "the page was reloaded"
    );
}

#[test]
fn with_a_token_the_dashboard_asks_for_it_and_keeps_it_out_of_the_url() {
    const TOKEN: &str = "dashboard-test-token-3f9c";
    let Some(mut browser) = Browser::launch() else {
        return;
    };
    let run = TestRun::new("dashboard-token");
    let network = run.network("net");
    let host = run.host("web");
    let _web = routed_backend(&run, "web", &host, &network).run();
    let dockhand = DockhandOnHost::start(&["--admin-token", TOKEN]);

    browser.navigate(&dashboard_url(&dockhand));
    browser.wait_for(
        "the login form",
        "!document.querySelector('#login').hidden && document.querySelector('#status').dataset.state === 'login'",
    );
    browser.evaluate(MARK).unwrap();
    assert_eq!(
        browser
            .evaluate("document.querySelectorAll('#hosts .host').length")
            .unwrap(),
        0,
        "hosts shown without the token"
    );

    // A wrong token is refused, and the form comes back saying so.
    browser.type_into("#token", "not-the-token");
    browser.press_enter();
    let refused = browser.wait_for(
        "the refusal",
        "!document.querySelector('#login').hidden && !document.querySelector('#login-error').hidden && document.querySelector('#login-error').textContent",
    );
    assert!(
        refused.as_str().unwrap_or_default().contains("refused"),
        "{refused}"
    );

    browser.type_into("#token", TOKEN);
    browser.press_enter();
    let shown = browser.wait_for(&format!("{host} on the page"), &host_text(&host));
    assert!(
        shown.as_str().unwrap_or_default().contains(&host),
        "{shown}"
    );
    assert_eq!(
        browser
            .evaluate("document.querySelector('#login').hidden")
            .unwrap(),
        true
    );
    // Kept for this tab only, never in the address.
    assert_eq!(
        browser
            .evaluate("sessionStorage.getItem('dockhand.admin-token')")
            .unwrap(),
        TOKEN
    );
    let url = browser.evaluate("location.href").unwrap();
    assert_eq!(url, dashboard_url(&dockhand));
    assert_eq!(
        browser.evaluate(STILL_MARKED).unwrap(),
        Value::Bool(true),
        "the page was reloaded"
    );
}
