//! dockhand: an edge reverse proxy whose routes come from Docker labels and a
//! routes file, swapped live without dropping traffic.
//!
//! Layout, in the order a request meets it:
//!
//! - `config`: the model (hosts, locations, upstreams), the routes-file parser
//!   with path-precise errors, and process settings from flags.
//! - `docker`: the Docker provider: follows containers through events and
//!   inspect, and publishes the hosts their labels describe.
//! - `labels`: Docker labels, networks and ports into desired hosts and
//!   diagnostics, as a pure function (the Docker provider feeds it).
//! - `file_provider`: loads the routes file, reloads it on change or SIGHUP,
//!   keeps the last good routes when a reload fails.
//! - `routes`: builds the immutable `RouteTable` from desired hosts, matches
//!   host and path, and swaps the table atomically.
//! - `resolve`: upstream names to addresses: the worker that asks DNS again
//!   every few seconds and on demand (A/AAAA), SRV resolution with its
//!   caches, and the DNS client behind a narrow trait.
//! - `upstream`: a location's endpoints, their health and in-flight counts
//!   (kept across rebuilds), and the choice among them.
//! - `proxy`: the server (HTTP/1.1 and h2c, upgrades, graceful shutdown), the
//!   pooled upstream client (TCP, TLS, SRV), retries, rewrites, header rules,
//!   statuses and the access log.

pub mod config;
pub mod docker;
pub mod file_provider;
pub mod labels;
pub mod proxy;
pub mod resolve;
pub mod routes;
mod sync;
pub mod upstream;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Notify;

use config::Settings;
use file_provider::{FileProvider, RoutesFileError};
use proxy::{ProxyState, ServerSettings, UpstreamClient};
use resolve::{Dns, HickoryDns, NameResolver, Unconfigured};
use routes::Router;
use upstream::{tcp_probe, EndpointRegistry};

/// Serves on `listener` until `shutdown` resolves, then drains in-flight
/// requests for up to the shutdown timeout. `reload` re-reads the routes file
/// (main wires it to SIGHUP). Fails at start when the routes file is bad.
pub async fn run(
    listener: TcpListener,
    settings: Settings,
    reload: Arc<Notify>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RoutesFileError> {
    let registry = Arc::new(EndpointRegistry::new(tcp_probe(settings.connect_timeout)));
    let router = Arc::new(Router::new(registry.clone()));
    let watcher = match &settings.routes_file {
        Some(path) => {
            let provider = FileProvider::start(path.clone(), router.clone())?;
            Some(tokio::spawn(
                provider.watch(settings.routes_poll_interval, reload),
            ))
        }
        None => None,
    };
    let dns = name_server(&settings);
    let names = NameResolver::spawn(dns.clone(), router.watch_names(), router.clone());
    let docker = settings
        .docker
        .clone()
        .map(|docker| tokio::spawn(docker::run_provider(docker, router.clone(), names.clone())));
    let state = Arc::new(ProxyState {
        router,
        client: UpstreamClient::new(settings.connect_timeout, registry, dns),
        resolve_hints: Arc::new(names),
        upstream_timeout: settings.upstream_timeout,
        upstream_wait: settings.upstream_wait,
    });
    let server_settings = ServerSettings {
        header_read_timeout: settings.header_read_timeout,
        shutdown_timeout: settings.shutdown_timeout,
        trusted_proxies: settings.trusted_proxies.clone(),
    };
    let drained = proxy::serve(listener, state, server_settings, shutdown).await;
    if !drained {
        tracing::warn!(timeout = ?settings.shutdown_timeout, "shutdown timeout reached with requests still in flight");
    }
    for task in [watcher, docker].into_iter().flatten() {
        task.abort();
    }
    Ok(())
}

/// The DNS server upstream names are resolved with: `--dns-resolver`, else
/// the system's. Without a usable system configuration, names stay
/// unresolved (their locations answer 503) and the rest is served.
fn name_server(settings: &Settings) -> Arc<dyn Dns> {
    match settings.dns_resolver {
        Some(server) => Arc::new(HickoryDns::with_server(server)),
        None => match HickoryDns::from_system() {
            Ok(dns) => Arc::new(dns),
            Err(error) => {
                tracing::error!(%error, "no usable DNS configuration; upstream names will not resolve");
                Arc::new(Unconfigured(error.to_string()))
            }
        },
    }
}
