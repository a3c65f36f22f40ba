//! The routes-file provider: reads the file at start (a bad file stops the
//! start), then re-reads it on SIGHUP and when its contents change (polled).
//! A change that fails to load keeps the hosts being served and is published
//! as a diagnostic until a good version replaces it. The file is read off the
//! runtime's worker thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::config::{
    parse_routes_file, ConfigErrors, Desired, Diagnostic, Findings, Origin, ProviderId,
};
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

/// Reads and checks the routes file: what it serves, or why it can't be loaded.
pub async fn load(path: &Path) -> Result<Desired, RoutesFileError> {
    let text = read(path).await?;
    parse(path, &text)
}

pub struct FileProvider {
    path: PathBuf,
    router: Arc<Router>,
    /// The contents last looked at, good or bad, so each version is read once.
    last_seen: String,
    /// The last version that loaded: served while a bad one is diagnosed.
    last_good: Desired,
}

impl FileProvider {
    /// Loads and publishes the file, or fails without publishing anything.
    pub async fn start(
        path: PathBuf,
        router: Arc<Router>,
    ) -> Result<FileProvider, RoutesFileError> {
        let text = read(&path).await?;
        let desired = parse(&path, &text)?;
        router.publish(ProviderId::File, desired.clone());
        Ok(FileProvider {
            path,
            router,
            last_seen: text,
            last_good: desired,
        })
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

    /// Reloads when the contents changed, or always when `forced`.
    async fn check(&mut self, forced: bool) {
        let loaded = match read(&self.path).await {
            Ok(text) if text == self.last_seen && !forced => return,
            Ok(text) => {
                let loaded = parse(&self.path, &text);
                self.last_seen = text;
                loaded
            }
            Err(error) => {
                if !forced && self.last_seen.is_empty() {
                    // Already diagnosed; a poll doesn't repeat it.
                    return;
                }
                // Remembered as empty, so the same failure is reported once.
                self.last_seen.clear();
                Err(error)
            }
        };
        match loaded {
            Ok(desired) => {
                let hosts = desired.hosts.hosts.len();
                self.last_good = desired.clone();
                self.router.publish(ProviderId::File, desired);
                tracing::info!(path = %self.path.display(), hosts, "routes file reloaded");
            }
            Err(error) => {
                let desired = Desired {
                    diagnostics: diagnose(&self.path, &error),
                    ..self.last_good.clone()
                };
                self.router.publish(ProviderId::File, desired);
            }
        }
    }
}

/// A version that did not load, as diagnostics: one per invalid key.
fn diagnose(path: &Path, error: &RoutesFileError) -> Vec<Diagnostic> {
    let mut diagnostics = Vec::new();
    let origin = Origin::RoutesFile {
        path: path.to_owned(),
    };
    let mut findings = Findings::new(origin, &mut diagnostics);
    let kept = "; the last good version is served";
    match error {
        RoutesFileError::Read { source, .. } => {
            findings.error("", format!("can't be read: {source}{kept}"))
        }
        RoutesFileError::Invalid { errors, .. } => {
            for error in &errors.0 {
                findings.error(&error.path, format!("{}{kept}", error.reason));
            }
        }
    }
    diagnostics
}

async fn read(path: &Path) -> Result<String, RoutesFileError> {
    tokio::fs::read_to_string(path)
        .await
        .map_err(|source| RoutesFileError::Read {
            path: path.to_owned(),
            source,
        })
}

fn parse(path: &Path, text: &str) -> Result<Desired, RoutesFileError> {
    parse_routes_file(text)
        .map(|hosts| Desired {
            hosts,
            ..Desired::default()
        })
        .map_err(|errors| RoutesFileError::Invalid {
            path: path.to_owned(),
            errors,
        })
}
