//! Process settings: what the command line and environment decided, already
//! typed and checked. The binary fills them from its flags; tests build them
//! directly. `defaults` is the one place a default is written: the flags take
//! their default text from it, and `Settings::default()` parses that same
//! text, so the two cannot drift. Nothing here knows about the model, the
//! providers or the proxy.

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;

use crate::admin::AdminToken;
use crate::config::parse_duration;
use crate::connect::Http1Engine;

/// Every default, as a user would write it on the command line.
pub mod defaults {
    pub const HTTP_LISTEN: &str = "0.0.0.0:80";
    pub const HTTPS_LISTEN: &str = "0.0.0.0:443";
    pub const TLS_HANDSHAKE_TIMEOUT: &str = "10s";
    pub const CERTS_POLL_INTERVAL: &str = "2s";
    pub const ACME_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";
    pub const ACME_STAGING_DIRECTORY: &str =
        "https://acme-staging-v02.api.letsencrypt.org/directory";
    pub const ACME_STORAGE: &str = "/var/lib/dockhand/acme";
    pub const ADMIN_LISTEN: &str = "127.0.0.1:8081";
    pub const ROUTES_POLL_INTERVAL: &str = "1s";
    pub const DOCKER_HOST: &str = "unix:///var/run/docker.sock";
    pub const LABEL_PREFIX: &str = "dockhand";
    pub const UPSTREAM_WAIT: &str = "5s";
    pub const CONNECT_TIMEOUT: &str = "10s";
    pub const UPSTREAM_TIMEOUT: &str = "60s";
    pub const SHUTDOWN_TIMEOUT: &str = "30s";
    pub const HEADER_READ_TIMEOUT: &str = "10s";
    pub const CLIENT_BODY_TIMEOUT: &str = "60s";
    pub const CLIENT_SEND_TIMEOUT: &str = "60s";
    pub const DOCKER_RELIST_INTERVAL: &str = "60s";
    pub const LOG_LEVEL: &str = "info";
    pub const ACCESS_LOG: &str = "stdout";

    /// `--workers`: the CPUs this process may use (std counts its CPU
    /// affinity and cgroup quota), or 1 when that can't be told. Computed,
    /// so not a text like the others.
    pub fn workers() -> super::NonZeroUsize {
        std::thread::available_parallelism().unwrap_or(super::NonZeroUsize::MIN)
    }
}

/// Process-wide settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The JSON routes file, if any.
    pub routes_file: Option<PathBuf>,
    /// How often the routes file is checked for changes.
    pub routes_poll_interval: Duration,
    /// Upper bound on establishing one upstream connection.
    pub connect_timeout: Duration,
    /// How long a request that finds no upstream waits for one to appear;
    /// also how long a location whose upstreams moved away is kept (the
    /// grace period): both wait for a recreated container to come back.
    pub upstream_wait: Duration,
    /// Upper bound from sending a request to receiving the upstream's
    /// response head, and on each pause within its response body.
    pub upstream_timeout: Duration,
    /// How long in-flight requests may finish after a shutdown signal.
    pub shutdown_timeout: Duration,
    /// How long a client may take to send a request head (slowloris guard).
    pub header_read_timeout: Duration,
    /// How long a client may leave its request body waiting between two
    /// reads before `408`.
    pub client_body_timeout: Duration,
    /// How long a client may accept no bytes of what dockhand has for it
    /// before its connection is cut.
    pub client_send_timeout: Duration,
    /// What carries HTTP/1.1 to upstream addresses.
    pub http1_engine: Http1Engine,
    /// Peers whose `X-Forwarded-*` headers are trusted and extended.
    pub trusted_proxies: Vec<IpNet>,
    /// The DNS server upstream names are resolved with; `None` means the
    /// system's resolver.
    pub dns_resolver: Option<SocketAddr>,
    /// The Docker provider's settings; `None` serves without Docker.
    pub docker: Option<DockerSettings>,
    /// What the admin listener asks for; `None`: it must be on loopback.
    pub admin_token: Option<AdminToken>,
    /// HTTPS: where certificates come from, and the handshake's bounds.
    pub tls: TlsSettings,
    /// The threads that accept and serve client connections, each with its
    /// own listeners and upstream pools (see `workers`).
    pub workers: NonZeroUsize,
}

/// HTTPS termination: certificates from a directory and/or ACME.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSettings {
    /// `--certs-dir`: PEM pairs, re-read when they change.
    pub certs_dir: Option<PathBuf>,
    /// How often the certificates directory is checked for changes.
    pub certs_poll_interval: Duration,
    /// Upper bound on a client's TLS handshake.
    pub handshake_timeout: Duration,
    /// `None`: no certificates are ordered.
    pub acme: Option<AcmeSettings>,
}

impl TlsSettings {
    /// Whether the HTTPS listener is opened: when certificates can exist.
    pub fn https_wanted(&self) -> bool {
        self.certs_dir.is_some() || self.acme.is_some()
    }
}

/// Ordering certificates over ACME (RFC 8555).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeSettings {
    /// The account's contact.
    pub email: String,
    /// The directory URL of the CA.
    pub directory: String,
    /// Extra PEM roots trusted for the directory (a private CA, Pebble).
    pub ca: Option<PathBuf>,
    /// Where the account and certificates are kept across restarts.
    pub storage: PathBuf,
    pub challenge: AcmeChallenge,
}

/// How the CA checks that dockhand serves a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// Answered on the HTTP listener (port 80).
    Http01,
    /// Answered on the HTTPS listener (RFC 8737), when port 80 is not reachable.
    TlsAlpn01,
}

/// What the Docker provider needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerSettings {
    pub host: DockerHost,
    /// `--network`: the networks to reach containers through, in preference order.
    pub networks: Vec<String>,
    pub label_prefix: String,
    /// How often every container is listed again, besides events.
    pub relist_interval: Duration,
    /// `--docker-mode`: what is followed; `None`, detected from the engine
    /// (services too on a swarm manager).
    pub mode: Option<DockerMode>,
}

/// What the Docker provider follows: containers' labels, Swarm services'
/// labels (`deploy.labels`), or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerMode {
    Container,
    Swarm,
    Both,
}

impl DockerMode {
    pub fn follows_containers(mode: Option<DockerMode>) -> bool {
        mode != Some(DockerMode::Swarm)
    }

    pub fn follows_services(mode: Option<DockerMode>) -> bool {
        mode != Some(DockerMode::Container)
    }
}

/// Where the Docker engine listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerHost {
    /// `unix:///var/run/docker.sock`, or the bare path.
    Unix(PathBuf),
    /// `tcp://host:2375` (plain HTTP; `http://` is accepted too).
    Tcp { host: String, port: u16 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a Docker host: {reason} (write unix:///PATH, tcp://HOST:PORT or a socket path)")]
pub struct BadDockerHost {
    text: String,
    reason: &'static str,
}

impl FromStr for DockerHost {
    type Err = BadDockerHost;

    fn from_str(text: &str) -> Result<DockerHost, BadDockerHost> {
        let bad = |reason| BadDockerHost {
            text: text.to_owned(),
            reason,
        };
        if let Some(path) = text.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(bad("the socket path must be absolute"));
            }
            return Ok(DockerHost::Unix(path.into()));
        }
        if text.starts_with('/') {
            return Ok(DockerHost::Unix(text.into()));
        }
        let Some(address) = text
            .strip_prefix("tcp://")
            .or_else(|| text.strip_prefix("http://"))
        else {
            return Err(bad("unknown scheme"));
        };
        let address = address.trim_end_matches('/');
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| bad("the port is missing"))?;
        let port = port.parse().map_err(|_| bad("the port is not a number"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.contains(['/', '@', '?', '#']) {
            return Err(bad("the host name is not valid"));
        }
        Ok(DockerHost::Tcp {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for DockerHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DockerHost::Unix(path) => write!(f, "unix://{}", path.display()),
            DockerHost::Tcp { host, port } if host.contains(':') => {
                write!(f, "tcp://[{host}]:{port}")
            }
            DockerHost::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
        }
    }
}

/// Parses one of the `defaults` texts; they are constants, so a failure is
/// a bug caught by the first test that builds settings.
fn default_of<T: FromStr>(text: &str) -> T
where
    T::Err: fmt::Debug,
{
    text.parse().expect("a default in `defaults` parses")
}

fn default_duration(text: &str) -> Duration {
    parse_duration(text).expect("a default duration in `defaults` parses")
}

impl Default for DockerSettings {
    fn default() -> DockerSettings {
        DockerSettings {
            host: default_of(defaults::DOCKER_HOST),
            networks: Vec::new(),
            label_prefix: defaults::LABEL_PREFIX.to_owned(),
            relist_interval: default_duration(defaults::DOCKER_RELIST_INTERVAL),
            mode: None,
        }
    }
}

impl Default for TlsSettings {
    /// No certificates: HTTPS off.
    fn default() -> TlsSettings {
        TlsSettings {
            certs_dir: None,
            certs_poll_interval: default_duration(defaults::CERTS_POLL_INTERVAL),
            handshake_timeout: default_duration(defaults::TLS_HANDSHAKE_TIMEOUT),
            acme: None,
        }
    }
}

impl Default for Settings {
    /// What the binary runs with when given no flags (the Docker provider on).
    fn default() -> Settings {
        Settings {
            routes_file: None,
            routes_poll_interval: default_duration(defaults::ROUTES_POLL_INTERVAL),
            upstream_wait: default_duration(defaults::UPSTREAM_WAIT),
            connect_timeout: default_duration(defaults::CONNECT_TIMEOUT),
            upstream_timeout: default_duration(defaults::UPSTREAM_TIMEOUT),
            shutdown_timeout: default_duration(defaults::SHUTDOWN_TIMEOUT),
            header_read_timeout: default_duration(defaults::HEADER_READ_TIMEOUT),
            client_body_timeout: default_duration(defaults::CLIENT_BODY_TIMEOUT),
            client_send_timeout: default_duration(defaults::CLIENT_SEND_TIMEOUT),
            http1_engine: Http1Engine::default(),
            trusted_proxies: Vec::new(),
            dns_resolver: None,
            docker: Some(DockerSettings::default()),
            admin_token: None,
            tls: TlsSettings::default(),
            workers: defaults::workers(),
        }
    }
}

/// Why settings can't be served with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("nothing would be served: --no-docker turns the Docker provider off and no --routes file is given")]
    NothingToServe,
}

impl Settings {
    /// Checks what no single flag can: that something will be served.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.docker.is_none() && self.routes_file.is_none() {
            return Err(SettingsError::NothingToServe);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hosts() {
        let unix = |path: &str| Ok(DockerHost::Unix(path.into()));
        let tcp = |host: &str, port| {
            Ok(DockerHost::Tcp {
                host: host.to_owned(),
                port,
            })
        };
        let cases = [
            ("unix:///var/run/docker.sock", unix("/var/run/docker.sock")),
            (
                "/run/user/1000/docker.sock",
                unix("/run/user/1000/docker.sock"),
            ),
            ("tcp://docker-proxy:2375", tcp("docker-proxy", 2375)),
            ("http://10.0.0.1:2375/", tcp("10.0.0.1", 2375)),
            ("tcp://[::1]:2375", tcp("::1", 2375)),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<DockerHost>(), expected, "{text}");
        }
        for typo in [
            "unix:/var/run/docker.sock",
            "unix://var/run/docker.sock",
            "tcp://docker-proxy",
            "tcp://docker-proxy:twentythree",
            "tcp://:2375",
            "docker.sock",
            "ssh://me@host",
            "",
        ] {
            let error = typo.parse::<DockerHost>().unwrap_err().to_string();
            assert!(error.contains(&format!("`{typo}`")), "{error}");
        }
        for text in [
            "unix:///var/run/docker.sock",
            "tcp://[::1]:2375",
            "tcp://a:1",
        ] {
            assert_eq!(text.parse::<DockerHost>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn serving_nothing_is_refused() {
        let settings = Settings {
            docker: None,
            ..Settings::default()
        };
        assert_eq!(settings.validate(), Err(SettingsError::NothingToServe));
        assert_eq!(Settings::default().validate(), Ok(()));
    }
}
