//! dockhand: an edge reverse proxy whose routes come from Docker labels and a
//! routes file, swapped live without dropping traffic.
//!
//! Layout, in the order data meets it:
//!
//! - `settings`: process settings, typed, with the one source of defaults.
//! - `config`: the model (hosts, locations, upstreams), what a provider
//!   publishes (`Desired`: hosts and diagnostics), the routes-file parser
//!   with path-precise errors. Imports nothing else of dockhand's.
//! - `labels`: Docker labels, networks and ports into desired hosts and
//!   diagnostics, as a pure function.
//! - `provider`: where desired hosts come from: `file` (the routes file,
//!   reloaded on change or SIGHUP, the last good version kept) and `docker`
//!   (containers followed through events and inspect, fed to `labels`).
//! - `routes`: the router. It holds every provider's `Desired` and
//!   diagnostics, settles conflicts between providers (the file wins, in
//!   `RouteTable::build`), keeps vanished locations whose upstreams move for
//!   the grace period (`routes::grace`), builds the immutable `RouteTable`,
//!   swaps it atomically, and tells the resolver which names to watch and
//!   when containers moved.
//! - `resolve`: upstream names to addresses: the worker that asks DNS again
//!   every few seconds and on demand (A/AAAA), SRV resolution with its
//!   caches, and the DNS client behind a narrow trait.
//! - `upstream`: a location's endpoints, their state kept across rebuilds
//!   (`registry`), their health (active checks by one background service,
//!   and passive health from failed connects, in `upstream::health`), and
//!   the choice among them (`balance`).
//! - `proxy`: the server (dockhand's own for HTTP/1.1 clients, hyper's for
//!   h2c and protocol switches; HTTPS with HTTP/2 by ALPN; graceful
//!   shutdown),
//!   forwarding with its tries, rewrites, header rules, statuses and the
//!   access log.
//! - `middleware`: what a location does to requests besides forwarding
//!   them (IP allow list, body limit, redirect, response headers, CORS),
//!   as decisions `proxy` acts on.
//! - `connect`: pools, opening connections (TCP, upstream TLS, SRV dial),
//!   and dockhand's own HTTP/1.1 exchange with upstream addresses (its
//!   idle connections kept per worker thread), hyper's client for the rest.
//! - `http1`: HTTP/1.1 on the wire (RFC 9112) as bytes: heads parsed in
//!   place, framing, bodies and the chunked decoder, trailers, heads
//!   written from pieces, and
//!   the read buffers a worker thread lends. Knows no routing or sockets.
//! - `admin`: the admin listener: what is served and why (hosts, addresses,
//!   diagnostics), health probes, behind a token off loopback.
//! - `metrics`: Prometheus metrics, counted by the parts above as things
//!   happen (one `Metrics` shared by `Arc`) and served by `admin` at
//!   `/metrics`. Imports nothing else of dockhand's.
//! - `tls`: HTTPS termination: certificates by SNI (from files and ACME),
//!   the rustls configuration, ACME's challenge answers.
//! - `limits`: the process's open-file limit, raised at start.
//! - `socket_io`: TCP reads and writes by system call, for the client and
//!   upstream sockets of both HTTP paths.
//! - `file_stamp`: what `stat` says of a file, to tell a change at a poll
//!   without reading it (the routes file, the certificates directory).
//! - `workers`: the `--workers` threads, each accepting and serving client
//!   connections on listeners and upstream pools of its own.

pub mod admin;
pub mod config;
pub mod connect;
mod error;
mod file_stamp;
pub mod http1;
mod kept_box;
pub mod labels;
pub mod limits;
pub mod metrics;
pub mod middleware;
pub mod provider;
pub mod proxy;
pub mod resolve;
pub mod routes;
pub mod settings;
mod socket_io;
mod sync;
pub mod tls;
pub mod upstream;
pub mod workers;

pub use error::Error;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use admin::AdminState;
use config::{Desired, ProviderId};
use connect::UpstreamClient;
use metrics::Metrics;
use provider::file::{self, FileProvider};
use proxy::{ErrorKind, ProxyState, ServerSettings, TlsTermination};
use resolve::{CountedDns, Dns, HickoryDns, NameResolver, Unconfigured};
use routes::Router;
use settings::{DockerMode, Settings};
use tls::files::CertsDir;
use tls::TlsState;
use upstream::{run_checks, tcp_probe, EndpointRegistry};
use workers::{DataPath, Workers};

/// The sockets dockhand serves on, bound by the caller (port 0 in tests).
pub struct Listeners {
    pub http: TcpListener,
    /// The HTTPS listener; `None` serves none (see `TlsSettings::https_wanted`).
    pub https: Option<TcpListener>,
    /// The admin listener; `None` serves none.
    pub admin: Option<TcpListener>,
}

/// Checks the configuration without serving: the settings, and the routes
/// file when there is one. The binary calls it before binding any port. DNS
/// servers written as names are not looked up: one that does not resolve
/// is served as a diagnostic (DNS may be briefly down), not refused.
pub async fn check(settings: &Settings) -> Result<(), Error> {
    settings.validate()?;
    if let Some(path) = &settings.routes_file {
        file::load(path).await?;
    }
    Ok(())
}

/// Serves on `listeners` until `shutdown` resolves, then drains in-flight
/// requests for up to the shutdown timeout. Fails at start when the settings
/// or the routes file are bad. Client connections are served by
/// `settings.workers` threads of their own (one worker alone serves on the
/// caller's runtime); the rest (providers, checks, ACME, the admin
/// listener) runs on the caller's runtime.
pub async fn run(
    listeners: Listeners,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    settings.validate()?;
    if let Some(admin) = &listeners.admin {
        let address = admin.local_addr().map_err(Error::AdminListener)?;
        admin::check_exposure(address, settings.admin_token.as_ref())?;
    }
    let metrics = Arc::new(Metrics::new(&ErrorKind::ALL.map(ErrorKind::reason)));
    let registry = Arc::new(EndpointRegistry::new());
    let router = Arc::new(
        Router::new(registry.clone(), settings.upstream_wait).with_metrics(metrics.clone()),
    );
    let dns: Arc<dyn Dns> = Arc::new(CountedDns::new(name_server(&settings), metrics.clone()));
    // Aborted when `run` returns or is dropped.
    let mut background = JoinSet::new();
    if let Some(path) = &settings.routes_file {
        let provider = FileProvider::start(path.clone(), router.clone(), dns.clone()).await?;
        background.spawn(provider.watch(settings.routes_poll_interval));
    }
    let awaited = awaited_providers(&settings);
    let names = NameResolver::spawn(
        dns.clone(),
        router.watch_names(),
        router.watch_moves(),
        router.clone(),
    );
    background.spawn(run_checks(
        registry.clone(),
        tcp_probe(settings.connect_timeout),
    ));
    background.spawn({
        let router = router.clone();
        async move { router.expire_grace_periods().await }
    });
    if let Some(docker) = settings.docker.clone() {
        // Without the flag, the swarm provider says what it detected.
        if let Some(mode) = docker.mode {
            tracing::info!(?mode, "docker mode (--docker-mode)");
        }
        if DockerMode::follows_containers(docker.mode) {
            background.spawn(provider::docker::run_provider(
                docker.clone(),
                router.clone(),
                dns.clone(),
                metrics.clone(),
            ));
        }
        if DockerMode::follows_services(docker.mode) {
            background.spawn(provider::swarm::run_provider(
                docker,
                router.clone(),
                dns.clone(),
            ));
        }
    }
    // Where plain HTTP is redirected: the port the HTTPS listener is bound to.
    let https_port = listeners
        .https
        .as_ref()
        .and_then(|listener| listener.local_addr().ok())
        .map(|address| address.port());
    let tls = TlsState::new();
    if let Some(dir) = &settings.tls.certs_dir {
        let certs = CertsDir::start(dir.clone(), tls.clone())
            .await
            .map_err(|error| Error::CertsDir {
                dir: dir.clone(),
                error,
            })?;
        let router = router.clone();
        let publish = move |diagnostics| {
            let desired = Desired {
                diagnostics,
                ..Desired::default()
            };
            router.publish(ProviderId::Certificates, desired);
        };
        background.spawn(certs.watch(settings.tls.certs_poll_interval, publish));
    }
    if let Some(acme) = &settings.tls.acme {
        // Stored certificates are served from the first handshake; ordering
        // runs in the background and never delays serving.
        let loaded = tls::acme::load(acme, &tls).await;
        background.spawn(tls::acme::run(
            acme.clone(),
            loaded,
            tls.clone(),
            router.clone(),
            metrics.clone(),
        ));
    }
    let state = Arc::new(ProxyState {
        router,
        client: UpstreamClient::new(
            settings.http1_engine,
            settings.connect_timeout,
            registry,
            dns,
            metrics.clone(),
        ),
        resolve_hints: Arc::new(names.clone()),
        upstream_timeout: settings.upstream_timeout,
        upstream_wait: settings.upstream_wait,
        client_body_timeout: settings.client_body_timeout,
        metrics,
        tls,
        https_port,
    });
    if let Some(listener) = listeners.admin {
        let admin = AdminState {
            proxy: state.clone(),
            names,
            token: settings.admin_token.clone(),
            awaited,
        };
        background.spawn(admin::serve(listener, Arc::new(admin)));
    }
    let server_settings = ServerSettings {
        header_read_timeout: settings.header_read_timeout,
        client_send_timeout: settings.client_send_timeout,
        shutdown_timeout: settings.shutdown_timeout,
        trusted_proxies: settings.trusted_proxies.clone(),
        http1_engine: settings.http1_engine,
    };
    let https = match listeners.https {
        Some(listener) => {
            let termination = TlsTermination::new(
                state.tls.clone(),
                state.metrics.clone(),
                settings.tls.handshake_timeout,
            )
            .map_err(Error::TlsConfig)?;
            Some((listener, Arc::new(termination)))
        }
        None => None,
    };
    let data_path = DataPath {
        http: listeners.http,
        https,
        state,
        settings: server_settings,
    };
    let stop = CancellationToken::new();
    let workers = Workers::start(settings.workers, data_path, stop.clone()).await?;
    let stopping = async move {
        shutdown.await;
        stop.cancel();
    };
    let ((), drained) = tokio::join!(stopping, workers.serve());
    if !drained {
        tracing::warn!(timeout = ?settings.shutdown_timeout, "shutdown timeout reached with requests still in flight");
    }
    Ok(())
}

/// The sources of routes `/readyz` waits for: each must deliver once.
/// Certificates never hold readiness up: plain HTTP serves without them,
/// and an ACME order may take minutes.
fn awaited_providers(settings: &Settings) -> Vec<ProviderId> {
    let file = settings.routes_file.as_ref().map(|_| ProviderId::File);
    let mode = settings.docker.as_ref().map(|docker| docker.mode);
    let docker = mode
        .filter(|mode| DockerMode::follows_containers(*mode))
        .map(|_| ProviderId::Docker);
    let swarm = mode
        .filter(|mode| DockerMode::follows_services(*mode))
        .map(|_| ProviderId::Swarm);
    file.into_iter().chain(docker).chain(swarm).collect()
}

/// The DNS server upstream names, and DNS servers written as names, are
/// resolved with: `--dns-resolver`, else the system's. Without a usable
/// system configuration, names stay unresolved (their locations answer 503)
/// and the rest is served.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_never_waits_for_certificates() {
        let mut settings = Settings {
            routes_file: Some("routes.json".into()),
            ..Settings::default()
        };
        settings.tls.certs_dir = Some("certs".into());
        settings.tls.acme = Some(settings::AcmeSettings {
            email: "admin@example.com".into(),
            directory: "https://acme.example.com/directory".into(),
            ca: None,
            storage: "acme".into(),
            challenge: settings::AcmeChallenge::Http01,
        });
        let awaited = awaited_providers(&settings);
        assert!(awaited.contains(&ProviderId::File), "{awaited:?}");
        assert!(!awaited.contains(&ProviderId::Certificates), "{awaited:?}");
        assert!(!awaited.contains(&ProviderId::Acme), "{awaited:?}");
    }

    #[test]
    fn readiness_waits_for_what_the_docker_mode_follows() {
        let awaited = |mode| {
            awaited_providers(&Settings {
                docker: Some(settings::DockerSettings {
                    mode,
                    ..Default::default()
                }),
                ..Settings::default()
            })
        };
        let (docker, swarm) = (ProviderId::Docker, ProviderId::Swarm);
        assert_eq!(awaited(None), [docker, swarm]);
        assert_eq!(awaited(Some(DockerMode::Both)), [docker, swarm]);
        assert_eq!(awaited(Some(DockerMode::Container)), [docker]);
        assert_eq!(awaited(Some(DockerMode::Swarm)), [swarm]);
    }
}
