//! The immutable route table: hosts indexed for matching (exact names, wildcard
//! suffixes, the catch-all) and, per host, locations ordered longest prefix
//! first. Built once per change; lookups borrow and never allocate.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::Source;
use crate::config::{DesiredHosts, HostConfig, HostPattern, LocationConfig, Retry, Rewrite};
use crate::upstream::{BuildContext, CheckSettings, UpstreamSet};

#[derive(Default)]
pub struct RouteTable {
    exact: HashMap<Box<str>, usize>,
    /// Keyed by the suffix after `*.`.
    wildcards: HashMap<Box<str>, usize>,
    any: Option<usize>,
    hosts: Vec<HostRoutes>,
}

struct HostRoutes {
    /// Longest prefix first, so the first match is the longest.
    locations: Vec<Location>,
}

/// Where a matched request goes.
pub struct Location {
    pub prefix: Box<str>,
    pub upstreams: UpstreamSet,
    /// Its upstreams come from containers, which move: a request that finds
    /// none, or loses one, waits for the next table.
    pub follows_containers: bool,
    /// Shared with the requests that use it, so none copies it.
    pub retry: Option<Arc<Retry>>,
    pub rewrite: Option<Rewrite>,
}

impl Location {
    /// Whether its upstreams can move under a request (containers, DNS
    /// names), so one that lost its upstream may wait for where it went.
    pub fn follows_moves(&self) -> bool {
        self.follows_containers || !self.upstreams.names().is_empty()
    }
}

/// Why a request matched nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteMiss {
    NoHost,
    NoLocation,
}

impl RouteTable {
    /// A table of every source's hosts; a host defined by several sources is
    /// taken from the first (in `Source` order) and the others are skipped.
    pub fn build(
        sources: &BTreeMap<Source, DesiredHosts>,
        context: &BuildContext<'_>,
    ) -> RouteTable {
        let mut table = RouteTable::default();
        let mut taken = HashSet::new();
        for (source, desired) in sources {
            for host in &desired.hosts {
                if !taken.insert(&host.pattern) {
                    tracing::warn!(host = %host.pattern, ?source, "host defined by several sources; the first is served");
                    continue;
                }
                table.add_host(*source, host, context);
            }
        }
        table
    }

    fn add_host(&mut self, source: Source, host: &HostConfig, context: &BuildContext<'_>) {
        let index = self.hosts.len();
        let follows_containers = source == Source::Docker;
        let mut locations: Vec<Location> = host
            .locations
            .iter()
            .map(|location| build_location(host, location, follows_containers, context))
            .collect();
        locations.sort_by_key(|location| std::cmp::Reverse(location.prefix.len()));
        self.hosts.push(HostRoutes { locations });
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
}

fn build_location(
    host: &HostConfig,
    config: &LocationConfig,
    follows_containers: bool,
    context: &BuildContext<'_>,
) -> Location {
    let checks = CheckSettings::layered(&host.health_check, &config.health_check);
    Location {
        prefix: config.prefix.as_str().into(),
        upstreams: UpstreamSet::build(&config.upstreams, config.load_balancing, checks, context),
        follows_containers,
        retry: config.retry.clone().map(Arc::new),
        rewrite: config.rewrite.clone(),
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
        let registry = EndpointRegistry::always_reachable();
        let context = BuildContext {
            resolved: &HashMap::new(),
            registry: &registry,
        };
        RouteTable::build(&BTreeMap::from([(Source::File, desired)]), &context)
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
    fn names_have_no_address_yet() {
        let table =
            table(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"app:8080": {}}}}}}}"#);
        let location = table.find("a.com", "/").unwrap();
        assert!(location.upstreams.pick(&[]).is_none());
        assert!(location.follows_moves(), "a name moves");
    }
}
