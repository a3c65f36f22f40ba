//! The real `Dns`: hickory-resolver asking the system's DNS servers (with
//! `/etc/hosts`) or one given server. It owns the wire and the mapping of DNS
//! outcomes to `LookupError`; it caches nothing, because its callers schedule
//! and cache lookups themselves and must see every change of an answer.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::future::{self, BoxFuture, FutureExt};
use hickory_resolver::config::{NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::{NameServerPool, TokioConnectionProvider};
use hickory_resolver::proto::op::{Query, ResponseCode};
use hickory_resolver::proto::rr::{Name, RData, RecordType};
use hickory_resolver::proto::xfer::{DnsHandle, DnsRequestOptions, FirstAnswer, RetryDnsHandle};
use hickory_resolver::proto::{ProtoError, ProtoErrorKind};
use hickory_resolver::{ResolveError, TokioResolver};

use super::{Dns, IpAnswer, LookupError, SrvAnswer, SrvRecord};

/// How long one query may wait for its answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Queries sent again after a timeout: two attempts in all.
const RETRIES: usize = 1;

/// Could not read the system's resolver configuration.
#[derive(Debug, thiserror::Error)]
#[error("reading the system's DNS configuration: {0}")]
pub struct SystemConfigError(#[from] ResolveError);

pub struct HickoryDns {
    /// A/AAAA lookups: search list, ndots and `/etc/hosts` as the system has them.
    resolver: TokioResolver,
    /// SRV lookups: the same servers asked directly, so that the whole
    /// answer (every target's additional records) is kept.
    servers: RetryDnsHandle<NameServerPool<TokioConnectionProvider>>,
    request_options: DnsRequestOptions,
}

impl HickoryDns {
    /// The servers of `/etc/resolv.conf` (Docker's embedded DNS inside a
    /// container), and `/etc/hosts` for A/AAAA lookups.
    pub fn from_system() -> Result<HickoryDns, SystemConfigError> {
        let (config, options) = hickory_resolver::system_conf::read_system_conf()?;
        Ok(HickoryDns::new(config, options))
    }

    /// Only the DNS server at `server` (UDP, TCP when an answer is truncated),
    /// without `/etc/hosts`.
    pub fn with_server(server: SocketAddr) -> HickoryDns {
        let servers = NameServerConfigGroup::from_ips_clear(&[server.ip()], server.port(), true);
        let config = ResolverConfig::from_parts(None, Vec::new(), servers);
        let mut options = ResolverOpts::default();
        options.use_hosts_file = ResolveHosts::Never;
        HickoryDns::new(config, options)
    }

    fn new(config: ResolverConfig, mut options: ResolverOpts) -> HickoryDns {
        options.timeout = ATTEMPT_TIMEOUT;
        options.attempts = RETRIES;
        options.edns0 = true;
        // Nothing is kept between lookups: a zero-sized cache whose entries
        // expire as they are made.
        options.cache_size = 0;
        options.positive_max_ttl = Some(Duration::ZERO);
        options.negative_max_ttl = Some(Duration::ZERO);
        let pool = NameServerPool::from_config(
            NameServerConfigGroup::from(config.name_servers().to_vec()),
            options.clone(),
            TokioConnectionProvider::default(),
        );
        let mut request_options = DnsRequestOptions::default();
        request_options.recursion_desired = options.recursion_desired;
        request_options.use_edns = options.edns0;
        let resolver =
            TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
                .with_options(options.clone())
                .build();
        HickoryDns {
            resolver,
            servers: RetryDnsHandle::new(pool, options.attempts),
            request_options,
        }
    }

    /// The addresses of one record type, with their TTLs; none is NotFound.
    async fn addresses(
        &self,
        name: &str,
        kind: RecordType,
    ) -> Result<Vec<(IpAddr, u32)>, LookupError> {
        let lookup =
            self.resolver
                .lookup(name, kind)
                .await
                .map_err(|error| match error.proto() {
                    Some(proto) => lookup_error(proto),
                    None => LookupError::Failed(error.to_string()),
                })?;
        let addresses: Vec<(IpAddr, u32)> = lookup
            .records()
            .iter()
            .filter_map(|record| record_ip(record.data()).map(|ip| (ip, record.ttl())))
            .collect();
        if addresses.is_empty() {
            return Err(LookupError::NotFound);
        }
        Ok(addresses)
    }

    async fn ip_answer(&self, name: &str) -> Result<IpAnswer, LookupError> {
        let (v4, v6) = future::join(
            self.addresses(name, RecordType::A),
            self.addresses(name, RecordType::AAAA),
        )
        .await;
        let addresses = match (v4, v6) {
            (Ok(mut v4), Ok(v6)) => {
                v4.extend(v6);
                v4
            }
            (Ok(addresses), Err(_)) | (Err(_), Ok(addresses)) => addresses,
            // A failure says nothing about the name; only two "no such
            // records" answers say it has no addresses.
            (Err(LookupError::Failed(reason)), _) | (_, Err(LookupError::Failed(reason))) => {
                return Err(LookupError::Failed(reason))
            }
            (Err(LookupError::NotFound), Err(LookupError::NotFound)) => {
                return Err(LookupError::NotFound)
            }
        };
        let ttl = addresses.iter().map(|(_, ttl)| *ttl).min().unwrap_or(0);
        Ok(IpAnswer {
            addresses: addresses.into_iter().map(|(ip, _)| ip).collect(),
            ttl: Duration::from_secs(u64::from(ttl)),
        })
    }

    async fn srv_answer(&self, owner: &str) -> Result<SrvAnswer, LookupError> {
        let mut name = Name::from_ascii(owner)
            .map_err(|error| LookupError::Failed(format!("`{owner}`: {error}")))?;
        // The owner is used exactly as given: no search list.
        name.set_fqdn(true);
        let response = self
            .servers
            .lookup(Query::query(name, RecordType::SRV), self.request_options)
            .first_answer()
            .await
            .map_err(|error| lookup_error(&error))?;
        let mut records = Vec::new();
        let mut ttl = None::<u32>;
        for record in response.answers() {
            if let RData::SRV(srv) = record.data() {
                records.push(SrvRecord {
                    priority: srv.priority(),
                    weight: srv.weight(),
                    port: srv.port(),
                    target: name_text(srv.target()),
                });
                ttl = Some(ttl.map_or(record.ttl(), |ttl| ttl.min(record.ttl())));
            }
        }
        let Some(ttl) = ttl else {
            return Err(LookupError::NotFound);
        };
        let additional = response
            .additionals()
            .iter()
            .filter_map(|record| record_ip(record.data()).map(|ip| (name_text(record.name()), ip)))
            .collect();
        Ok(SrvAnswer {
            records,
            additional,
            ttl: Duration::from_secs(u64::from(ttl)),
        })
    }
}

impl Dns for HickoryDns {
    fn lookup_ip<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
        self.ip_answer(name).boxed()
    }

    fn lookup_srv<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
        self.srv_answer(owner).boxed()
    }
}

/// hickory reports every answer without records as "no records found",
/// SERVFAIL and REFUSED included: only its response code tells them apart.
fn lookup_error(error: &ProtoError) -> LookupError {
    match error.kind() {
        ProtoErrorKind::NoRecordsFound { response_code, .. } => match response_code {
            ResponseCode::NXDomain | ResponseCode::NoError => LookupError::NotFound,
            code => LookupError::Failed(format!("the server answered {code}")),
        },
        _ => LookupError::Failed(error.to_string()),
    }
}

fn record_ip(data: &RData) -> Option<IpAddr> {
    match data {
        RData::A(a) => Some(IpAddr::V4(a.0)),
        RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
        _ => None,
    }
}

/// A name without its trailing dot; the root stays `"."`.
fn name_text(name: &Name) -> String {
    if name.is_root() {
        return ".".to_owned();
    }
    let text = name.to_ascii();
    text.strip_suffix('.').unwrap_or(&text).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_only_their_trailing_dot() {
        assert_eq!(name_text(&Name::root()), ".");
        assert_eq!(
            name_text(&Name::from_ascii("node-1.example.internal.").unwrap()),
            "node-1.example.internal"
        );
        assert_eq!(name_text(&Name::from_ascii("node-1").unwrap()), "node-1");
    }

    #[test]
    fn only_nxdomain_and_empty_answers_are_not_found() {
        let no_records = |response_code| {
            ProtoError::from(ProtoErrorKind::NoRecordsFound {
                query: Box::new(Query::default()),
                soa: None,
                ns: None,
                negative_ttl: None,
                response_code,
                trusted: false,
                authorities: None,
            })
        };
        assert_eq!(
            lookup_error(&no_records(ResponseCode::NXDomain)),
            LookupError::NotFound
        );
        assert_eq!(
            lookup_error(&no_records(ResponseCode::NoError)),
            LookupError::NotFound
        );
        for code in [ResponseCode::ServFail, ResponseCode::Refused] {
            assert!(matches!(
                lookup_error(&no_records(code)),
                LookupError::Failed(_)
            ));
        }
        assert!(matches!(
            lookup_error(&ProtoError::from(ProtoErrorKind::Timeout)),
            LookupError::Failed(_)
        ));
    }
}
