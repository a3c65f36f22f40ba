//! Docker labels into desired hosts: a pure function from the facts the
//! Docker provider gathered (containers, their labels, networks, ports and
//! health, and dockhand's own networks) to hosts and diagnostics. It does no
//! I/O and keeps no state; the provider calls it on every change and diffs
//! the result. Grace periods for recreated containers are the router's.
//!
//! - `facts`: the inputs.
//! - `keys`: the label key grammar, unknown keys and near-miss prefixes.
//! - `route`: one route's values, validated with `config::values`.
//! - `network`, `port`: the address and port a container is reached at.
//! - `merge`: replicas into locations, conflicts between them.
//!
//! DNS servers written as names (`resolution.resolver`) stay names here;
//! `dns_server_names` lists them with their labels, for the provider to look
//! up before it publishes.

mod facts;
mod keys;
mod merge;
mod network;
mod port;
mod route;

pub use facts::{ContainerFacts, Health, ProxyFacts, ServiceRef};
/// The keys a route may carry: the fuzz target checks that every diagnostic
/// names a label a container carries or could carry.
pub use keys::{ROUTE_KEYS, SWARM_UPSTREAM_KEY};

use std::net::SocketAddr;

use crate::config::{
    values, ContainerRef, DesiredHosts, Diagnostic, Findings, NamedDnsServer, Origin,
    UpstreamConfig, UpstreamTarget,
};

use merge::Locations;
use route::LabelRoute;

/// Builds the hosts the containers' labels describe, with every label problem
/// found. Every container that carries a route makes its location exist;
/// only those that take requests (running, and healthy when they have a
/// health check) bring upstreams, so a host whose containers all exist but
/// none can serve has locations without upstreams (`503`, not `404`).
/// Diagnostics come sorted by container name, then label.
pub fn build_hosts(
    containers: &[ContainerFacts],
    context: &ProxyFacts,
) -> (DesiredHosts, Vec<Diagnostic>) {
    // Location settings come from the oldest container that serves, so
    // those that serve come first.
    let mut in_order: Vec<&ContainerFacts> = containers.iter().collect();
    in_order.sort_by(|a, b| {
        (!a.takes_requests(), a.created, &a.id).cmp(&(!b.takes_requests(), b.created, &b.id))
    });
    let mut diagnostics = Vec::new();
    let mut locations = Locations::default();
    for container in in_order {
        let mut findings =
            Findings::new(origin_of(container), &mut diagnostics).with_values(&container.labels);
        let routes = read_routes(container, &context.label_prefix, &mut findings);
        for route in &routes {
            let source = ContainerRef {
                name: container.name.clone(),
                id: container.id.clone(),
                labels: route.label_start.trim_end_matches('.').to_owned(),
            };
            let upstreams = match container.takes_requests() {
                true => upstreams_of(container, route, &source, context, &mut findings),
                false => Vec::new(),
            };
            locations.add(&source, route, &upstreams, &mut findings);
        }
    }
    // Stable, so problems of one label keep the order they were found in.
    diagnostics.sort_by(|a, b| (&a.origin, &a.key).cmp(&(&b.origin, &b.key)));
    (locations.into_desired_hosts(), diagnostics)
}

/// The DNS servers written as names in the routes that bring upstreams
/// (those of containers that take requests), each with its container and
/// label. Every route's upstreams share one resolution, so one per route.
pub fn dns_server_names(
    containers: &[ContainerFacts],
    context: &ProxyFacts,
) -> Vec<NamedDnsServer> {
    let mut named = Vec::new();
    // `build_hosts` reports the labels' problems; here they are read for names only.
    let mut reported_elsewhere = Vec::new();
    for container in containers.iter().filter(|c| c.takes_requests()) {
        let origin = origin_of(container);
        let mut findings = Findings::new(origin.clone(), &mut reported_elsewhere);
        for route in read_routes(container, &context.label_prefix, &mut findings) {
            let name = route
                .upstream_override
                .iter()
                .flatten()
                .find_map(UpstreamTarget::dns_server_name);
            if let Some(name) = name {
                named.push(NamedDnsServer {
                    origin: origin.clone(),
                    key: route.label("resolution.resolver"),
                    name: name.to_owned(),
                });
            }
        }
    }
    named
}

fn origin_of(container: &ContainerFacts) -> Origin {
    match &container.service {
        Some(service) => Origin::Service {
            name: service.name.clone(),
            id: service.id.clone(),
        },
        None => Origin::Container {
            name: container.name.clone(),
            id: container.id.clone(),
        },
    }
}

/// The valid routes of one container; none when it is turned off.
fn read_routes(
    container: &ContainerFacts,
    prefix: &str,
    findings: &mut Findings<'_>,
) -> Vec<LabelRoute> {
    let enable_label = format!("{prefix}.enable");
    // Read before anything else: a container turned off gets no diagnostics.
    if let Some(enable) = container.labels.get(&enable_label) {
        match values::boolean(enable) {
            Ok(true) => {}
            Ok(false) => return Vec::new(),
            Err(reason) => {
                // Whether it was meant to be on is unknown: leave it out.
                findings.error(
                    enable_label,
                    format!("{reason}; the container is not routed"),
                );
                return Vec::new();
            }
        }
    }
    let sorted = keys::sort_labels(&container.labels, prefix, findings);
    if sorted.swarm_upstream.is_some() && container.service.is_none() {
        findings.warning(
            format!("{prefix}.{SWARM_UPSTREAM_KEY}"),
            "read on Swarm services only (their deploy.labels), ignored on a container",
        );
    }
    let has_named_routes = sorted.routes.iter().any(|route| route.name.is_some());
    sorted
        .routes
        .iter()
        .filter_map(|labels| route::read_route(labels, has_named_routes, findings))
        .collect()
}

/// What one route of a container sends to: its `upstream` targets, or the
/// container's own address on the chosen network and port. Empty (with an
/// error) when the container can't be reached.
fn upstreams_of(
    container: &ContainerFacts,
    route: &LabelRoute,
    source: &ContainerRef,
    context: &ProxyFacts,
    findings: &mut Findings<'_>,
) -> Vec<UpstreamConfig> {
    let network_label = route.label("network");
    let port_label = route.label("port");
    if let Some(targets) = &route.upstream_override {
        let unused = [
            (route.port.is_some(), port_label),
            (route.network.is_some(), network_label),
        ];
        for (_, label) in unused.into_iter().filter(|(set, _)| *set) {
            findings.warning(
                label,
                format!(
                    "not used: {} replaces the container's own address",
                    route.label("upstream")
                ),
            );
        }
        return targets
            .iter()
            .map(|target| route.upstream.upstream(target.clone(), source))
            .collect();
    }
    let port = port::choose(route.port, &container.exposed_ports, &port_label)
        .map_err(|reason| findings.error(port_label.as_str(), reason));
    if let Some(name) = &container.reached_by_name {
        // The name answers on the networks the service shares with dockhand.
        let Ok(port) = port else {
            return Vec::new();
        };
        let target = UpstreamTarget::Name {
            host: name.clone(),
            port,
        };
        return vec![route.upstream.upstream(target, source)];
    }
    let reach = network::reach(container, route.network.as_deref(), context, &network_label)
        .map_err(|reason| findings.error(network_label.as_str(), reason));
    let (Ok(reach), Ok(port)) = (reach, port) else {
        return Vec::new();
    };
    if let Some(warning) = reach.warning {
        findings.warning(network_label, warning);
    }
    let target = UpstreamTarget::Address(SocketAddr::new(reach.address, port));
    vec![route.upstream.upstream(target, source)]
}
