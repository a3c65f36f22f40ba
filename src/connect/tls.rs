//! The TLS side of connecting to an upstream: the client configurations (the
//! `ring` provider only, ALPN offering `h2` then `http/1.1`), the server name
//! sent, the handshake over an already-open stream, and the connection type
//! the pooled client uses. It does not open TCP connections, bound them in
//! time, or decide which upstreams use TLS (`client` and `config` do).
//!
//! `verify = true` checks the certificate chain against the system's roots
//! (`SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured), loaded once per process,
//! for the server name. `verify = false` accepts any certificate through
//! `AcceptAnyCertificate`, which still checks that the upstream holds the key
//! of the certificate it showed.

use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{self, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The ALPN names of HTTP/2 and HTTP/1.1, as both sides of dockhand offer them.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The system's trusted roots, loaded on first use and then shared. Files
/// that can't be read or parsed are logged and skipped: with none left, every
/// `verify = true` upstream fails its handshake, and nothing else.
pub fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS.get_or_init(load_system_roots).clone()
}

fn load_system_roots() -> Arc<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "could not load a system root certificate");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!(ignored, "system root certificates that could not be parsed");
    }
    if added == 0 {
        tracing::warn!("no system root certificates: upstreams with verify = true will fail");
    } else {
        tracing::debug!(added, "system root certificates loaded");
    }
    Arc::new(roots)
}

fn ring_provider() -> Arc<CryptoProvider> {
    Arc::new(crypto::ring::default_provider())
}

/// A client configuration with the `ring` provider, never the process
/// default. `verify`: check certificates against `roots`; otherwise accept any.
pub fn client_config(verify: bool, roots: Arc<RootCertStore>) -> Arc<ClientConfig> {
    let provider = ring_provider();
    let algorithms = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports TLS 1.2 and 1.3");
    let mut config = if verify {
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { algorithms }))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
    Arc::new(config)
}

/// The two configurations upstreams need for one root store, built once and
/// shared by every upstream (and so by their TLS session caches).
#[derive(Clone)]
pub struct ClientConfigs {
    verifying: Arc<ClientConfig>,
    accepting_any: Arc<ClientConfig>,
}

impl ClientConfigs {
    pub fn new(roots: Arc<RootCertStore>) -> ClientConfigs {
        ClientConfigs {
            verifying: client_config(true, roots.clone()),
            accepting_any: client_config(false, roots),
        }
    }

    /// The configuration for an upstream's `verify` setting.
    pub fn get(&self, verify: bool) -> Arc<ClientConfig> {
        if verify {
            self.verifying.clone()
        } else {
            self.accepting_any.clone()
        }
    }
}

/// Accepts whatever certificate an upstream shows (`verify = false`), for
/// upstreams with self-signed or internal certificates. The handshake's
/// signatures are still checked with the provider's algorithms, so the
/// connection is encrypted to whoever holds that certificate's key; who that
/// is goes unchecked.
#[derive(Debug)]
pub struct AcceptAnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// How to speak TLS to one upstream address: built when routes are built,
/// used for every connection to it.
#[derive(Clone)]
pub struct TlsSettings {
    server_name: ServerName<'static>,
    config: Arc<ClientConfig>,
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a valid TLS server name")]
pub struct InvalidServerName(String);

impl TlsSettings {
    /// `sni` when set (the upstream's `sni`, or the name SRV resolution
    /// gives), else the upstream's IP `address` as the server name.
    pub fn new(
        sni: Option<&str>,
        address: IpAddr,
        config: Arc<ClientConfig>,
    ) -> Result<TlsSettings, InvalidServerName> {
        let server_name = match sni {
            Some(name) => ServerName::try_from(name.to_owned())
                .map_err(|_| InvalidServerName(name.to_owned()))?,
            None => ServerName::IpAddress(address.into()),
        };
        Ok(TlsSettings {
            server_name,
            config,
        })
    }

    pub fn server_name(&self) -> &ServerName<'static> {
        &self.server_name
    }
}

/// Why a TLS handshake with an upstream failed; the proxy answers any of
/// them as `tls_handshake` (502), with this as the cause.
#[derive(Debug, thiserror::Error)]
pub enum TlsHandshakeError {
    /// The name to send is not one rustls accepts.
    #[error(transparent)]
    ServerName(#[from] InvalidServerName),
    /// `verify = true` and the certificate is not trusted, expired, or for another name.
    #[error("the upstream's certificate was refused: {0}")]
    Certificate(rustls::CertificateError),
    /// The upstream broke the protocol or offered nothing in common.
    #[error("the TLS handshake failed: {0}")]
    Protocol(rustls::Error),
    /// The connection failed or closed during the handshake.
    #[error("the connection failed during the TLS handshake: {0}")]
    Io(io::Error),
}

impl From<io::Error> for TlsHandshakeError {
    fn from(error: io::Error) -> TlsHandshakeError {
        // tokio-rustls carries rustls' own error inside the io::Error.
        match error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            Some(rustls::Error::InvalidCertificate(reason)) => {
                TlsHandshakeError::Certificate(reason.clone())
            }
            Some(other) => TlsHandshakeError::Protocol(other.clone()),
            None => TlsHandshakeError::Io(error),
        }
    }
}

/// Runs the client handshake over `stream` (already connected; bounding it
/// in time is the caller's).
pub async fn handshake<S>(
    stream: S,
    settings: &TlsSettings,
) -> Result<TlsConnection<S>, TlsHandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let connector = TlsConnector::from(settings.config.clone());
    let stream = connector
        .connect(settings.server_name.clone(), stream)
        .await?;
    let negotiated_h2 = stream.get_ref().1.alpn_protocol() == Some(ALPN_H2);
    Ok(TlsConnection {
        stream,
        negotiated_h2,
    })
}

/// An upstream connection after its handshake. Wrapped in
/// `hyper_util::rt::TokioIo`, it is a connection the pooled client can use,
/// and tells it to speak HTTP/2 when ALPN chose `h2`.
#[derive(Debug)]
pub struct TlsConnection<S> {
    stream: TlsStream<S>,
    negotiated_h2: bool,
}

impl<S> TlsConnection<S> {
    /// Whether the upstream chose `h2` through ALPN (else HTTP/1.1).
    pub fn negotiated_h2(&self) -> bool {
        self.negotiated_h2
    }
}

impl<S: Connection> Connection for TlsConnection<S> {
    fn connected(&self) -> Connected {
        let connected = self.stream.get_ref().0.connected();
        if self.negotiated_h2 {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsConnection<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(context, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsConnection<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(context, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(context, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_roots_are_loaded_once_and_shared() {
        assert!(Arc::ptr_eq(&system_roots(), &system_roots()));
    }

    #[test]
    fn both_configurations_offer_h2_then_http1() {
        let configs = ClientConfigs::new(Arc::new(RootCertStore::empty()));
        for verify in [true, false] {
            assert_eq!(
                configs.get(verify).alpn_protocols,
                [b"h2".to_vec(), b"http/1.1".to_vec()]
            );
        }
        assert!(Arc::ptr_eq(&configs.get(true), &configs.get(true)));
        assert!(!Arc::ptr_eq(&configs.get(true), &configs.get(false)));
    }

    #[test]
    fn a_server_name_rustls_refuses_is_an_error() {
        let config = client_config(false, Arc::new(RootCertStore::empty()));
        let refused = TlsSettings::new(Some("not a name"), IpAddr::from([127, 0, 0, 1]), config);
        assert!(refused.is_err());
    }
}
