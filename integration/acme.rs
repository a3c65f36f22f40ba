//! HTTPS over ACME as deployed: `dockhand:test` in a container with the
//! engine's socket, ports 80 and 443 published on loopback, its ACME account
//! and certificates on a volume, ordering from Debian's `pebble` (RFC 8555)
//! for a labelled container's host. Pebble runs on the host (the core suite's
//! harness, shared): its directory listens on the test network's gateway,
//! where the container reaches it, and it validates HTTP-01 (RFC 8555 §8.3)
//! against dockhand's published port 80, every name resolved to 127.0.0.1
//! by the harness's DNS server.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core_harness::dns_server::DnsServer;
use crate::core_harness::pebble::{Pebble, PebbleConfig};
use crate::core_harness::tls_support::{client_config, https_connection};
use crate::support::{
    admin_json, docker, free_port, http_get, record_figure, wait_until_ok, TestRun,
};

const TOKEN: &str = "acme-suite-token";

/// How long the order may take from the backend's start: its first health
/// check by dockhand comes one check interval (15 s) after it appears, the
/// order a settle delay (2 s) after that, then Pebble's validation.
const ORDER_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// The address the host has on `network`, where its containers reach it.
fn gateway(network: &str) -> IpAddr {
    let gateway = docker([
        "network",
        "inspect",
        "--format",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
        network,
    ]);
    gateway
        .parse()
        .unwrap_or_else(|_| panic!("the gateway of {network}: {gateway:?}"))
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `GET /api/v1/certificates` on the admin listener: `name`'s order (its
/// `state`: `waiting`, `ordering`, `failed`, `issued`, and what goes with
/// it), once it is known.
fn order_of(admin: SocketAddr, name: &str) -> Result<serde_json::Value, String> {
    let view = admin_json(admin, TOKEN, "/api/v1/certificates")?;
    view["acme"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|order| order["name"] == name)
        .cloned()
        .ok_or_else(|| format!("{name} not among the orders: {view}"))
}

#[test]
fn a_labelled_containers_host_gets_a_certificate_from_pebble_over_acme() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let run = TestRun::new("acme-pebble");
    let network = run.network("net");
    let host = run.host("app");
    let (http_port, https_port) = (free_port(), free_port());

    let dns = runtime.block_on(DnsServer::start());
    dns.set_a(&host, ["127.0.0.1"], 60);
    let pebble = runtime.block_on(Pebble::start(PebbleConfig {
        http_port,
        tls_port: https_port,
        dns: dns.address(),
        validity: None,
        reject_nonces: false,
        listen: gateway(&network.name),
    }));

    let pebble_ca = format!("{}:/pebble-ca.pem:ro", pebble.ca_file.display());
    let dockhand = run.dockhand_in_container_with(
        "dockhand",
        &network,
        &[
            "--acme-email",
            "ops@example.com",
            "--acme-directory",
            &pebble.directory,
            "--acme-ca",
            "/pebble-ca.pem",
            "--acme-storage",
            "/var/lib/dockhand/acme",
            "--admin-listen",
            "0.0.0.0:8081",
            "--admin-token",
            TOKEN,
            "--log-level",
            "debug",
        ],
        |spec| {
            spec.volume(&pebble_ca)
                // An anonymous volume: `docker rm -v` takes it with the container.
                .volume("/var/lib/dockhand/acme")
                .option("--publish")
                .option(&format!("127.0.0.1:{http_port}:80"))
                .option("--publish")
                .option(&format!("127.0.0.1:{https_port}:443"))
                .publish(8081)
        },
    );
    let admin = wait_until_ok("the admin port", || dockhand.container.published(8081));

    // Unhealthy for its first seconds: no order may start before a healthy
    // upstream, so a label typo's host never spends the CA's rate limits.
    let app = run
        .backend("app")
        .label("dockhand.host", &host)
        .network(&network)
        .env("UNHEALTHY_FOR_MS", "3000")
        .healthcheck("200ms")
        .run();

    let mut seen: Vec<String> = Vec::new();
    let mut last;
    let started = Instant::now();
    loop {
        let order = order_of(admin, &host).unwrap_or_else(|error| error.into());
        let state = order["state"].as_str().unwrap_or_default().to_owned();
        if !state.is_empty() && seen.last() != Some(&state) {
            seen.push(state.clone());
        }
        last = order;
        if state == "issued" || state == "failed" || started.elapsed() > ORDER_WAIT_LIMIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        seen.last().map(String::as_str),
        Some("issued"),
        "the order ended {last} after {seen:?}\ndockhand:\n{}\npebble:\n{}",
        dockhand.log(),
        pebble.log()
    );
    record_figure(&format!(
        "ACME in Docker: issued {:.1} s after the backend started (states seen {seen:?})",
        started.elapsed().as_secs_f64()
    ));
    assert_eq!(
        seen.first().map(String::as_str),
        Some("waiting"),
        "waiting for a healthy upstream first: {seen:?}"
    );
    let allowed = ["waiting", "ordering", "issued"];
    assert!(
        seen.iter().all(|state| allowed.contains(&state.as_str())),
        "{seen:?}"
    );

    // HTTPS through the published 443, verified against Pebble's root.
    let roots = runtime.block_on(pebble.root());
    let config = client_config(Arc::clone(&roots), &[b"http/1.1"]);
    let reply = runtime.block_on(async {
        https_connection(loopback(https_port), &host, config)
            .await
            .get(&host, "/")
            .await
    });
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["hostname"], app.name.as_str());
    assert_eq!(body["headers"]["x-forwarded-proto"], "https", "{body}");

    // Plain HTTP for the host now has a certificate: 308 to HTTPS.
    let plain = http_get(loopback(http_port), &host, "/x?y=1").unwrap();
    assert_eq!(plain.status, 308, "{}", plain.text());
    assert_eq!(
        plain.header("location"),
        Some(format!("https://{host}/x?y=1").as_str())
    );
}
