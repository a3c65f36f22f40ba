//! TLS upstreams end to end: the dockhand binary, trusting a test CA through
//! `SSL_CERT_FILE` as it would the system's roots, in front of HTTPS
//! backends with certificates made at test time.

use std::net::SocketAddr;

use http::StatusCode;
use serde_json::json;

use crate::dns_server::{srv, DnsServer};
use crate::support::*;
use crate::tls_support::{acceptor, https_backend, self_signed, ServerIdentity, TestCa};

const BOTH: &[&[u8]] = &[b"h2", b"http/1.1"];

/// dockhand with one location sending to `upstream` with `settings`,
/// trusting `ca` as its system roots.
struct TrustingProxy {
    process: ProxyProcess,
    _roots: tempfile::NamedTempFile,
}

async fn proxy(ca: &TestCa, upstream: SocketAddr, settings: serde_json::Value) -> TrustingProxy {
    proxy_to(ca, &upstream.to_string(), settings).await
}

/// As `proxy`, with the upstream written as `key` (a name, an SRV owner).
async fn proxy_to(ca: &TestCa, key: &str, settings: serde_json::Value) -> TrustingProxy {
    let roots = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(roots.path(), ca.pem()).unwrap();
    let routes = json!({"host": {"a.test": {"location": {"/": {"upstream": {
        key: settings
    }}}}}})
    .to_string();
    let process = ProxyProcess::start_with_env(
        &routes,
        &["--no-docker"],
        &[("SSL_CERT_FILE", roots.path())],
    )
    .await;
    TrustingProxy {
        process,
        _roots: roots,
    }
}

async fn backend_for(identity: &ServerIdentity) -> SocketAddr {
    https_backend(acceptor(identity, BOTH)).await
}

#[tokio::test]
async fn a_trusted_certificate_for_the_name_passes_verification() {
    let ca = TestCa::new("test ca");
    let backend = backend_for(&ca.leaf("api.example.test")).await;
    let dockhand = proxy(
        &ca,
        backend,
        json!({"tls": true, "sni": "api.example.test", "verify": true,
               "headers": {"add": {"Host": "api.example.test"}}}),
    )
    .await;
    let reply = get(dockhand.process.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    // ALPN chose h2; the host the upstream sees is the one headers.add set,
    // as `:authority` too, never the address.
    assert_eq!(reply.json()["version"], "HTTP/2.0");
    assert_eq!(reply.json()["host"], "api.example.test");
    assert_eq!(reply.json()["authority"], "api.example.test");
}

#[tokio::test]
async fn an_untrusted_certificate_with_verify_is_a_502() {
    let trusted = TestCa::new("trusted ca");
    let other = TestCa::new("other ca");
    let backend = backend_for(&other.leaf("api.example.test")).await;
    let dockhand = proxy(
        &trusted,
        backend,
        json!({"tls": true, "sni": "api.example.test", "verify": true}),
    )
    .await;
    assert_refused_handshake(&dockhand, "UnknownIssuer").await;
}

#[tokio::test]
async fn a_certificate_for_another_name_with_verify_is_a_502() {
    let ca = TestCa::new("test ca");
    let backend = backend_for(&ca.leaf("other.example.test")).await;
    let dockhand = proxy(
        &ca,
        backend,
        json!({"tls": true, "sni": "api.example.test", "verify": true}),
    )
    .await;
    assert_refused_handshake(&dockhand, "not valid for name").await;
}

#[tokio::test]
async fn an_expired_certificate_with_verify_is_a_502() {
    let ca = TestCa::new("test ca");
    let backend = backend_for(&ca.expired_leaf("api.example.test")).await;
    let dockhand = proxy(
        &ca,
        backend,
        json!({"tls": true, "sni": "api.example.test", "verify": true}),
    )
    .await;
    assert_refused_handshake(&dockhand, "certificate expired").await;
}

/// A request to `a.test` fails its TLS handshake: 502 `tls_handshake`, with
/// rustls' reason (`because`) in the access log's cause.
async fn assert_refused_handshake(dockhand: &TrustingProxy, because: &str) {
    let reply = get(dockhand.process.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.header("x-dockhand-error"), "tls_handshake");
    let access = dockhand.process.access_event("a.test").await;
    assert_eq!(access["error"], "tls_handshake");
    let cause = access["cause"].as_str().unwrap_or_default();
    assert!(
        cause.contains("certificate was refused") && cause.contains(because),
        "{cause}"
    );
}

#[tokio::test]
async fn without_verify_any_certificate_is_accepted() {
    let ca = TestCa::new("test ca");
    let backend = backend_for(&self_signed("anything.test")).await;
    let dockhand = proxy(&ca, backend, json!({"tls": true})).await;
    let reply = get(dockhand.process.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.json()["host"],
        "a.test",
        "the client's Host by default"
    );
    assert_eq!(reply.json()["authority"], "a.test");
}

#[tokio::test]
async fn srv_upstreams_send_the_owner_or_the_target_as_server_name() {
    let ca = TestCa::new("test ca");
    // The certificate names the target host, not the service.
    let backend = backend_for(&ca.leaf("node-1.example.test")).await;
    let dns = DnsServer::start().await;
    dns.set_srv(
        "api.srv.example.test",
        [srv(0, 1, backend.port(), "node-1.example.test")],
        30,
    );
    dns.set_a("node-1.example.test", ["127.0.0.1"], 30);
    let settings = |server_name: &str| {
        json!({"tls": true, "verify": true, "resolution": {
            "mode": "srv", "resolver": dns.address().to_string(), "tls_server_name": server_name
        }})
    };
    let target = proxy_to(&ca, "api.srv.example.test", settings("target")).await;
    let reply = get(target.process.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());

    // The owner is not the name the certificate is for.
    let owner = proxy_to(&ca, "api.srv.example.test", settings("owner")).await;
    let reply = get(owner.process.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.header("x-dockhand-error"), "tls_handshake");
}
