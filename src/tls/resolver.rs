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

    /// The certificate that answers `client_hello`, or why there is none.
    /// A refusal is counted and logged here, once per ClientHello: the
    /// HTTPS listener asks before the handshake starts (so a refused one
    /// costs no handshake at all), and rustls asks again during it.
    pub fn choose(
        &self,
        client_hello: &ClientHello<'_>,
    ) -> Result<Arc<CertifiedKey>, TlsHandshake> {
        let Some(server_name) = client_hello.server_name() else {
            return Err(self.refuse(TlsHandshake::NoServerName, None));
        };
        let acme_validation = client_hello
            .alpn()
            .is_some_and(|mut offered| offered.any(|protocol| protocol == ACME_TLS_ALPN_PROTOCOL));
        let certificate = match acme_validation {
            true => self.tls.challenges.tls_alpn01(server_name),
            false => self
                .tls
                .certificates
                .lookup(server_name)
                .map(|certificate| certificate.key.clone()),
        };
        certificate.ok_or_else(|| self.refuse(TlsHandshake::UnknownServerName, Some(server_name)))
    }

    fn refuse(&self, ended: TlsHandshake, server_name: Option<&str>) -> TlsHandshake {
        self.metrics.tls_handshake(ended);
        tracing::info!(
            server_name = server_name.unwrap_or(""),
            "TLS handshake refused: {}",
            match ended {
                TlsHandshake::NoServerName => "the client named no server (SNI)",
                _ => "no certificate for the name the client asked for",
            }
        );
        ended
    }
}

/// Whether a failed handshake is one this resolver refused (and so has
/// already counted): rustls ends it with this error when the resolver
/// answers no certificate.
pub fn refused_by_resolver(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|error| {
            matches!(error, rustls::Error::General(message) if message == NO_CERTIFICATE_RESOLVED)
        })
}

/// rustls' words for a handshake its resolver gave no certificate.
const NO_CERTIFICATE_RESOLVED: &str = "no server certificate chain resolved";

impl std::fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SniResolver")
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(&client_hello).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConnection};

    use crate::tls::server_config;

    /// The words `refused_by_resolver` looks for are the ones rustls ends a
    /// handshake with when the resolver has no certificate.
    #[test]
    fn a_refusal_by_the_resolver_is_recognised_in_the_handshake_error() {
        let resolver = SniResolver::new(TlsState::new(), Arc::default());
        let mut server = ServerConnection::new(server_config(resolver).unwrap()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        let name = ServerName::try_from("unknown.test").unwrap();
        let mut client = ClientConnection::new(Arc::new(config), name).unwrap();
        let mut hello = Vec::new();
        client.write_tls(&mut hello).unwrap();
        server.read_tls(&mut hello.as_slice()).unwrap();
        let error = server.process_new_packets().unwrap_err();
        // As tokio-rustls hands it over.
        let error = std::io::Error::new(std::io::ErrorKind::InvalidData, error);
        assert!(refused_by_resolver(&error), "{error}");
        let other = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::General("something else".to_owned()),
        );
        assert!(!refused_by_resolver(&other));
    }
}
