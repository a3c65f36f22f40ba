//! The names and addresses the configuration speaks of: what a host entry
//! matches (`HostPattern`), where an upstream's addresses come from
//! (`UpstreamTarget`), and how an SRV owner is resolved and by which DNS
//! server. They stand apart from the model, which re-exports them, because
//! the middleware settings need them too (forward auth's address; a CORS
//! origin's domain is checked as a host pattern): the middleware module and
//! the scalar parsers (`scalars`) use them without depending on the whole
//! model, which holds the middlewares.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// What a host entry matches, already lower-cased.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    /// `example.com`
    Exact(String),
    /// `*.example.com`, stored as the suffix `example.com`.
    Wildcard(String),
    /// `*`
    Any,
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(name) => f.write_str(name),
            HostPattern::Wildcard(suffix) => write!(f, "*.{suffix}"),
            HostPattern::Any => f.write_str("*"),
        }
    }
}

/// Where an upstream's addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTarget {
    /// Written as an address: used as is, never resolved.
    Address(SocketAddr),
    /// Written as `name:port`: resolved with A/AAAA lookups.
    Name { host: String, port: u16 },
    /// An SRV owner name (`_app._tcp.example.internal`).
    Srv {
        owner: String,
        resolution: SrvResolution,
    },
}

impl fmt::Display for UpstreamTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamTarget::Address(addr) => write!(f, "{addr}"),
            UpstreamTarget::Name { host, port } => write!(f, "{host}:{port}"),
            UpstreamTarget::Srv { owner, .. } => f.write_str(owner),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SrvResolution {
    /// The DNS server to ask; `None`: the one upstream names are resolved with.
    pub resolver: Option<DnsServer>,
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    pub negative_ttl: Duration,
    pub tls_server_name: TlsServerName,
}

/// The DNS server an SRV owner is asked of (`resolution.resolver`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DnsServer {
    /// Written as an address, or the address its provider found for a name.
    Address(SocketAddr),
    /// Written as `name:port`. The model does no I/O, so the provider looks
    /// the name up when it loads its routes and puts the address in its
    /// place, or leaves the upstream out (`DnsServerAddresses::settle`):
    /// connecting never waits on this lookup.
    Name { host: String, port: u16 },
}

impl fmt::Display for DnsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DnsServer::Address(address) => write!(f, "{address}"),
            DnsServer::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TlsServerName {
    #[default]
    Owner,
    Target,
}
