//! Upstream names through the whole proxy, against a real DNS server on
//! loopback whose answers the tests change: addresses followed, failures
//! riding on the last answer, names that stop existing, pooled connections
//! kept for addresses that stay and closed for those that go, and SRV
//! upstreams, with DNS servers written as names looked up when the routes
//! load.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

use dockhand::config::{Origin, ProviderId, Severity};
use dockhand::provider::file::FileProvider;
use dockhand::resolve::HickoryDns;
use dockhand::routes::Router;
use dockhand::settings::Settings;
use dockhand::upstream::EndpointRegistry;

use crate::dns_server::{srv, Behaviour, DnsServer, RecordType};
use crate::support::*;

/// A backend on `address` answering `x-backend: name`, counting the
/// connections it accepted and those that have ended. Dropped, it goes
/// away as a removed container does: its connections with it.
struct Counted {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Counted {
    async fn start(address: SocketAddr, name: &'static str) -> Counted {
        let listener = TcpListener::bind(address).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (accepted_count, closed_count) = (accepted.clone(), closed.clone());
        let task = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts the connections.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepted_count.fetch_add(1, Ordering::SeqCst);
                let closed_count = closed_count.clone();
                connections.spawn(async move {
                    let service = service_fn(move |_| async move {
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("x-backend", name)
                                .body(empty())
                                .unwrap(),
                        )
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    closed_count.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Counted {
            addr,
            accepted,
            closed,
            task,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// dockhand resolving with `dns`, waiting `upstream_wait` for upstreams.
async fn proxy_with_dns(routes: &str, dns: &DnsServer, upstream_wait: Duration) -> Proxy {
    let settings = Settings {
        dns_resolver: Some(dns.address()),
        upstream_wait,
        ..test_settings()
    };
    Proxy::start_with(routes, settings).await
}

fn name_route(name_and_port: &str) -> String {
    json!({"host": {"a.test": {"location": {"/": {"upstream": {name_and_port: {}}}}}}}).to_string()
}

async fn answered_by(proxy: &Proxy) -> (StatusCode, String) {
    let reply = get(proxy.addr, "a.test", "/").await;
    (reply.status, reply.header("x-backend").to_owned())
}

#[tokio::test]
async fn a_changed_address_is_followed_within_one_refresh() {
    let first = Counted::start("127.0.0.1:0".parse().unwrap(), "first").await;
    let port = first.addr.port();
    let second = Counted::start(SocketAddr::from(([127, 0, 0, 2], port)), "second").await;
    let dns = DnsServer::start().await;
    dns.set_a("app.test", ["127.0.0.1"], 600);
    let proxy = proxy_with_dns(
        &name_route(&format!("app.test:{port}")),
        &dns,
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(answered_by(&proxy).await, (StatusCode::OK, "first".into()));

    // The record says 600 s; the name is asked again every 5 s regardless.
    dns.set_a("app.test", ["127.0.0.2"], 600);
    eventually("the new address is used", || async {
        answered_by(&proxy).await.1 == "second"
    })
    .await;
    for _ in 0..5 {
        assert_eq!(answered_by(&proxy).await, (StatusCode::OK, "second".into()));
    }
    drop(first);
    drop(second);
}

#[tokio::test]
async fn failed_lookups_keep_the_last_addresses() {
    let backend = Counted::start("127.0.0.1:0".parse().unwrap(), "app").await;
    let dns = DnsServer::start().await;
    dns.set_a("app.test", ["127.0.0.1"], 1);
    let routes = name_route(&format!("app.test:{}", backend.addr.port()));
    let proxy = proxy_with_dns(&routes, &dns, Duration::from_millis(200)).await;
    assert_eq!(answered_by(&proxy).await.0, StatusCode::OK);

    for behaviour in [Behaviour::ServFail, Behaviour::Refused, Behaviour::NoReply] {
        dns.set_behaviour("app.test", behaviour);
        let asked = dns.queries("app.test", crate::dns_server::RecordType::A);
        eventually("the server is asked again", || async {
            dns.queries("app.test", crate::dns_server::RecordType::A) > asked
        })
        .await;
        assert_eq!(answered_by(&proxy).await.0, StatusCode::OK);
    }
}

#[tokio::test]
async fn a_name_that_stops_existing_answers_503_and_a_new_address_is_used_by_the_next_request() {
    let backend = Counted::start("127.0.0.1:0".parse().unwrap(), "app").await;
    let dns = DnsServer::start().await;
    dns.set_a("app.test", ["127.0.0.1"], 600);
    let routes = name_route(&format!("app.test:{}", backend.addr.port()));
    let proxy = proxy_with_dns(&routes, &dns, Duration::from_secs(2)).await;
    assert_eq!(answered_by(&proxy).await.0, StatusCode::OK);

    dns.remove("app.test");
    eventually("NXDOMAIN drops the address", || async {
        answered_by(&proxy).await.0 == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;

    // The request that finds no upstream has the name resolved again at once,
    // and goes to the address that appeared, well before the next refresh.
    let asked = dns.queries("app.test", crate::dns_server::RecordType::A);
    dns.set_a("app.test", ["127.0.0.1"], 600);
    let started = std::time::Instant::now();
    assert_eq!(answered_by(&proxy).await, (StatusCode::OK, "app".into()));
    assert!(dns.queries("app.test", crate::dns_server::RecordType::A) > asked);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered within --upstream-wait"
    );
}

#[tokio::test]
async fn an_address_that_stays_keeps_its_pooled_connection_and_one_that_goes_is_closed() {
    let stays = Counted::start("127.0.0.1:0".parse().unwrap(), "stays").await;
    let port = stays.addr.port();
    let goes = Counted::start(SocketAddr::from(([127, 0, 0, 2], port)), "goes").await;
    let dns = DnsServer::start().await;
    dns.set_a("app.test", ["127.0.0.1", "127.0.0.2"], 600);
    let proxy = proxy_with_dns(
        &name_route(&format!("app.test:{port}")),
        &dns,
        Duration::from_secs(2),
    )
    .await;
    for _ in 0..6 {
        assert_eq!(answered_by(&proxy).await.0, StatusCode::OK);
    }
    assert_eq!(stays.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(goes.accepted.load(Ordering::SeqCst), 1);

    dns.set_a("app.test", ["127.0.0.1"], 600);
    eventually("the gone address's idle connection is closed", || async {
        goes.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    for _ in 0..6 {
        assert_eq!(answered_by(&proxy).await, (StatusCode::OK, "stays".into()));
    }
    assert_eq!(
        stays.accepted.load(Ordering::SeqCst),
        1,
        "the address that stayed kept its pooled connection"
    );
    assert_eq!(stays.closed.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_name_is_resolved_again_right_after_a_failed_connect() {
    let old = Counted::start("127.0.0.1:0".parse().unwrap(), "old").await;
    let port = old.addr.port();
    let dns = DnsServer::start().await;
    dns.set_a("app.test", ["127.0.0.1"], 600);
    let proxy = proxy_with_dns(
        &name_route(&format!("app.test:{port}")),
        &dns,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(answered_by(&proxy).await.1, "old");

    // The container is recreated elsewhere: the old address refuses, the
    // name points to the new one. The request in between follows it.
    let new = Counted::start(SocketAddr::from(([127, 0, 0, 3], port)), "new").await;
    dns.set_a("app.test", ["127.0.0.3"], 600);
    drop(old);
    let started = std::time::Instant::now();
    assert_eq!(answered_by(&proxy).await, (StatusCode::OK, "new".into()));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "followed within --upstream-wait, not at the next refresh"
    );
    drop(new);
}

#[tokio::test]
async fn srv_upstreams_reach_a_target_of_the_lowest_priority() {
    let preferred = Counted::start("127.0.0.1:0".parse().unwrap(), "preferred").await;
    let backup = Counted::start("127.0.0.1:0".parse().unwrap(), "backup").await;
    let dns = DnsServer::start().await;
    dns.set_srv(
        "_app._tcp.example.test",
        [
            srv(10, 1, preferred.addr.port(), "node-1.example.test"),
            srv(20, 1, backup.addr.port(), "node-2.example.test"),
        ],
        30,
    );
    dns.set_a("node-1.example.test", ["127.0.0.1"], 30);
    dns.set_a("node-2.example.test", ["127.0.0.1"], 30);
    let proxy = proxy_to_srv("_app._tcp.example.test", &dns).await;
    for _ in 0..3 {
        assert_eq!(
            answered_by(&proxy).await,
            (StatusCode::OK, "preferred".into())
        );
    }

    // The preferred tier goes away: the next tier is dialed.
    drop(preferred);
    for _ in 0..3 {
        assert_eq!(answered_by(&proxy).await, (StatusCode::OK, "backup".into()));
    }
}

/// A proxy whose one location sends to the SRV `owner`, asking `dns`.
async fn proxy_to_srv(owner: &str, dns: &DnsServer) -> Proxy {
    let routes = json!({"host": {"a.test": {"location": {"/": {"upstream": {
        owner: {"resolution": {"mode": "srv", "resolver": dns.address().to_string()}}
    }}}}}})
    .to_string();
    Proxy::start(&routes).await
}

#[tokio::test]
async fn an_srv_service_without_targets_answers_503_dns_no_records() {
    let dns = DnsServer::start().await;
    dns.set_srv("_none._tcp.example.test", [srv(0, 0, 0, ".")], 30);
    let proxy = proxy_to_srv("_none._tcp.example.test", &dns).await;
    let reply = get(proxy.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("x-dockhand-error"), "dns_no_records");
    assert_eq!(reply.header("retry-after"), "5");
    // A name that does not exist has no records either.
    let proxy = proxy_to_srv("_gone._tcp.example.test", &dns).await;
    let reply = get(proxy.addr, "a.test", "/").await;
    assert_eq!(reply.header("x-dockhand-error"), "dns_no_records");
}

#[tokio::test]
async fn a_failed_srv_lookup_answers_502_dns_failure() {
    let dns = DnsServer::start().await;
    dns.set_behaviour("_app._tcp.example.test", Behaviour::ServFail);
    let proxy = proxy_to_srv("_app._tcp.example.test", &dns).await;
    let reply = get(proxy.addr, "a.test", "/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.header("x-dockhand-error"), "dns_failure");
}

/// `a.test` with `/srv` sent to the SRV owner `_app._tcp.example.test`,
/// asked of the DNS server `resolver`, and `/plain` sent to `plain`.
fn srv_and_plain_routes(resolver: &str, plain: SocketAddr) -> String {
    json!({"host": {"a.test": {"location": {
        "/srv": {"upstream": {"_app._tcp.example.test": {
            "resolution": {"mode": "srv", "resolver": resolver}}}},
        "/plain": {"upstream": {plain.to_string(): {}}}
    }}}})
    .to_string()
}

/// `dns` serving `_app._tcp.example.test` at `backend` (on 127.0.0.1).
fn serve_app_srv(dns: &DnsServer, backend: &Counted) {
    dns.set_srv(
        "_app._tcp.example.test",
        [srv(10, 1, backend.addr.port(), "node.example.test")],
        30,
    );
    dns.set_a("node.example.test", ["127.0.0.1"], 30);
}

async fn status_and_backend(proxy: &Proxy, path: &str) -> (StatusCode, String) {
    let reply = get(proxy.addr, "a.test", path).await;
    (reply.status, reply.header("x-backend").to_owned())
}

#[tokio::test]
async fn a_dns_server_written_as_a_name_is_looked_up_when_the_routes_load_not_at_connect() {
    let app = Counted::start("127.0.0.1:0".parse().unwrap(), "app").await;
    let plain = Counted::start("127.0.0.1:0".parse().unwrap(), "plain").await;
    let dns = DnsServer::start().await;
    serve_app_srv(&dns, &app);
    // The test DNS server answers for its own name, at its own address.
    dns.set_a("ns.example.test", ["127.0.0.1"], 30);
    let resolver = format!("ns.example.test:{}", dns.address().port());
    let routes = srv_and_plain_routes(&resolver, plain.addr);
    let proxy = proxy_with_dns(&routes, &dns, Duration::from_secs(2)).await;
    eventually("the DNS server's name is looked up at load", || async {
        dns.queries("ns.example.test", RecordType::A) == 1
    })
    .await;

    // Gone from DNS now: connecting does not need it, the address found at load is used.
    dns.remove("ns.example.test");
    for _ in 0..3 {
        assert_eq!(
            status_and_backend(&proxy, "/srv").await,
            (StatusCode::OK, "app".into())
        );
    }
    assert_eq!(dns.queries("ns.example.test", RecordType::A), 1);
    assert_eq!(
        app.accepted.load(Ordering::SeqCst),
        1,
        "one pooled connection"
    );
}

#[tokio::test]
async fn a_dns_server_name_that_does_not_resolve_answers_503_until_it_does_and_others_serve() {
    let app = Counted::start("127.0.0.1:0".parse().unwrap(), "app").await;
    let plain = Counted::start("127.0.0.1:0".parse().unwrap(), "plain").await;
    let dns = DnsServer::start().await;
    serve_app_srv(&dns, &app);
    let resolver = format!("missing.example.test:{}", dns.address().port());
    let routes = srv_and_plain_routes(&resolver, plain.addr);
    // The start does not fail: DNS may be briefly down.
    let proxy = proxy_with_dns(&routes, &dns, Duration::from_millis(100)).await;
    let reply = get(proxy.addr, "a.test", "/srv").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    // The upstream asking that server is left out until it resolves: the
    // location is known, nothing can serve it now.
    assert_eq!(reply.header("x-dockhand-error"), "no_healthy_upstream");
    assert_eq!(
        status_and_backend(&proxy, "/plain").await,
        (StatusCode::OK, "plain".into())
    );

    // Looked up again until it resolves, without a reload.
    dns.set_a("missing.example.test", ["127.0.0.1"], 30);
    eventually("the DNS server's name resolves", || async {
        status_and_backend(&proxy, "/srv").await == (StatusCode::OK, "app".into())
    })
    .await;
    assert_eq!(
        status_and_backend(&proxy, "/plain").await,
        (StatusCode::OK, "plain".into())
    );
}

#[tokio::test]
async fn a_dns_server_name_that_does_not_exist_is_a_diagnostic_at_its_key_path() {
    let plain = Counted::start("127.0.0.1:0".parse().unwrap(), "plain").await;
    let dns = DnsServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("routes.json");
    let resolver = format!("missing.example.test:{}", dns.address().port());
    std::fs::write(&path, srv_and_plain_routes(&resolver, plain.addr)).unwrap();
    let router = Arc::new(Router::new(
        Arc::new(EndpointRegistry::new()),
        Duration::from_secs(5),
    ));
    let names_dns = Arc::new(HickoryDns::with_server(dns.address()));
    FileProvider::start(path.clone(), router.clone(), names_dns)
        .await
        .expect("served with the diagnostic");

    let diagnostics = router.diagnostics();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let (provider, diagnostic) = &diagnostics[0];
    assert_eq!(*provider, ProviderId::File);
    assert_eq!(diagnostic.origin, Origin::RoutesFile { path });
    assert_eq!(
        diagnostic.key,
        r#"host."a.test".location."/srv".upstream."_app._tcp.example.test".resolution.resolver"#
    );
    assert_eq!(diagnostic.severity, Severity::Error);
    assert_eq!(
        diagnostic.reason,
        "DNS server name `missing.example.test` did not resolve \
         (the name does not exist or has no records); \
         the upstreams that ask it are left out until it resolves"
    );
    let table = router.current();
    assert!(table
        .find("a.test", "/srv")
        .unwrap()
        .upstreams
        .endpoints()
        .is_empty());
    assert_eq!(
        table
            .find("a.test", "/plain")
            .unwrap()
            .upstreams
            .endpoints()
            .len(),
        1
    );
}
