//! A location's upstreams as the proxy uses them: the addresses requests can be
//! sent to, each with the settings of the upstream it came from, and the choice
//! of the next one. Address discovery (names) and health arrive here from other
//! modules; this one only holds and picks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::uri::Authority;

use crate::config::{Protocol, UpstreamConfig, UpstreamTarget};

/// One address requests can be sent to.
#[derive(Debug)]
pub struct Endpoint {
    pub address: SocketAddr,
    /// `address` as a URI authority, built once so requests don't format it.
    pub authority: Authority,
    pub config: Arc<UpstreamConfig>,
}

impl Endpoint {
    fn new(address: SocketAddr, config: Arc<UpstreamConfig>) -> Endpoint {
        let authority = Authority::try_from(address.to_string())
            .expect("a socket address is a valid authority");
        Endpoint {
            address,
            authority,
            config,
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.config.protocol
    }
}

/// The endpoints of one location, chosen in turn.
#[derive(Debug, Default)]
pub struct UpstreamSet {
    endpoints: Vec<Arc<Endpoint>>,
    next: AtomicUsize,
}

impl UpstreamSet {
    /// Endpoints for the upstreams written as addresses. Names get theirs from
    /// the resolver, and TLS upstreams are not reachable by this version, so
    /// neither adds one here.
    pub fn build(configs: &[UpstreamConfig]) -> UpstreamSet {
        let endpoints = configs
            .iter()
            .filter(|config| !config.tls)
            .filter_map(|config| match config.target {
                UpstreamTarget::Address(address) => {
                    Some(Arc::new(Endpoint::new(address, Arc::new(config.clone()))))
                }
                UpstreamTarget::Name { .. } | UpstreamTarget::Srv { .. } => None,
            })
            .collect();
        UpstreamSet {
            endpoints,
            next: AtomicUsize::new(0),
        }
    }

    /// The next endpoint in round-robin order; `None` when there is no address.
    pub fn pick(&self) -> Option<Arc<Endpoint>> {
        if self.endpoints.is_empty() {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        Some(self.endpoints[turn % self.endpoints.len()].clone())
    }

    /// Whether `address` is still one of this location's endpoints.
    pub fn contains(&self, address: std::net::SocketAddr) -> bool {
        self.endpoints
            .iter()
            .any(|endpoint| endpoint.address == address)
    }

    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_routes_file;

    #[test]
    fn round_robin_visits_each_in_turn() {
        let desired = parse_routes_file(
            r#"{"host": {"a.com": {"location": {"/": {"upstream": {
                "10.0.0.1:80": {}, "10.0.0.2:80": {}, "10.0.0.3:80": {}, "app:80": {}
            }}}}}}"#,
        )
        .unwrap();
        let set = UpstreamSet::build(&desired.hosts[0].locations[0].upstreams);
        assert_eq!(set.len(), 3, "the name has no address");
        let picked: Vec<String> = (0..6)
            .map(|_| set.pick().unwrap().address.to_string())
            .collect();
        assert_eq!(
            picked,
            [
                "10.0.0.1:80",
                "10.0.0.2:80",
                "10.0.0.3:80",
                "10.0.0.1:80",
                "10.0.0.2:80",
                "10.0.0.3:80"
            ]
        );
    }
}
