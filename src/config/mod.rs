//! The configuration model: what a source (the routes file today, Docker labels
//! later) says the proxy should serve, as typed data with no strings left to
//! interpret. It owns the model types, the routes-file parser and the process
//! settings from flags; it does not build routing structures (see `routes`).

mod durations;
mod flags;
mod json_reader;
mod model;
mod routes_file;
pub mod values;

pub use durations::parse_duration;
pub use flags::{Flags, LogFormat};
pub use json_reader::{ConfigError, ConfigErrors};
pub use model::*;
pub use routes_file::parse_routes_file;

use std::path::PathBuf;
use std::time::Duration;

/// Process-wide settings, resolved from flags and environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The JSON routes file, if any.
    pub routes_file: Option<PathBuf>,
    /// How often the routes file is checked for changes.
    pub routes_poll_interval: Duration,
    /// Upper bound on establishing one upstream connection.
    pub connect_timeout: Duration,
    /// How long a request that finds no upstream waits for one to appear.
    pub upstream_wait: Duration,
    /// Upper bound from sending a request to receiving the upstream's response head.
    pub upstream_timeout: Duration,
    /// How long in-flight requests may finish after a shutdown signal.
    pub shutdown_timeout: Duration,
    /// How long a client may take to send a request head (slowloris guard).
    pub header_read_timeout: Duration,
    /// Peers whose `X-Forwarded-*` headers are trusted and extended.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The DNS server upstream names are resolved with; `None` means the
    /// system's resolver.
    pub dns_resolver: Option<std::net::SocketAddr>,
    /// The Docker provider's settings; `None` serves without Docker.
    pub docker: Option<crate::docker::DockerSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            routes_file: None,
            routes_poll_interval: Duration::from_secs(1),
            upstream_wait: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            upstream_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            trusted_proxies: Vec::new(),
            dns_resolver: None,
            docker: None,
        }
    }
}
