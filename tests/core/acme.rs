//! Certificates ordered over ACME from a real CA (Pebble, on loopback):
//! issued over HTTP-01 and TLS-ALPN-01 and served over HTTPS to a client
//! that trusts Pebble's root only; reused after a restart without an
//! order; renewed under load without a failed request; a CA refusing
//! leaves every host served over plain HTTP, with the CA's words in the
//! diagnostics; a host without a healthy upstream, or a wildcard, is not
//! ordered.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dockhand::settings::{AcmeChallenge, AcmeSettings, Settings};
use http::StatusCode;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use tokio::net::TcpListener;

use crate::dns_server::DnsServer;
use crate::pebble::{Pebble, PebbleConfig};
use crate::support::{
    empty, eventually_within, get, read_reply, record_figure, request, test_settings, Backend,
    Proxy, Reply,
};
use crate::tls_support::{client_config, tls_connect};

/// Long enough for Pebble to validate and issue, a settle delay and a
/// first health check included; a generous bound, not a timing.
const ISSUED_WITHIN: Duration = Duration::from_secs(60);

/// dockhand, Pebble and the test DNS server, wired together on loopback.
struct AcmeRun {
    proxy: Proxy,
    pebble: Pebble,
    _dns: DnsServer,
}

/// The routes file: each name to its upstream, checked every second.
fn routes(hosts: &[(&str, SocketAddr)]) -> String {
    let hosts: serde_json::Map<String, serde_json::Value> = hosts
        .iter()
        .map(|(name, upstream)| {
            (
                name.to_string(),
                serde_json::json!({
                    "health_check": {"interval_secs": 1},
                    "location": {"/": {"upstream": {upstream.to_string(): {}}}}
                }),
            )
        })
        .collect();
    serde_json::json!({ "host": hosts }).to_string()
}

fn acme_settings(pebble: &Pebble, storage: &Path, challenge: AcmeChallenge) -> Settings {
    let mut settings = test_settings();
    settings.tls.acme = Some(AcmeSettings {
        email: "ops@example.com".to_owned(),
        directory: pebble.directory.clone(),
        ca: Some(pebble.ca_file.clone()),
        storage: storage.to_owned(),
        challenge,
    });
    settings
}

impl AcmeRun {
    /// Pebble validating against the proxy's listeners, names resolving to
    /// loopback, then the proxy with ACME on.
    async fn start(
        routes: &str,
        names: &[&str],
        storage: &Path,
        challenge: AcmeChallenge,
        adjust: impl FnOnce(&mut PebbleConfig),
    ) -> AcmeRun {
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dns = DnsServer::start().await;
        for name in names {
            dns.set_a(name, ["127.0.0.1"], 60);
        }
        let mut config = PebbleConfig::new(&http, &https, &dns);
        adjust(&mut config);
        let pebble = Pebble::start(config).await;
        let proxy = Proxy::start_on(
            http,
            https,
            routes,
            acme_settings(&pebble, storage, challenge),
        )
        .await;
        AcmeRun {
            proxy,
            pebble,
            _dns: dns,
        }
    }

    fn https(&self) -> SocketAddr {
        self.proxy.https.unwrap()
    }

    async fn orders(&self, result: &str) -> u64 {
        metric_sum(&self.proxy, &format!("result=\"{result}\"")).await
    }
}

/// `GET /` for `name` over a new TLS connection verified against `roots`:
/// the leaf the proxy showed and the reply, or what failed.
async fn https_get(
    https: SocketAddr,
    name: &str,
    roots: Arc<RootCertStore>,
) -> Result<(Vec<u8>, Reply), String> {
    let config = client_config(roots, &[b"http/1.1"]);
    let tls = tls_connect(https, name, config)
        .await
        .map_err(|error| format!("handshake: {error}"))?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|error| error.to_string())?;
    tokio::spawn(connection);
    let response = sender
        .send_request(request("GET", name, "/").body(empty()).unwrap())
        .await
        .map_err(|error| error.to_string())?;
    Ok((leaf, read_reply(response).await))
}

/// Waits until `name` is served over HTTPS with a certificate Pebble
/// issued; returns its leaf.
async fn issued_leaf(run: &AcmeRun, name: &str, roots: &Arc<RootCertStore>) -> Vec<u8> {
    served_leaf(run.https(), &run.pebble, name, roots).await
}

/// As [`issued_leaf`], from the HTTPS listener at `https`.
async fn served_leaf(
    https: SocketAddr,
    pebble: &Pebble,
    name: &str,
    roots: &Arc<RootCertStore>,
) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + ISSUED_WITHIN;
    loop {
        match https_get(https, name, roots.clone()).await {
            Ok((leaf, reply)) if reply.status == StatusCode::OK => return leaf,
            outcome => assert!(
                tokio::time::Instant::now() < deadline,
                "no certificate for {name} within {ISSUED_WITHIN:?}: {:?}\n{}",
                outcome.map(|(_, reply)| reply.status),
                pebble.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sum of the `dockhand_acme_orders_total` series matching `filter`.
async fn metric_sum(proxy: &Proxy, filter: &str) -> u64 {
    let metrics = get(proxy.admin, "localhost", "/metrics").await.text();
    metrics
        .lines()
        .filter(|line| line.starts_with("dockhand_acme_orders_total") && line.contains(filter))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn diagnostics(proxy: &Proxy) -> Vec<serde_json::Value> {
    let reply = get(proxy.admin, "localhost", "/api/v1/diagnostics").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    reply.json()["diagnostics"].as_array().unwrap().clone()
}

/// A host with a healthy upstream gets a certificate over `challenge`,
/// and an HTTPS request verified against Pebble's root reaches it.
async fn a_certificate_is_served_after(challenge: AcmeChallenge, name: &str) {
    let backend = Backend::echo("app").await;
    let storage = tempfile::tempdir().unwrap();
    let run = AcmeRun::start(
        &routes(&[(name, backend.addr)]),
        &[name],
        storage.path(),
        challenge,
        |_| {},
    )
    .await;
    let roots = run.pebble.root().await;
    issued_leaf(&run, name, &roots).await;
    let (_, reply) = https_get(run.https(), name, roots).await.unwrap();
    assert_eq!(reply.header("x-backend"), "app");
    assert_eq!(run.orders("issued").await, 1);
    assert_eq!(run.orders("failed").await, 0);
}

/// RFC 8555 §8.3: the CA fetches the key authorization from
/// `http://<name>/.well-known/acme-challenge/<token>` on the HTTP listener.
#[tokio::test]
async fn a_host_with_a_healthy_upstream_gets_a_certificate_over_http_01() {
    a_certificate_is_served_after(AcmeChallenge::Http01, "app.example.com").await;
}

/// RFC 8737 §3: the CA connects to the HTTPS listener offering only
/// `acme-tls/1` and checks the acmeIdentifier extension of the
/// certificate it is shown.
#[tokio::test]
async fn a_host_gets_a_certificate_over_tls_alpn_01() {
    a_certificate_is_served_after(AcmeChallenge::TlsAlpn01, "alpn.example.com").await;
}

#[tokio::test]
async fn a_restart_on_the_same_storage_serves_the_stored_certificate_without_an_order() {
    let backend = Backend::echo("app").await;
    let storage = tempfile::tempdir().unwrap();
    let routes = routes(&[("kept.example.com", backend.addr)]);
    let first = AcmeRun::start(
        &routes,
        &["kept.example.com"],
        storage.path(),
        AcmeChallenge::Http01,
        |_| {},
    )
    .await;
    let roots = first.pebble.root().await;
    let leaf = issued_leaf(&first, "kept.example.com", &roots).await;
    let AcmeRun {
        proxy,
        pebble,
        _dns,
    } = first;
    proxy.stop().await;
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let second = Proxy::start_on(
        http,
        https,
        &routes,
        acme_settings(&pebble, storage.path(), AcmeChallenge::Http01),
    )
    .await;
    let (served, reply) = https_get(second.https.unwrap(), "kept.example.com", roots)
        .await
        .expect("the stored certificate is served from the start");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(served, leaf, "the same leaf");
    assert_eq!(
        metric_sum(&second, "").await,
        0,
        "no order on the second run"
    );
}

#[tokio::test]
async fn a_certificate_due_for_renewal_is_renewed_without_a_failed_request() {
    let backend = Backend::echo("app").await;
    let storage = tempfile::tempdir().unwrap();
    // Valid 30 s: renewed a third of that before the end, 20 s in (and
    // ordered a settle delay later), leaving the old one 8 s to spare.
    let run = AcmeRun::start(
        &routes(&[("renew.example.com", backend.addr)]),
        &["renew.example.com"],
        storage.path(),
        AcmeChallenge::Http01,
        |config| config.validity = Some(Duration::from_secs(30)),
    )
    .await;
    let roots = run.pebble.root().await;
    let first = issued_leaf(&run, "renew.example.com", &roots).await;
    let mut requests = 0;
    let mut failures = Vec::new();
    let deadline = tokio::time::Instant::now() + ISSUED_WITHIN;
    let renewed = loop {
        assert!(tokio::time::Instant::now() < deadline, "never renewed");
        requests += 1;
        match https_get(run.https(), "renew.example.com", roots.clone()).await {
            Ok((leaf, reply)) if reply.status == StatusCode::OK => {
                if leaf != first {
                    break leaf;
                }
            }
            Ok((_, reply)) => failures.push(format!("{} {}", reply.status, reply.text())),
            Err(error) => failures.push(error),
        }
        // A steady stream, not a flood: the suite shares its cores.
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_ne!(renewed, first);
    assert_eq!(failures, Vec::<String>::new(), "after {requests} requests");
    record_figure(&format!(
        "acme renewal: {requests} HTTPS requests on new connections while the certificate was renewed, 0 failed"
    ));
    assert!(requests > 1);
    assert_eq!(run.orders("issued").await, 2);
}

/// RFC 8555 §6.7: the problem document's detail is what the diagnostic says.
#[tokio::test]
async fn a_ca_refusing_orders_leaves_every_host_served_over_http_with_a_diagnostic() {
    let one = Backend::echo("one").await;
    let two = Backend::echo("two").await;
    let storage = tempfile::tempdir().unwrap();
    let run = AcmeRun::start(
        &routes(&[("one.example.com", one.addr), ("two.example.com", two.addr)]),
        &["one.example.com", "two.example.com"],
        storage.path(),
        AcmeChallenge::Http01,
        |config| config.reject_nonces = true,
    )
    .await;
    eventually_within(ISSUED_WITHIN, "the ACME diagnostics", || async {
        let found = diagnostics(&run.proxy).await;
        ["one.example.com", "two.example.com"].iter().all(|name| {
            found.iter().any(|diagnostic| {
                diagnostic["source"] == "acme"
                    && diagnostic["name"] == *name
                    && diagnostic["severity"] == "error"
                    && diagnostic["reason"]
                        .as_str()
                        .is_some_and(|reason| reason.contains("nonce"))
            })
        })
    })
    .await;
    assert_eq!(run.orders("failed").await, 1, "one order for both names");
    assert_eq!(run.orders("issued").await, 0);
    for (name, backend) in [("one.example.com", "one"), ("two.example.com", "two")] {
        let reply = get(run.proxy.addr, name, "/").await;
        assert_eq!(reply.status, StatusCode::OK, "{name} over HTTP");
        assert_eq!(reply.header("x-backend"), backend);
    }
}

#[tokio::test]
async fn a_host_without_a_healthy_upstream_is_not_ordered_and_a_wildcard_gets_a_diagnostic() {
    let backend = Backend::echo("app").await;
    let closed = crate::support::refused_address();
    let storage = tempfile::tempdir().unwrap();
    let routes = serde_json::json!({"host": {
        "up.example.com": {"health_check": {"interval_secs": 1},
                           "location": {"/": {"upstream": {backend.addr.to_string(): {}}}}},
        "down.example.com": {"health_check": {"interval_secs": 1},
                             "location": {"/": {"upstream": {closed.to_string(): {}}}}},
        "*.wild.example.com": {"location": {"/": {"upstream": {backend.addr.to_string(): {}}}}}
    }})
    .to_string();
    let run = AcmeRun::start(
        &routes,
        &["up.example.com", "down.example.com"],
        storage.path(),
        AcmeChallenge::Http01,
        |_| {},
    )
    .await;
    let roots = run.pebble.root().await;
    // By the time the healthy host's certificate is issued, the other has
    // been checked (and found unreachable) several times.
    issued_leaf(&run, "up.example.com", &roots).await;
    assert_eq!(run.orders("issued").await, 1);
    assert_eq!(run.orders("failed").await, 0);
    let refused = https_get(run.https(), "down.example.com", roots).await;
    assert!(refused.is_err(), "no certificate for the unhealthy host");
    let found = diagnostics(&run.proxy).await;
    assert!(
        found.iter().any(|diagnostic| diagnostic["source"] == "acme"
            && diagnostic["name"] == "*.wild.example.com"
            && diagnostic["severity"] == "warning"
            && diagnostic["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("DNS-01 is not supported yet"))),
        "{found:?}"
    );
    assert!(
        !found
            .iter()
            .any(|diagnostic| diagnostic["name"] == "down.example.com"),
        "waiting is no failure"
    );
}

#[tokio::test]
async fn a_ca_unreachable_at_start_is_a_failed_order_not_a_failed_start() {
    let backend = Backend::echo("app").await;
    let storage = tempfile::tempdir().unwrap();
    let mut settings = test_settings();
    settings.tls.acme = Some(AcmeSettings {
        email: "ops@example.com".to_owned(),
        directory: format!("https://{}/dir", crate::support::free_port()),
        ca: None,
        storage: storage.path().to_owned(),
        challenge: AcmeChallenge::Http01,
    });
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = Proxy::start_on(
        http,
        https,
        &routes(&[("app.example.com", backend.addr)]),
        settings,
    )
    .await;
    eventually_within(ISSUED_WITHIN, "the failed order's diagnostic", || async {
        diagnostics(&proxy).await.iter().any(|diagnostic| {
            diagnostic["name"] == "app.example.com"
                && diagnostic["reason"]
                    .as_str()
                    .is_some_and(|reason| reason.contains("refused"))
        })
    })
    .await;
    assert_eq!(metric_sum(&proxy, "result=\"failed\"").await, 1);
    let reply = get(proxy.addr, "app.example.com", "/").await;
    assert_eq!(reply.status, StatusCode::OK, "served over HTTP");
}

/// The order lock files in an ACME storage folder.
fn lock_files(storage: &Path) -> usize {
    let Ok(directories) = std::fs::read_dir(storage) else {
        return 0;
    };
    directories
        .flatten()
        .filter_map(|directory| std::fs::read_dir(directory.path().join("locks")).ok())
        .flat_map(|locks| locks.flatten())
        .count()
}

/// Two replicas sharing one `--acme-storage` (a shared volume): the one
/// holding the order's lock orders; the other waits, then serves the
/// certificate it stored. The CA asks the replica that did not order for
/// the HTTP-01 answer, which it reads from the storage.
#[tokio::test]
async fn replicas_sharing_the_storage_order_a_certificate_once_and_both_serve_it() {
    let backend = Backend::echo("app").await;
    let storage = tempfile::tempdir().unwrap();
    let name = "shared.example.com";
    let routes = routes(&[(name, backend.addr)]);
    // Pebble validates against the listeners of the replica that waits:
    // bound now, they serve once it starts; questions wait in the backlog.
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dns = DnsServer::start().await;
    dns.set_a(name, ["127.0.0.1"], 60);
    let pebble = Pebble::start(PebbleConfig::new(&http, &https, &dns)).await;
    let settings = || acme_settings(&pebble, storage.path(), AcmeChallenge::Http01);
    let ordering = Proxy::start_on(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        &routes,
        settings(),
    )
    .await;
    eventually_within(ISSUED_WITHIN, "the order lock is taken", || async {
        lock_files(storage.path()) == 1
    })
    .await;
    let waiting = Proxy::start_on(http, https, &routes, settings()).await;
    let roots = pebble.root().await;
    let leaf = served_leaf(ordering.https.unwrap(), &pebble, name, &roots).await;
    let picked_up = served_leaf(waiting.https.unwrap(), &pebble, name, &roots).await;
    assert_eq!(picked_up, leaf, "one certificate, served by both");
    assert_eq!(metric_sum(&ordering, "result=\"issued\"").await, 1);
    assert_eq!(metric_sum(&waiting, "result=\"issued\"").await, 0);
    assert_eq!(metric_sum(&waiting, "result=\"picked_up\"").await, 1);
    assert_eq!(metric_sum(&waiting, "result=\"failed\"").await, 0);
    assert_eq!(lock_files(storage.path()), 0, "the lock is given back");
}
