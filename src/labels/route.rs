//! One route's label values, read into typed settings with the same parsers
//! and reasons as the routes file (`config::values`). A route with a bad value
//! is left out whole (an error diagnostic says why), so a half-understood
//! route never serves; the container's other routes are unaffected.

use std::time::Duration;

use http::{HeaderName, HeaderValue};

use crate::config::middleware::{read_middlewares, Middlewares, SwitchOrList, WrittenSettings};
use crate::config::values::{self, ResolutionMode, RewriteKind};
use crate::config::{
    parse_duration, ContainerRef, HealthCheck, HostPattern, Hsts, LoadBalancing, Protocol, Retry,
    Rewrite, SrvResolution, Upgrades, UpstreamConfig, UpstreamTarget,
};

use super::keys::{RouteLabels, HEADER_KEY_START};
use crate::config::Findings;

/// One route of a container, every value validated.
#[derive(Debug, Clone)]
pub struct LabelRoute {
    /// What this route's labels start with (`dockhand.`, `dockhand.routes.api.`), for diagnostics.
    pub label_start: String,
    /// Each gets the location; duplicates removed, order kept.
    pub hosts: Vec<HostPattern>,
    pub path: String,
    pub port: Option<u16>,
    pub network: Option<String>,
    /// `upstream`: targets that replace the container's own address.
    pub upstream_override: Option<Vec<UpstreamTarget>>,
    pub host: HostSettings,
    pub location: LocationSettings,
    pub upstream: UpstreamSettings,
}

impl LabelRoute {
    pub fn label(&self, key: &str) -> String {
        format!("{}{key}", self.label_start)
    }
}

/// The settings of the hosts a route names, as far as its labels write
/// them (`None`: not written, so another route of the host may set it).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSettings {
    pub https_redirect: Option<bool>,
    pub hsts: Option<Hsts>,
}

/// The settings of the location a route joins; replicas must agree on them.
#[derive(Debug, Clone, Default)]
pub struct LocationSettings {
    pub load_balancing: LoadBalancing,
    pub retry: Option<Retry>,
    pub rewrite: Option<Rewrite>,
    pub health_check: HealthCheck,
    pub upgrades: Upgrades,
    pub middlewares: Middlewares,
}

/// The settings of each upstream a route contributes.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    pub weight: u8,
    /// `None`: decided by the target's port.
    pub tls: Option<bool>,
    pub sni: Option<String>,
    pub verify: bool,
    pub protocol: Protocol,
    pub headers_add: Vec<(HeaderName, HeaderValue)>,
}

impl UpstreamSettings {
    /// An upstream of `target`, read from the route `source`.
    pub fn upstream(&self, target: UpstreamTarget, source: &ContainerRef) -> UpstreamConfig {
        UpstreamConfig {
            container: Some(source.clone()),
            tls: self.tls.unwrap_or_else(|| values::default_tls(&target)),
            target,
            weight: self.weight,
            sni: self.sni.clone(),
            verify: self.verify,
            headers_add: self.headers_add.clone(),
            protocol: self.protocol,
        }
    }
}

const DEFAULT_PATH: &str = "/";

/// Reads one route; `None` when it has no host or a bad value (reported).
/// `has_named_routes`: the container also has `routes.<name>` labels.
pub fn read_route(
    labels: &RouteLabels<'_>,
    has_named_routes: bool,
    findings: &mut Findings<'_>,
) -> Option<LabelRoute> {
    if !labels.values.contains_key("host") {
        report_missing_host(labels, has_named_routes, findings);
        return None;
    }
    let mut reader = Reader {
        labels,
        findings,
        refused: false,
    };
    let hosts = reader.list("host", values::host_pattern).map(|written| {
        let mut hosts = Vec::with_capacity(written.len());
        for host in written {
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        hosts
    });
    let path = reader.read("path", values::location_prefix);
    let port = reader.read("port", values::port);
    let network = reader.read("network", non_empty);
    let upstream_override = read_upstream_override(&mut reader);
    let location = LocationSettings {
        load_balancing: reader
            .read("load_balancing", values::load_balancing)
            .unwrap_or_default(),
        retry: read_retry(&mut reader),
        rewrite: read_rewrite(&mut reader),
        health_check: HealthCheck {
            interval: reader
                .read("health_check.interval_secs", |text| {
                    values::whole_number(text, values::HEALTH_INTERVAL_SECS)
                })
                .map(Duration::from_secs),
            enabled: reader.read("health_check.enabled", values::boolean),
        },
        upgrades: read_upgrades(&mut reader),
        middlewares: read_middlewares(&mut reader),
    };
    let upstream = UpstreamSettings {
        weight: reader
            .read("weight", |text| values::whole_number(text, values::WEIGHTS))
            .map_or(1, |weight| weight as u8),
        tls: reader.read("tls", values::boolean),
        sni: reader.read("sni", values::server_name),
        verify: reader.read("verify", values::boolean).unwrap_or(false),
        protocol: reader
            .read("protocol", values::protocol)
            .unwrap_or_default(),
        headers_add: read_headers(&mut reader),
    };
    check_verify(&mut reader, &upstream, upstream_override.as_ref());
    let host = HostSettings {
        https_redirect: reader.read("https_redirect", values::boolean),
        hsts: reader.read("hsts", values::hsts),
    };
    if reader.refused {
        return None;
    }
    Some(LabelRoute {
        label_start: labels.label_start.clone(),
        hosts: hosts?,
        path: path.unwrap_or_else(|| DEFAULT_PATH.to_owned()),
        port,
        network,
        upstream_override: upstream_override?,
        host,
        location,
        upstream,
    })
}

fn report_missing_host(
    labels: &RouteLabels<'_>,
    has_named_routes: bool,
    findings: &mut Findings<'_>,
) {
    let written: Vec<String> = labels.values.keys().map(|key| labels.label(key)).collect();
    match labels.name {
        Some(name) => findings.error(
            labels.label("host"),
            format!("route `{name}` has no host, so its labels route nothing"),
        ),
        None => {
            // Unnamed labels beside named routes look like defaults for them; they are not.
            let hint = if has_named_routes {
                " (routes.<name> labels do not inherit them)"
            } else {
                ""
            };
            findings.warning(
                labels.label("host"),
                format!(
                    "not set, so these labels route nothing: {}{hint}",
                    written.join(", ")
                ),
            );
        }
    }
}

/// `upstream` in the resolution mode the route asks for, with `resolution.*` checked.
/// `Some(None)`: no override; `None`: refused.
fn read_upstream_override(reader: &mut Reader<'_, '_>) -> Option<Option<Vec<UpstreamTarget>>> {
    let mode = match reader.raw("resolution.mode") {
        Some(_) => reader.read("resolution.mode", values::resolution_mode)?,
        None => ResolutionMode::A,
    };
    match mode {
        ResolutionMode::A => {
            for key in SRV_KEYS {
                if reader.raw(key).is_some() {
                    reader.refuse(key, values::SRV_ONLY);
                }
            }
            Some(reader.list("upstream", values::upstream_target))
        }
        ResolutionMode::Srv => {
            let resolution = read_srv_resolution(reader);
            if reader.raw("upstream").is_none() {
                reader.refuse(
                    "resolution.mode",
                    format!(
                        "srv needs {} naming the SRV owner (such as _app._tcp.example.internal)",
                        reader.labels.label("upstream")
                    ),
                );
                return None;
            }
            let owners = reader.list("upstream", values::srv_owner)?;
            let resolution = resolution?;
            Some(Some(
                owners
                    .into_iter()
                    .map(|owner| UpstreamTarget::Srv {
                        owner,
                        resolution: resolution.clone(),
                    })
                    .collect(),
            ))
        }
    }
}

const SRV_KEYS: [&str; 5] = [
    "resolution.resolver",
    "resolution.min_ttl",
    "resolution.max_ttl",
    "resolution.negative_ttl",
    "resolution.tls_server_name",
];

fn read_srv_resolution(reader: &mut Reader<'_, '_>) -> Option<SrvResolution> {
    let mut ttl =
        |key: &str, default: Duration| reader.read(key, parse_duration).unwrap_or(default);
    let min_ttl = ttl("resolution.min_ttl", values::DEFAULT_MIN_TTL);
    let max_ttl = ttl("resolution.max_ttl", values::DEFAULT_MAX_TTL);
    let negative_ttl = ttl("resolution.negative_ttl", values::DEFAULT_NEGATIVE_TTL);
    let resolution = SrvResolution {
        resolver: reader.read("resolution.resolver", values::resolver),
        min_ttl,
        max_ttl,
        negative_ttl,
        tls_server_name: reader
            .read("resolution.tls_server_name", values::tls_server_name)
            .unwrap_or_default(),
    };
    let has_sni = reader.raw("sni").is_some();
    let min_ttl_written = reader.raw("resolution.min_ttl").is_some();
    let problems = values::srv_resolution_problems(&resolution, has_sni, min_ttl_written);
    for (key, reason) in &problems {
        reader.refuse(&format!("resolution.{key}"), reason.as_str());
    }
    problems.is_empty().then_some(resolution)
}

/// `verify` as far as labels alone tell: TLS may still come from the port
/// (443) when `tls` is not written, so only `tls=false` refuses it here.
fn check_verify(
    reader: &mut Reader<'_, '_>,
    upstream: &UpstreamSettings,
    upstream_override: Option<&Option<Vec<UpstreamTarget>>>,
) {
    let named_by_srv = matches!(
        upstream_override,
        Some(Some(targets)) if targets.iter().any(|target| matches!(target, UpstreamTarget::Srv { .. }))
    );
    let has_server_name = reader.raw("sni").is_some() || named_by_srv;
    let maybe_tls = upstream.tls != Some(false);
    if let Some(reason) = values::verify_problem(upstream.verify, maybe_tls, has_server_name) {
        reader.refuse("verify", reason);
    }
}

/// `retry.attempts` and `retry.on`: either one makes the location retry.
fn read_retry(reader: &mut Reader<'_, '_>) -> Option<Retry> {
    if reader.raw("retry.attempts").is_none() && reader.raw("retry.on").is_none() {
        return None;
    }
    let attempts = reader
        .read("retry.attempts", |text| {
            values::whole_number(text, values::RETRY_ATTEMPTS)
        })
        .map(|attempts| attempts as u8);
    let on = reader.list("retry.on", values::retry_condition);
    Some(values::retry(attempts, on))
}

/// `upgrades`: comma-separated protocol names; an empty value forwards none.
fn read_upgrades(reader: &mut Reader<'_, '_>) -> Upgrades {
    let protocols = match reader.raw("upgrades") {
        None => return Upgrades::default(),
        Some("") => Vec::new(),
        // A refused protocol leaves the whole route out (`reader.refused`).
        Some(_) => reader
            .list("upgrades", values::upgrade_protocol)
            .unwrap_or_default(),
    };
    values::upgrades(protocols)
}

fn read_rewrite(reader: &mut Reader<'_, '_>) -> Option<Rewrite> {
    const KEYS: [&str; 4] = ["strip_prefix", "add_prefix", "match", "replace"];
    let present: Vec<&str> = KEYS
        .into_iter()
        .filter(|key| reader.raw(&format!("rewrite.{key}")).is_some())
        .collect();
    if present.is_empty() {
        return None;
    }
    let strip = reader.read("rewrite.strip_prefix", values::rewrite_prefix);
    let add = reader.read("rewrite.add_prefix", values::rewrite_prefix);
    let pattern = reader.read("rewrite.match", values::rewrite_pattern);
    let replace = reader.raw("rewrite.replace").map(str::to_owned);
    match values::rewrite_kind(present.iter().copied()) {
        Ok(RewriteKind::Prefix) => Some(Rewrite::Prefix { strip, add }),
        Ok(RewriteKind::Regex) => Some(Rewrite::Regex {
            pattern: pattern?,
            replace: replace?,
        }),
        Err(reason) => {
            // Only match/replace can be out of place or alone; name the one written.
            let key = if present.contains(&"match") {
                "rewrite.match"
            } else {
                "rewrite.replace"
            };
            reader.refuse(key, reason);
            None
        }
    }
}

fn read_headers(reader: &mut Reader<'_, '_>) -> Vec<(HeaderName, HeaderValue)> {
    let written: Vec<(&str, &str)> = reader
        .labels
        .values
        .iter()
        .filter_map(|(key, value)| Some((key.strip_prefix(HEADER_KEY_START)?, *value)))
        .collect();
    written
        .into_iter()
        .filter_map(|(name, value)| {
            let key = format!("{HEADER_KEY_START}{name}");
            reader.check(&key, values::header(name, value))
        })
        .collect()
}

fn non_empty(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Err("is empty".into())
    } else {
        Ok(text.to_owned())
    }
}

/// Reads values of one route, reporting each refusal on its label.
struct Reader<'r, 'f> {
    labels: &'r RouteLabels<'r>,
    findings: &'r mut Findings<'f>,
    /// Something was refused: the route is left out.
    refused: bool,
}

impl Reader<'_, '_> {
    fn raw(&self, key: &str) -> Option<&str> {
        self.labels.values.get(key).copied()
    }

    fn read<T>(&mut self, key: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let parsed = parse(self.raw(key)?);
        self.check(key, parsed)
    }

    /// A comma-separated list, each item parsed; empty items (a trailing
    /// comma) are skipped.
    fn list<T>(&mut self, key: &str, parse: impl Fn(&str) -> Result<T, String>) -> Option<Vec<T>> {
        let items: Vec<Result<T, String>> = list_items(self.raw(key)?).map(parse).collect();
        if items.is_empty() {
            self.refuse(key, "is empty");
            return None;
        }
        let mut parsed = Vec::with_capacity(items.len());
        let mut all_valid = true;
        for item in items {
            match self.check(key, item) {
                Some(value) => parsed.push(value),
                None => all_valid = false,
            }
        }
        all_valid.then_some(parsed)
    }

    fn check<T>(&mut self, key: &str, parsed: Result<T, String>) -> Option<T> {
        parsed.map_err(|reason| self.refuse(key, reason)).ok()
    }

    fn refuse(&mut self, key: &str, reason: impl Into<String>) {
        self.findings.error(self.labels.label(key), reason);
        self.refused = true;
    }
}

/// The items of a label's comma-separated list, trimmed, empty ones (a
/// trailing comma) skipped.
fn list_items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// Labels write every value as text, lists comma-separated.
impl WrittenSettings for Reader<'_, '_> {
    fn is_written(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    fn text(&mut self, key: &str) -> Option<String> {
        self.raw(key).map(str::to_owned)
    }

    fn boolean(&mut self, key: &str) -> Option<bool> {
        self.read(key, values::boolean)
    }

    fn list(&mut self, key: &str) -> Option<Vec<String>> {
        Some(list_items(self.raw(key)?).map(str::to_owned).collect())
    }

    fn switch_or_list(&mut self, key: &str) -> Option<SwitchOrList> {
        match values::boolean(self.raw(key)?) {
            Ok(on) => Some(SwitchOrList::Switch(on)),
            Err(_) => WrittenSettings::list(self, key).map(SwitchOrList::List),
        }
    }

    fn entries(&mut self, start: &str) -> Vec<(String, String)> {
        self.labels
            .values
            .iter()
            .filter_map(|(key, value)| {
                Some((key.strip_prefix(start)?.to_owned(), (*value).to_owned()))
            })
            .collect()
    }

    fn refuse(&mut self, key: &str, reason: String) {
        Reader::refuse(self, key, reason);
    }
}
