//! The certificates directory's problems as diagnostics, made here for
//! serving and for `dockhand check` alike: a pair that can't be served is
//! an error with the reason loading gave, a directory that can't be read
//! is one too, and a certificate that has expired or expires within
//! `EXPIRY_WARNING` is a warning (clients will refuse it soon; renewing is
//! the user's job for files).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{load_dir, LoadedPair};
use crate::config::{Diagnostic, Findings, Origin};
use crate::tls::Certificate;

/// How long before its end a certificate's coming expiry is a warning.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// A directory's pairs by their chain's path: the certificates that
/// loaded, and why the others did not.
#[derive(Debug, Default)]
pub(super) struct Pairs {
    pub loaded: BTreeMap<PathBuf, Arc<Certificate>>,
    pub problems: BTreeMap<PathBuf, String>,
}

impl From<Vec<LoadedPair>> for Pairs {
    fn from(found: Vec<LoadedPair>) -> Pairs {
        let mut pairs = Pairs::default();
        for pair in found {
            match pair.certificate {
                Ok(certificate) => {
                    pairs.loaded.insert(pair.chain_path, certificate);
                }
                Err(error) => {
                    pairs.problems.insert(pair.chain_path, error.to_string());
                }
            }
        }
        pairs
    }
}

/// Whether the diagnostics say what serving does about each problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Consequence {
    Serving,
    Checking,
}

/// Why the directory itself can't be read, as a problem keyed by its path.
pub(super) fn unreadable(error: &io::Error) -> String {
    format!("can't be read: {error}")
}

/// `problems` (by path: a pair's chain, or `dir` itself) as errors, and the
/// expiry of each certificate `served` as of `now` as warnings.
pub(super) fn diagnose(
    dir: &Path,
    problems: &BTreeMap<PathBuf, String>,
    served: &BTreeMap<PathBuf, Arc<Certificate>>,
    consequence: Consequence,
    now: SystemTime,
) -> Vec<Diagnostic> {
    let mut diagnostics = Vec::new();
    for (path, problem) in problems {
        let outcome = match consequence {
            Consequence::Checking => "",
            Consequence::Serving if path == dir => "; the certificates read before are served",
            Consequence::Serving if served.contains_key(path) => {
                "; the last good certificate is served"
            }
            Consequence::Serving => "; not served",
        };
        finding(path, &mut diagnostics).error("", format!("{problem}{outcome}"));
    }
    for (path, certificate) in served {
        if let Some(warning) = expiry_warning(certificate, now) {
            finding(path, &mut diagnostics).warning("", warning);
        }
    }
    diagnostics.sort();
    diagnostics
}

fn finding<'a>(path: &Path, diagnostics: &'a mut Vec<Diagnostic>) -> Findings<'a> {
    let origin = Origin::CertificateFile {
        path: path.to_owned(),
    };
    Findings::new(origin, diagnostics)
}

fn expiry_warning(certificate: &Certificate, now: SystemTime) -> Option<String> {
    let until = humantime::format_rfc3339_seconds(certificate.not_after);
    match certificate.not_after.duration_since(now) {
        Err(_) => Some(format!("expired at {until}; clients refuse it")),
        Ok(left) if left < EXPIRY_WARNING => {
            let days = left.as_secs() / (24 * 60 * 60);
            Some(format!("expires at {until}, in {days} days"))
        }
        Ok(_) => None,
    }
}

/// Every problem of the pairs in `dir`, without serving them (`dockhand
/// check`): none when every pair loads and none expires soon.
pub async fn check(dir: &Path) -> Vec<Diagnostic> {
    let owned = dir.to_owned();
    let loaded = tokio::task::spawn_blocking(move || load_dir(&owned))
        .await
        .unwrap_or_else(|error| Err(io::Error::other(error)));
    let (problems, loaded) = match loaded {
        Ok(found) => {
            let pairs = Pairs::from(found);
            (pairs.problems, pairs.loaded)
        }
        Err(error) => (
            BTreeMap::from([(dir.to_owned(), unreadable(&error))]),
            BTreeMap::new(),
        ),
    };
    diagnose(
        dir,
        &problems,
        &loaded,
        Consequence::Checking,
        SystemTime::now(),
    )
}
