//! Prometheus metrics (the `prometheus-client` crate): one `Metrics` value,
//! made by `run` and shared by `Arc` with what counts (the proxy, the
//! router, the resolvers, the Docker provider), and `render`, the text
//! served at the admin listener's `/metrics` (the Prometheus text format). Counters and histograms are
//! counted as things happen (`requests` for the per-request ones); gauges
//! of state (upstream health, in-flight requests, diagnostics) are read at
//! scrape time (`current`). Label values never come from clients
//! (`labels`). This module imports nothing else of dockhand's: the others
//! call it, and the router describes its state through `CurrentState`.

mod current;
mod labels;
mod requests;

#[cfg(test)]
mod tests;

pub use current::{CurrentState, DiagnosticCounts, UpstreamReading};
pub use labels::UNMATCHED;
pub use requests::LocationCounters;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use labels::{
    ActionLabels, DialLabels, DnsLabels, ProtocolLabels, ReasonLabels, RefusalLabels, ResultLabels,
    VersionLabels,
};
use requests::RequestFamilies;

/// The `Content-Type` of `render`'s text: the Prometheus text format
/// (0.0.4), which every Prometheus scrapes and `promtool check metrics`
/// reads (it refuses OpenMetrics' counter names without `_total`).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Every metric name starts with `dockhand_`.
const PREFIX: &str = "dockhand";

/// What an SRV owner lookup served (the results of trickster's
/// `proxy_origin_srv_lookups_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrvLookup {
    /// A cached answer, still fresh.
    Hit,
    /// An answer looked up for this dial.
    Miss,
    /// The last good answer, because the refresh failed or was slow.
    Stale,
    /// A cached NXDOMAIN, empty answer or failure.
    Negative,
    /// A lookup that ended without an answer to serve.
    Error,
}

impl SrvLookup {
    const ALL: [SrvLookup; 5] = [
        SrvLookup::Hit,
        SrvLookup::Miss,
        SrvLookup::Stale,
        SrvLookup::Negative,
        SrvLookup::Error,
    ];

    fn label(self) -> &'static str {
        match self {
            SrvLookup::Hit => "hit",
            SrvLookup::Miss => "miss",
            SrvLookup::Stale => "stale",
            SrvLookup::Negative => "negative",
            SrvLookup::Error => "error",
        }
    }
}

/// The protocol of a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientProtocol {
    Http1,
    H2,
}

impl ClientProtocol {
    fn label(self) -> &'static str {
        match self {
            ClientProtocol::Http1 => "http1",
            ClientProtocol::H2 => "h2",
        }
    }
}

/// How a TLS handshake with a client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsHandshake {
    Completed,
    /// The ClientHello named no server: no certificate is a fair answer.
    NoServerName,
    /// The ClientHello named a server dockhand has no certificate for.
    UnknownServerName,
    /// The client did not finish within the handshake timeout.
    TimedOut,
    /// Any other failure (bad records, no common version or cipher).
    Failed,
}

impl TlsHandshake {
    const ALL: [TlsHandshake; 5] = [
        TlsHandshake::Completed,
        TlsHandshake::NoServerName,
        TlsHandshake::UnknownServerName,
        TlsHandshake::TimedOut,
        TlsHandshake::Failed,
    ];

    fn label(self) -> &'static str {
        match self {
            TlsHandshake::Completed => "completed",
            TlsHandshake::NoServerName => "no_server_name",
            TlsHandshake::UnknownServerName => "unknown_server_name",
            TlsHandshake::TimedOut => "timed_out",
            TlsHandshake::Failed => "failed",
        }
    }
}

/// How an ACME order ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeOrder {
    /// A certificate was issued and stored.
    Issued,
    /// The order failed (a problem document, a refused challenge, no answer).
    Failed,
    /// Another replica sharing the storage ordered it; it was read from there.
    PickedUp,
}

impl AcmeOrder {
    const ALL: [AcmeOrder; 3] = [AcmeOrder::Issued, AcmeOrder::Failed, AcmeOrder::PickedUp];

    fn label(self) -> &'static str {
        match self {
            AcmeOrder::Issued => "issued",
            AcmeOrder::Failed => "failed",
            AcmeOrder::PickedUp => "picked_up",
        }
    }
}

/// The registry and every family counted as things happen.
pub struct Metrics {
    registry: Registry,
    requests: RequestFamilies,
    unmatched: Arc<LocationCounters>,
    retries: Family<ReasonLabels, Counter>,
    errors: Family<ReasonLabels, Counter>,
    refusals: Family<RefusalLabels, Counter>,
    dns_lookups: Family<DnsLabels, Counter>,
    srv_lookups: Family<ResultLabels, Counter>,
    srv_dial_attempts: Family<DialLabels, Counter>,
    docker_events: Family<ActionLabels, Counter>,
    docker_connected: Gauge,
    table_swaps: Counter,
    table_build: Histogram,
    connections: Family<ProtocolLabels, Gauge>,
    tls_handshakes: Family<ResultLabels, Counter>,
    acme_orders: Family<ResultLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(&[])
    }
}

impl Metrics {
    /// `error_reasons`: every `x-dockhand-error` reason, shown at 0 from
    /// the start so a rate over them needs no series to appear first.
    pub fn new(error_reasons: &[&'static str]) -> Metrics {
        let requests = RequestFamilies {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| {
                // 1 ms to about 33 s.
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            bytes_in: Family::default(),
            bytes_out: Family::default(),
        };
        let unmatched = Arc::new(requests.location(UNMATCHED.into(), UNMATCHED.into()));
        let mut metrics = Metrics {
            unmatched,
            retries: Family::default(),
            errors: Family::default(),
            refusals: Family::default(),
            dns_lookups: Family::default(),
            srv_lookups: Family::default(),
            srv_dial_attempts: Family::default(),
            docker_events: Family::default(),
            docker_connected: Gauge::default(),
            table_swaps: Counter::default(),
            // 0.1 ms to about 3 s.
            table_build: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            connections: Family::default(),
            tls_handshakes: Family::default(),
            acme_orders: Family::default(),
            requests,
            registry: Registry::with_prefix(PREFIX),
        };
        // Shown at 0 from the start: made now, the lock on each dropped at once.
        for reason in error_reasons {
            drop(metrics.errors.get_or_create(&ReasonLabels { reason }));
        }
        for result in SrvLookup::ALL {
            let result = result.label();
            drop(metrics.srv_lookups.get_or_create(&ResultLabels { result }));
        }
        for protocol in [ClientProtocol::Http1, ClientProtocol::H2] {
            let protocol = protocol.label();
            drop(
                metrics
                    .connections
                    .get_or_create(&ProtocolLabels { protocol }),
            );
        }
        for result in TlsHandshake::ALL {
            let result = result.label();
            drop(
                metrics
                    .tls_handshakes
                    .get_or_create(&ResultLabels { result }),
            );
        }
        for result in AcmeOrder::ALL {
            let result = result.label();
            drop(metrics.acme_orders.get_or_create(&ResultLabels { result }));
        }
        metrics.register();
        metrics
    }

    fn register(&mut self) {
        let registry = &mut self.registry;
        let requests = &self.requests;
        registry.register(
            "requests",
            "Requests answered, by host pattern, location and status code",
            requests.requests.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time from a request's head to the end of its response, by host pattern",
            Unit::Seconds,
            requests.duration.clone(),
        );
        registry.register_with_unit(
            "request_body",
            "Request body bytes read from clients, by host pattern",
            Unit::Bytes,
            requests.bytes_in.clone(),
        );
        registry.register_with_unit(
            "response_body",
            "Response body bytes sent to clients, by host pattern",
            Unit::Bytes,
            requests.bytes_out.clone(),
        );
        registry.register(
            "retries",
            "Requests sent again to an upstream, by the reason the last try failed",
            self.retries.clone(),
        );
        registry.register(
            "errors",
            "Statuses dockhand answered itself, by x-dockhand-error reason",
            self.errors.clone(),
        );
        registry.register(
            "middleware_refusals",
            "Requests a location's middleware refused, by host pattern and middleware",
            self.refusals.clone(),
        );
        registry.register(
            "dns_lookups",
            "DNS queries made, by record type and result",
            self.dns_lookups.clone(),
        );
        registry.register(
            "proxy_origin_srv_lookups",
            "SRV owner lookups of upstream dials, by what they served",
            self.srv_lookups.clone(),
        );
        registry.register(
            "proxy_origin_srv_dial_attempts",
            "Connection attempts to SRV targets, by priority tier (0 preferred) and result",
            self.srv_dial_attempts.clone(),
        );
        registry.register(
            "docker_events",
            "Docker events followed, by action",
            self.docker_events.clone(),
        );
        registry.register(
            "docker_connected",
            "Whether dockhand is connected to Docker (1) or not (0)",
            self.docker_connected.clone(),
        );
        registry.register(
            "route_table_swaps",
            "Route tables built and swapped in",
            self.table_swaps.clone(),
        );
        registry.register_with_unit(
            "route_table_build",
            "Time to build one route table",
            Unit::Seconds,
            self.table_build.clone(),
        );
        registry.register(
            "client_connections",
            "Open client connections, by protocol (counted from their first request)",
            self.connections.clone(),
        );
        registry.register(
            "tls_handshakes",
            "TLS handshakes with clients, by how they ended",
            self.tls_handshakes.clone(),
        );
        registry.register(
            "acme_orders",
            "ACME certificate orders, by how they ended",
            self.acme_orders.clone(),
        );
        let build_info = Family::<VersionLabels, Gauge>::default();
        build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "dockhand's version, as a label", build_info);
    }

    /// The text of every metric (`CONTENT_TYPE`), with the gauges read
    /// from `current` now.
    pub fn render(&self, current: &dyn CurrentState) -> String {
        let mut text = String::new();
        let scraped = current::read(current);
        // Writing to a String fails only if an encoder does, which the
        // label and metric types here never do.
        prometheus_text::encode(&mut text, &self.registry)
            .and_then(|()| prometheus_text::encode(&mut text, &scraped))
            .expect("metrics encode into a string");
        text
    }

    /// The series of one location, for its route table to keep.
    pub fn location(&self, host: Arc<str>, location: Arc<str>) -> LocationCounters {
        self.requests.location(host, location)
    }

    /// The series of requests that matched no location.
    pub fn unmatched(&self) -> &Arc<LocationCounters> {
        &self.unmatched
    }

    /// A request is sent again; `reason`: why its last try did not do.
    pub fn retry(&self, reason: &'static str) {
        self.retries.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// dockhand answered a request itself with `reason`.
    pub fn error(&self, reason: &'static str) {
        self.errors.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// A request of `host` (its pattern) refused by the middleware `feature`.
    pub fn refused(&self, host: Arc<str>, feature: &'static str) {
        self.refusals
            .get_or_create(&RefusalLabels { host, feature })
            .inc();
    }

    /// A DNS query of `record` type (`A/AAAA`, `SRV`) ended with `result`.
    pub fn dns_lookup(&self, record: &'static str, result: &'static str) {
        self.dns_lookups
            .get_or_create(&DnsLabels { record, result })
            .inc();
    }

    pub fn srv_lookup(&self, served: SrvLookup) {
        self.srv_lookups
            .get_or_create(&ResultLabels {
                result: served.label(),
            })
            .inc();
    }

    /// A connection attempt to a target of SRV priority tier `tier` (0 preferred).
    pub fn srv_dial_attempt(&self, tier: usize, success: bool) {
        let labels = DialLabels {
            tier: u16::try_from(tier).unwrap_or(u16::MAX),
            result: if success { "success" } else { "failure" },
        };
        self.srv_dial_attempts.get_or_create(&labels).inc();
    }

    pub fn docker_event(&self, action: &'static str) {
        self.docker_events
            .get_or_create(&ActionLabels { action })
            .inc();
    }

    pub fn docker_connected(&self, connected: bool) {
        self.docker_connected.set(i64::from(connected));
    }

    /// A route table was built in `build` and swapped in.
    pub fn table_swapped(&self, build: Duration) {
        self.table_swaps.inc();
        self.table_build.observe(build.as_secs_f64());
    }

    pub fn tls_handshake(&self, ended: TlsHandshake) {
        self.tls_handshakes
            .get_or_create(&ResultLabels {
                result: ended.label(),
            })
            .inc();
    }

    pub fn acme_order(&self, ended: AcmeOrder) {
        self.acme_orders
            .get_or_create(&ResultLabels {
                result: ended.label(),
            })
            .inc();
    }

    /// Counts a client connection as open until the returned guard drops.
    pub fn client_connection(&self, protocol: ClientProtocol) -> OpenConnection {
        let gauge = self.connections.get_or_create_owned(&ProtocolLabels {
            protocol: protocol.label(),
        });
        gauge.inc();
        OpenConnection(gauge)
    }
}

/// An open client connection, counted until dropped.
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}
