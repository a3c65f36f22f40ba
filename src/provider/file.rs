//! The routes-file provider: reads the file at start (a bad file stops the
//! start), then re-reads it on SIGHUP and when its contents change (polled).
//! A change that fails to load keeps the hosts being served and is published
//! as a diagnostic until a good version replaces it. The file is read off the
//! runtime's worker thread, and at a poll only when its stamp
//! (`crate::file_stamp`) says it may have changed. DNS servers the file names are looked up at each
//! load (`dns_servers`); one that does not resolve, at start as later, is a
//! diagnostic and empties only the locations that ask it (DNS may be briefly
//! down), and it is looked up again at the polls until it resolves.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use super::dns_servers::{self, RETRY_INTERVAL};
use super::users_files;
use crate::config::{
    dns_server_names, parse_routes_file, users_file_key, ConfigErrors, Desired, DesiredHosts,
    Diagnostic, Findings, HostConfig, LocationConfig, Origin, ProviderId, Severity,
};
use crate::file_stamp::FileStamp;
use crate::resolve::Dns;
use crate::routes::Router;

#[derive(Debug, thiserror::Error)]
pub enum RoutesFileError {
    #[error("can't read routes file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("routes file {path} is invalid:\n{errors}")]
    Invalid { path: PathBuf, errors: ConfigErrors },
}

/// Reads and checks the routes file: the hosts it describes (DNS server
/// names not yet looked up), or why it can't be loaded.
pub async fn load(path: &Path) -> Result<DesiredHosts, RoutesFileError> {
    let text = read(path).await?;
    parse(path, &text)
}

pub struct FileProvider {
    path: PathBuf,
    router: Arc<Router>,
    /// Asked for the addresses of DNS servers written as names.
    dns: Arc<dyn Dns>,
    /// The contents last looked at, good or bad, so each version is read once.
    last_seen: String,
    /// The file's stamp when `last_seen` was read, if it can be trusted to
    /// tell a change: while the file keeps it, a poll does not read the file.
    last_seen_stamp: Option<FileStamp>,
    /// The last version that loaded, DNS server names as written: served
    /// while a bad one is diagnosed.
    last_good: DesiredHosts,
    /// Why the contents last looked at did not load, if they did not.
    load_problems: Vec<Diagnostic>,
    /// When to look up again a DNS server name that had no address.
    dns_server_retry: Option<Instant>,
}

impl FileProvider {
    /// Loads and publishes the file, or fails without publishing anything.
    /// A DNS server name that does not resolve does not fail the start.
    pub async fn start(
        path: PathBuf,
        router: Arc<Router>,
        dns: Arc<dyn Dns>,
    ) -> Result<FileProvider, RoutesFileError> {
        let (stamp, text) = stamped_read(&path).await;
        let text = text?;
        let hosts = parse(&path, &text)?;
        let mut provider = FileProvider {
            path,
            router,
            dns,
            last_seen: text,
            last_seen_stamp: stamp,
            last_good: hosts,
            load_problems: Vec::new(),
            dns_server_retry: None,
        };
        provider.publish().await;
        Ok(provider)
    }

    /// Re-reads the file every `poll_interval`, and at once on SIGHUP.
    pub async fn watch(mut self, poll_interval: Duration) {
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(hangup) => Some(hangup),
            Err(error) => {
                tracing::warn!(%error, "SIGHUP can't be caught; the routes file is polled only");
                None
            }
        };
        let mut ticker = tokio::time::interval(poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = ticker.tick() => false,
                Some(()) = async { hangup.as_mut()?.recv().await } => {
                    tracing::info!("SIGHUP: reloading the routes file");
                    true
                }
            };
            self.check(forced).await;
        }
    }

    /// Reloads when the contents changed, or always when `forced`; else
    /// looks up again, when due, a DNS server name that had no address.
    async fn check(&mut self, forced: bool) {
        match self.read_change(forced).await {
            Some(Ok(hosts)) => {
                let count = hosts.hosts.len();
                self.last_good = hosts;
                self.load_problems.clear();
                self.publish().await;
                tracing::info!(path = %self.path.display(), hosts = count, "routes file reloaded");
            }
            Some(Err(error)) => {
                self.load_problems = diagnose(&self.path, &error, KEPT);
                self.publish().await;
            }
            None if self.dns_server_retry.is_some_and(|at| Instant::now() >= at) => {
                self.publish().await;
            }
            None => {}
        }
    }

    /// The version to load now, if there is one to load: `None` when the
    /// contents did not change (or failed to read again) and nothing forces it.
    async fn read_change(&mut self, forced: bool) -> Option<Result<DesiredHosts, RoutesFileError>> {
        if !forced
            && self.last_seen_stamp.is_some()
            && FileStamp::of(&self.path).await == self.last_seen_stamp
        {
            return None;
        }
        let (stamp, text) = stamped_read(&self.path).await;
        self.last_seen_stamp = stamp;
        match text {
            Ok(text) if text == self.last_seen && !forced => None,
            Ok(text) => {
                let loaded = parse(&self.path, &text);
                self.last_seen = text;
                Some(loaded)
            }
            // Already diagnosed; a poll doesn't repeat it.
            Err(_) if !forced && self.last_seen.is_empty() => None,
            Err(error) => {
                // Remembered as empty, so the same failure is reported once.
                self.last_seen.clear();
                Some(Err(error))
            }
        }
    }

    /// Publishes the last good version, with its DNS server names looked up
    /// now, and every current problem.
    async fn publish(&mut self) {
        let mut desired = Desired {
            hosts: self.last_good.clone(),
            diagnostics: self.load_problems.clone(),
            ..Desired::default()
        };
        let origin = Origin::RoutesFile {
            path: self.path.clone(),
        };
        let named = dns_server_names(&desired.hosts, &origin);
        let resolved = dns_servers::settle(&*self.dns, &named, &mut desired).await;
        users_files::settle(&mut desired, &users_file_in(&origin)).await;
        self.dns_server_retry = (!resolved).then(|| Instant::now() + RETRY_INTERVAL);
        self.router.publish(ProviderId::File, desired);
    }
}

/// What a served routes file's diagnostics add to each reason.
const KEPT: &str = "; the last good version is served";

/// The routes file's problems as diagnostics, without serving it (`dockhand
/// check`): none when it loads.
pub async fn check(path: &Path) -> Vec<Diagnostic> {
    match load(path).await {
        Ok(hosts) => {
            let mut desired = Desired {
                hosts,
                ..Desired::default()
            };
            let origin = Origin::RoutesFile {
                path: path.to_owned(),
            };
            users_files::settle(&mut desired, &users_file_in(&origin)).await;
            desired.diagnostics
        }
        Err(error) => diagnose(path, &error, ""),
    }
}

/// Where a location's `users_file` is written in the routes file `origin`.
fn users_file_in(
    origin: &Origin,
) -> impl Fn(&HostConfig, &LocationConfig) -> (Origin, String) + Sync + '_ {
    |host, location| (origin.clone(), users_file_key(host, location))
}

/// A version that did not load, as diagnostics: one per invalid key, each
/// reason followed by `consequence`.
fn diagnose(path: &Path, error: &RoutesFileError, consequence: &str) -> Vec<Diagnostic> {
    let mut diagnostics = Vec::new();
    let origin = Origin::RoutesFile {
        path: path.to_owned(),
    };
    let mut findings = Findings::new(origin, &mut diagnostics);
    match error {
        RoutesFileError::Read { source, .. } => {
            findings.error("", format!("can't be read: {source}{consequence}"))
        }
        RoutesFileError::Invalid { errors, .. } => {
            for error in &errors.0 {
                findings.report(
                    Severity::Error,
                    &error.path,
                    format!("{}{consequence}", error.reason),
                    error.suggestion.clone(),
                );
            }
        }
    }
    diagnostics
}

/// The file's contents, and its stamp if it can be trusted to tell that
/// they changed (taken before they were read: a write after it changes it).
async fn stamped_read(path: &Path) -> (Option<FileStamp>, Result<String, RoutesFileError>) {
    let now = SystemTime::now();
    let stamp = FileStamp::of(path).await;
    let text = read(path).await;
    let settled = stamp
        .filter(|_| text.is_ok())
        .and_then(|stamp| stamp.if_settled(now));
    (settled, text)
}

async fn read(path: &Path) -> Result<String, RoutesFileError> {
    tokio::fs::read_to_string(path)
        .await
        .map_err(|source| RoutesFileError::Read {
            path: path.to_owned(),
            source,
        })
}

fn parse(path: &Path, text: &str) -> Result<DesiredHosts, RoutesFileError> {
    parse_routes_file(text).map_err(|errors| RoutesFileError::Invalid {
        path: path.to_owned(),
        errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::srv::fake_dns::{ip_answer, FakeDns};
    use crate::upstream::EndpointRegistry;

    const ROUTES: &str = r#"{ "host": { "a.com": { "location": {
        "/srv": { "upstream": { "_app._tcp.example.test": {
            "resolution": { "mode": "srv", "resolver": "ns.example.test:5353" } } } },
        "/plain": { "upstream": { "10.0.0.1:80": {} } } } } } }"#;

    struct Loaded {
        provider: FileProvider,
        router: Arc<Router>,
        dns: Arc<FakeDns>,
        _dir: tempfile::TempDir,
    }

    /// The provider started on `ROUTES`, its DNS not knowing the name yet.
    async fn start() -> Loaded {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("routes.json");
        std::fs::write(&path, ROUTES).unwrap();
        let router = Arc::new(Router::new(
            Arc::new(EndpointRegistry::new()),
            Duration::from_secs(5),
        ));
        let dns = Arc::new(FakeDns::default());
        let provider = FileProvider::start(path, router.clone(), dns.clone())
            .await
            .expect("a name that does not resolve does not fail the start");
        Loaded {
            provider,
            router,
            dns,
            _dir: dir,
        }
    }

    impl Loaded {
        fn upstream_count(&self, prefix: &str) -> usize {
            let table = self.router.current();
            let location = table.find("a.com", prefix).unwrap();
            location.upstreams.endpoints().len()
        }

        fn diagnostics(&self) -> Vec<String> {
            let diagnostics = self.router.diagnostics().into_iter();
            diagnostics
                .map(|(_, d)| format!("{}: {}", d.key, d.reason))
                .collect()
        }

        fn lookups(&self) -> usize {
            self.dns.ip_calls("ns.example.test")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_resolver_name_without_an_address_is_served_as_a_diagnostic_and_tried_again() {
        let mut loaded = start().await;
        assert_eq!(
            loaded.upstream_count("/srv"),
            0,
            "503, not a lookup at connect"
        );
        assert_eq!(loaded.upstream_count("/plain"), 1);
        assert_eq!(
            loaded.diagnostics(),
            [concat!(
                r#"host."a.com".location."/srv".upstream."_app._tcp.example.test".resolution.resolver: "#,
                "DNS server name `ns.example.test` did not resolve (the name does not exist or has no records); ",
                "the upstreams that ask it are left out until it resolves"
            )]
        );
        assert_eq!(loaded.lookups(), 1);

        loaded.dns.set_ip(
            "ns.example.test",
            Ok(ip_answer(&["10.0.0.53"], Duration::from_secs(30))),
        );
        loaded.provider.check(false).await;
        assert_eq!(loaded.lookups(), 1, "not before the retry interval");
        tokio::time::advance(RETRY_INTERVAL).await;
        loaded.provider.check(false).await;
        assert_eq!(loaded.lookups(), 2);
        assert_eq!(loaded.upstream_count("/srv"), 1);
        assert_eq!(loaded.diagnostics(), Vec::<String>::new());

        // Resolved: looked up again at the next load only.
        tokio::time::advance(RETRY_INTERVAL * 3).await;
        loaded.provider.check(false).await;
        assert_eq!(loaded.lookups(), 2);
        loaded.provider.check(true).await;
        assert_eq!(loaded.lookups(), 3, "SIGHUP loads again");
    }

    #[tokio::test]
    async fn a_bad_version_keeps_the_last_good_one_with_its_dns_server() {
        let mut loaded = start().await;
        loaded.dns.set_ip(
            "ns.example.test",
            Ok(ip_answer(&["10.0.0.53"], Duration::from_secs(30))),
        );
        loaded.provider.check(true).await;
        assert_eq!(loaded.upstream_count("/srv"), 1);

        std::fs::write(&loaded.provider.path, "{ not json").unwrap();
        loaded.provider.check(false).await;
        assert_eq!(loaded.upstream_count("/srv"), 1);
        let diagnostics = loaded.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert!(
            diagnostics[0].contains("the last good version is served"),
            "{diagnostics:?}"
        );
    }

    /// Started on a file last changed long enough before that its stamp is
    /// trusted.
    async fn start_settled() -> Loaded {
        let loaded = start().await;
        std::thread::sleep(Duration::from_millis(1100));
        let mut loaded = loaded;
        loaded.provider.check(true).await;
        assert!(loaded.provider.last_seen_stamp.is_some(), "settled");
        loaded
    }

    #[tokio::test]
    async fn a_poll_does_not_read_a_file_whose_stamp_did_not_change() {
        let mut loaded = start_settled().await;
        // Were the file read, these contents would differ from it.
        loaded.provider.last_seen = String::from("other contents");
        assert!(loaded.provider.read_change(false).await.is_none());
        assert!(
            loaded.provider.read_change(true).await.is_some(),
            "SIGHUP reads it"
        );
    }

    #[tokio::test]
    async fn an_edit_that_keeps_the_length_and_the_modification_time_is_loaded() {
        let mut loaded = start_settled().await;
        let path = loaded.provider.path.clone();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        let edited = ROUTES.replace("/plain", "/plaim");
        let mut file = std::fs::File::options().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, edited.as_bytes()).unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        loaded.provider.check(false).await;
        let table = loaded.router.current();
        let location = table.find("a.com", "/plaim").unwrap();
        assert_eq!(location.prefix.as_ref(), "/plaim");
    }
}
