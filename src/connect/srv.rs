//! The SRV resolvers upstreams dial through: one per resolution settings,
//! each with its caches, made when first used.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use super::dial::ConnectError;
use crate::config::SrvResolution;
use crate::resolve::{CacheTtls, Dns, HickoryDns, SrvResolver};
use crate::sync::lock;

/// One SRV resolver (with its caches) per resolution settings.
pub(super) struct SrvResolvers {
    pub(super) system: Arc<dyn Dns>,
    pub(super) resolvers: Mutex<HashMap<SrvResolution, Arc<SrvResolver>>>,
}

impl SrvResolvers {
    pub(super) async fn resolver(
        &self,
        resolution: &SrvResolution,
    ) -> Result<Arc<SrvResolver>, ConnectError> {
        if let Some(resolver) = lock(&self.resolvers).get(resolution) {
            return Ok(resolver.clone());
        }
        let dns: Arc<dyn Dns> = match &resolution.resolver {
            None => self.system.clone(),
            Some((host, port)) => Arc::new(HickoryDns::with_server(SocketAddr::new(
                self.server_address(host).await?,
                *port,
            ))),
        };
        let ttls = CacheTtls {
            min_ttl: resolution.min_ttl,
            max_ttl: resolution.max_ttl,
            negative_ttl: resolution.negative_ttl,
        };
        Ok(lock(&self.resolvers)
            .entry(resolution.clone())
            .or_insert_with(|| Arc::new(SrvResolver::new(dns, ttls)))
            .clone())
    }

    /// A `resolver` written as a name is looked up with the system's DNS.
    async fn server_address(&self, host: &str) -> Result<IpAddr, ConnectError> {
        if let Ok(ip) = host.parse() {
            return Ok(ip);
        }
        let lookup_failed =
            |error: Box<dyn std::error::Error + Send + Sync>| ConnectError::Lookup {
                name: format!("the DNS server {host}"),
                error,
            };
        let answer = self
            .system
            .lookup_ip(host)
            .await
            .map_err(|error| lookup_failed(Box::new(error)))?;
        answer
            .addresses
            .first()
            .copied()
            .ok_or_else(|| lookup_failed("no address".into()))
    }
}
