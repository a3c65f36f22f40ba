//! A host's `https_redirect` and `hsts` end to end (issue 13, item 4):
//! dockhand started with a certificates directory that covers some hosts;
//! plain HTTP for those hosts gets `308` to HTTPS without reaching their
//! upstream, unless the host turns it off; a host without a certificate
//! (none in the directory, or an ACME order that failed) and an unknown
//! host are served over HTTP as before. The ACME HTTP-01 answer comes first
//! even on a host that redirects. Over TLS, a host's `hsts` is sent (in
//! place of the upstream's), never over plain HTTP.

use std::sync::Arc;
use std::time::Duration;

use dockhand::config::{parse_routes_file, Desired, ProviderId};
use dockhand::routes::Router;
use dockhand::tls::{Certificate, CertificateSource, TlsState};
use dockhand::upstream::EndpointRegistry;

use crate::support::*;
use crate::tls_support::*;

/// `secure.test` (has a certificate, redirects unless `redirect` is false),
/// `kept.test` (has a certificate, `https_redirect: false`) and
/// `plain.test` (no certificate).
fn routes(
    secure: impl ToString,
    kept: impl ToString,
    plain: impl ToString,
    redirect: bool,
) -> String {
    serde_json::json!({"host": {
        "secure.test": {"https_redirect": redirect, "hsts": 31536000,
            "location": {"/": {"upstream": {secure.to_string(): {}}}}},
        "kept.test": {"https_redirect": false,
            "location": {"/": {"upstream": {kept.to_string(): {}}}}},
        "plain.test": {"location": {"/": {"upstream": {plain.to_string(): {}}}}}
    }})
    .to_string()
}

#[tokio::test]
async fn plain_http_is_redirected_only_for_hosts_with_a_certificate_that_keep_the_redirect() {
    let secure =
        RecordingUpstream::start(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecure").await;
    let kept = Backend::echo("kept").await;
    let plain = Backend::echo("plain").await;
    let ca = TestCa::new("redirect test CA");
    // `unrouted.test` has a certificate but no route.
    let secure_certificate = ca.leaf_for(&["secure.test", "unrouted.test"]);
    let kept_certificate = ca.leaf("kept.test");
    let proxy = Proxy::start_https(
        &routes(secure.addr, kept.addr, plain.addr, true),
        &[&secure_certificate, &kept_certificate],
        test_settings(),
    )
    .await;
    let port = proxy.https.unwrap().port();

    // The path and query as sent; the HTTPS listener's port (not 443 here).
    let reply = get(proxy.addr, "secure.test", "/a/b%2Fc?x=1&y=%20z&&").await;
    assert_eq!(reply.status, 308);
    assert_eq!(
        reply.header("location"),
        format!("https://secure.test:{port}/a/b%2Fc?x=1&y=%20z&&")
    );
    assert_eq!(reply.text(), "This host is served over HTTPS.\n");
    assert!(!reply.headers.contains_key("x-dockhand-error"));
    assert!(
        !reply.headers.contains_key("strict-transport-security"),
        "never over plain HTTP (RFC 6797 §7.2)"
    );
    // The host as the client wrote it, without the plain-HTTP port.
    let written = format!("Secure.TEST:{}", proxy.addr.port());
    let reply = get(proxy.addr, &written, "/").await;
    assert_eq!(reply.status, 308);
    assert_eq!(
        reply.header("location"),
        format!("https://Secure.TEST:{port}/")
    );
    // 308 keeps the method and body (RFC 9110 §15.4.9): a POST is redirected
    // too, its body unread.
    let post = request("POST", "secure.test", "/form")
        .body(full("a=1"))
        .unwrap();
    let reply = send(proxy.addr, post).await;
    assert_eq!(reply.status, 308);
    assert_eq!(
        reply.header("location"),
        format!("https://secure.test:{port}/form")
    );
    secure.assert_untouched("redirected requests");

    let reply = get(proxy.addr, "kept.test", "/k?q").await;
    assert_eq!(reply.status, 200, "https_redirect=false is forwarded");
    assert!(reply.text().contains("kept"), "{}", reply.text());
    let reply = get(proxy.addr, "plain.test", "/p").await;
    assert_eq!(reply.status, 200, "no certificate: served over HTTP");
    assert!(reply.text().contains("plain"), "{}", reply.text());
    let reply = get(proxy.addr, "unrouted.test", "/").await;
    assert_eq!(reply.status, 404, "an unknown host is not redirected");
    assert_eq!(reply.header("x-dockhand-error"), "no_host");

    // The admin API's host view shows both settings.
    let view = get(proxy.admin, "localhost", "/api/v1/hosts").await.json();
    let hosts = &view["host"];
    assert_eq!(hosts["secure.test"]["https_redirect"], true);
    assert_eq!(hosts["secure.test"]["hsts"], "max-age=31536000");
    assert_eq!(hosts["kept.test"]["https_redirect"], false);
    assert_eq!(hosts["kept.test"]["hsts"], serde_json::Value::Null);

    // Turned off in the file: forwarded from the next table on.
    proxy.write_routes(&routes(secure.addr, kept.addr, plain.addr, false));
    eventually("secure.test is forwarded", || async {
        get(proxy.addr, "secure.test", "/now").await.status == 200
    })
    .await;
    assert_eq!(secure.requests().len(), 1, "{:?}", secure.requests());
    proxy.stop().await;
}

/// The TLS state is made inside `run`, so a test can't set a challenge
/// token on it: here the router and the TLS state are fed directly and
/// served by the real server (as `run` serves them).
#[tokio::test]
async fn the_acme_challenge_is_answered_before_the_redirect_and_443_is_left_out() {
    let upstream = RecordingUpstream::start(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
    let registry = Arc::new(EndpointRegistry::new());
    let router = Arc::new(Router::new(registry.clone(), Duration::from_secs(5)));
    let hosts = parse_routes_file(&one_route("secure.test", upstream.addr)).unwrap();
    router.publish(
        ProviderId::File,
        Desired {
            hosts,
            diagnostics: Vec::new(),
            container_addresses: Default::default(),
        },
    );
    let identity = self_signed("secure.test");
    let tls = Arc::new(TlsState::default());
    let certificate =
        Certificate::from_pem(identity.chain_pem.as_bytes(), identity.key_pem.as_bytes()).unwrap();
    tls.certificates
        .replace(CertificateSource::Files, vec![Arc::new(certificate)]);
    tls.challenges.set_http01("tok", "tok.print");
    let (addr, server) = serve_router(router, registry, tls, Some(443)).await;

    let challenge = get(addr, "secure.test", "/.well-known/acme-challenge/tok").await;
    assert_eq!(challenge.status, 200);
    assert_eq!(challenge.text(), "tok.print");
    let other = get(addr, "secure.test", "/.well-known/acme-challenge/other").await;
    assert_eq!(other.status, 308, "only a pending token is answered");
    assert_eq!(
        other.header("location"),
        "https://secure.test/.well-known/acme-challenge/other"
    );
    let root = get(addr, "secure.test:80", "/").await;
    assert_eq!(root.header("location"), "https://secure.test/");
    upstream.assert_untouched("challenge and redirects");
    server.abort();
}

/// RFC 6797: `Strict-Transport-Security` for TLS clients of hosts with
/// `hsts` (§7.1, the field once: the upstream's is replaced), never over
/// plain HTTP (§7.2); hosts without `hsts` pass the upstream's through.
/// The redirect's `Location` is where the host is served over TLS.
#[tokio::test]
async fn hsts_goes_to_tls_clients_of_hosts_that_ask_for_it_never_over_plain_http() {
    let echo = Backend::echo("echo").await;
    let sends_its_own = RecordingUpstream::start(
        b"HTTP/1.1 200 OK\r\nstrict-transport-security: max-age=5\r\ncontent-length: 2\r\n\r\nok",
    )
    .await;
    let routes = serde_json::json!({"host": {
        "hsts.test": {"https_redirect": false, "hsts": "31536000; includeSubDomains",
            "location": {"/": {"upstream": {echo.addr.to_string(): {}}}}},
        "replaced.test": {"hsts": 600,
            "location": {"/": {"upstream": {sends_its_own.addr.to_string(): {}}}}},
        "passed.test": {"location": {"/": {"upstream": {sends_its_own.addr.to_string(): {}}}}},
        "none.test": {"location": {"/": {"upstream": {echo.addr.to_string(): {}}}}}
    }})
    .to_string();
    let ca = TestCa::new("hsts test CA");
    let names = ["hsts.test", "replaced.test", "passed.test", "none.test"];
    let certificate = ca.leaf_for(&names);
    let proxy = Proxy::start_https(&routes, &[&certificate], test_settings()).await;
    let https = proxy.https.unwrap();
    let sts = |reply: &Reply| -> Vec<String> {
        reply
            .headers
            .get_all("strict-transport-security")
            .iter()
            .map(|value| value.to_str().unwrap().to_owned())
            .collect()
    };
    let expected = [
        ("hsts.test", vec!["max-age=31536000; includeSubDomains"]),
        ("replaced.test", vec!["max-age=600"]),
        ("passed.test", vec!["max-age=5"]),
        ("none.test", vec![]),
    ];
    // HTTP/2 and HTTP/1.1 over TLS alike.
    for alpn in [&b"h2"[..], b"http/1.1"] {
        for (host, values) in &expected {
            let config = client_config(ca.roots(), &[alpn]);
            let mut client = https_connection(https, host, config).await;
            let reply = client.get(host, "/x").await;
            assert_eq!(reply.status, 200, "{host}");
            assert_eq!(
                &sts(&reply),
                values,
                "{host} over {}",
                String::from_utf8_lossy(alpn)
            );
        }
    }

    let plain = get(proxy.addr, "hsts.test", "/x").await;
    assert_eq!(plain.status, 200, "https_redirect=false");
    assert_eq!(sts(&plain), Vec::<String>::new(), "never over plain HTTP");

    let redirect = get(proxy.addr, "replaced.test", "/r?q=1").await;
    assert_eq!(redirect.status, 308);
    assert!(sts(&redirect).is_empty());
    let location = redirect.header("location").to_owned();
    assert_eq!(
        location,
        format!("https://replaced.test:{}/r?q=1", https.port())
    );
    let config = client_config(ca.roots(), &[b"http/1.1"]);
    let mut client = https_connection(https, "replaced.test", config).await;
    let followed = client.get("replaced.test", "/r?q=1").await;
    assert_eq!(followed.status, 200);
    assert_eq!(followed.text(), "ok");
    proxy.stop().await;
}
