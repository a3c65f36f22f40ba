//! `GET /api/v1/hosts`: every host served, in the routes file's shape
//! (`host` → `location` → `upstream`, keyed as they are written), with what
//! is known now beside the settings: which provider and containers define
//! each, and each upstream's current addresses with their health, in-flight
//! requests and where they came from.

use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::AdminState;

use crate::config::{
    middlewares_json, ContainerRef, Hashes, HostConfig, LoadBalancing, LocationConfig, Protocol,
    ProviderId, Retry, Rewrite, UpstreamConfig, UpstreamTarget,
};
use crate::routes::{Location, Snapshot, Swap};
use crate::upstream::{CheckSettings, Destination, Endpoint};

/// Every host, by its written name.
pub fn all_hosts(state: &AdminState) -> Value {
    let snapshot = state.router().snapshot();
    let hosts: Map<String, Value> = served_hosts(&snapshot)
        .map(|(provider, host)| {
            let view = host_view(state, &snapshot, provider, host);
            (host.pattern.to_string(), view)
        })
        .collect();
    json!({
        "table": snapshot.last_swap.as_ref().map(swap_view),
        "host": hosts,
    })
}

/// One host by its written name (`*.example.com` for a wildcard); `None`
/// when nothing serves it.
pub fn one_host(state: &AdminState, name: &str) -> Option<Value> {
    let snapshot = state.router().snapshot();
    let name = name.to_ascii_lowercase();
    let view = served_hosts(&snapshot)
        .find(|(_, host)| host.pattern.to_string() == name)
        .map(|(provider, host)| host_view(state, &snapshot, provider, host));
    view
}

/// The hosts as served: a host several providers define, from the first.
fn served_hosts(snapshot: &Snapshot) -> impl Iterator<Item = (ProviderId, &HostConfig)> {
    snapshot
        .providers
        .iter()
        .flat_map(|(provider, desired)| desired.hosts.iter().map(|host| (*provider, host)))
        .filter(|(provider, host)| {
            !snapshot
                .conflicts
                .iter()
                .any(|conflict| conflict.host == host.pattern && conflict.ignored == *provider)
        })
}

fn swap_view(swap: &Swap) -> Value {
    json!({
        "number": swap.number,
        "swapped_at": timestamp(swap.at),
        "build_ms": swap.build.as_secs_f64() * 1000.0,
    })
}

fn host_view(
    state: &AdminState,
    snapshot: &Snapshot,
    provider: ProviderId,
    host: &HostConfig,
) -> Value {
    let ignored_from: Vec<String> = snapshot
        .conflicts
        .iter()
        .filter(|conflict| conflict.host == host.pattern)
        .map(|conflict| conflict.ignored.to_string())
        .collect();
    let locations: Map<String, Value> = host
        .locations
        .iter()
        .map(|location| {
            let served = snapshot.table.location(&host.pattern, &location.prefix);
            let view = location_view(state, host, location, served);
            (location.prefix.clone(), view)
        })
        .collect();
    json!({
        "provider": provider.to_string(),
        "ignored_from": ignored_from,
        "https_redirect": host.https_redirect,
        "hsts": host.hsts.map(|hsts| hsts.to_string()),
        "location": locations,
    })
}

fn location_view(
    state: &AdminState,
    host: &HostConfig,
    config: &LocationConfig,
    served: Option<&Location>,
) -> Value {
    let checks = CheckSettings::layered(&host.health_check, &config.health_check);
    let upstreams: Map<String, Value> = config
        .upstreams
        .iter()
        .map(|upstream| {
            let endpoints = served
                .into_iter()
                .flat_map(|location| location.upstreams.endpoints())
                .filter(|endpoint| *endpoint.config == *upstream);
            let addresses: Vec<Value> = endpoints
                .map(|endpoint| address_view(state, endpoint))
                .collect();
            let mut view = upstream_settings(upstream);
            view.insert("addresses".into(), addresses.into());
            (upstream.target.to_string(), Value::Object(view))
        })
        .collect();
    json!({
        "containers": config.containers.iter().map(container_view).collect::<Vec<_>>(),
        "load_balancing": match config.load_balancing {
            LoadBalancing::RoundRobin => "round_robin",
            LoadBalancing::LeastConnections => "least_connections",
        },
        "retry": config.retry.as_ref().map(retry_view),
        "rewrite": config.rewrite.as_ref().map(rewrite_view),
        "health_check": {"enabled": checks.enabled, "interval_secs": checks.interval.as_secs()},
        "upgrades": config.upgrades.protocols(),
        "middlewares": middlewares_json(&config.middlewares, Hashes::Hidden),
        "upstream": upstreams,
    })
}

fn container_view(container: &ContainerRef) -> Value {
    json!({"name": container.name, "id": container.id, "labels": container.labels})
}

fn retry_view(retry: &Retry) -> Value {
    let on: Vec<String> = retry
        .on_connect
        .then(|| "connect".to_owned())
        .into_iter()
        .chain(retry.on_statuses.iter().map(|s| s.as_str().to_owned()))
        .collect();
    json!({"attempts": retry.attempts, "on": on})
}

fn rewrite_view(rewrite: &Rewrite) -> Value {
    match rewrite {
        Rewrite::Prefix { strip, add } => json!({"strip_prefix": strip, "add_prefix": add}),
        Rewrite::Regex { pattern, replace } => {
            json!({"match": pattern.as_str(), "replace": replace})
        }
    }
}

/// An upstream's settings as the routes file writes them.
fn upstream_settings(upstream: &UpstreamConfig) -> Map<String, Value> {
    let mut view = Map::new();
    view.insert("weight".into(), upstream.weight.into());
    view.insert("tls".into(), upstream.tls.into());
    if upstream.tls {
        view.insert("sni".into(), upstream.sni.clone().into());
        view.insert("verify".into(), upstream.verify.into());
    }
    let protocol = match upstream.protocol {
        Protocol::Http1 => "http1",
        Protocol::H2c => "h2c",
    };
    view.insert("protocol".into(), protocol.into());
    if !upstream.headers_add.is_empty() {
        let added: Map<String, Value> = upstream
            .headers_add
            .iter()
            .map(|(name, value)| {
                let text = match is_credential(name.as_str()) {
                    true => REDACTED.to_owned(),
                    false => String::from_utf8_lossy(value.as_bytes()).into_owned(),
                };
                (name.to_string(), text.into())
            })
            .collect();
        view.insert("headers".into(), json!({"add": added}));
    }
    if let UpstreamTarget::Srv { resolution, .. } = &upstream.target {
        let resolver = resolution.resolver.as_ref().map(ToString::to_string);
        view.insert(
            "resolution".into(),
            json!({
                "mode": "srv",
                "resolver": resolver,
                "min_ttl": humantime::format_duration(resolution.min_ttl).to_string(),
                "max_ttl": humantime::format_duration(resolution.max_ttl).to_string(),
                "negative_ttl": humantime::format_duration(resolution.negative_ttl).to_string(),
            }),
        );
    }
    view
}

/// What the API shows in place of a credential.
const REDACTED: &str = "(redacted)";

/// Whether a header added towards an upstream likely carries a credential
/// (`Authorization: Bearer …`, an API key): the API names it but does not
/// show its value, which a reader of the dashboard need not learn.
fn is_credential(name: &str) -> bool {
    const EXACT: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];
    const PARTS: [&str; 5] = ["token", "secret", "password", "key", "auth"];
    EXACT.contains(&name) || PARTS.iter().any(|part| name.contains(part))
}

fn address_view(state: &AdminState, endpoint: &Endpoint) -> Value {
    let health = endpoint.state.health();
    json!({
        "address": endpoint.to_string(),
        "health": health.as_str(),
        "failures": endpoint.state.failures(),
        "last_check": endpoint.state.last_check().map(timestamp),
        "in_flight": endpoint.state.in_flight(),
        "weight": endpoint.weight(),
        "source": source_view(state, endpoint),
    })
}

/// Where an address came from: a container, an address written in the
/// routes file, a DNS name (and when it last answered), or an SRV owner
/// (and the targets it last answered with).
fn source_view(state: &AdminState, endpoint: &Endpoint) -> Value {
    let config = &endpoint.config;
    match (&config.target, &endpoint.destination) {
        (UpstreamTarget::Name { host, .. }, _) => json!({
            "kind": "dns",
            "name": host,
            "resolved_at": state.names.last_answer(host).map(timestamp),
        }),
        (_, Destination::Srv { owner, resolution }) => {
            let targets: Vec<Value> = state
                .proxy
                .client
                .cached_srv(owner, resolution)
                .map(|answer| answer.records)
                .unwrap_or_default()
                .iter()
                .map(|record| {
                    json!({
                        "target": record.target,
                        "port": record.port,
                        "priority": record.priority,
                        "weight": record.weight,
                    })
                })
                .collect();
            json!({"kind": "srv", "owner": &**owner, "targets": targets})
        }
        (_, Destination::Address(_)) => match &config.container {
            Some(container) => {
                json!({"kind": "container", "name": container.name, "id": container.id})
            }
            None => json!({"kind": "address"}),
        },
    }
}

/// RFC 3339 in UTC, to the second.
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_added_towards_upstreams_are_not_shown() {
        for name in [
            "authorization",
            "x-api-key",
            "x-auth-token",
            "cookie",
            "x-secret",
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in ["host", "x-forwarded-prefix", "x-tenant"] {
            assert!(!is_credential(name), "{name}");
        }
    }
}
