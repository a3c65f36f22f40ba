//! What is read at scrape time rather than counted as it happens: each
//! upstream address's health and requests in flight, and the diagnostics
//! of the moment. Whoever holds that state (the router) describes it
//! through `CurrentState`; the series are made afresh at every scrape, so
//! an address that left the table leaves the output with it.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::labels::{SeverityLabels, UpstreamLabels};

/// One upstream address of one location, as it is now.
pub struct UpstreamReading<'a> {
    /// The host pattern as configured.
    pub host: &'a str,
    pub location: &'a str,
    /// The address dialed (`10.0.0.7:80`), or the SRV owner it is dialed through.
    pub address: String,
    /// Whether it may be chosen: not marked unhealthy (unchecked counts as healthy).
    pub healthy: bool,
    pub in_flight: u64,
}

/// Current diagnostics, by severity.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DiagnosticCounts {
    pub errors: u64,
    pub warnings: u64,
}

/// The state gauges are read from at each scrape.
pub trait CurrentState {
    /// Calls `each` with every upstream address of the current route table.
    fn each_upstream(&self, each: &mut dyn FnMut(UpstreamReading<'_>));
    fn diagnostic_counts(&self) -> DiagnosticCounts;
}

/// No state: no upstreams, no diagnostics.
impl CurrentState for () {
    fn each_upstream(&self, _: &mut dyn FnMut(UpstreamReading<'_>)) {}

    fn diagnostic_counts(&self) -> DiagnosticCounts {
        DiagnosticCounts::default()
    }
}

/// A registry of the gauges read from `current` now.
pub(super) fn read(current: &dyn CurrentState) -> Registry {
    let mut registry = Registry::with_prefix(super::PREFIX);
    let healthy = Family::<UpstreamLabels, Gauge>::default();
    let in_flight = Family::<UpstreamLabels, Gauge>::default();
    current.each_upstream(&mut |reading| {
        let labels = UpstreamLabels {
            host: reading.host.to_owned(),
            location: reading.location.to_owned(),
            address: reading.address,
        };
        healthy
            .get_or_create(&labels)
            .set(i64::from(reading.healthy));
        in_flight
            .get_or_create(&labels)
            .set(i64::try_from(reading.in_flight).unwrap_or(i64::MAX));
    });
    registry.register(
        "upstream_healthy",
        "Whether an upstream address may be chosen (1) or is marked unhealthy (0)",
        healthy,
    );
    registry.register(
        "upstream_requests_in_flight",
        "Requests sent to an upstream address whose response has not ended",
        in_flight,
    );
    let counts = current.diagnostic_counts();
    let diagnostics = Family::<SeverityLabels, Gauge>::default();
    for (severity, count) in [("error", counts.errors), ("warning", counts.warnings)] {
        diagnostics
            .get_or_create(&SeverityLabels { severity })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    registry.register(
        "diagnostics",
        "Current label and routes-file problems, by severity",
        diagnostics,
    );
    registry
}
