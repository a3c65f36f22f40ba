//! The certificates directory followed while serving: looked at every
//! `--certs-poll-interval` (the files' stamps compared, files read off the
//! runtime) and reloaded on a change, without touching connections. Each
//! pair's last good certificate stays in service, by its chain's path,
//! while its files are invalid or mismatched; a pair removed stops being
//! served. A problem is shown (as a diagnostic, so logged) once a poll has
//! seen the directory unchanged with it: a certificate written before its
//! key is mismatched for a moment, and the next poll finds the pair whole.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::diagnose::{diagnose, unreadable, Consequence, Pairs};
use super::{load_dir, stamp_dir, DirStamp, LoadedPair};
use crate::config::Diagnostic;
use crate::tls::{Certificate, CertificateSource, TlsState};

/// The certificates served from the directory, by their chain's path, for
/// the admin API (the store knows certificates, not files).
#[derive(Default)]
pub struct FileCertificates(RwLock<BTreeMap<PathBuf, Arc<Certificate>>>);

impl FileCertificates {
    /// The chain file `certificate` was loaded from, if it is served from one.
    pub fn path_of(&self, certificate: &Arc<Certificate>) -> Option<PathBuf> {
        let served = self.0.read().unwrap_or_else(|e| e.into_inner());
        served
            .iter()
            .find(|(_, held)| Arc::ptr_eq(held, certificate))
            .map(|(path, _)| path.clone())
    }

    fn set(&self, served: BTreeMap<PathBuf, Arc<Certificate>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = served;
    }
}

pub struct CertsDir {
    dir: PathBuf,
    tls: Arc<TlsState>,
    /// The files as last read; `None` when the directory could not be.
    stamp: Option<DirStamp>,
    /// The certificate in service for each pair: the last one that loaded.
    served: BTreeMap<PathBuf, Arc<Certificate>>,
    /// Why each pair (or the directory itself) does not load now.
    problems: BTreeMap<PathBuf, String>,
    /// The problems shown: those the last poll saw unchanged.
    shown: BTreeMap<PathBuf, String>,
}

impl CertsDir {
    /// Reads `dir` and serves what loads; fails when the directory can't be
    /// read. Problems found now are shown at once.
    pub async fn start(dir: PathBuf, tls: Arc<TlsState>) -> io::Result<CertsDir> {
        let (stamp, pairs) = scan(dir.clone(), None).await?.unwrap_or_default();
        let mut certs = CertsDir {
            dir,
            tls,
            stamp: Some(stamp),
            served: BTreeMap::new(),
            problems: BTreeMap::new(),
            shown: BTreeMap::new(),
        };
        certs.apply(pairs);
        certs.shown = certs.problems.clone();
        Ok(certs)
    }

    /// Looks at the directory once and reloads it if it changed; returns
    /// whether it did.
    pub async fn poll(&mut self) -> bool {
        match scan(self.dir.clone(), self.stamp.clone()).await {
            Ok(None) => {
                self.shown = self.problems.clone();
                false
            }
            Ok(Some((stamp, pairs))) => {
                self.stamp = Some(stamp);
                self.apply(pairs);
                tracing::info!(dir = %self.dir.display(), certificates = self.served.len(), problems = self.problems.len(), "certificates directory reloaded");
                true
            }
            Err(error) => {
                // What was served stays; the pairs' problems can't be
                // looked at again until the directory can.
                self.stamp = None;
                let problem = unreadable(&error);
                let again = self.problems.get(&self.dir) == Some(&problem);
                self.problems.insert(self.dir.clone(), problem);
                if again {
                    self.shown = self.problems.clone();
                }
                false
            }
        }
    }

    /// The pairs found replace the served ones: a pair that failed keeps
    /// its last good certificate, a pair gone is dropped.
    fn apply(&mut self, pairs: Vec<LoadedPair>) {
        let Pairs { loaded, problems } = Pairs::from(pairs);
        self.served.retain(|path, _| problems.contains_key(path));
        self.served.extend(loaded);
        self.problems = problems;
        let problems = &self.problems;
        self.shown
            .retain(|path, problem| problems.get(path) == Some(problem));
        let certificates = self.served.values().cloned().collect();
        self.tls
            .certificates
            .replace(CertificateSource::Files, certificates);
        self.tls.files.set(self.served.clone());
    }

    /// The problems shown, and the expiry of what is served as of `now`.
    pub fn diagnostics(&self, now: SystemTime) -> Vec<Diagnostic> {
        diagnose(
            &self.dir,
            &self.shown,
            &self.served,
            Consequence::Serving,
            now,
        )
    }

    /// Publishes the diagnostics, then polls every `poll_interval` and
    /// publishes them again (the router ignores an unchanged set).
    pub async fn watch(mut self, poll_interval: Duration, publish: impl Fn(Vec<Diagnostic>)) {
        let mut ticker = tokio::time::interval(poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            publish(self.diagnostics(SystemTime::now()));
            ticker.tick().await;
            self.poll().await;
        }
    }
}

/// The directory's stamp and pairs, read off the runtime; `None` when the
/// stamp is still `previous`.
async fn scan(
    dir: PathBuf,
    previous: Option<DirStamp>,
) -> io::Result<Option<(DirStamp, Vec<LoadedPair>)>> {
    tokio::task::spawn_blocking(move || read_if_changed(&dir, previous))
        .await
        .unwrap_or_else(|error| Err(io::Error::other(error)))
}

/// Stamped before it is read: a change while reading is seen at the next poll.
fn read_if_changed(
    dir: &Path,
    previous: Option<DirStamp>,
) -> io::Result<Option<(DirStamp, Vec<LoadedPair>)>> {
    let stamp = stamp_dir(dir)?;
    if previous.as_ref() == Some(&stamp) {
        return Ok(None);
    }
    Ok(Some((stamp, load_dir(dir)?)))
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    use super::*;
    use crate::config::{Origin, Severity};

    /// A pair's PEM texts.
    struct Pem {
        chain: String,
        key: String,
    }

    fn pem(name: &str) -> Pem {
        let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        Pem {
            chain: made.cert.pem(),
            key: made.signing_key.serialize_pem(),
        }
    }

    /// Writes by renaming a staged file, as certbot and editors do.
    fn write(path: &Path, text: &str) {
        let staging = path.with_extension("staging");
        std::fs::write(&staging, text).unwrap();
        std::fs::rename(&staging, path).unwrap();
    }

    struct Fixture {
        dir: tempfile::TempDir,
        tls: Arc<TlsState>,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                dir: tempfile::tempdir().unwrap(),
                tls: TlsState::new(),
            }
        }

        fn chain(&self, name: &str) -> PathBuf {
            self.dir.path().join(format!("{name}.crt"))
        }

        fn write_pair(&self, name: &str, pair: &Pem) {
            write(&self.chain(name), &pair.chain);
            write(&self.dir.path().join(format!("{name}.key")), &pair.key);
        }

        async fn start(&self) -> CertsDir {
            CertsDir::start(self.dir.path().to_owned(), self.tls.clone())
                .await
                .unwrap()
        }

        /// The leaf's DER served for `host`.
        fn served(&self, host: &str) -> Option<Vec<u8>> {
            let certificate = self.tls.certificates.lookup(host)?;
            Some(certificate.key.cert[0].to_vec())
        }
    }

    /// The leaf's DER of `pair`.
    fn der(pair: &Pem) -> Vec<u8> {
        CertificateDer::from_pem_slice(pair.chain.as_bytes())
            .unwrap()
            .to_vec()
    }

    fn errors(certs: &CertsDir) -> Vec<(PathBuf, String)> {
        certs
            .diagnostics(SystemTime::now())
            .into_iter()
            .filter(|diagnostic| diagnostic.severity == Severity::Error)
            .map(|diagnostic| match diagnostic.origin {
                Origin::CertificateFile { path } => (path, diagnostic.reason),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn an_unchanged_directory_is_not_reloaded_and_a_replaced_file_is() {
        let fixture = Fixture::new();
        let first = pem("a.example.com");
        fixture.write_pair("a", &first);
        let mut certs = fixture.start().await;
        let changes = fixture.tls.certificates.subscribe();
        assert!(!certs.poll().await, "nothing changed");
        assert!(!changes.has_changed().unwrap());

        // Same sizes (same key type and names), new files.
        let second = pem("a.example.com");
        fixture.write_pair("a", &second);
        assert!(certs.poll().await);
        assert_eq!(fixture.served("a.example.com"), Some(der(&second)));
        assert!(!certs.poll().await, "read once");

        // A new file is a change; a file removed is one too.
        fixture.write_pair("b", &pem("b.example.com"));
        assert!(certs.poll().await);
        assert!(fixture.tls.certificates.covers("b.example.com"));
        std::fs::remove_file(fixture.chain("b")).unwrap();
        assert!(certs.poll().await);
        assert!(!fixture.tls.certificates.covers("b.example.com"));
        assert!(fixture.tls.certificates.covers("a.example.com"));
    }

    #[tokio::test]
    async fn a_certificate_written_before_its_key_keeps_the_last_good_one_without_a_diagnostic() {
        let fixture = Fixture::new();
        let old = pem("a.example.com");
        fixture.write_pair("a", &old);
        let mut certs = fixture.start().await;

        let new = pem("a.example.com");
        write(&fixture.chain("a"), &new.chain);
        assert!(certs.poll().await);
        assert_eq!(fixture.served("a.example.com"), Some(der(&old)));
        assert_eq!(
            errors(&certs),
            [],
            "not shown while it may be a write in two steps"
        );

        write(&fixture.dir.path().join("a.key"), &new.key);
        assert!(certs.poll().await);
        assert_eq!(fixture.served("a.example.com"), Some(der(&new)));
        assert!(!certs.poll().await);
        assert_eq!(errors(&certs), []);
    }

    #[tokio::test]
    async fn a_pair_that_stays_mismatched_is_an_error_until_fixed_and_its_last_good_certificate_is_served(
    ) {
        let fixture = Fixture::new();
        let good = pem("a.example.com");
        fixture.write_pair("a", &good);
        let mut certs = fixture.start().await;

        write(&fixture.dir.path().join("a.key"), &pem("a.example.com").key);
        assert!(certs.poll().await);
        assert!(!certs.poll().await);
        assert_eq!(
            errors(&certs),
            [(
                fixture.chain("a"),
                "the private key does not belong to the certificate; the last good certificate is served"
                    .to_owned()
            )]
        );
        assert_eq!(fixture.served("a.example.com"), Some(der(&good)));
        let path = fixture
            .tls
            .files
            .path_of(&fixture.tls.certificates.lookup("a.example.com").unwrap());
        assert_eq!(path, Some(fixture.chain("a")));

        // A pair that never loaded is not served, and says so.
        write(&fixture.chain("c"), &pem("c.example.com").chain);
        assert!(certs.poll().await);
        assert!(!certs.poll().await);
        let reasons: Vec<String> = errors(&certs)
            .into_iter()
            .map(|(_, reason)| reason)
            .collect();
        assert!(reasons[1].ends_with("; not served"), "{reasons:?}");
        assert!(reasons[1].contains("c.key"), "{reasons:?}");

        let fixed = pem("a.example.com");
        fixture.write_pair("a", &fixed);
        std::fs::remove_file(fixture.chain("c")).unwrap();
        assert!(certs.poll().await);
        assert_eq!(errors(&certs), []);
        assert_eq!(fixture.served("a.example.com"), Some(der(&fixed)));
    }

    #[tokio::test]
    async fn a_directory_that_vanishes_keeps_its_certificates_and_is_an_error() {
        let fixture = Fixture::new();
        fixture.write_pair("a", &pem("a.example.com"));
        let mut certs = fixture.start().await;
        let moved = fixture.dir.path().with_extension("moved");
        std::fs::rename(fixture.dir.path(), &moved).unwrap();
        assert!(!certs.poll().await);
        assert!(!certs.poll().await);
        let errors = errors(&certs);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, fixture.dir.path());
        assert!(errors[0].1.starts_with("can't be read: "), "{errors:?}");
        assert!(fixture.tls.certificates.covers("a.example.com"));
        std::fs::rename(&moved, fixture.dir.path()).unwrap();
        assert!(certs.poll().await);
        assert_eq!(super::tests::errors(&certs), []);
    }

    #[tokio::test]
    async fn certificates_near_or_past_their_end_are_warnings() {
        let fixture = Fixture::new();
        fixture.write_pair("a", &pem("a.example.com"));
        let certs = fixture.start().await;
        let served = fixture.tls.certificates.lookup("a.example.com").unwrap();
        let warnings = |now: SystemTime| -> Vec<String> {
            certs
                .diagnostics(now)
                .into_iter()
                .map(|diagnostic| {
                    assert_eq!(diagnostic.severity, Severity::Warning);
                    diagnostic.reason
                })
                .collect()
        };
        let day = Duration::from_secs(24 * 60 * 60);
        assert_eq!(warnings(served.not_after - 8 * day), Vec::<String>::new());
        let soon = warnings(served.not_after - 3 * day - Duration::from_secs(60));
        assert_eq!(soon.len(), 1);
        assert!(soon[0].ends_with(", in 3 days"), "{soon:?}");
        let past = warnings(served.not_after + day);
        assert!(past[0].starts_with("expired at "), "{past:?}");
    }
}
