//! The model every source produces: hosts, their locations, and the upstreams of
//! each location, with every setting already parsed and validated.

use std::fmt;
use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode};
use regex::Regex;

use super::middleware::Middlewares;
pub use super::names::{DnsServer, HostPattern, SrvResolution, TlsServerName, UpstreamTarget};

/// The desired hosts of one source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DesiredHosts {
    pub hosts: Vec<HostConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    pub pattern: HostPattern,
    /// Applies to every location that does not set its own.
    pub health_check: HealthCheck,
    /// Plain HTTP for it is redirected to HTTPS (`308`) while it has a
    /// certificate; `false` keeps serving it over plain HTTP as well.
    pub https_redirect: bool,
    /// `Strict-Transport-Security` on its responses to TLS clients; `None`: not sent.
    pub hsts: Option<Hsts>,
    pub locations: Vec<LocationConfig>,
}

/// HTTP Strict Transport Security (RFC 6797) as a host asks for it: how
/// long browsers are to use only HTTPS for it, and whether for its
/// subdomains too. Shown as the header writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hsts {
    /// Seconds; 0 tells browsers to forget the host (RFC 6797 §6.1.1).
    pub max_age: u32,
    pub include_subdomains: bool,
    /// Consent to the browsers' preload lists (not part of RFC 6797).
    pub preload: bool,
}

impl fmt::Display for Hsts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "max-age={}", self.max_age)?;
        if self.include_subdomains {
            f.write_str("; includeSubDomains")?;
        }
        if self.preload {
            f.write_str("; preload")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LocationConfig {
    /// Path prefix, starting with `/`, matched at a segment boundary.
    pub prefix: String,
    pub load_balancing: LoadBalancing,
    pub retry: Option<Retry>,
    pub rewrite: Option<Rewrite>,
    /// The location's own check settings, layered over its host's.
    pub health_check: HealthCheck,
    /// The protocols a client may switch to through this location.
    pub upgrades: Upgrades,
    /// What it does to requests besides forwarding them (auth, limits, headers).
    pub middlewares: Middlewares,
    pub upstreams: Vec<UpstreamConfig>,
    /// Its upstreams move: they are containers, which are recreated, scaled
    /// and moved. The provider says so; the router then keeps the location
    /// through a grace period when its upstreams vanish, and a request that
    /// loses its upstream waits for where it went.
    pub upstreams_move: bool,
    /// The container routes that define it (labels only; empty for the
    /// routes file), oldest first: the admin API says where a host came from.
    pub containers: Vec<ContainerRef>,
}

/// One container route: the container, and where the route's labels start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRef {
    pub name: String,
    pub id: String,
    /// `dockhand` for the container's main route, `dockhand.routes.<name>` for a named one.
    pub labels: String,
}

/// The protocols (`Upgrade` tokens, lower case, each once) a location
/// forwards a protocol switch to; an offered protocol is matched by its name,
/// its version ignored. Built only from validated values (`values::upgrade_protocol`),
/// which never let `h2c` in: a client that switched a connection to HTTP/2
/// would send streams for any path and host past routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgrades(Vec<String>);

/// WebSocket, and nothing else, unless a location says otherwise.
const DEFAULT_UPGRADE: &str = "websocket";

impl Default for Upgrades {
    fn default() -> Upgrades {
        Upgrades(vec![DEFAULT_UPGRADE.to_owned()])
    }
}

impl Upgrades {
    /// `protocols` already validated and lower-cased; repeats are dropped.
    pub(super) fn from_validated(protocols: Vec<String>) -> Upgrades {
        let mut kept: Vec<String> = Vec::with_capacity(protocols.len());
        for protocol in protocols {
            if !kept.contains(&protocol) {
                kept.push(protocol);
            }
        }
        Upgrades(kept)
    }

    /// Whether a switch to the protocol named `name` (no version) is forwarded.
    pub fn allows(&self, name: &str) -> bool {
        self.0
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(name))
    }

    /// The protocols, in the order written.
    pub fn protocols(&self) -> &[String] {
        &self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadBalancing {
    #[default]
    RoundRobin,
    LeastConnections,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// Tries after the first, 0..=10.
    pub attempts: u8,
    pub on_connect: bool,
    pub on_statuses: Vec<StatusCode>,
}

#[derive(Debug, Clone)]
pub enum Rewrite {
    Prefix {
        strip: Option<String>,
        add: Option<String>,
    },
    Regex {
        pattern: Regex,
        replace: String,
    },
}

/// Health-check settings as written; unset fields inherit from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthCheck {
    pub interval: Option<Duration>,
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub target: UpstreamTarget,
    /// 1..=127
    pub weight: u8,
    pub tls: bool,
    pub sni: Option<String>,
    pub verify: bool,
    /// Request headers set (replacing) towards this upstream.
    pub headers_add: Vec<(HeaderName, HeaderValue)>,
    pub protocol: Protocol,
    /// The container route it was read from (labels only).
    pub container: Option<ContainerRef>,
}

/// Patterns compare by their source text (`Regex` has no equality of its own),
/// so an unchanged rewrite leaves the route table untouched.
impl PartialEq for Rewrite {
    fn eq(&self, other: &Rewrite) -> bool {
        match (self, other) {
            (
                Rewrite::Prefix { strip, add },
                Rewrite::Prefix {
                    strip: other_strip,
                    add: other_add,
                },
            ) => strip == other_strip && add == other_add,
            (
                Rewrite::Regex { pattern, replace },
                Rewrite::Regex {
                    pattern: other_pattern,
                    replace: other_replace,
                },
            ) => pattern.as_str() == other_pattern.as_str() && replace == other_replace,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge over cleartext (gRPC).
    H2c,
}
