//! The immutable route table: hosts indexed for matching (exact names, wildcard
//! suffixes, the catch-all) and, per host, locations ordered longest prefix
//! first. Built once per change; lookups borrow and never allocate.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use http::uri::PathAndQuery;
use http::HeaderValue;

use crate::config::{
    middleware::ForwardAuth, DesiredHosts, HostConfig, HostPattern, LoadBalancing, LocationConfig,
    Protocol, ProviderId, Retry, Rewrite, Upgrades, UpstreamConfig,
};
use crate::metrics::{LocationCounters, Metrics};
use crate::middleware::{LimitersBuild, LocationMiddlewares};
use crate::upstream::{CheckSettings, EndpointInputs, UpstreamSet};

/// A location's auth service: its setting, its endpoints, resolved,
/// pooled and checked like any upstream's, and its request's path and
/// `Host`, made once here rather than at each request.
pub struct ForwardAuthRoute {
    pub settings: ForwardAuth,
    pub upstreams: UpstreamSet,
    pub path: PathAndQuery,
    /// `None` if the authority written is no header value (then the
    /// request keeps the `Host` it had).
    pub host: Option<HeaderValue>,
}

/// What a table is built from besides the desired hosts: what the
/// endpoints need, and where rate limits keep their buckets.
pub struct BuildInputs<'a> {
    pub endpoints: EndpointInputs<'a>,
    pub limiters: LimitersBuild<'a>,
}

/// Hosts by name, hashed with foldhash rather than std's SipHash: a lookup
/// per request, where SipHash of the Host cost more than the rest of the
/// route's lookup. The keys are configured hosts; a client only looks up,
/// so crafted collisions can't lengthen a chain.
type HostIndex = HashMap<Box<str>, usize, foldhash::fast::RandomState>;

#[derive(Default)]
pub struct RouteTable {
    exact: HostIndex,
    /// Keyed by the suffix after `*.`.
    wildcards: HostIndex,
    any: Option<usize>,
    hosts: Vec<HostRoutes>,
}

struct HostRoutes {
    pattern: HostPattern,
    /// Longest prefix first, so the first match is the longest.
    locations: Vec<Location>,
}

/// Where a matched request goes.
pub struct Location {
    /// Shared with the access records of the requests it serves.
    pub prefix: Arc<str>,
    pub upstreams: UpstreamSet,
    /// Its provider says its upstreams move (containers): a request that
    /// loses one waits for the next table.
    pub upstreams_move: bool,
    /// Shared with the requests that use it, so none copies it.
    pub retry: Option<Arc<Retry>>,
    pub rewrite: Option<Rewrite>,
    /// The protocols a client may switch to; any other `Upgrade` is not forwarded.
    pub upgrades: Upgrades,
    /// What it does to requests besides forwarding them; `None` for the
    /// many locations that set none, whose requests never look further.
    pub middlewares: Option<Arc<LocationMiddlewares>>,
    /// Its `forward_auth` service, reached like an upstream.
    pub forward_auth: Option<Arc<ForwardAuthRoute>>,
    /// Its host as configured (`*.example.com`), for metrics.
    pub host: Arc<str>,
    /// Its host's `https_redirect`: plain HTTP goes to HTTPS while the
    /// host has a certificate.
    pub https_redirect: bool,
    /// Its host's `Strict-Transport-Security` value, for TLS clients.
    pub hsts: Option<HeaderValue>,
    /// Its requests' metric series, resolved at its first request.
    counters: OnceLock<Arc<LocationCounters>>,
}

impl Location {
    /// Whether its upstreams can move under a request (containers, DNS
    /// names), so one that lost its upstream may wait for where it went.
    pub fn follows_moves(&self) -> bool {
        self.upstreams_move || !self.upstreams.names().is_empty()
    }

    /// The metric series its requests count in.
    pub fn counters(&self, metrics: &Metrics) -> &Arc<LocationCounters> {
        self.counters
            .get_or_init(|| Arc::new(metrics.location(self.host.clone(), self.prefix.clone())))
    }
}

/// Why a request matched nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteMiss {
    NoHost,
    NoLocation,
}

/// The same host defined by two providers: the first serves it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Conflict {
    pub host: HostPattern,
    pub served_by: ProviderId,
    pub ignored: ProviderId,
}

impl RouteTable {
    /// A table of every provider's hosts; a host defined by several
    /// providers is taken from the first (in `ProviderId` order), and each
    /// other definition is a conflict.
    pub fn build(
        providers: &BTreeMap<ProviderId, &DesiredHosts>,
        context: &BuildInputs<'_>,
    ) -> (RouteTable, Vec<Conflict>) {
        let mut table = RouteTable::default();
        context.endpoints.registry.start_table();
        let mut taken = HashMap::new();
        let mut conflicts = Vec::new();
        for (provider, desired) in providers {
            for host in &desired.hosts {
                if let Some(served_by) = taken.get(&host.pattern) {
                    conflicts.push(Conflict {
                        host: host.pattern.clone(),
                        served_by: *served_by,
                        ignored: *provider,
                    });
                    continue;
                }
                taken.insert(&host.pattern, *provider);
                table.add_host(host, context);
            }
        }
        conflicts.sort();
        (table, conflicts)
    }

    fn add_host(&mut self, host: &HostConfig, context: &BuildInputs<'_>) {
        let index = self.hosts.len();
        let mut locations: Vec<Location> = host
            .locations
            .iter()
            .map(|location| build_location(host, location, context))
            .collect();
        locations.sort_by_key(|location| std::cmp::Reverse(location.prefix.len()));
        self.hosts.push(HostRoutes {
            pattern: host.pattern.clone(),
            locations,
        });
        match &host.pattern {
            HostPattern::Exact(name) => self.exact.insert(name.as_str().into(), index),
            HostPattern::Wildcard(suffix) => self.wildcards.insert(suffix.as_str().into(), index),
            HostPattern::Any => self.any.replace(index),
        };
    }

    /// The location for a normalized host (see `normalize_host`) and a request path.
    pub fn find(&self, host: &str, path: &str) -> Result<&Location, RouteMiss> {
        let host = self.find_host(host).ok_or(RouteMiss::NoHost)?;
        host.locations
            .iter()
            .find(|location| prefix_matches(&location.prefix, path))
            .ok_or(RouteMiss::NoLocation)
    }

    fn find_host(&self, host: &str) -> Option<&HostRoutes> {
        let index = self.exact.get(host).copied().or_else(|| {
            // Dropping one leading label at a time tries the longest suffix first.
            host.match_indices('.')
                .find_map(|(dot, _)| self.wildcards.get(&host[dot + 1..]).copied())
                .or(self.any)
        })?;
        Some(&self.hosts[index])
    }

    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// Every host served, with its locations (longest prefix first).
    pub fn hosts(&self) -> impl Iterator<Item = (&HostPattern, &[Location])> {
        self.hosts
            .iter()
            .map(|host| (&host.pattern, host.locations.as_slice()))
    }

    /// The location of `pattern` (as written, not a request's host) with
    /// exactly `prefix`.
    pub fn location(&self, pattern: &HostPattern, prefix: &str) -> Option<&Location> {
        let index = match pattern {
            HostPattern::Exact(name) => self.exact.get(name.as_str()),
            HostPattern::Wildcard(suffix) => self.wildcards.get(suffix.as_str()),
            HostPattern::Any => self.any.as_ref(),
        }?;
        self.hosts[*index]
            .locations
            .iter()
            .find(|location| &*location.prefix == prefix)
    }
}

fn build_location(
    host: &HostConfig,
    config: &LocationConfig,
    context: &BuildInputs<'_>,
) -> Location {
    let checks = CheckSettings::layered(&host.health_check, &config.health_check);
    let name: Arc<str> = format!("{}{}", host.pattern, config.prefix).into();
    Location {
        prefix: config.prefix.as_str().into(),
        upstreams: UpstreamSet::build(
            &config.upstreams,
            config.load_balancing,
            checks,
            &context.endpoints,
            &name,
        ),
        upstreams_move: config.upstreams_move,
        retry: config.retry.clone().map(Arc::new),
        rewrite: config.rewrite.clone(),
        upgrades: config.upgrades.clone(),
        forward_auth: config.middlewares.forward_auth.as_ref().map(|auth| {
            let name: Arc<str> = format!("{name} forward_auth").into();
            Arc::new(ForwardAuthRoute {
                upstreams: UpstreamSet::build(
                    &[auth_upstream(auth)],
                    LoadBalancing::RoundRobin,
                    checks,
                    &context.endpoints,
                    &name,
                ),
                path: PathAndQuery::try_from(auth.path.as_str())
                    .unwrap_or_else(|_| PathAndQuery::from_static("/")),
                host: HeaderValue::from_str(&auth.authority).ok(),
                settings: auth.clone(),
            })
        }),
        middlewares: (!config.middlewares.is_empty()).then(|| {
            let host = host.pattern.to_string();
            Arc::new(LocationMiddlewares::new(
                config.middlewares.clone(),
                |counted, limit| (context.limiters).limiter(&host, &config.prefix, counted, limit),
            ))
        }),
        host: host.pattern.to_string().into(),
        https_redirect: host.https_redirect,
        // Digits and directive names: always a valid header value.
        hsts: host
            .hsts
            .and_then(|hsts| HeaderValue::try_from(hsts.to_string()).ok()),
        counters: OnceLock::new(),
    }
}

/// The auth service as an upstream: plain HTTP/1.1 or TLS as its URL says.
fn auth_upstream(auth: &ForwardAuth) -> UpstreamConfig {
    UpstreamConfig {
        target: auth.target.clone(),
        weight: 1,
        tls: auth.tls,
        sni: None,
        verify: false,
        headers_add: Vec::new(),
        protocol: Protocol::Http1,
        container: None,
    }
}

/// `/api` matches `/api` and `/api/users`, not `/apis`; `/api/` matches `/api/x`.
fn prefix_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_routes_file;
    use crate::upstream::EndpointRegistry;

    fn table(json: &str) -> RouteTable {
        let desired = parse_routes_file(json).expect("valid routes");
        let registry = EndpointRegistry::new();
        let limiters = crate::middleware::RateLimiters::default();
        let context = BuildInputs {
            endpoints: EndpointInputs {
                resolved: &HashMap::new(),
                registry: &registry,
            },
            limiters: limiters.build(),
        };
        RouteTable::build(&BTreeMap::from([(ProviderId::File, &desired)]), &context).0
    }

    fn upstream_of(table: &RouteTable, host: &str, path: &str) -> Result<String, RouteMiss> {
        table
            .find(host, path)
            .map(|location| location.upstreams.pick(&[]).unwrap().to_string())
    }

    const HOSTS: &str = r#"{"host": {
        "example.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}},
        "*.example.com": {"location": {"/": {"upstream": {"10.0.0.2:80": {}}}}},
        "*.api.example.com": {"location": {"/": {"upstream": {"10.0.0.3:80": {}}}}},
        "*": {"location": {"/": {"upstream": {"10.0.0.4:80": {}}}}}
    }}"#;

    #[test]
    fn host_precedence() {
        let table = table(HOSTS);
        let cases = [
            ("example.com", "10.0.0.1:80"),
            ("www.example.com", "10.0.0.2:80"),
            ("a.b.example.com", "10.0.0.2:80"),
            ("v1.api.example.com", "10.0.0.3:80"),
            ("x.v1.api.example.com", "10.0.0.3:80"),
            ("api.example.com", "10.0.0.2:80"),
            ("other.org", "10.0.0.4:80"),
            ("com", "10.0.0.4:80"),
        ];
        for (host, expected) in cases {
            assert_eq!(
                upstream_of(&table, host, "/"),
                Ok(expected.to_owned()),
                "{host}"
            );
        }
    }

    #[test]
    fn no_catch_all_means_no_host() {
        let table = table(
            r#"{"host": {"*.example.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#,
        );
        assert_eq!(
            upstream_of(&table, "example.com", "/"),
            Err(RouteMiss::NoHost)
        );
        assert_eq!(
            upstream_of(&table, "example.org", "/"),
            Err(RouteMiss::NoHost)
        );
    }

    #[test]
    fn longest_prefix_at_segment_boundary() {
        let table = table(
            r#"{"host": {"a.com": {"location": {
                "/api": {"upstream": {"10.0.0.1:80": {}}},
                "/api/v2": {"upstream": {"10.0.0.2:80": {}}},
                "/static/": {"upstream": {"10.0.0.3:80": {}}}
            }}}}"#,
        );
        let cases = [
            ("/api", Ok("10.0.0.1:80")),
            ("/api/users", Ok("10.0.0.1:80")),
            ("/api/v2", Ok("10.0.0.2:80")),
            ("/api/v2/x", Ok("10.0.0.2:80")),
            ("/api/v20", Ok("10.0.0.1:80")),
            ("/apis", Err(RouteMiss::NoLocation)),
            ("/static/app.js", Ok("10.0.0.3:80")),
            ("/static", Err(RouteMiss::NoLocation)),
            ("/", Err(RouteMiss::NoLocation)),
        ];
        for (path, expected) in cases {
            assert_eq!(
                upstream_of(&table, "a.com", path),
                expected.map(str::to_owned),
                "{path}"
            );
        }
    }

    #[test]
    fn every_location_carries_its_hosts_https_settings() {
        let table = table(
            r#"{"host": {
                "a.com": {"https_redirect": false, "hsts": "600; includeSubDomains",
                    "location": {"/": {"upstream": {"10.0.0.1:80": {}}},
                                 "/api": {"upstream": {"10.0.0.2:80": {}}}}},
                "b.com": {"location": {"/": {"upstream": {"10.0.0.3:80": {}}}}}
            }}"#,
        );
        for path in ["/", "/api/x"] {
            let location = table.find("a.com", path).unwrap();
            assert!(!location.https_redirect, "{path}");
            assert_eq!(
                location.hsts.as_ref().unwrap(),
                "max-age=600; includeSubDomains"
            );
        }
        let defaults = table.find("b.com", "/").unwrap();
        assert!(defaults.https_redirect);
        assert_eq!(defaults.hsts, None);
    }

    #[test]
    fn names_have_no_address_yet() {
        let table =
            table(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"app:8080": {}}}}}}}"#);
        let location = table.find("a.com", "/").unwrap();
        assert!(location.upstreams.pick(&[]).is_none());
        assert!(location.follows_moves(), "a name moves");
    }
}
