//! Routes into hosts and locations. Containers whose routes name the same host
//! and path are replicas of one location, each adding its upstreams; the
//! oldest one's location settings are used, and a newer one that disagrees
//! gets a warning. A host's own settings (`https_redirect`, `hsts`) are
//! taken from the oldest route that writes each, whatever its path, so one
//! container can set them for the host; a route that writes another value
//! gets a warning. Hosts and locations come out sorted, so the same
//! containers always give the same hosts.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::time::Duration;

use crate::config::{
    values, ContainerRef, DesiredHosts, HealthCheck, HostConfig, HostPattern, Hsts, LoadBalancing,
    LocationConfig, Retry, Rewrite, Upgrades, UpstreamConfig,
};

use super::route::{LabelRoute, LocationSettings};
use crate::config::Findings;

/// The locations built so far, by host then path.
#[derive(Default)]
pub struct Locations {
    hosts: BTreeMap<String, HostEntry>,
}

struct HostEntry {
    pattern: HostPattern,
    https_redirect: Option<Written<bool>>,
    hsts: Option<Written<Hsts>>,
    locations: BTreeMap<String, LocationEntry>,
}

/// A host setting as the first (oldest) route that wrote it has it.
struct Written<T> {
    value: T,
    /// The container whose label it is.
    by: String,
}

impl HostEntry {
    /// Takes the host settings `route` writes that no older route did, and
    /// warns on those it writes otherwise.
    fn settle(
        &mut self,
        container: &ContainerRef,
        route: &LabelRoute,
        findings: &mut Findings<'_>,
    ) {
        let place = self.pattern.to_string();
        let host = route.host;
        let label = |key| route.label(key);
        Written::settle(
            &mut self.https_redirect,
            host.https_redirect,
            container,
            &place,
            label("https_redirect"),
            findings,
        );
        Written::settle(
            &mut self.hsts,
            host.hsts,
            container,
            &place,
            label("hsts"),
            findings,
        );
    }
}

impl<T: Copy + PartialEq + Display> Written<T> {
    /// `written` by a route of `container` (its label `label`): held if no
    /// older route wrote it, else warned about if it differs.
    fn settle(
        held: &mut Option<Written<T>>,
        written: Option<T>,
        container: &ContainerRef,
        place: &str,
        label: String,
        findings: &mut Findings<'_>,
    ) {
        let Some(mine) = written else { return };
        match held {
            None => {
                *held = Some(Written {
                    value: mine,
                    by: container.name.clone(),
                })
            }
            Some(theirs) if theirs.value != mine => findings.warning(
                label,
                format!(
                    "{place}: `{mine}` here, `{}` on \"{}\", the oldest container that sets it for this host, whose setting is used",
                    theirs.value, theirs.by
                ),
            ),
            Some(_) => {}
        }
    }
}

struct LocationEntry {
    config: LocationConfig,
    /// The container whose settings the location has.
    oldest: String,
}

impl Locations {
    /// Adds one route of `container`, with the upstreams it brings (possibly
    /// none: the location still exists and answers 503). Call oldest container first.
    pub fn add(
        &mut self,
        container: &ContainerRef,
        route: &LabelRoute,
        upstreams: &[UpstreamConfig],
        findings: &mut Findings<'_>,
    ) {
        for pattern in &route.hosts {
            let host = self
                .hosts
                .entry(pattern.to_string())
                .or_insert_with(|| HostEntry {
                    pattern: pattern.clone(),
                    https_redirect: None,
                    hsts: None,
                    locations: BTreeMap::new(),
                });
            host.settle(container, route, findings);
            let location =
                host.locations
                    .entry(route.path.clone())
                    .or_insert_with(|| LocationEntry {
                        config: new_location(&route.path, &route.location),
                        oldest: container.name.clone(),
                    });
            let place = format!("{pattern}{}", route.path);
            let routed_by = &location.config.containers;
            if let Some(other) = routed_by.iter().find(|c| c.name == container.name) {
                findings.error(
                    route.label("host"),
                    format!("{place} is already routed by this container's {}.host; this route adds nothing to it", other.labels),
                );
                continue;
            }
            for (key, theirs, mine) in differences(&location.config, &route.location) {
                findings.warning(
                    route.label(key),
                    format!(
                        "{place}: `{mine}` here, `{theirs}` on \"{}\", the oldest replica serving, whose setting is used",
                        location.oldest
                    ),
                );
            }
            location.config.containers.push(container.clone());
            location.config.upstreams.extend_from_slice(upstreams);
        }
    }

    pub fn into_desired_hosts(self) -> DesiredHosts {
        let hosts = self
            .hosts
            .into_values()
            .map(|host| HostConfig {
                pattern: host.pattern,
                health_check: HealthCheck::default(),
                https_redirect: host
                    .https_redirect
                    .map_or(values::DEFAULT_HTTPS_REDIRECT, |written| written.value),
                hsts: host.hsts.map(|written| written.value),
                locations: host
                    .locations
                    .into_values()
                    .map(|location| location.config)
                    .collect(),
            })
            .collect();
        DesiredHosts { hosts }
    }
}

fn new_location(path: &str, settings: &LocationSettings) -> LocationConfig {
    LocationConfig {
        prefix: path.to_owned(),
        load_balancing: settings.load_balancing,
        retry: settings.retry.clone(),
        rewrite: settings.rewrite.clone(),
        health_check: settings.health_check,
        upgrades: settings.upgrades.clone(),
        middlewares: settings.middlewares.clone(),
        upstreams: Vec::new(),
        upstreams_move: true,
        containers: Vec::new(),
    }
}

/// The settings where `settings` disagrees with the location, as (key, the
/// location's, these), each described as a user would write it.
fn differences(
    location: &LocationConfig,
    settings: &LocationSettings,
) -> Vec<(&'static str, String, String)> {
    let pairs = [
        (
            "load_balancing",
            describe_load_balancing(location.load_balancing),
            describe_load_balancing(settings.load_balancing),
        ),
        (
            "retry",
            describe_retry(location.retry.as_ref()),
            describe_retry(settings.retry.as_ref()),
        ),
        (
            "rewrite",
            describe_rewrite(location.rewrite.as_ref()),
            describe_rewrite(settings.rewrite.as_ref()),
        ),
        (
            "health_check",
            describe_health_check(location.health_check),
            describe_health_check(settings.health_check),
        ),
        (
            "upgrades",
            describe_upgrades(&location.upgrades),
            describe_upgrades(&settings.upgrades),
        ),
    ];
    // Equal settings (nearly always) need no description at all.
    let (theirs, mine) = match location.middlewares == settings.middlewares {
        true => (Vec::new(), Vec::new()),
        false => (
            location.middlewares.describe(),
            settings.middlewares.describe(),
        ),
    };
    let middlewares = MIDDLEWARE_FEATURES.into_iter().map(|feature| {
        (
            feature,
            describe_middleware(&theirs, feature),
            describe_middleware(&mine, feature),
        )
    });
    pairs
        .into_iter()
        .chain(middlewares)
        .filter(|(_, theirs, mine)| theirs != mine)
        .collect()
}

/// The middlewares a conflict can name, each by the start of its labels.
const MIDDLEWARE_FEATURES: [&str; 9] = [
    "ip_allow",
    "rate_limit",
    "basic_auth",
    "forward_auth",
    "max_body_size",
    "redirect",
    "headers",
    "cors",
    "compress",
];

fn describe_load_balancing(load_balancing: LoadBalancing) -> String {
    match load_balancing {
        LoadBalancing::RoundRobin => "round_robin",
        LoadBalancing::LeastConnections => "least_connections",
    }
    .to_owned()
}

fn describe_retry(retry: Option<&Retry>) -> String {
    let Some(retry) = retry else {
        return "no retry".to_owned();
    };
    let on: Vec<String> = retry
        .on_connect
        .then(|| "connect".to_owned())
        .into_iter()
        .chain(
            retry
                .on_statuses
                .iter()
                .map(|status| status.as_str().to_owned()),
        )
        .collect();
    format!("attempts={}, on={}", retry.attempts, on.join(","))
}

fn describe_rewrite(rewrite: Option<&Rewrite>) -> String {
    match rewrite {
        None => "no rewrite".to_owned(),
        Some(Rewrite::Prefix { strip, add }) => {
            let parts: Vec<String> = [("strip_prefix", strip), ("add_prefix", add)]
                .into_iter()
                .filter_map(|(key, value)| Some(format!("{key}={}", value.as_deref()?)))
                .collect();
            parts.join(", ")
        }
        Some(Rewrite::Regex { pattern, replace }) => {
            format!("match={}, replace={replace}", pattern.as_str())
        }
    }
}

/// One middleware's settings, as a diagnostic shows them; `none` when unset.
/// `described`: a location's middlewares as `Middlewares::describe` says them.
fn describe_middleware(described: &[(&'static str, String)], feature: &str) -> String {
    let described: Vec<&str> = described
        .iter()
        .filter(|(key, _)| *key == feature)
        .map(|(_, text)| text.as_str())
        .collect();
    match described.is_empty() {
        true => "none".to_owned(),
        false => described.join("; "),
    }
}

fn describe_upgrades(upgrades: &Upgrades) -> String {
    match upgrades.protocols() {
        [] => "no upgrades".to_owned(),
        protocols => protocols.join(","),
    }
}

fn describe_health_check(check: HealthCheck) -> String {
    let interval = check
        .interval
        .map(|interval: Duration| format!("interval_secs={}", interval.as_secs()));
    let enabled = check.enabled.map(|enabled| format!("enabled={enabled}"));
    let parts: Vec<String> = interval.into_iter().chain(enabled).collect();
    if parts.is_empty() {
        "default".to_owned()
    } else {
        parts.join(", ")
    }
}
