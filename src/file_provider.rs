//! The routes-file provider: reads the file at start (a bad file stops the
//! start), then re-reads it when asked (SIGHUP) and when its contents change
//! (polled). A change that fails to parse keeps the routes being served and
//! says why, once per distinct bad version.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::{parse_routes_file, ConfigErrors, DesiredHosts};
use crate::routes::{Router, Source};

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

pub struct FileProvider {
    path: PathBuf,
    router: Arc<Router>,
    /// The contents last looked at, good or bad, so each version is read once.
    last_seen: String,
}

impl FileProvider {
    /// Loads and publishes the file, or fails without publishing anything.
    pub fn start(path: PathBuf, router: Arc<Router>) -> Result<FileProvider, RoutesFileError> {
        let text = read(&path)?;
        let desired = parse(&path, &text)?;
        router.publish(Source::File, desired);
        Ok(FileProvider {
            path,
            router,
            last_seen: text,
        })
    }

    /// Re-reads the file every `poll_interval` and whenever `reload` is notified.
    pub async fn watch(mut self, poll_interval: Duration, reload: Arc<Notify>) {
        let mut ticker = tokio::time::interval(poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = ticker.tick() => false,
                () = reload.notified() => true,
            };
            self.check(forced);
        }
    }

    /// Reloads when the contents changed, or always when `forced`.
    fn check(&mut self, forced: bool) {
        let text = match read(&self.path) {
            Ok(text) => text,
            Err(error) => {
                if forced || !self.last_seen.is_empty() {
                    tracing::error!(%error, "routes file unreadable; keeping the current routes");
                }
                // Remember the failure so a poll doesn't repeat the message.
                self.last_seen.clear();
                return;
            }
        };
        if text == self.last_seen && !forced {
            return;
        }
        match parse(&self.path, &text) {
            Ok(desired) => {
                let hosts = desired.hosts.len();
                self.router.publish(Source::File, desired);
                tracing::info!(path = %self.path.display(), hosts, "routes file reloaded");
            }
            Err(error) => {
                tracing::error!(%error, "routes file not reloaded; keeping the current routes");
            }
        }
        self.last_seen = text;
    }
}

fn read(path: &Path) -> Result<String, RoutesFileError> {
    std::fs::read_to_string(path).map_err(|source| RoutesFileError::Read {
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
