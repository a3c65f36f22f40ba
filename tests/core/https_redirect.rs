//! A host's `https_redirect` and `hsts` end to end (issue 13, item 4):
//! dockhand started with a certificates directory that covers some hosts;
//! plain HTTP for those hosts gets `308` to HTTPS without reaching their
//! upstream, unless the host turns it off; a host without a certificate
//! (none in the directory, or an ACME order that failed) and an unknown
//! host are served over HTTP as before. The ACME HTTP-01 answer comes first
//! even on a host that redirects.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dockhand::config::{parse_routes_file, Desired, ProviderId};
use dockhand::routes::Router;
use dockhand::tls::{Certificate, CertificateSource, TlsState};
use dockhand::upstream::EndpointRegistry;

use crate::support::*;

/// A self-signed certificate for `names`, written as `<file>.crt` and `<file>.key`.
fn write_certificate(dir: &Path, file: &str, names: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let certificate = rcgen::CertificateParams::new(names)
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let pem = (certificate.pem(), key.serialize_pem());
    std::fs::write(dir.join(format!("{file}.crt")), &pem.0).unwrap();
    std::fs::write(dir.join(format!("{file}.key")), &pem.1).unwrap();
    pem
}

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
    let certs = tempfile::tempdir().unwrap();
    // `unrouted.test` has a certificate but no route.
    write_certificate(certs.path(), "secure", &["secure.test", "unrouted.test"]);
    write_certificate(certs.path(), "kept", &["kept.test"]);
    let mut settings = test_settings();
    settings.tls.certs_dir = Some(certs.path().to_owned());
    let (proxy, https) = Proxy::start_with_https_listener(
        &routes(secure.addr, kept.addr, plain.addr, true),
        settings,
    )
    .await;
    let port = https.port();

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
    let certs = tempfile::tempdir().unwrap();
    let (chain, key) = write_certificate(certs.path(), "secure", &["secure.test"]);
    let tls = Arc::new(TlsState::default());
    let certificate = Certificate::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
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
