//! The SRV resolvers upstreams dial through: one per resolution settings,
//! each with its caches, made when first used. A DNS server written as a
//! name was looked up by its provider when the routes were loaded; only
//! addresses are asked here, so no connection waits on that lookup.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::error::ConnectError;
use crate::config::{DnsServer, SrvResolution};
use crate::resolve::{CacheTtls, Dns, HickoryDns, SrvAnswer, SrvResolver};
use crate::sync::lock;

/// One SRV resolver (with its caches) per resolution settings.
pub(super) struct SrvResolvers {
    pub(super) system: Arc<dyn Dns>,
    pub(super) resolvers: Mutex<HashMap<SrvResolution, Arc<SrvResolver>>>,
}

impl SrvResolvers {
    /// The SRV answer cached for `owner` under `resolution`; never looks up.
    pub(super) fn cached(&self, owner: &str, resolution: &SrvResolution) -> Option<SrvAnswer> {
        let resolver = lock(&self.resolvers).get(resolution)?.clone();
        resolver.cached_srv(owner)
    }

    pub(super) async fn resolver(
        &self,
        resolution: &SrvResolution,
    ) -> Result<Arc<SrvResolver>, ConnectError> {
        if let Some(resolver) = lock(&self.resolvers).get(resolution) {
            return Ok(resolver.clone());
        }
        let dns: Arc<dyn Dns> = match &resolution.resolver {
            None => self.system.clone(),
            Some(DnsServer::Address(server)) => Arc::new(HickoryDns::with_server(*server)),
            // Providers settle names before they publish: one left here is
            // refused rather than looked up on a request's time.
            Some(server @ DnsServer::Name { .. }) => {
                return Err(ConnectError::Lookup {
                    name: format!("the DNS server {server}"),
                    error: "no address (names are looked up when routes load)".into(),
                });
            }
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
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::config::TlsServerName;
    use crate::resolve::{IpAnswer, LookupError, SrvAnswer};

    /// The names DNS, counting what it is asked.
    #[derive(Default)]
    struct CountingDns(AtomicUsize);

    impl Dns for CountingDns {
        fn lookup_ip<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(LookupError::NotFound) })
        }

        fn lookup_srv<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(LookupError::NotFound) })
        }
    }

    fn resolution(resolver: DnsServer) -> SrvResolution {
        SrvResolution {
            resolver: Some(resolver),
            min_ttl: Duration::from_secs(5),
            max_ttl: Duration::from_secs(60),
            negative_ttl: Duration::from_secs(5),
            tls_server_name: TlsServerName::Owner,
        }
    }

    #[tokio::test]
    async fn a_dns_server_is_asked_at_its_address_and_a_name_is_never_looked_up() {
        let dns = Arc::new(CountingDns::default());
        let resolvers = SrvResolvers {
            system: dns.clone(),
            resolvers: Mutex::default(),
        };
        let by_address = resolution(DnsServer::Address("127.0.0.1:5353".parse().unwrap()));
        let first = resolvers.resolver(&by_address).await.unwrap();
        let again = resolvers.resolver(&by_address).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "one resolver per settings");

        let by_name = resolution(DnsServer::Name {
            host: "ns.example.test".into(),
            port: 53,
        });
        match resolvers.resolver(&by_name).await {
            Err(error @ ConnectError::Lookup { .. }) => {
                let text = error.to_string();
                assert!(text.contains("ns.example.test:53"), "{text}")
            }
            Err(other) => panic!("another error: {other}"),
            Ok(_) => panic!("a name was dialed through"),
        }
        assert_eq!(dns.0.load(Ordering::SeqCst), 0, "nothing looked up");
    }
}
