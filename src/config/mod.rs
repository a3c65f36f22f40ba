//! The configuration model: what a provider (the routes file, Docker labels)
//! says the proxy should serve, as typed data with no strings left to
//! interpret, and what it found wrong on the way (diagnostics). It owns the
//! model types, the routes-file parser and its validators, and the step that
//! puts the addresses a provider looked up in place of DNS server names
//! (`dns_servers`); it imports nothing else of dockhand's, does no I/O, and
//! does not build routing structures (see `routes`).

mod diagnostic;
mod dns_servers;
mod durations;
mod json_reader;
pub mod middleware;
mod middleware_json;
mod middleware_written;
mod model;
mod names;
mod routes_file;
mod scalars;
pub mod values;

pub use diagnostic::{Diagnostic, Findings, Origin, Severity, SeverityCounts};
pub use dns_servers::{DnsServerAddresses, NamedDnsServer};
pub use durations::parse_duration;
pub use json_reader::{ConfigError, ConfigErrors};
pub use middleware::Middlewares;
pub use middleware_written::{middlewares_json, Hashes};
pub use model::*;
pub use routes_file::{dns_server_names, parse_routes_file, users_file_key};

use std::fmt;

/// Who publishes desired hosts. A host several providers define is served
/// as the first one (in this order) says: the routes file wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProviderId {
    File,
    Docker,
    /// Swarm services' labels.
    Swarm,
    /// The certificates directory: diagnostics only, never hosts.
    Certificates,
    /// ACME orders: diagnostics only, never hosts.
    Acme,
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderId::File => "routes file",
            ProviderId::Docker => "docker",
            ProviderId::Swarm => "swarm",
            ProviderId::Certificates => "certificates directory",
            ProviderId::Acme => "acme",
        })
    }
}

/// Everything one provider wants right now, published whole on each change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    pub hosts: DesiredHosts,
    /// Every current problem of the provider's input, sorted.
    pub diagnostics: Vec<Diagnostic>,
    /// Every address the provider's containers have now. Upstream names may
    /// point at any of them (compose service names, aliases), so when this
    /// set changes the names are resolved again at once.
    pub container_addresses: std::collections::BTreeSet<std::net::IpAddr>,
}
