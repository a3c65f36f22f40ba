//! The label key grammar. Sorts one container's labels into routes
//! (`<prefix>.<key>` is the unnamed route, `<prefix>.routes.<name>.<key>` a
//! named one) and reports keys that are not dockhand's: unknown keys with a
//! "did you mean", and near misses of the prefix itself (`dockhnad.host`,
//! `dockhand_host`). Values are read elsewhere (`route`).

use std::collections::BTreeMap;

use crate::config::middleware::{is_middleware_key, MIDDLEWARE_KEYS};
use crate::config::values::closest;

use crate::config::{Findings, Severity};

/// Every key a route may carry, besides `headers.add.<Header-Name>`.
pub const ROUTE_KEYS: &[&str] = &[
    "host",
    "path",
    "port",
    "network",
    "upstream",
    "weight",
    "load_balancing",
    "retry.attempts",
    "retry.on",
    "rewrite.strip_prefix",
    "rewrite.add_prefix",
    "rewrite.match",
    "rewrite.replace",
    "health_check.interval_secs",
    "health_check.enabled",
    "upgrades",
    "tls",
    "sni",
    "verify",
    "protocol",
    "https_redirect",
    "hsts",
    "resolution.mode",
    "resolution.resolver",
    "resolution.min_ttl",
    "resolution.max_ttl",
    "resolution.negative_ttl",
    "resolution.tls_server_name",
];

/// `headers.add.<Header-Name>`: one request header per label.
pub const HEADER_KEY_START: &str = "headers.add.";
/// `<prefix>.enable`: the whole container, never one route.
const ENABLE_KEY: &str = "enable";
/// `<prefix>.swarm.upstream`: how a whole Swarm service is reached (read by
/// the swarm provider), never one route's.
pub const SWARM_UPSTREAM_KEY: &str = "swarm.upstream";
const ROUTES_SEGMENT: &str = "routes";

/// A container's dockhand labels, sorted out.
#[derive(Debug, Default)]
pub struct SortedLabels<'a> {
    /// The value of `<prefix>.enable`, if written.
    pub enable: Option<&'a str>,
    /// The value of `<prefix>.swarm.upstream`, if written.
    pub swarm_upstream: Option<&'a str>,
    /// The unnamed route first (when it has labels), then named routes by name.
    pub routes: Vec<RouteLabels<'a>>,
}

/// The labels of one route, keyed without their route's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteLabels<'a> {
    /// `None` for the unnamed route.
    pub name: Option<&'a str>,
    /// What every label of this route starts with: `dockhand.` or `dockhand.routes.api.`.
    pub label_start: String,
    /// Known keys (`host`, `retry.on`, `headers.add.X-Id`...) to their values, trimmed.
    pub values: BTreeMap<&'a str, &'a str>,
}

impl RouteLabels<'_> {
    /// The full label of one of this route's keys, as the user wrote it.
    pub fn label(&self, key: &str) -> String {
        format!("{}{key}", self.label_start)
    }
}

/// Sorts `labels` under `prefix`, reporting unknown keys and near misses.
pub fn sort_labels<'a>(
    labels: &'a BTreeMap<String, String>,
    prefix: &str,
    findings: &mut Findings<'_>,
) -> SortedLabels<'a> {
    let start = format!("{prefix}.");
    let mut sorted = SortedLabels::default();
    let mut routes: BTreeMap<Option<&str>, RouteLabels<'a>> = BTreeMap::new();
    for (label, value) in labels {
        let value = value.trim();
        let Some(key) = label.strip_prefix(&start) else {
            if let Some(meant) = near_miss(label, prefix) {
                findings.report(
                    Severity::Warning,
                    label.as_str(),
                    format!("not read, the label prefix is `{prefix}`"),
                    Some(meant),
                );
            }
            continue;
        };
        match key {
            ENABLE_KEY => {
                sorted.enable = Some(value);
                continue;
            }
            SWARM_UPSTREAM_KEY => {
                sorted.swarm_upstream = Some(value);
                continue;
            }
            _ => {}
        }
        let (name, route_key) = match split_route(key) {
            Ok(split) => split,
            Err(reason) => {
                findings.warning(label.as_str(), reason.replace("<prefix>", prefix));
                continue;
            }
        };
        let route_start = match name {
            Some(name) => format!("{start}{ROUTES_SEGMENT}.{name}."),
            None => start.clone(),
        };
        if let Some((reason, meant)) = route_key_problem(route_key, &start, &route_start) {
            findings.report(Severity::Warning, label.as_str(), reason, meant);
            continue;
        }
        routes
            .entry(name)
            .or_insert_with(|| RouteLabels {
                name,
                label_start: route_start,
                values: BTreeMap::new(),
            })
            .values
            .insert(route_key, value);
    }
    // `None` sorts first, so the unnamed route leads.
    sorted.routes = routes.into_values().collect();
    sorted
}

/// Splits a key after the prefix into its route name (if any) and the key within the route.
fn split_route(key: &str) -> Result<(Option<&str>, &str), &'static str> {
    let Some(named) = key.strip_prefix(ROUTES_SEGMENT) else {
        return Ok((None, key));
    };
    let Some(named) = named.strip_prefix('.') else {
        // `routesx.host` and the like: an unknown key of the unnamed route.
        return Ok((None, key));
    };
    match named.split_once('.') {
        Some((name, route_key)) if !name.is_empty() && !route_key.is_empty() => {
            Ok((Some(name), route_key))
        }
        _ => Err("a named route's labels are written <prefix>.routes.<name>.<key>"),
    }
}

/// Why `key` is not a key of the route whose labels start with `route_start`
/// (`start` is the prefix's: `dockhand.`), with the nearest label as a suggestion.
fn route_key_problem(
    key: &str,
    start: &str,
    route_start: &str,
) -> Option<(String, Option<String>)> {
    let unnamed = start == route_start;
    if is_route_key(key) {
        return None;
    }
    if key == ENABLE_KEY {
        let reason = format!(
            "unknown key, ignored (enable applies to the whole container: {start}{ENABLE_KEY})"
        );
        return Some((reason, None));
    }
    if key == SWARM_UPSTREAM_KEY {
        let reason = format!(
            "unknown key, ignored (swarm.upstream applies to the whole service: {start}{SWARM_UPSTREAM_KEY})"
        );
        return Some((reason, None));
    }
    if key.starts_with(HEADER_KEY_START) {
        let reason = format!(
            "names no header, ignored (write {route_start}{HEADER_KEY_START}<Header-Name>)"
        );
        return Some((reason, None));
    }
    // `route.api.host`, `rutes.api.host`: a misspelt `routes` segment.
    let misspelt_routes = || {
        let (first, rest) = key.split_once('.')?;
        let misspelt = unnamed && closest(first, &[ROUTES_SEGMENT]).is_some() && rest.contains('.');
        misspelt.then(|| format!("{ROUTES_SEGMENT}.{rest}"))
    };
    let known: Vec<&str> = ROUTE_KEYS.iter().chain(MIDDLEWARE_KEYS).copied().collect();
    let suggestion = closest(key, &known)
        .map(str::to_owned)
        .or_else(misspelt_routes);
    let meant = suggestion.map(|near| format!("{route_start}{near}"));
    Some(("unknown key, ignored".to_owned(), meant))
}

fn is_route_key(key: &str) -> bool {
    ROUTE_KEYS.contains(&key)
        || is_middleware_key(key)
        || key
            .strip_prefix(HEADER_KEY_START)
            .is_some_and(|name| !name.is_empty())
}

/// The label meant by a key that almost starts with the prefix: a misspelt
/// or differently cased prefix (`dockhnad.host`, `Dockhand.host`) or another
/// separator (`dockhand_host`), followed by a dockhand key. Requiring a known
/// key after it keeps other tools' labels, and other dockhand instances'
/// prefixes such as `dockhand-internal.`, from being flagged.
fn near_miss(label: &str, prefix: &str) -> Option<String> {
    let lower = label.to_ascii_lowercase();
    let prefix_lower = prefix.to_ascii_lowercase();
    let after_separator = lower
        .strip_prefix(&prefix_lower)
        .filter(|rest| rest.starts_with(['_', '-', ':', '/']))
        .map(|rest| &label[label.len() - rest.len() + 1..]);
    // The prefix may itself hold dots: compare as many segments as it has.
    let prefix_segments = prefix.split('.').count();
    let misspelt = label
        .match_indices('.')
        .nth(prefix_segments - 1)
        .and_then(|(dot, _)| {
            let written = &label[..dot];
            let near = written != prefix
                && (written.eq_ignore_ascii_case(prefix)
                    || closest(&written.to_ascii_lowercase(), &[prefix_lower.as_str()]).is_some());
            near.then(|| &label[dot + 1..])
        });
    let rest = misspelt.or(after_separator)?;
    let is_dockhand_key = rest == ENABLE_KEY
        || is_route_key(rest)
        || matches!(split_route(rest), Ok((Some(_), key)) if is_route_key(key));
    is_dockhand_key.then(|| format!("{prefix}.{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_need_a_dockhand_key_after_them() {
        let near = |label| near_miss(label, "dockhand");
        assert_eq!(near("dockhnad.host").as_deref(), Some("dockhand.host"));
        assert_eq!(near("Dockhand.port").as_deref(), Some("dockhand.port"));
        assert_eq!(near("dockhand_host").as_deref(), Some("dockhand.host"));
        assert_eq!(
            near("dokhand.routes.api.host").as_deref(),
            Some("dockhand.routes.api.host")
        );
        assert_eq!(near("dockhand-internal.host"), None);
        assert_eq!(near("com.docker.compose.project"), None);
        assert_eq!(near("traefik.enable"), None);
        assert_eq!(near("dockhnad.banana"), None);
    }

    #[test]
    fn near_misses_of_a_dotted_prefix() {
        assert_eq!(
            near_miss("com.exmaple.proxy.host", "com.example.proxy").as_deref(),
            Some("com.example.proxy.host")
        );
        assert_eq!(near_miss("com.host", "com.example.proxy"), None);
    }

    #[test]
    fn route_names_and_keys() {
        assert_eq!(split_route("host"), Ok((None, "host")));
        assert_eq!(
            split_route("routes.api.retry.on"),
            Ok((Some("api"), "retry.on"))
        );
        assert!(split_route("routes.api").is_err());
        assert!(split_route("routes..host").is_err());
        assert_eq!(split_route("routesx.host"), Ok((None, "routesx.host")));
    }

    #[test]
    fn suggestions_name_the_whole_label() {
        let unnamed = |key| route_key_problem(key, "dockhand.", "dockhand.");
        let named = |key| route_key_problem(key, "dockhand.", "dockhand.routes.api.");
        let suggests = |problem: Option<(String, Option<String>)>, label: &str| {
            let (reason, meant) = problem.expect("a problem");
            assert_eq!(reason, "unknown key, ignored");
            assert_eq!(meant.as_deref(), Some(label));
        };
        suggests(unnamed("hots"), "dockhand.host");
        suggests(named("retry.atempts"), "dockhand.routes.api.retry.attempts");
        suggests(unnamed("route.api.host"), "dockhand.routes.api.host");
        assert_eq!(named("headers.add.X-Id"), None);
        assert_eq!(
            unnamed("banana"),
            Some(("unknown key, ignored".into(), None))
        );
        assert!(named("enable").unwrap().0.contains("dockhand.enable"));
        assert!(unnamed("headers.add.")
            .unwrap()
            .0
            .contains("names no header"));
    }
}
