//! Upstream names to addresses. A/AAAA names are resolved again on a schedule
//! and on demand (ADR 0006) by the worker in `names`; SRV owner names are
//! resolved when a connection is opened, through a bounded cache (`srv`).
//! DNS itself sits behind the narrow `Dns` trait: `hickory` is the real one,
//! tests feed fakes, and `counted` counts any one's queries in the metrics.

mod counted;
pub mod names;

use std::net::IpAddr;
use std::time::Duration;

use futures_util::future::BoxFuture;

pub mod hickory;
pub mod srv;

pub use counted::CountedDns;
pub use hickory::{HickoryDns, SystemConfigError};
pub use names::{AddressSink, NameResolver, ResolvedNames};
pub use srv::{CacheTtls, SrvConnection, SrvDialError, SrvResolver};

/// The addresses a name has right now, and how long the answer says it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpAnswer {
    /// Never empty: a name without addresses is `LookupError::NotFound`.
    pub addresses: Vec<IpAddr>,
    pub ttl: Duration,
}

/// One SRV record of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvRecord {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    /// Without the trailing dot; `.` (service not available) is kept as `"."`.
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvAnswer {
    pub records: Vec<SrvRecord>,
    /// Target addresses the server sent along (the additional section), by
    /// target name without the trailing dot.
    pub additional: Vec<(String, IpAddr)>,
    /// The smallest TTL of the records.
    pub ttl: Duration,
}

/// Why a lookup gave no answer. The difference matters: a name that does not
/// exist drops its addresses, a failure keeps the last ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// NXDOMAIN, or the name exists without records of the type asked for.
    #[error("the name does not exist or has no records")]
    NotFound,
    /// A timeout, SERVFAIL, REFUSED, or no server reachable.
    #[error("lookup failed: {0}")]
    Failed(String),
}

/// The DNS queries dockhand makes.
pub trait Dns: Send + Sync + 'static {
    /// A and AAAA records of `name` (also `/etc/hosts` for the system resolver).
    fn lookup_ip<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>>;
    /// SRV records of `owner`, exactly as given.
    fn lookup_srv<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>>;
}

/// DNS when the system's configuration could not be read: every lookup
/// fails with the reason, so names stay without addresses (`503`) and the
/// reason is logged with each.
pub struct Unconfigured(pub String);

impl Dns for Unconfigured {
    fn lookup_ip<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
        Box::pin(async { Err(LookupError::Failed(self.0.clone())) })
    }

    fn lookup_srv<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
        Box::pin(async { Err(LookupError::Failed(self.0.clone())) })
    }
}

/// What the proxy tells the name resolver while handling requests.
pub trait ResolveHints: Send + Sync + 'static {
    /// Connecting to an address of `name` failed.
    fn failed_connect(&self, name: &str);
    /// A request found no upstream in a location using `name`.
    fn no_upstream(&self, name: &str);
}

impl ResolveHints for NameResolver {
    fn failed_connect(&self, name: &str) {
        self.after_failed_connect(name);
    }

    fn no_upstream(&self, name: &str) {
        self.after_no_upstream(name);
    }
}

/// For a proxy without names to resolve.
impl ResolveHints for () {
    fn failed_connect(&self, _: &str) {}
    fn no_upstream(&self, _: &str) {}
}
