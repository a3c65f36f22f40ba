//! HTTPS termination: the certificates dockhand serves and how a handshake
//! picks one. `Certificate` is a chain and its key, parsed and checked once,
//! with the names and validity it carries; `CertificateStore` holds every
//! certificate by where it came from (the certificates directory, ACME) and
//! swaps in a new `SniIndex` on each change, so a handshake is one lookup;
//! `SniResolver` answers rustls' question "which certificate for this
//! ClientHello", and refuses rather than answer with another host's;
//! `AcmeChallenges` holds what ACME validation asks of the listeners while
//! an order runs, and `AcmeStatus` where each name's order stands.
//! `files` reads and follows the certificates directory. `server_config` builds the rustls configuration the HTTPS
//! listener serves with. Apart from `acme`, which follows the route table to
//! learn which hosts need a certificate, this module knows nothing of routes
//! or requests.

pub mod acme;
mod certificate;
mod challenges;
pub mod files;
mod index;
mod resolver;
mod server_config;
mod status;
mod store;

#[cfg(test)]
pub(crate) use certificate::test_certificate;
pub use certificate::{Certificate, CertificateError};
pub use challenges::{AcmeChallenges, ACME_TLS_ALPN_PROTOCOL, HTTP01_PATH_PREFIX};
pub use index::SniIndex;
pub use resolver::{refused_by_resolver, SniResolver};
pub use server_config::server_config;
pub use status::{AcmeStatus, OrderState};
pub use store::{CertificateSource, CertificateStore};

use std::sync::Arc;

/// What the listeners share about TLS: the certificates served, and the
/// answers to ACME's challenges while orders run. Present (and empty) when
/// HTTPS is off, so the plain-HTTP side can ask whether a host has a
/// certificate without a special case.
#[derive(Default)]
pub struct TlsState {
    pub certificates: CertificateStore,
    pub challenges: AcmeChallenges,
    /// Where each name's ACME order stands, for the admin API.
    pub acme: AcmeStatus,
    /// Which file each certificate of the directory comes from, for the admin API.
    pub files: files::FileCertificates,
}

impl TlsState {
    pub fn new() -> Arc<TlsState> {
        Arc::new(TlsState::default())
    }
}
