//! rustls' question "which certificate answers this ClientHello". A
//! handshake that offers `acme-tls/1` gets the TLS-ALPN-01 challenge
//! certificate for its name; any other gets the indexed certificate for its
//! server name. A ClientHello without a server name, or for a name with no
//! certificate, gets none, and rustls refuses it: answering with another
//! host's certificate would tell a scanner which hosts are served here.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::challenges::ACME_TLS_ALPN_PROTOCOL;
use super::TlsState;
use crate::metrics::{Metrics, TlsHandshake};

pub struct SniResolver {
    tls: Arc<TlsState>,
    metrics: Arc<Metrics>,
}

impl SniResolver {
    pub fn new(tls: Arc<TlsState>, metrics: Arc<Metrics>) -> SniResolver {
        SniResolver { tls, metrics }
    }

    fn refuse(&self, ended: TlsHandshake, server_name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        self.metrics.tls_handshake(ended);
        tracing::info!(
            server_name = server_name.unwrap_or(""),
            "TLS handshake refused: {}",
            match ended {
                TlsHandshake::NoServerName => "the client named no server (SNI)",
                _ => "no certificate for the name the client asked for",
            }
        );
        None
    }
}

impl std::fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SniResolver")
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(server_name) = client_hello.server_name() else {
            return self.refuse(TlsHandshake::NoServerName, None);
        };
        let acme_validation = client_hello
            .alpn()
            .is_some_and(|mut offered| offered.any(|protocol| protocol == ACME_TLS_ALPN_PROTOCOL));
        if acme_validation {
            return match self.tls.challenges.tls_alpn01(server_name) {
                Some(certificate) => Some(certificate),
                None => self.refuse(TlsHandshake::UnknownServerName, Some(server_name)),
            };
        }
        match self.tls.certificates.lookup(server_name) {
            Some(certificate) => Some(certificate.key.clone()),
            None => self.refuse(TlsHandshake::UnknownServerName, Some(server_name)),
        }
    }
}
