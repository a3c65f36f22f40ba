//! Every certificate dockhand holds, by where it came from, and the SNI
//! index built from them. A source replaces its whole set at once (the
//! certificates directory after a change, ACME after an order), and the
//! index is rebuilt and swapped then; handshakes read it without a lock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::certificate::Certificate;
use super::index::SniIndex;

/// Where a certificate came from, in order of preference: a certificate a
/// user put in the directory wins over one ordered for the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CertificateSource {
    /// `--certs-dir`.
    Files,
    /// Ordered over ACME.
    Acme,
}

impl CertificateSource {
    pub fn label(self) -> &'static str {
        match self {
            CertificateSource::Files => "file",
            CertificateSource::Acme => "acme",
        }
    }
}

pub struct CertificateStore {
    sources: Mutex<BTreeMap<CertificateSource, Vec<Arc<Certificate>>>>,
    index: ArcSwap<SniIndex>,
    /// Counts changes; the HTTPS listener and ACME follow it.
    changes: watch::Sender<u64>,
}

impl Default for CertificateStore {
    fn default() -> CertificateStore {
        CertificateStore {
            sources: Mutex::default(),
            index: ArcSwap::default(),
            changes: watch::Sender::new(0),
        }
    }
}

impl CertificateStore {
    /// Replaces every certificate of `source`; within a source, the one
    /// valid longest is preferred for a name.
    pub fn replace(&self, source: CertificateSource, mut certificates: Vec<Arc<Certificate>>) {
        certificates.sort_by_key(|certificate| std::cmp::Reverse(certificate.not_after));
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.insert(source, certificates);
        self.index
            .store(Arc::new(SniIndex::build(sources.values().flatten())));
        drop(sources);
        self.changes.send_modify(|count| *count += 1);
    }

    /// The certificate a handshake for `server_name` is answered with.
    pub fn lookup(&self, server_name: &str) -> Option<Arc<Certificate>> {
        self.index.load().lookup(server_name).cloned()
    }

    /// Whether a client asking for `host` would get a certificate.
    pub fn covers(&self, host: &str) -> bool {
        self.index.load().lookup(host).is_some()
    }

    /// Every certificate held, with its source, in order of preference.
    pub fn all(&self) -> Vec<(CertificateSource, Arc<Certificate>)> {
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources
            .iter()
            .flat_map(|(source, certificates)| {
                certificates
                    .iter()
                    .map(|certificate| (*source, certificate.clone()))
            })
            .collect()
    }

    /// Changes as they happen: the value counts them.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::certificate::test_certificate as certificate;

    #[test]
    fn a_file_certificate_wins_over_an_ordered_one_and_each_source_replaces_its_own() {
        let store = CertificateStore::default();
        let changes = store.subscribe();
        let ordered = certificate(&["a.example.com", "b.example.com"]);
        let file = certificate(&["a.example.com"]);
        store.replace(CertificateSource::Acme, vec![ordered.clone()]);
        store.replace(CertificateSource::Files, vec![file.clone()]);
        assert!(changes.has_changed().unwrap());
        assert!(Arc::ptr_eq(&store.lookup("a.example.com").unwrap(), &file));
        assert!(Arc::ptr_eq(
            &store.lookup("b.example.com").unwrap(),
            &ordered
        ));
        store.replace(CertificateSource::Files, Vec::new());
        assert!(Arc::ptr_eq(
            &store.lookup("a.example.com").unwrap(),
            &ordered
        ));
        assert!(store.covers("b.example.com"));
        assert!(!store.covers("c.example.com"));
        assert_eq!(store.all().len(), 1);
    }
}
