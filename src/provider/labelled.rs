//! Publishing what labels describe, for the providers that read labels
//! (containers' and services'): the hosts and diagnostics of the label
//! pipeline, the replicas' addresses, and the DNS servers the labels name
//! looked up now (each name once, nothing kept between publishes).

use tokio::time::Instant;

use super::dns_servers::{self, RETRY_INTERVAL};
use super::users_files;
use crate::config::{
    Desired, DesiredHosts, Diagnostic, HostConfig, LocationConfig, Origin, ProviderId,
};
use crate::labels::{build_hosts, dns_server_names, ContainerFacts, ProxyFacts};
use crate::resolve::Dns;
use crate::routes::Router;

/// What a publish did.
pub struct Published {
    /// The router took a change.
    pub changed: bool,
    /// When to publish again because a DNS server name had no address.
    pub retry_at: Option<Instant>,
}

/// Builds the hosts `replicas` describe, with `more_diagnostics` (the
/// provider's own), and hands them to the router under `provider` (which
/// swaps only on change, logs each diagnostic once and keeps vanished
/// locations for the grace period).
pub async fn publish(
    provider: ProviderId,
    replicas: &[ContainerFacts],
    more_diagnostics: Vec<Diagnostic>,
    context: &ProxyFacts,
    router: &Router,
    dns: &dyn Dns,
) -> Published {
    let (hosts, diagnostics) = hosts_of(replicas, more_diagnostics, context);
    let container_addresses = replicas
        .iter()
        .flat_map(|replica| replica.networks.values().flatten().copied())
        .collect();
    let mut desired = Desired {
        hosts,
        diagnostics,
        container_addresses,
    };
    let named = dns_server_names(replicas, context);
    let resolved = dns_servers::settle(dns, &named, &mut desired).await;
    users_files::settle(&mut desired, &users_file_label).await;
    Published {
        changed: router.publish(provider, desired),
        retry_at: (!resolved).then(|| Instant::now() + RETRY_INTERVAL),
    }
}

/// What `replicas` describe, checked as a publish would (`dockhand check`):
/// every problem, the users files' included; DNS server names are not
/// looked up (one that does not resolve is served, not refused).
pub async fn check(
    replicas: &[ContainerFacts],
    more_diagnostics: Vec<Diagnostic>,
    context: &ProxyFacts,
) -> Vec<Diagnostic> {
    let (hosts, diagnostics) = hosts_of(replicas, more_diagnostics, context);
    let mut desired = Desired {
        hosts,
        diagnostics,
        ..Desired::default()
    };
    users_files::settle(&mut desired, &users_file_label).await;
    desired.diagnostics
}

/// Where a location's `users_file` label is: on its oldest container.
fn users_file_label(_: &HostConfig, location: &LocationConfig) -> (Origin, String) {
    let container = location.containers.first();
    let origin = Origin::Container {
        name: container.map_or_else(String::new, |c| c.name.clone()),
        id: container.map_or_else(String::new, |c| c.id.clone()),
    };
    let start = container.map_or("dockhand", |c| c.labels.as_str());
    (origin, format!("{start}.basic_auth.users_file"))
}

/// The hosts `replicas` describe, and every problem: the label pipeline's
/// and `more_diagnostics` (the provider's own), sorted, each once.
pub fn hosts_of(
    replicas: &[ContainerFacts],
    more_diagnostics: Vec<Diagnostic>,
    context: &ProxyFacts,
) -> (DesiredHosts, Vec<Diagnostic>) {
    let (hosts, mut diagnostics) = build_hosts(replicas, context);
    diagnostics.extend(more_diagnostics);
    diagnostics.sort_by(|a, b| (&a.origin, &a.key).cmp(&(&b.origin, &b.key)));
    // Replicas of one service share their labels, and so their problems.
    diagnostics.dedup();
    (hosts, diagnostics)
}

/// Sleeps until `retry_at` (a [`Published::retry_at`]); without one, forever.
pub async fn until(retry_at: Option<Instant>) {
    match retry_at {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
