//! A location's upstreams as the proxy uses them: every endpoint requests can
//! be sent to (each address of each upstream, with that upstream's settings),
//! their health and in-flight counts (`health`, kept across rebuilds by
//! `registry`), and the choice of the next one (`balance`). Where the
//! addresses of names come from is `resolve`'s business; this module is
//! handed them.

mod balance;
mod checks;
mod endpoint;
mod health;
mod lease;
mod registry;

pub use checks::run_checks;
pub use endpoint::{Destination, Endpoint, TlsTarget, Transport};
pub use health::{tcp_probe, Check, EndpointState, Health, InFlight, Probe};
pub use lease::Retirement;
pub use registry::EndpointRegistry;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use balance::Balancer;

use crate::config::{HealthCheck, LoadBalancing, UpstreamConfig, UpstreamTarget};

/// Check interval when neither the location nor its host sets one.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(15);

/// What building a location's endpoints needs from outside the location.
pub struct EndpointInputs<'a> {
    pub resolved: &'a HashMap<String, Arc<[IpAddr]>>,
    pub registry: &'a EndpointRegistry,
}

/// The endpoints of one location and how the next one is chosen.
#[derive(Debug)]
pub struct UpstreamSet {
    endpoints: Vec<Arc<Endpoint>>,
    balancer: Balancer,
    /// The names the endpoints come from, resolved again when none is left.
    names: Box<[String]>,
}

impl UpstreamSet {
    pub fn build(
        configs: &[UpstreamConfig],
        load_balancing: LoadBalancing,
        health: CheckSettings,
        context: &EndpointInputs<'_>,
        location: &Arc<str>,
    ) -> UpstreamSet {
        let mut endpoints = Vec::new();
        let mut names = Vec::new();
        for config in configs {
            let config = Arc::new(config.clone());
            let transport = Transport::of(&config);
            for destination in destinations(&config.target, context.resolved) {
                let state =
                    context
                        .registry
                        .state(&destination, &transport, health.interval(), location);
                let endpoint = Endpoint::new(destination, transport.clone(), config.clone(), state);
                endpoints.extend(endpoint.map(Arc::new));
            }
            if let UpstreamTarget::Name { host, .. } = &config.target {
                if !names.contains(host) {
                    names.push(host.clone());
                }
            }
        }
        let weights: Vec<usize> = endpoints.iter().map(|endpoint| endpoint.weight()).collect();
        UpstreamSet {
            balancer: Balancer::new(load_balancing, &weights),
            endpoints,
            names: names.into(),
        }
    }

    /// The endpoint to send to next, avoiding those already `tried` while
    /// others are left; `None` when the location has no endpoint.
    pub fn pick(&self, tried: &[Arc<Endpoint>]) -> Option<Arc<Endpoint>> {
        if let ([only], []) = (self.endpoints.as_slice(), tried) {
            return Some(only.clone());
        }
        let index = self.balancer.pick(&self.endpoints, tried)?;
        Some(self.endpoints[index].clone())
    }

    /// The DNS names this location's upstreams are written with.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn endpoints(&self) -> &[Arc<Endpoint>] {
        &self.endpoints
    }
}

/// Where an upstream's connections go: its address, each current address of
/// its name, or its SRV owner.
fn destinations(
    target: &UpstreamTarget,
    resolved: &HashMap<String, Arc<[IpAddr]>>,
) -> Vec<Destination> {
    match target {
        UpstreamTarget::Address(address) => vec![Destination::Address(*address)],
        UpstreamTarget::Name { host, port } => resolved
            .get(host)
            .map(|addresses| {
                addresses
                    .iter()
                    .map(|ip| Destination::Address(SocketAddr::new(*ip, *port)))
                    .collect()
            })
            .unwrap_or_default(),
        UpstreamTarget::Srv { owner, resolution } => vec![Destination::Srv {
            owner: owner.as_str().into(),
            resolution: resolution.clone(),
        }],
    }
}

/// A location's health-check settings after its host's are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSettings {
    pub enabled: bool,
    pub interval: Duration,
}

impl CheckSettings {
    pub fn layered(host: &HealthCheck, location: &HealthCheck) -> CheckSettings {
        CheckSettings {
            enabled: location.enabled.or(host.enabled).unwrap_or(true),
            interval: location
                .interval
                .or(host.interval)
                .unwrap_or(DEFAULT_CHECK_INTERVAL),
        }
    }

    fn interval(self) -> Option<Duration> {
        self.enabled.then_some(self.interval)
    }
}

#[cfg(test)]
mod tests;
