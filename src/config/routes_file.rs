//! The routes file: JSON in the shape of MODEL.md, read into `DesiredHosts`.
//! Every problem is reported with its key path; nothing half-read is returned.
//! DNS servers written as names stay names; `dns_server_names` lists them
//! with their key paths, for the provider to look up when it loads.

use std::time::Duration;

use serde_json::Value;

use super::diagnostic::Origin;
use super::dns_servers::NamedDnsServer;
use super::durations::parse_duration;
use super::json_reader::{kind, ConfigError, ConfigErrors, KeyPath, Object, Problems};
use super::middleware::read_middlewares;
use super::middleware_json::{middleware_roots, JsonSettings};
use super::model::*;
use super::values::{self, ResolutionMode, RewriteKind};

/// Parses a whole routes file, or returns every problem in it.
pub fn parse_routes_file(text: &str) -> Result<DesiredHosts, ConfigErrors> {
    let document: Value = serde_json::from_str(text).map_err(|error| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            reason: format!("not valid JSON: {error}"),
            suggestion: None,
        }])
    })?;
    let mut problems = Problems::default();
    let hosts = read_document(&document, &mut problems);
    problems.into_result(DesiredHosts { hosts })
}

/// The DNS servers written as names in a routes file's `hosts`, each with
/// the key path of its `resolver` (host names as matched: lower case).
/// Where a location's `basic_auth.users_file` is written in the file.
pub fn users_file_key(host: &HostConfig, location: &LocationConfig) -> String {
    let key = KeyPath::default()
        .field("host")
        .user_key(&host.pattern.to_string())
        .field("location")
        .user_key(&location.prefix)
        .field("basic_auth")
        .field("users_file");
    key.as_str().to_owned()
}

pub fn dns_server_names(hosts: &DesiredHosts, origin: &Origin) -> Vec<NamedDnsServer> {
    let mut named = Vec::new();
    for host in &hosts.hosts {
        let host_path = KeyPath::default()
            .field("host")
            .user_key(&host.pattern.to_string());
        for location in &host.locations {
            let upstreams_path = host_path
                .field("location")
                .user_key(&location.prefix)
                .field("upstream");
            for upstream in &location.upstreams {
                let Some(name) = upstream.target.dns_server_name() else {
                    continue;
                };
                let key = upstreams_path
                    .user_key(&upstream.target.to_string())
                    .field("resolution")
                    .field("resolver");
                named.push(NamedDnsServer {
                    origin: origin.clone(),
                    key: key.as_str().to_owned(),
                    name: name.to_owned(),
                });
            }
        }
    }
    named
}

fn read_document(document: &Value, problems: &mut Problems) -> Vec<HostConfig> {
    let Some(root) = Object::read(document, KeyPath::default(), &["host"], problems) else {
        return Vec::new();
    };
    let mut hosts: Vec<HostConfig> = Vec::new();
    for (name, value, path) in root.entries("host", problems) {
        let pattern = match values::host_pattern(name) {
            Ok(pattern) => pattern,
            Err(reason) => {
                problems.report(&path, reason);
                continue;
            }
        };
        if hosts.iter().any(|host| host.pattern == pattern) {
            problems.report(
                &path,
                format!("`{pattern}` is listed twice (host names ignore case)"),
            );
            continue;
        }
        if let Some(host) = read_host(pattern, value, path, problems) {
            hosts.push(host);
        }
    }
    hosts
}

fn read_host(
    pattern: HostPattern,
    value: &Value,
    path: KeyPath,
    problems: &mut Problems,
) -> Option<HostConfig> {
    let known = ["health_check", "https_redirect", "hsts", "location"];
    let host = Object::read(value, path, &known, problems)?;
    let health_check = read_health_check(&host, problems);
    let https_redirect = host
        .bool("https_redirect", problems)
        .unwrap_or(values::DEFAULT_HTTPS_REDIRECT);
    let hsts = host
        .get("hsts")
        .and_then(|(v, p)| read_hsts(v, &p, problems));
    let locations: Vec<LocationConfig> = host
        .entries("location", problems)
        .into_iter()
        .filter_map(|(prefix, value, path)| read_location(prefix, value, path, problems))
        .collect();
    if !host.map.contains_key("location") {
        problems.report(&host.path, "a host needs at least one location");
    }
    Some(HostConfig {
        pattern,
        health_check,
        https_redirect,
        hsts,
        locations,
    })
}

/// `hsts`: a max-age in seconds, or a string that adds directives to it
/// (`"31536000; includeSubDomains"`).
fn read_hsts(value: &Value, path: &KeyPath, problems: &mut Problems) -> Option<Hsts> {
    let parsed = match value {
        Value::String(text) => values::hsts(text),
        Value::Number(number) => match number.as_u64() {
            Some(seconds) => values::hsts_max_age(seconds),
            None => Err(format!(
                "expected a whole number of seconds, found {number}"
            )),
        },
        other => Err(format!(
            "expected a max-age in seconds (such as 31536000) or a string such as \
             \"31536000; includeSubDomains\", found {}",
            kind(other)
        )),
    };
    report(parsed, path, problems)
}

fn read_location(
    prefix: &str,
    value: &Value,
    path: KeyPath,
    problems: &mut Problems,
) -> Option<LocationConfig> {
    let prefix = values::location_prefix(prefix)
        .map_err(|reason| problems.report(&path, reason))
        .ok();
    let mut known = vec![
        "load_balancing",
        "retry",
        "rewrite",
        "health_check",
        "upgrades",
        "upstream",
    ];
    known.extend(middleware_roots());
    let location = Object::read(value, path, &known, problems)?;
    let load_balancing = location
        .str("load_balancing", problems)
        .and_then(|(text, path)| report(values::load_balancing(text), &path, problems))
        .unwrap_or_default();
    let retry = location
        .get("retry")
        .and_then(|(v, p)| read_retry(v, p, problems));
    let rewrite = location
        .get("rewrite")
        .and_then(|(v, p)| read_rewrite(v, p, problems));
    let health_check = read_health_check(&location, problems);
    let upgrades = location
        .get("upgrades")
        .map_or_else(Upgrades::default, |(v, p)| read_upgrades(v, &p, problems));
    let middlewares = read_middlewares(&mut JsonSettings::of(&location, problems));
    let upstreams: Vec<UpstreamConfig> = location
        .entries("upstream", problems)
        .into_iter()
        .filter_map(|(key, value, path)| read_upstream(key, value, path, problems))
        .collect();
    if !location.map.contains_key("upstream") {
        problems.report(&location.path, "a location needs at least one upstream");
    }
    Some(LocationConfig {
        prefix: prefix?,
        load_balancing,
        retry,
        rewrite,
        health_check,
        upgrades,
        middlewares,
        upstreams,
        // Written addresses stay put; names are followed through DNS.
        upstreams_move: false,
        containers: Vec::new(),
    })
}

fn read_retry(value: &Value, path: KeyPath, problems: &mut Problems) -> Option<Retry> {
    let retry = Object::read(value, path, &["attempts", "on"], problems)?;
    let attempts = retry
        .integer("attempts", values::RETRY_ATTEMPTS, problems)
        .map(|n| n as u8);
    let Some((on, on_path)) = retry.get("on") else {
        return Some(values::retry(attempts, None));
    };
    let Some(items) = on.as_array().filter(|items| !items.is_empty()) else {
        problems.report(
            &on_path,
            "expected a non-empty array such as [\"connect\", \"502\"]",
        );
        return None;
    };
    let mut conditions = Vec::with_capacity(items.len());
    for item in items {
        let condition = item
            .as_str()
            .ok_or_else(|| format!("expected strings, found {item}"))
            .and_then(values::retry_condition);
        conditions.push(report(condition, &on_path, problems)?);
    }
    Some(values::retry(attempts, Some(conditions)))
}

/// `upgrades`: an array of protocol names, possibly empty (no upgrade is
/// forwarded). A refused one is reported, and the location keeps the rest.
fn read_upgrades(value: &Value, path: &KeyPath, problems: &mut Problems) -> Upgrades {
    let Some(items) = value.as_array() else {
        problems.report(
            path,
            "expected an array such as [\"websocket\"] ([] for none)",
        );
        return Upgrades::default();
    };
    let protocols = items
        .iter()
        .filter_map(|item| {
            let protocol = item
                .as_str()
                .ok_or_else(|| format!("expected strings, found {item}"))
                .and_then(values::upgrade_protocol);
            report(protocol, path, problems)
        })
        .collect();
    values::upgrades(protocols)
}

fn read_rewrite(value: &Value, path: KeyPath, problems: &mut Problems) -> Option<Rewrite> {
    let known = ["strip_prefix", "add_prefix", "match", "replace"];
    let rewrite = Object::read(value, path, &known, problems)?;
    let prefix_key = |key: &str, problems: &mut Problems| {
        rewrite
            .str(key, problems)
            .and_then(|(text, path)| report(values::rewrite_prefix(text), &path, problems))
    };
    let strip = prefix_key("strip_prefix", problems);
    let add = prefix_key("add_prefix", problems);
    let pattern = rewrite.str("match", problems);
    let replace = rewrite.str("replace", problems);
    let kind = values::rewrite_kind(rewrite.map.keys().map(String::as_str));
    match report(kind, &rewrite.path, problems)? {
        RewriteKind::Prefix => Some(Rewrite::Prefix { strip, add }),
        RewriteKind::Regex => {
            // A value that is not a string was reported by `str` already.
            let ((pattern, path), (replace, _)) = pattern.zip(replace)?;
            let pattern = report(values::rewrite_pattern(pattern), &path, problems)?;
            Some(Rewrite::Regex {
                pattern,
                replace: replace.to_owned(),
            })
        }
    }
}

fn read_health_check(parent: &Object<'_>, problems: &mut Problems) -> HealthCheck {
    let Some((value, path)) = parent.get("health_check") else {
        return HealthCheck::default();
    };
    let Some(check) = Object::read(value, path, &["interval_secs", "enabled"], problems) else {
        return HealthCheck::default();
    };
    HealthCheck {
        interval: check
            .integer("interval_secs", values::HEALTH_INTERVAL_SECS, problems)
            .map(Duration::from_secs),
        enabled: check.bool("enabled", problems),
    }
}

fn read_upstream(
    key: &str,
    value: &Value,
    path: KeyPath,
    problems: &mut Problems,
) -> Option<UpstreamConfig> {
    let known = [
        "weight",
        "tls",
        "sni",
        "verify",
        "headers",
        "protocol",
        "network",
        "resolution",
    ];
    let upstream = Object::read(value, path, &known, problems)?;
    if let Some((_, path)) = upstream.get("network") {
        problems.report(&path, "network applies to Docker labels only");
    }
    let sni = upstream
        .str("sni", problems)
        .and_then(|(text, path)| report(values::server_name(text), &path, problems));
    let target = read_target(key, &upstream, sni.is_some(), problems)?;
    let weight = upstream
        .integer("weight", values::WEIGHTS, problems)
        .map_or(1, |n| n as u8);
    let tls = upstream
        .bool("tls", problems)
        .unwrap_or_else(|| values::default_tls(&target));
    let verify = upstream.bool("verify", problems).unwrap_or(false);
    let has_server_name = sni.is_some() || matches!(target, UpstreamTarget::Srv { .. });
    let problem = values::verify_problem(verify, tls, has_server_name);
    if let (Some(reason), Some((_, path))) = (problem, upstream.get("verify")) {
        problems.report(&path, reason);
    }
    let protocol = upstream
        .str("protocol", problems)
        .and_then(|(text, path)| report(values::protocol(text), &path, problems))
        .unwrap_or_default();
    let headers_add = read_headers(&upstream, problems);
    Some(UpstreamConfig {
        target,
        weight,
        tls,
        sni,
        verify,
        headers_add,
        protocol,
        container: None,
    })
}

fn read_headers(
    upstream: &Object<'_>,
    problems: &mut Problems,
) -> Vec<(http::HeaderName, http::HeaderValue)> {
    let Some((value, path)) = upstream.get("headers") else {
        return Vec::new();
    };
    let Some(headers) = Object::read(value, path, &["add"], problems) else {
        return Vec::new();
    };
    headers
        .entries("add", problems)
        .into_iter()
        .filter_map(|(name, value, path)| {
            let header = value
                .as_str()
                .ok_or_else(|| "expected a string".to_owned())
                .and_then(|value| values::header(name, value));
            report(header, &path, problems)
        })
        .collect()
}

/// The upstream's key, read as the resolution mode says: `host:port` for
/// mode `a`, an SRV owner name for mode `srv`.
fn read_target(
    key: &str,
    upstream: &Object<'_>,
    has_sni: bool,
    problems: &mut Problems,
) -> Option<UpstreamTarget> {
    let key_path = &upstream.path;
    let resolution = upstream.get("resolution").and_then(|(value, path)| {
        let known = [
            "mode",
            "resolver",
            "min_ttl",
            "max_ttl",
            "negative_ttl",
            "tls_server_name",
        ];
        Object::read(value, path, &known, problems)
    });
    let mode = match resolution.as_ref().and_then(|r| r.str("mode", problems)) {
        Some((text, path)) => report(values::resolution_mode(text), &path, problems)?,
        None => ResolutionMode::A,
    };
    match (mode, resolution) {
        (ResolutionMode::Srv, Some(resolution)) => {
            let owner = report(values::srv_owner(key), key_path, problems);
            let resolution = read_srv_resolution(&resolution, has_sni, problems)?;
            Some(UpstreamTarget::Srv {
                owner: owner?,
                resolution,
            })
        }
        (_, resolution) => {
            if let Some(resolution) = &resolution {
                for srv_key in resolution.map.keys().filter(|k| *k != "mode") {
                    problems.report(&resolution.path.field(srv_key), values::SRV_ONLY);
                }
            }
            report(values::upstream_target(key), key_path, problems)
        }
    }
}

fn read_srv_resolution(
    resolution: &Object<'_>,
    has_sni: bool,
    problems: &mut Problems,
) -> Option<SrvResolution> {
    let resolver = resolution
        .str("resolver", problems)
        .and_then(|(text, path)| report(values::resolver(text), &path, problems));
    let ttl = |key: &str, default: Duration, problems: &mut Problems| {
        resolution
            .str(key, problems)
            .and_then(|(text, path)| report(parse_duration(text), &path, problems))
            .unwrap_or(default)
    };
    let srv = SrvResolution {
        resolver,
        min_ttl: ttl("min_ttl", values::DEFAULT_MIN_TTL, problems),
        max_ttl: ttl("max_ttl", values::DEFAULT_MAX_TTL, problems),
        negative_ttl: ttl("negative_ttl", values::DEFAULT_NEGATIVE_TTL, problems),
        tls_server_name: resolution
            .str("tls_server_name", problems)
            .and_then(|(text, path)| report(values::tls_server_name(text), &path, problems))
            .unwrap_or_default(),
    };
    let min_ttl_written = resolution.map.contains_key("min_ttl");
    for (key, reason) in values::srv_resolution_problems(&srv, has_sni, min_ttl_written) {
        problems.report(&resolution.path.field(key), reason);
    }
    Some(srv)
}

/// Keeps a parsed value, or reports why it was refused at `path`.
fn report<T>(parsed: Result<T, String>, path: &KeyPath, problems: &mut Problems) -> Option<T> {
    parsed.map_err(|reason| problems.report(path, reason)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = r#"host."example.com".location."/".upstream"#;

    /// The problems of a file whose only upstream is `key` with `settings`.
    fn problems(key: &str, settings: &str) -> Vec<String> {
        let file = format!(
            r#"{{ "host": {{ "example.com": {{ "location": {{ "/": {{
                "upstream": {{ {key:?}: {settings} }} }} }} }} }} }}"#
        );
        match parse_routes_file(&file) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_complete_srv_upstream_is_read() {
        let file = r#"{ "host": { "example.com": { "location": { "/": { "upstream": {
            "_app._tcp.example.internal": { "resolution": { "mode": "srv",
                "resolver": "127.0.0.1:5353", "min_ttl": "1s", "max_ttl": "2m",
                "negative_ttl": "3s", "tls_server_name": "target" } } } } } } } }"#;
        let hosts = parse_routes_file(file).unwrap();
        let target = &hosts.hosts[0].locations[0].upstreams[0].target;
        assert_eq!(
            *target,
            UpstreamTarget::Srv {
                owner: "_app._tcp.example.internal".into(),
                resolution: SrvResolution {
                    resolver: Some(DnsServer::Address("127.0.0.1:5353".parse().unwrap())),
                    min_ttl: Duration::from_secs(1),
                    max_ttl: Duration::from_secs(120),
                    negative_ttl: Duration::from_secs(3),
                    tls_server_name: TlsServerName::Target,
                },
            }
        );
    }

    #[test]
    fn a_resolver_written_as_a_name_is_kept_as_written_with_its_key_path() {
        let file = r#"{ "host": { "A.com": { "location": { "/srv": { "upstream": {
            "_app._tcp.x": { "resolution": { "mode": "srv", "resolver": "NS.x:5353" } },
            "_b._tcp.x": { "resolution": { "mode": "srv", "resolver": "[::1]:53" } },
            "_c._tcp.x": { "resolution": { "mode": "srv" } } } } } } } }"#;
        let hosts = parse_routes_file(file).unwrap();
        let resolvers: Vec<Option<DnsServer>> = hosts.hosts[0].locations[0]
            .upstreams
            .iter()
            .map(|upstream| match &upstream.target {
                UpstreamTarget::Srv { resolution, .. } => resolution.resolver.clone(),
                other => panic!("not srv: {other}"),
            })
            .collect();
        assert_eq!(
            resolvers,
            [
                Some(DnsServer::Name {
                    host: "ns.x".into(),
                    port: 5353
                }),
                Some(DnsServer::Address("[::1]:53".parse().unwrap())),
                None,
            ]
        );
        let origin = Origin::RoutesFile {
            path: "routes.json".into(),
        };
        assert_eq!(
            dns_server_names(&hosts, &origin),
            [NamedDnsServer {
                origin: origin.clone(),
                key: r#"host."a.com".location."/srv".upstream."_app._tcp.x".resolution.resolver"#
                    .into(),
                name: "ns.x".into(),
            }]
        );
    }

    #[test]
    fn an_srv_owner_that_is_an_address_is_refused() {
        for owner in ["10.0.0.1", "10.0.0.1:53", "::1"] {
            assert_eq!(
                problems(owner, r#"{ "resolution": { "mode": "srv" } }"#),
                [format!(
                    "{PATH}.{owner:?}: an SRV upstream is an owner name such as \
                     _app._tcp.example.internal, not an address"
                )]
            );
        }
    }

    #[test]
    fn a_resolver_must_be_host_and_port() {
        let found = problems(
            "_app._tcp.example.internal",
            r#"{ "resolution": { "mode": "srv", "resolver": "127.0.0.1" } }"#,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(&format!(
                r#"{PATH}."_app._tcp.example.internal".resolution.resolver: a resolver is host:port"#
            )),
            "{found:?}"
        );
    }

    #[test]
    fn min_ttl_longer_than_max_ttl_is_refused_after_defaults() {
        let expected = [format!(
            r#"{PATH}."_a._tcp.internal".resolution.min_ttl: min_ttl is longer than max_ttl"#
        )];
        let written = r#"{ "resolution": { "mode": "srv", "min_ttl": "10s", "max_ttl": "5s" } }"#;
        assert_eq!(problems("_a._tcp.internal", written), expected);
        // The default max_ttl is 60s.
        let defaulted = r#"{ "resolution": { "mode": "srv", "min_ttl": "2m" } }"#;
        assert_eq!(problems("_a._tcp.internal", defaulted), expected);
    }

    /// Found by fuzzing: the problem named `min_ttl`, which the file does
    /// not have, when only `max_ttl` was written (below the default min_ttl).
    #[test]
    fn a_max_ttl_below_the_default_min_ttl_is_refused_at_max_ttl() {
        let written = r#"{ "resolution": { "mode": "srv", "max_ttl": "2s" } }"#;
        assert_eq!(
            problems("_a._tcp.internal", written),
            [format!(
                r#"{PATH}."_a._tcp.internal".resolution.max_ttl: max_ttl is shorter than min_ttl (5s unless set)"#
            )]
        );
    }

    #[test]
    fn target_server_names_and_a_fixed_sni_are_refused_together() {
        let settings = r#"{ "sni": "fixed.example.com",
            "resolution": { "mode": "srv", "tls_server_name": "target" } }"#;
        assert_eq!(
            problems("_a._tcp.internal", settings),
            [format!(
                r#"{PATH}."_a._tcp.internal".resolution.tls_server_name: "target" can't be combined with a fixed sni"#
            )]
        );
        let owner_name = r#"{ "sni": "fixed.example.com",
            "resolution": { "mode": "srv", "tls_server_name": "owner" } }"#;
        assert_eq!(
            problems("_a._tcp.internal", owner_name),
            Vec::<String>::new()
        );
    }

    #[test]
    fn srv_keys_with_mode_a_are_refused() {
        for key in [
            "resolver",
            "min_ttl",
            "max_ttl",
            "negative_ttl",
            "tls_server_name",
        ] {
            let value = match key {
                "resolver" => "127.0.0.1:53",
                "tls_server_name" => "owner",
                _ => "5s",
            };
            for mode in [r#""mode": "a", "#, ""] {
                let settings = format!(r#"{{ "resolution": {{ {mode}"{key}": "{value}" }} }}"#);
                assert_eq!(
                    problems("app:8080", &settings),
                    [format!(
                        r#"{PATH}."app:8080".resolution.{key}: applies only with mode "srv""#
                    )],
                    "{settings}"
                );
            }
        }
    }

    fn refusal(upstream: &str) -> String {
        let text = format!(
            r#"{{"host": {{"a.com": {{"location": {{"/": {{"upstream": {upstream}}}}}}}}}}}"#
        );
        match parse_routes_file(&text) {
            Ok(_) => String::new(),
            Err(errors) => errors.to_string(),
        }
    }

    /// The `upgrades` of the only location, or the problems of the file.
    fn upgrades_of(written: &str) -> Result<Vec<String>, String> {
        let text = format!(
            r#"{{"host": {{"a.com": {{"location": {{"/": {{"upgrades": {written},
                "upstream": {{"10.0.0.1:80": {{}}}}}}}}}}}}}}"#
        );
        parse_routes_file(&text)
            .map(|hosts| hosts.hosts[0].locations[0].upgrades.protocols().to_vec())
            .map_err(|errors| errors.to_string())
    }

    #[test]
    fn upgrades_are_read_and_h2c_is_refused_with_its_key_path() {
        let unset = parse_routes_file(
            r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#,
        )
        .unwrap();
        assert_eq!(
            unset.hosts[0].locations[0].upgrades.protocols(),
            ["websocket"]
        );
        assert_eq!(upgrades_of("[]"), Ok(vec![]));
        assert_eq!(
            upgrades_of(r#"["WebSocket", "custom"]"#),
            Ok(vec!["websocket".into(), "custom".into()])
        );
        let path = r#"host."a.com".location."/".upgrades"#;
        let refused = upgrades_of(r#"["websocket", "h2c"]"#).unwrap_err();
        assert!(
            refused.contains(&format!("{path}: h2c is never forwarded")),
            "{refused}"
        );
        let not_a_list = upgrades_of(r#""websocket""#).unwrap_err();
        assert!(
            not_a_list.contains(&format!("{path}: expected an array")),
            "{not_a_list}"
        );
        let not_strings = upgrades_of("[1]").unwrap_err();
        assert!(
            not_strings.contains(&format!("{path}: expected strings, found 1")),
            "{not_strings}"
        );
    }

    /// The host `a.com` with `settings` beside its one location: its
    /// `(https_redirect, hsts)`, or the file's problems.
    fn https_settings(settings: &str) -> Result<(bool, Option<String>), String> {
        let text = format!(
            r#"{{"host": {{"a.com": {{ {settings}
                "location": {{"/": {{"upstream": {{"10.0.0.1:80": {{}}}}}}}}}}}}}}"#
        );
        parse_routes_file(&text)
            .map(|hosts| {
                let host = &hosts.hosts[0];
                (host.https_redirect, host.hsts.map(|hsts| hsts.to_string()))
            })
            .map_err(|errors| errors.to_string())
    }

    #[test]
    fn https_redirect_and_hsts_are_read_at_host_level() {
        assert_eq!(https_settings(""), Ok((true, None)));
        assert_eq!(
            https_settings(r#""https_redirect": false, "hsts": 31536000,"#),
            Ok((false, Some("max-age=31536000".into())))
        );
        assert_eq!(
            https_settings(r#""hsts": "63072000; includeSubDomains; preload","#),
            Ok((
                true,
                Some("max-age=63072000; includeSubDomains; preload".into())
            ))
        );
        assert_eq!(
            https_settings(r#""hsts": 0,"#),
            Ok((true, Some("max-age=0".into())))
        );
    }

    #[test]
    fn bad_https_settings_are_refused_at_their_key() {
        let cases = [
            (
                r#""https_redirect": "no","#,
                r#"host."a.com".https_redirect: expected true or false, found a string"#,
            ),
            (
                r#""hsts": true,"#,
                r#"host."a.com".hsts: expected a max-age in seconds (such as 31536000) or a string"#,
            ),
            (
                r#""hsts": -5,"#,
                r#"host."a.com".hsts: expected a whole number of seconds, found -5"#,
            ),
            (
                r#""hsts": 1.5,"#,
                r#"host."a.com".hsts: expected a whole number of seconds, found 1.5"#,
            ),
            (
                r#""hsts": 100000000,"#,
                r#"host."a.com".hsts: an HSTS max-age is 0 to 63072000 seconds (two years), found 100000000"#,
            ),
            (
                r#""hsts": "1y","#,
                r#"host."a.com".hsts: `1y` is not an HSTS max-age in seconds"#,
            ),
            (
                r#""hsts": "600; includeSubdomain","#,
                r#"host."a.com".hsts: unknown HSTS directive `includeSubdomain`"#,
            ),
            (
                r#""hsts_max_age": 600,"#,
                r#"host."a.com": unknown key `hsts_max_age`"#,
            ),
            (
                r#""https_redirects": false,"#,
                r#"host."a.com": unknown key `https_redirects` (did you mean `https_redirect`?)"#,
            ),
        ];
        for (settings, expected) in cases {
            let refused = https_settings(settings).unwrap_err();
            assert!(refused.contains(expected), "{settings}: {refused}");
        }
    }

    #[test]
    fn verify_needs_tls_and_a_server_name() {
        let cases = [
            (
                r#"{"api.example.com:443": {"sni": "api.example.com", "verify": true}}"#,
                None,
            ),
            (
                r#"{"10.0.0.1:8443": {"tls": true, "sni": "api.example.com", "verify": true}}"#,
                None,
            ),
            (r#"{"10.0.0.1:443": {"verify": false}}"#, None),
            (
                r#"{"_app._tcp.example.internal": {"tls": true, "verify": true,
                    "resolution": {"mode": "srv"}}}"#,
                None,
            ),
            (
                r#"{"api.example.com:443": {"verify": true}}"#,
                Some(
                    r#"host."a.com".location."/".upstream."api.example.com:443".verify: verify needs sni"#,
                ),
            ),
            (
                r#"{"10.0.0.1:8443": {"sni": "api.example.com", "verify": true}}"#,
                Some(
                    r#"host."a.com".location."/".upstream."10.0.0.1:8443".verify: verify needs TLS"#,
                ),
            ),
            (
                r#"{"10.0.0.1:443": {"tls": false, "sni": "api.example.com", "verify": true}}"#,
                Some(
                    r#"host."a.com".location."/".upstream."10.0.0.1:443".verify: verify needs TLS"#,
                ),
            ),
        ];
        for (upstream, expected) in cases {
            let refusal = refusal(upstream);
            match expected {
                None => assert_eq!(refusal, "", "{upstream}"),
                Some(expected) => assert!(refusal.contains(expected), "{upstream}: {refusal}"),
            }
        }
    }
}
