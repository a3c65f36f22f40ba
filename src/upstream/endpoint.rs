//! One place requests can be sent to (an address, or an SRV owner name whose
//! target is chosen when a connection is opened), with the settings of the
//! upstream it came from and the state it shares with every location that
//! sends to the same place.

use std::net::SocketAddr;
use std::sync::Arc;

use http::uri::Authority;

use super::health::EndpointState;
use crate::config::{Protocol, SrvResolution, UpstreamConfig, UpstreamTarget};

/// How connections to an endpoint are made: what the pool keys them by,
/// besides the address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transport {
    Http1,
    /// HTTP/2 with prior knowledge over cleartext.
    H2c,
    /// TLS; ALPN chooses the HTTP version.
    Tls(TlsTarget),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsTarget {
    /// The server name sent: `sni`, else the upstream's name; an upstream
    /// written as an address without `sni` sends none (its address is what
    /// the certificate is checked against).
    pub sni: Option<String>,
    pub verify: bool,
}

impl Transport {
    pub fn of(config: &UpstreamConfig) -> Transport {
        match (config.tls, config.protocol) {
            (true, _) => Transport::Tls(TlsTarget {
                sni: config.sni.clone().or_else(|| match &config.target {
                    // The server name comes from the settings, never from the
                    // address a name resolved to.
                    UpstreamTarget::Name { host, .. } => Some(host.clone()),
                    UpstreamTarget::Address(_) | UpstreamTarget::Srv { .. } => None,
                }),
                verify: config.verify,
            }),
            (false, Protocol::Http1) => Transport::Http1,
            (false, Protocol::H2c) => Transport::H2c,
        }
    }
}

/// Where an endpoint's connections go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Destination {
    Address(SocketAddr),
    /// Resolved through SRV at every new connection.
    Srv {
        owner: Arc<str>,
        resolution: SrvResolution,
    },
}

#[derive(Debug)]
pub struct Endpoint {
    pub destination: Destination,
    pub transport: Transport,
    /// The URI authority requests carry towards it (the address, or the SRV
    /// owner name), built once so requests don't format it.
    pub authority: Authority,
    pub config: Arc<UpstreamConfig>,
    pub state: Arc<EndpointState>,
}

impl Endpoint {
    pub fn new(
        destination: Destination,
        transport: Transport,
        config: Arc<UpstreamConfig>,
        state: Arc<EndpointState>,
    ) -> Option<Endpoint> {
        let authority = match &destination {
            Destination::Address(address) => Authority::try_from(address.to_string()),
            Destination::Srv { owner, .. } => Authority::try_from(&**owner),
        }
        .ok()?;
        Some(Endpoint {
            transport,
            destination,
            authority,
            config,
            state,
        })
    }

    /// The DNS name this endpoint's address came from, if any.
    pub fn resolved_from(&self) -> Option<&str> {
        match &self.config.target {
            UpstreamTarget::Name { host, .. } => Some(host),
            UpstreamTarget::Address(_) | UpstreamTarget::Srv { .. } => None,
        }
    }

    pub fn weight(&self) -> usize {
        usize::from(self.config.weight.max(1))
    }

    /// Whether two endpoints send to the same place the same way.
    pub fn same_place(&self, other: &Endpoint) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.authority.as_str())
    }
}
