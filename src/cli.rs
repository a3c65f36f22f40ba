//! The command line: flags, each also read from `DOCKHAND_<FLAG>`, turned
//! into `Settings`. Defaults come from `settings::defaults`, the one place
//! they are written. Only the binary uses this module.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ipnet::IpNet;

use dockhand::admin::AdminToken;
use dockhand::config::parse_duration;
use dockhand::connect::Http1Engine;
use dockhand::settings::{
    defaults, AcmeChallenge, AcmeSettings, DockerHost, DockerMode, DockerSettings, Settings,
    TlsSettings,
};

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
    #[arg(long, env = "DOCKHAND_HTTP_LISTEN", default_value = defaults::HTTP_LISTEN)]
    pub http_listen: SocketAddr,

    /// Address the HTTPS listener binds; opened when --certs-dir or
    /// --acme-email is given.
    #[arg(long, env = "DOCKHAND_HTTPS_LISTEN", default_value = defaults::HTTPS_LISTEN)]
    pub https_listen: SocketAddr,

    /// Directory of certificates to serve: `<name>.crt` + `<name>.key`, or
    /// `<name>/fullchain.pem` + `<name>/privkey.pem`; re-read on change.
    #[arg(long, env = "DOCKHAND_CERTS_DIR", value_name = "DIR", global = true)]
    pub certs_dir: Option<PathBuf>,

    /// How often the certificates directory is checked for changes.
    #[arg(long, env = "DOCKHAND_CERTS_POLL_INTERVAL", default_value = defaults::CERTS_POLL_INTERVAL, value_parser = parse_duration)]
    pub certs_poll_interval: Duration,

    /// Upper bound on a client's TLS handshake.
    #[arg(long, env = "DOCKHAND_TLS_HANDSHAKE_TIMEOUT", default_value = defaults::TLS_HANDSHAKE_TIMEOUT, value_parser = parse_duration)]
    pub tls_handshake_timeout: Duration,

    /// Order certificates over ACME for every served host, with this contact.
    #[arg(long, env = "DOCKHAND_ACME_EMAIL", value_name = "EMAIL")]
    pub acme_email: Option<String>,

    /// The ACME directory URL (default: Let's Encrypt production).
    #[arg(long, env = "DOCKHAND_ACME_DIRECTORY", value_name = "URL")]
    pub acme_directory: Option<String>,

    /// Use Let's Encrypt's staging directory (untrusted certificates, high
    /// limits); --acme-directory, when given, wins.
    #[arg(long, env = "DOCKHAND_ACME_STAGING")]
    pub acme_staging: bool,

    /// PEM file of extra roots trusted for the ACME directory (a private CA).
    #[arg(long, env = "DOCKHAND_ACME_CA", value_name = "FILE")]
    pub acme_ca: Option<PathBuf>,

    /// Where the ACME account and certificates are kept.
    #[arg(long, env = "DOCKHAND_ACME_STORAGE", value_name = "DIR", default_value = defaults::ACME_STORAGE)]
    pub acme_storage: PathBuf,

    /// How the CA checks the names: on the HTTP listener, or on the HTTPS
    /// listener when port 80 is not reachable.
    #[arg(long, env = "DOCKHAND_ACME_CHALLENGE", value_enum, default_value_t = AcmeChallengeFlag::Http01)]
    pub acme_challenge: AcmeChallengeFlag,

    /// Address the admin listener (API, dashboard, metrics, probes) binds;
    /// off loopback it needs --admin-token or --admin-token-file.
    #[arg(long, env = "DOCKHAND_ADMIN_LISTEN", default_value = defaults::ADMIN_LISTEN, global = true)]
    pub admin_listen: SocketAddr,

    /// Bearer token the admin listener asks for (every path but /healthz).
    #[arg(
        long,
        env = "DOCKHAND_ADMIN_TOKEN",
        value_name = "TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// File holding the admin token (a Docker secret, say); surrounding
    /// whitespace is not part of it.
    #[arg(
        long,
        env = "DOCKHAND_ADMIN_TOKEN_FILE",
        value_name = "FILE",
        global = true
    )]
    pub admin_token_file: Option<PathBuf>,

    /// JSON routes file; reloaded on SIGHUP and when it changes.
    #[arg(long, env = "DOCKHAND_ROUTES", value_name = "FILE")]
    pub routes: Option<PathBuf>,

    /// How often the routes file is checked for changes.
    #[arg(long, env = "DOCKHAND_ROUTES_POLL_INTERVAL", default_value = defaults::ROUTES_POLL_INTERVAL, value_parser = parse_duration)]
    pub routes_poll_interval: Duration,

    /// Serve only the routes file, without Docker.
    #[arg(long, env = "DOCKHAND_NO_DOCKER", global = true)]
    pub no_docker: bool,

    /// Docker engine to follow: unix:///PATH, tcp://HOST:PORT or a socket
    /// path (default: DOCKER_HOST, else unix:///var/run/docker.sock).
    #[arg(long, env = "DOCKHAND_DOCKER_HOST", value_name = "URL", global = true)]
    pub docker_host: Option<DockerHost>,

    /// Network to reach containers through, in preference order (repeatable;
    /// default: the networks of dockhand's own container).
    #[arg(
        long = "network",
        env = "DOCKHAND_NETWORK",
        value_name = "NAME",
        value_delimiter = ',',
        global = true
    )]
    pub networks: Vec<String>,

    /// Prefix of the container labels dockhand reads.
    #[arg(long, env = "DOCKHAND_LABEL_PREFIX", default_value = defaults::LABEL_PREFIX, global = true)]
    pub label_prefix: String,

    /// How long a request that finds no upstream waits for one to appear
    /// before 503, and how long a location whose containers all went away is kept.
    #[arg(long, env = "DOCKHAND_UPSTREAM_WAIT", default_value = defaults::UPSTREAM_WAIT, value_parser = parse_duration)]
    pub upstream_wait: Duration,

    /// Upper bound on opening one upstream connection.
    #[arg(long, env = "DOCKHAND_CONNECT_TIMEOUT", default_value = defaults::CONNECT_TIMEOUT, value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Upper bound until an upstream's response headers arrive, and on
    /// each pause within its response body.
    #[arg(long, env = "DOCKHAND_UPSTREAM_TIMEOUT", default_value = defaults::UPSTREAM_TIMEOUT, value_parser = parse_duration)]
    pub upstream_timeout: Duration,

    /// How long in-flight requests may finish after SIGTERM or SIGINT.
    #[arg(long, env = "DOCKHAND_SHUTDOWN_TIMEOUT", default_value = defaults::SHUTDOWN_TIMEOUT, value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// How long a client may take to send a request head.
    #[arg(long, env = "DOCKHAND_HEADER_READ_TIMEOUT", default_value = defaults::HEADER_READ_TIMEOUT, value_parser = parse_duration)]
    pub header_read_timeout: Duration,

    /// How long a client may pause while sending a request body before 408.
    #[arg(long, env = "DOCKHAND_CLIENT_BODY_TIMEOUT", default_value = defaults::CLIENT_BODY_TIMEOUT, value_parser = parse_duration)]
    pub client_body_timeout: Duration,

    /// How long a client may accept no bytes of its responses before its
    /// connection is cut (and its upstream connection released).
    #[arg(long, env = "DOCKHAND_CLIENT_SEND_TIMEOUT", default_value = defaults::CLIENT_SEND_TIMEOUT, value_parser = parse_duration)]
    pub client_send_timeout: Duration,

    /// What is followed: containers' labels, Swarm services' labels
    /// (`deploy.labels`), or both (default: both on a swarm manager, else
    /// container).
    #[arg(long, env = "DOCKHAND_DOCKER_MODE", value_enum)]
    pub docker_mode: Option<DockerModeFlag>,

    /// How often every container is listed again, besides Docker's events.
    #[arg(long, env = "DOCKHAND_DOCKER_RELIST_INTERVAL", default_value = defaults::DOCKER_RELIST_INTERVAL, value_parser = parse_duration)]
    pub docker_relist_interval: Duration,

    /// The DNS server (`host:port`) upstream names are resolved with
    /// (default: the system's resolver, from /etc/resolv.conf and /etc/hosts).
    #[arg(long, env = "DOCKHAND_DNS_RESOLVER")]
    pub dns_resolver: Option<SocketAddr>,

    /// Peers (CIDRs or addresses, comma-separated) whose X-Forwarded-* headers are kept and extended.
    #[arg(long, env = "DOCKHAND_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_network)]
    pub trusted_proxies: Vec<IpNet>,

    /// Threads that accept and serve client connections, each with its own
    /// upstream pools; at least 1 (default: the CPUs dockhand may use).
    #[arg(long, env = "DOCKHAND_WORKERS", value_parser = parse_workers)]
    pub workers: Option<NonZeroUsize>,

    /// Log format (default: pretty on a terminal, else json).
    #[arg(long, env = "DOCKHAND_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Log level or filter (`info`, `debug`, `dockhand=debug,hyper=info`).
    #[arg(long, env = "DOCKHAND_LOG_LEVEL", default_value = defaults::LOG_LEVEL)]
    pub log_level: String,

    /// Where access-log events go: `off`, `stdout` (with the other logs),
    /// or a file they are appended to (JSON lines; text with `--log-format pretty`).
    #[arg(long, env = "DOCKHAND_ACCESS_LOG", value_name = "off|stdout|FILE", default_value = defaults::ACCESS_LOG)]
    pub access_log: AccessLog,

    /// What carries HTTP/1.1 to upstream addresses: dockhand's own path,
    /// or hyper's client as before it (kept for one release, to compare).
    #[arg(
        long,
        env = "DOCKHAND_HTTP1_ENGINE",
        default_value = "own",
        hide = true
    )]
    pub http1_engine: Http1EngineFlag,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Http1EngineFlag {
    Own,
    Hyper,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DockerModeFlag {
    Container,
    Swarm,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AcmeChallengeFlag {
    #[value(name = "http-01")]
    Http01,
    #[value(name = "tls-alpn-01")]
    TlsAlpn01,
}

/// What to do instead of serving.
#[derive(Debug, Subcommand, PartialEq, Eq)]
pub enum Command {
    /// Exit 0 when the admin listener's /readyz answers 200 (for the image's
    /// HEALTHCHECK, which has no shell or curl), else 1.
    Healthcheck,
    /// Check the routes file, the containers' labels and the certificates directory without serving:
    /// print every problem, exit 1 if any is an error, 2 if Docker can't be reached.
    Check(CheckFlags),
}

#[derive(Debug, Args, PartialEq, Eq)]
pub struct CheckFlags {
    /// Check this routes file (default: the one `--routes` or
    /// DOCKHAND_ROUTES gives dockhand). Given here, Docker is checked
    /// only with `--docker`.
    #[arg(long, value_name = "FILE")]
    pub routes: Option<PathBuf>,

    /// Check the labels of the engine's containers (the default unless
    /// `check --routes` is given, or `--no-docker`).
    #[arg(long)]
    pub docker: bool,

    /// How the problems are printed.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    /// One line per problem, then the counts.
    Text,
    /// One JSON document: the problems and their counts.
    Json,
}

/// `--access-log`: where the events at target `dockhand::access` go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLog {
    Off,
    Stdout,
    File(PathBuf),
}

impl FromStr for AccessLog {
    type Err = String;

    fn from_str(text: &str) -> Result<AccessLog, String> {
        match text {
            "off" => Ok(AccessLog::Off),
            "stdout" => Ok(AccessLog::Stdout),
            "" => Err("is empty (off, stdout or a file)".into()),
            path => Ok(AccessLog::File(path.into())),
        }
    }
}

/// The shortest poll interval (of the routes file, of the certificates
/// directory), so a typo can't make a busy loop.
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

impl Flags {
    /// The settings these flags say; `docker_host_env` is `DOCKER_HOST`,
    /// used when `--docker-host` is not given.
    pub fn settings(&self, docker_host_env: Option<&str>) -> Result<Settings, clap::Error> {
        let docker = match self.no_docker {
            true => None,
            false => Some(DockerSettings {
                host: self.docker_host(docker_host_env)?,
                networks: self.networks.clone(),
                label_prefix: self.label_prefix.clone(),
                relist_interval: self.docker_relist_interval,
                mode: self.docker_mode.map(|mode| match mode {
                    DockerModeFlag::Container => DockerMode::Container,
                    DockerModeFlag::Swarm => DockerMode::Swarm,
                    DockerModeFlag::Both => DockerMode::Both,
                }),
            }),
        };
        Ok(Settings {
            admin_token: self.admin_token()?,
            tls: self.tls(),
            docker,
            routes_file: self.routes.clone(),
            routes_poll_interval: self.routes_poll_interval.max(MIN_POLL_INTERVAL),
            upstream_wait: self.upstream_wait,
            connect_timeout: self.connect_timeout,
            upstream_timeout: self.upstream_timeout,
            shutdown_timeout: self.shutdown_timeout,
            header_read_timeout: self.header_read_timeout,
            client_body_timeout: self.client_body_timeout,
            client_send_timeout: self.client_send_timeout,
            http1_engine: match self.http1_engine {
                Http1EngineFlag::Own => Http1Engine::Own,
                Http1EngineFlag::Hyper => Http1Engine::Hyper,
            },
            trusted_proxies: self.trusted_proxies.clone(),
            dns_resolver: self.dns_resolver,
            workers: self.workers.unwrap_or_else(defaults::workers),
        })
    }

    fn tls(&self) -> TlsSettings {
        // An empty email (`DOCKHAND_ACME_EMAIL=` from a compose file's unset
        // variable) leaves ACME off.
        let email = self.acme_email.as_ref().filter(|email| !email.is_empty());
        let acme = email.map(|email| AcmeSettings {
            email: email.clone(),
            directory: match (&self.acme_directory, self.acme_staging) {
                (Some(directory), _) => directory.clone(),
                (None, true) => defaults::ACME_STAGING_DIRECTORY.to_owned(),
                (None, false) => defaults::ACME_DIRECTORY.to_owned(),
            },
            ca: self.acme_ca.clone(),
            storage: self.acme_storage.clone(),
            challenge: match self.acme_challenge {
                AcmeChallengeFlag::Http01 => AcmeChallenge::Http01,
                AcmeChallengeFlag::TlsAlpn01 => AcmeChallenge::TlsAlpn01,
            },
        });
        TlsSettings {
            certs_dir: self.certs_dir.clone(),
            certs_poll_interval: self.certs_poll_interval.max(MIN_POLL_INTERVAL),
            handshake_timeout: self.tls_handshake_timeout,
            acme,
        }
    }

    /// The token from `--admin-token` or the file `--admin-token-file` names.
    pub fn admin_token(&self) -> Result<Option<AdminToken>, clap::Error> {
        let invalid = |message: String| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message + "\n")
        };
        let text = match (&self.admin_token, &self.admin_token_file) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "--admin-token and --admin-token-file are both given; keep one".into(),
                ))
            }
            (Some(token), None) => token.clone(),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|error| {
                invalid(format!("--admin-token-file {}: {error}", path.display()))
            })?,
        };
        AdminToken::new(&text)
            .map(Some)
            .ok_or_else(|| invalid("the admin token is empty".into()))
    }

    fn docker_host(&self, docker_host_env: Option<&str>) -> Result<DockerHost, clap::Error> {
        if let Some(host) = &self.docker_host {
            return Ok(host.clone());
        }
        let Some(text) = docker_host_env.filter(|text| !text.is_empty()) else {
            return Ok(defaults::DOCKER_HOST
                .parse()
                .expect("the default Docker host parses"));
        };
        text.parse().map_err(|error| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("DOCKER_HOST (read because --docker-host is not given): {error}\n"),
            )
        })
    }
}

/// A count of workers: 1 or more.
fn parse_workers(text: &str) -> Result<NonZeroUsize, String> {
    let count: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of worker threads"))?;
    NonZeroUsize::new(count)
        .ok_or_else(|| "0 workers would serve nothing: give 1 or more".to_owned())
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
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Flags, clap::Error> {
        Flags::try_parse_from(std::iter::once("dockhand").chain(args.iter().copied()))
    }

    #[test]
    fn flags_without_arguments_give_the_default_settings() {
        let flags = parse(&[]).unwrap();
        assert_eq!(flags.settings(None).unwrap(), Settings::default());
        assert_eq!(flags.http_listen.to_string(), defaults::HTTP_LISTEN);
        assert_eq!(flags.log_level, defaults::LOG_LEVEL);
    }

    #[test]
    fn parses_flags() {
        let flags = parse(&[
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
        assert!(parse(&["--connect-timeout", "ten"]).is_err());
        assert!(parse(&["--trusted-proxies", "nope"]).is_err());
    }

    #[test]
    fn the_admin_token_comes_from_the_flag_or_a_file() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "from-file\n").unwrap();
        let path = file.path().to_str().unwrap();
        let token = |args: &[&str]| parse(args).unwrap().admin_token();
        assert_eq!(token(&[]).unwrap(), None);
        assert_eq!(
            token(&["--admin-token", "flag"]).unwrap(),
            AdminToken::new("flag")
        );
        assert_eq!(
            token(&["--admin-token-file", path]).unwrap(),
            AdminToken::new("from-file")
        );
        let both = token(&["--admin-token", "x", "--admin-token-file", path]);
        assert!(both.unwrap_err().to_string().contains("both"));
        let missing = token(&["--admin-token-file", "/nonexistent/token"]);
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/token"));
        let blank = token(&["--admin-token", " "]);
        assert!(blank.unwrap_err().to_string().contains("empty"));
    }

    #[test]
    fn healthcheck_is_a_subcommand_that_takes_the_admin_flags() {
        let flags = parse(&["healthcheck", "--admin-listen", "0.0.0.0:9000"]).unwrap();
        assert_eq!(flags.command, Some(Command::Healthcheck));
        assert_eq!(flags.admin_listen, "0.0.0.0:9000".parse().unwrap());
    }

    #[test]
    fn zero_workers_is_refused() {
        let error = parse(&["--workers", "0"]).unwrap_err().to_string();
        assert!(error.contains("--workers"), "{error}");
        assert!(error.contains("1 or more"), "{error}");
        let error = parse(&["--workers", "many"]).unwrap_err().to_string();
        assert!(error.contains("`many`"), "{error}");
        let settings = |args: &[&str]| parse(args).unwrap().settings(None).unwrap();
        assert_eq!(settings(&["--workers", "1"]).workers.get(), 1);
        assert_eq!(settings(&[]).workers, defaults::workers());
    }

    #[test]
    fn the_docker_mode_is_detected_unless_given_and_a_typo_is_refused() {
        let mode = |args: &[&str]| {
            parse(args)
                .unwrap()
                .settings(None)
                .unwrap()
                .docker
                .unwrap()
                .mode
        };
        assert_eq!(mode(&[]), None, "detected from the engine");
        assert_eq!(
            mode(&["--docker-mode", "container"]),
            Some(DockerMode::Container)
        );
        assert_eq!(mode(&["--docker-mode", "swarm"]), Some(DockerMode::Swarm));
        assert_eq!(mode(&["--docker-mode", "both"]), Some(DockerMode::Both));
        let error = parse(&["--docker-mode", "services"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--docker-mode"), "{error}");
        assert!(error.contains("container, swarm, both"), "{error}");
    }

    #[test]
    fn a_docker_host_typo_is_an_error_naming_the_flag() {
        let error = parse(&["--docker-host", "unix:/var/run/docker.sock"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--docker-host"), "{error}");
        assert!(error.contains("unix:///PATH"), "{error}");
        let flags = parse(&[]).unwrap();
        let error = flags.settings(Some("tcp//docker:2375")).unwrap_err();
        assert!(error.to_string().contains("DOCKER_HOST"), "{error}");
        let from_env = flags.settings(Some("tcp://docker:2375")).unwrap();
        assert_eq!(
            from_env.docker.unwrap().host.to_string(),
            "tcp://docker:2375"
        );
        let flag_wins = parse(&["--docker-host", "/run/docker.sock"]).unwrap();
        assert_eq!(
            flag_wins
                .settings(Some("tcp://docker:2375"))
                .unwrap()
                .docker
                .unwrap()
                .host,
            DockerHost::Unix("/run/docker.sock".into())
        );
    }

    #[test]
    fn acme_is_on_with_an_email_and_the_directory_follows_the_flags() {
        let acme = |args: &[&str]| parse(args).unwrap().settings(None).unwrap().tls.acme;
        assert_eq!(acme(&[]), None);
        assert_eq!(acme(&["--acme-email", ""]), None);
        let production = acme(&["--acme-email", "ops@example.com"]).unwrap();
        assert_eq!(production.directory, defaults::ACME_DIRECTORY);
        assert_eq!(production.challenge, AcmeChallenge::Http01);
        let staging = acme(&["--acme-email", "ops@example.com", "--acme-staging"]).unwrap();
        assert_eq!(staging.directory, defaults::ACME_STAGING_DIRECTORY);
        let own = [
            "--acme-email",
            "a@b.c",
            "--acme-staging",
            "--acme-directory",
            "https://ca/dir",
        ];
        assert_eq!(acme(&own).unwrap().directory, "https://ca/dir");
        let settings = parse(&["--certs-dir", "/certs"])
            .unwrap()
            .settings(None)
            .unwrap();
        assert!(settings.tls.https_wanted());
        assert!(!parse(&[])
            .unwrap()
            .settings(None)
            .unwrap()
            .tls
            .https_wanted());
    }

    /// A value for each flag that takes one, different from its default.
    fn example_value(flag: &str) -> &'static str {
        match flag {
            "http-listen" => "127.0.0.1:8080",
            "https-listen" => "127.0.0.1:8443",
            "certs-dir" => "/etc/dockhand/certs",
            "acme-email" => "admin@example.com",
            "acme-directory" => "https://localhost:14000/dir",
            "acme-staging" => "true",
            "acme-ca" => "/etc/dockhand/acme-ca.pem",
            "acme-storage" => "/data/acme",
            "acme-challenge" => "tls-alpn-01",
            "admin-listen" => "127.0.0.1:9091",
            "admin-token" => "s3cret",
            "admin-token-file" => "/run/secrets/dockhand_admin",
            "routes" => "/etc/dockhand/routes.json",
            "docker-host" => "tcp://docker-proxy:2375",
            "network" => "front,back",
            "label-prefix" => "edge",
            "dns-resolver" => "127.0.0.1:5353",
            "trusted-proxies" => "10.0.0.0/8",
            "workers" => "3",
            "http1-engine" => "hyper",
            "docker-mode" => "swarm",
            "log-format" => "json",
            "log-level" => "debug",
            "access-log" => "/var/log/dockhand/access.log",
            "no-docker" => "true",
            // Every other flag is a duration.
            _ => "7s",
        }
    }

    #[test]
    fn every_flag_can_come_from_the_environment() {
        let arguments: Vec<clap::Arg> = Flags::command()
            .get_arguments()
            .filter(|argument| argument.get_long().is_some())
            .cloned()
            .collect();
        assert!(arguments.len() >= 17, "every flag is seen");
        let mut command = Flags::command();
        for argument in &arguments {
            let long = argument.get_long().unwrap();
            let variable = format!("DOCKHAND_{}", long.to_uppercase().replace('-', "_"));
            assert_eq!(
                argument.get_env().and_then(|env| env.to_str()),
                Some(variable.as_str()),
                "--{long} reads {variable}"
            );
            // Read from a variable of this test's own, so the other tests
            // of this process keep seeing an empty DOCKHAND_* environment.
            // clap reads a variable when it is named, so it is set first.
            let own: &'static str = Box::leak(format!("DOCKHAND_TEST_{variable}").into_boxed_str());
            std::env::set_var(own, example_value(long));
            command = command.mut_arg(argument.get_id().clone(), |argument| argument.env(own));
        }
        let matches = command.try_get_matches_from(["dockhand"]).unwrap();
        for argument in &arguments {
            let id = argument.get_id().as_str();
            assert_eq!(
                matches.value_source(id),
                Some(clap::parser::ValueSource::EnvVariable),
                "--{id} was taken from its variable"
            );
        }
        let flags = <Flags as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        assert_eq!(flags.http_listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(flags.networks, ["front", "back"]);
        assert!(flags.no_docker);
        assert_eq!(flags.upstream_wait, Duration::from_secs(7));
        assert_eq!(flags.workers, NonZeroUsize::new(3));
        assert_eq!(flags.http1_engine, Http1EngineFlag::Hyper);
        assert_eq!(flags.docker_mode, Some(DockerModeFlag::Swarm));
        assert_eq!(
            flags.access_log,
            AccessLog::File("/var/log/dockhand/access.log".into())
        );
    }

    #[test]
    fn check_reads_the_docker_flags_written_after_it() {
        let flags = parse(&[
            "check",
            "--routes",
            "/tmp/routes.json",
            "--docker",
            "--docker-host",
            "tcp://docker:2375",
            "--format",
            "json",
        ])
        .unwrap();
        let Some(Command::Check(check)) = &flags.command else {
            panic!("{flags:?}");
        };
        assert_eq!(check.routes, Some("/tmp/routes.json".into()));
        assert!(check.docker);
        assert_eq!(check.format, CheckFormat::Json);
        assert_eq!(
            flags
                .settings(None)
                .unwrap()
                .docker
                .unwrap()
                .host
                .to_string(),
            "tcp://docker:2375"
        );
        assert_eq!(parse(&[]).unwrap().access_log, AccessLog::Stdout);
        assert_eq!(
            parse(&["--access-log", "off"]).unwrap().access_log,
            AccessLog::Off
        );
        assert!(parse(&["--access-log", ""]).is_err());
    }
}
