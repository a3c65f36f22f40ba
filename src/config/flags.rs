//! Command-line flags, each also read from `DOCKHAND_<FLAG>`, turned into `Settings`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ipnet::IpNet;

use super::durations::parse_duration;
use super::Settings;
use crate::docker::DockerSettings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Pretty,
}

/// A Docker-label-driven edge reverse proxy.
#[derive(Debug, Parser)]
#[command(name = "dockhand", version, about)]
pub struct Flags {
    /// Address the HTTP listener binds.
    #[arg(long, env = "DOCKHAND_HTTP_LISTEN", default_value = "0.0.0.0:80")]
    pub http_listen: SocketAddr,

    /// JSON routes file; reloaded on SIGHUP and when it changes.
    #[arg(long, env = "DOCKHAND_ROUTES", value_name = "FILE")]
    pub routes: Option<PathBuf>,

    /// How often the routes file is checked for changes.
    #[arg(long, env = "DOCKHAND_ROUTES_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub routes_poll_interval: Duration,

    /// Serve only the routes file, without Docker.
    #[arg(long, env = "DOCKHAND_NO_DOCKER")]
    pub no_docker: bool,

    /// Docker engine to follow (default: DOCKER_HOST, else unix:///var/run/docker.sock).
    #[arg(long, env = "DOCKHAND_DOCKER_HOST", value_name = "URL")]
    pub docker_host: Option<String>,

    /// Network to reach containers through, in preference order (repeatable;
    /// default: the networks of dockhand's own container).
    #[arg(
        long = "network",
        env = "DOCKHAND_NETWORK",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub networks: Vec<String>,

    /// Prefix of the container labels dockhand reads.
    #[arg(long, env = "DOCKHAND_LABEL_PREFIX", default_value = "dockhand")]
    pub label_prefix: String,

    /// How long a request that finds no upstream waits for one to appear before 503.
    #[arg(long, env = "DOCKHAND_UPSTREAM_WAIT", default_value = "5s", value_parser = parse_duration)]
    pub upstream_wait: Duration,

    /// Upper bound on opening one upstream connection.
    #[arg(long, env = "DOCKHAND_CONNECT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Upper bound until an upstream's response headers arrive.
    #[arg(long, env = "DOCKHAND_UPSTREAM_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub upstream_timeout: Duration,

    /// How long in-flight requests may finish after SIGTERM or SIGINT.
    #[arg(long, env = "DOCKHAND_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// The DNS server (`host:port`) upstream names are resolved with
    /// (default: the system's resolver, from /etc/resolv.conf and /etc/hosts).
    #[arg(long, env = "DOCKHAND_DNS_RESOLVER")]
    pub dns_resolver: Option<SocketAddr>,

    /// Peers (CIDRs or addresses, comma-separated) whose X-Forwarded-* headers are kept and extended.
    #[arg(long, env = "DOCKHAND_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_network)]
    pub trusted_proxies: Vec<IpNet>,

    /// Worker threads serving requests (default: the number of CPUs).
    #[arg(long, env = "DOCKHAND_WORKERS")]
    pub workers: Option<usize>,

    /// Log format (default: pretty on a terminal, else json).
    #[arg(long, env = "DOCKHAND_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Log level or filter (`info`, `debug`, `dockhand=debug,hyper=info`).
    #[arg(long, env = "DOCKHAND_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// Where Docker listens when neither the flag nor `DOCKER_HOST` says.
const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// How often the Docker provider lists every container, besides events.
const DOCKER_RELIST_INTERVAL: Duration = Duration::from_secs(60);

impl Flags {
    pub fn settings(&self) -> Settings {
        let docker = (!self.no_docker).then(|| DockerSettings {
            host: self
                .docker_host
                .clone()
                .or_else(|| {
                    std::env::var("DOCKER_HOST")
                        .ok()
                        .filter(|host| !host.is_empty())
                })
                .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_owned()),
            networks: self.networks.clone(),
            label_prefix: self.label_prefix.clone(),
            upstream_wait: self.upstream_wait,
            relist_interval: DOCKER_RELIST_INTERVAL,
        });
        Settings {
            docker,
            routes_file: self.routes.clone(),
            routes_poll_interval: self.routes_poll_interval.max(Duration::from_millis(10)),
            upstream_wait: self.upstream_wait,
            connect_timeout: self.connect_timeout,
            upstream_timeout: self.upstream_timeout,
            shutdown_timeout: self.shutdown_timeout,
            trusted_proxies: self.trusted_proxies.clone(),
            dns_resolver: self.dns_resolver,
            ..Settings::default()
        }
    }
}

/// A CIDR (`10.0.0.0/8`) or a single address (`10.0.0.1`, taken as /32 or /128).
fn parse_network(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{text}` is not a CIDR or an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_model() {
        let flags = Flags::try_parse_from(["dockhand"]).unwrap();
        assert_eq!(flags.http_listen, "0.0.0.0:80".parse().unwrap());
        let settings = flags.settings();
        assert_eq!(settings.connect_timeout, Duration::from_secs(10));
        assert_eq!(settings.upstream_timeout, Duration::from_secs(60));
        assert_eq!(settings.shutdown_timeout, Duration::from_secs(30));
        assert!(settings.trusted_proxies.is_empty());
    }

    #[test]
    fn parses_flags() {
        let flags = Flags::try_parse_from([
            "dockhand",
            "--upstream-timeout",
            "500ms",
            "--trusted-proxies",
            "10.0.0.0/8,192.0.2.1",
            "--no-docker",
        ])
        .unwrap();
        assert_eq!(flags.upstream_timeout, Duration::from_millis(500));
        assert_eq!(flags.trusted_proxies.len(), 2);
        assert!(
            flags.trusted_proxies[1].contains(&"192.0.2.1".parse::<std::net::IpAddr>().unwrap())
        );
        assert!(flags.no_docker);
        assert!(Flags::try_parse_from(["dockhand", "--connect-timeout", "ten"]).is_err());
        assert!(Flags::try_parse_from(["dockhand", "--trusted-proxies", "nope"]).is_err());
    }
}
