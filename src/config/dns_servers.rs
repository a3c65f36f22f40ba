//! DNS servers written as names (`"resolver": "ns.internal:5353"`). The
//! model does no I/O, so a provider gathers the names its routes use, with
//! where each is written (`NamedDnsServer`), looks them up when it loads,
//! and hands what it found here: `settle` puts each address in place of its
//! name and takes out the upstreams whose name has none, and `diagnose` says
//! which and why. A route table only ever holds DNS servers as addresses.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::diagnostic::{Diagnostic, Origin, Severity};
use super::model::{DesiredHosts, DnsServer, SrvResolution, UpstreamTarget};

/// A DNS server written as a name, and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedDnsServer {
    pub origin: Origin,
    /// The label, or the routes-file key path, of the `resolver`.
    pub key: String,
    pub name: String,
}

/// What looking up DNS server names found: each name's address, or why it
/// has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsServerAddresses(BTreeMap<String, Result<IpAddr, String>>);

impl DnsServerAddresses {
    pub fn insert(&mut self, name: String, found: Result<IpAddr, String>) {
        self.0.insert(name, found);
    }

    /// Puts the address of each DNS server written as a name in its place,
    /// and takes out the upstreams whose name has none. Their locations
    /// stay: without upstreams they answer 503, and other routes are
    /// untouched.
    pub fn settle(&self, hosts: &mut DesiredHosts) {
        for host in &mut hosts.hosts {
            for location in &mut host.locations {
                location
                    .upstreams
                    .retain_mut(|upstream| self.settle_target(&mut upstream.target));
            }
        }
    }

    /// An error for each of `named` whose name has no address.
    pub fn diagnose(&self, named: &[NamedDnsServer]) -> Vec<Diagnostic> {
        named
            .iter()
            .filter_map(|named| {
                Some(Diagnostic {
                    origin: named.origin.clone(),
                    key: named.key.clone(),
                    severity: Severity::Error,
                    reason: self.missing(&named.name)?,
                    // The label's value holds more than the name (its port).
                    value: None,
                    suggestion: None,
                })
            })
            .collect()
    }

    /// Whether `target` can be kept: it names no DNS server by name, or
    /// that name's address is now in its place.
    fn settle_target(&self, target: &mut UpstreamTarget) -> bool {
        let UpstreamTarget::Srv {
            resolution:
                SrvResolution {
                    resolver: Some(server),
                    ..
                },
            ..
        } = target
        else {
            return true;
        };
        let DnsServer::Name { host, port } = server else {
            return true;
        };
        match self.0.get(host.as_str()) {
            Some(Ok(ip)) => {
                *server = DnsServer::Address(SocketAddr::new(*ip, *port));
                true
            }
            _ => false,
        }
    }

    /// Why `name` has no address, if it has none.
    fn missing(&self, name: &str) -> Option<String> {
        let left_out = "the upstreams that ask it are left out until it resolves";
        match self.0.get(name) {
            Some(Ok(_)) => None,
            Some(Err(error)) => Some(format!(
                "DNS server name `{name}` did not resolve ({error}); {left_out}"
            )),
            None => Some(format!(
                "DNS server name `{name}` was not looked up; {left_out}"
            )),
        }
    }
}

impl UpstreamTarget {
    /// The name of the DNS server this SRV upstream asks, when it is written
    /// as a name rather than an address.
    pub fn dns_server_name(&self) -> Option<&str> {
        match self {
            UpstreamTarget::Srv {
                resolution:
                    SrvResolution {
                        resolver: Some(DnsServer::Name { host, .. }),
                        ..
                    },
                ..
            } => Some(host),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::parse_routes_file;

    fn hosts() -> DesiredHosts {
        parse_routes_file(
            r#"{ "host": { "a.com": { "location": {
                "/srv": { "upstream": {
                    "_app._tcp.x": { "resolution": { "mode": "srv", "resolver": "ns.x:5353" } },
                    "_web._tcp.x": { "resolution": { "mode": "srv", "resolver": "gone.x:53" } },
                    "_fixed._tcp.x": { "resolution": { "mode": "srv", "resolver": "10.0.0.9:53" } },
                    "10.0.0.1:80": {}
                } },
                "/other": { "upstream": { "_web._tcp.x": {
                    "resolution": { "mode": "srv", "resolver": "gone.x:53" } } } }
            } } } }"#,
        )
        .unwrap()
    }

    fn resolvers(hosts: &DesiredHosts) -> Vec<(String, Vec<String>)> {
        hosts.hosts[0]
            .locations
            .iter()
            .map(|location| {
                let upstreams = location
                    .upstreams
                    .iter()
                    .map(|upstream| match &upstream.target {
                        UpstreamTarget::Srv { owner, resolution } => {
                            format!("{owner} via {}", resolution.resolver.as_ref().unwrap())
                        }
                        other => other.to_string(),
                    });
                (location.prefix.clone(), upstreams.collect())
            })
            .collect()
    }

    #[test]
    fn names_become_addresses_and_upstreams_without_one_are_left_out() {
        let mut found = DnsServerAddresses::default();
        found.insert("ns.x".into(), Ok("10.0.0.53".parse().unwrap()));
        found.insert("gone.x".into(), Err("the name does not exist".into()));
        let mut hosts = hosts();
        found.settle(&mut hosts);
        assert_eq!(
            resolvers(&hosts),
            [
                (
                    "/srv".to_owned(),
                    vec![
                        "_app._tcp.x via 10.0.0.53:5353".to_owned(),
                        "_fixed._tcp.x via 10.0.0.9:53".to_owned(),
                        "10.0.0.1:80".to_owned(),
                    ]
                ),
                ("/other".to_owned(), vec![]),
            ]
        );
    }

    #[test]
    fn a_name_never_looked_up_is_left_out_too() {
        let mut hosts = hosts();
        DnsServerAddresses::default().settle(&mut hosts);
        let kept: Vec<usize> = hosts.hosts[0]
            .locations
            .iter()
            .map(|location| location.upstreams.len())
            .collect();
        assert_eq!(kept, [2, 0]);
    }

    #[test]
    fn each_name_without_an_address_is_an_error_where_it_is_written() {
        let origin = Origin::RoutesFile {
            path: PathBuf::from("routes.json"),
        };
        let named = |key: &str, name: &str| NamedDnsServer {
            origin: origin.clone(),
            key: key.into(),
            name: name.into(),
        };
        let mut found = DnsServerAddresses::default();
        found.insert("ns.x".into(), Ok("10.0.0.53".parse().unwrap()));
        found.insert("gone.x".into(), Err("lookup failed: timed out".into()));
        let diagnostics = found.diagnose(&[
            named("a", "ns.x"),
            named("b", "gone.x"),
            named("c", "new.x"),
        ]);
        let reasons: Vec<(Severity, &str, &str)> = diagnostics
            .iter()
            .map(|d| (d.severity, d.key.as_str(), d.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    Severity::Error,
                    "b",
                    "DNS server name `gone.x` did not resolve (lookup failed: timed out); \
                     the upstreams that ask it are left out until it resolves"
                ),
                (
                    Severity::Error,
                    "c",
                    "DNS server name `new.x` was not looked up; \
                     the upstreams that ask it are left out until it resolves"
                ),
            ]
        );
    }
}
